"""`CudaGraphManager`: generation 2 of vLLM's graph dispatch (vLLM 0.34.0), pure Python.

vLLM 0.34 removed V1's ``CudagraphDispatcher``; the model runner's ``CudaGraphManager``
(``vllm/v1/worker/gpu/cudagraph_utils.py``) builds the graphs to capture as
:class:`BatchExecutionDescriptor` s and dispatches each batch to the first compatible one:
uniform decode batches by request count per query length, every other batch by token
count on the prefill grid. This class models the descriptors, the capture order and
``dispatch``; it captures nothing (cgdispatch's capture layer does that). Dispatch answers
are memoised per argument tuple, on top of vLLM's own dict-based tables.
"""

from __future__ import annotations

import bisect
from collections import defaultdict
from collections.abc import Mapping
from dataclasses import dataclass, replace
from itertools import groupby, product
from typing import Any, NamedTuple

from ..arith import cdiv
from ..config import GraphConfig
from ..modes import CUDAGraphMode
from ..validate import DENSE_TABLE_LIMIT, MAX_STEP_TOKENS, check_int
from . import config as _v2

__all__ = ["BatchExecutionDescriptor", "BatchQuery", "CudaGraphManager", "is_compatible"]

M = CUDAGraphMode
_MEMO_LIMIT = 1 << 16
_EAGER_ANSWER_LIMIT = 1 << 16  # eager answers kept per manager (bounds its memory)


@dataclass(frozen=True)
class BatchExecutionDescriptor:
    """The shape of a batch and the graph mode to run it with (vLLM 0.34's fields).

    ``num_reqs=None``: no request padding (PIECEWISE graphs). ``uniform_token_count``:
    every request has exactly this many tokens (uniform decode graphs; None fits any).
    ``max_query_len``: upper bound on per-request query length (varlen decode graphs;
    None does not constrain). ``num_ubatches``: microbatches (DBO), 1 = no split.
    """

    cg_mode: CUDAGraphMode
    num_tokens: int
    num_reqs: int | None
    uniform_token_count: int | None = None
    max_query_len: int | None = None
    num_active_loras: int = 0
    num_ubatches: int = 1

    # ----- what every generation's key answers (capture layer, estimates, tables) -----
    def query_len(self, uniform_decode_query_len: int) -> int | None:
        """q of a uniform-decode key (stored in the key), None otherwise."""
        return self.uniform_token_count

    @property
    def decode_graph(self) -> bool:
        """A graph for uniform decode batches: a uniform token count (decode graphs and
        microbatch twins) or a query-length bound (varlen decode)."""
        return self.uniform_token_count is not None or self.max_query_len is not None

    @property
    def lora_active(self) -> bool:
        """The graph runs with LoRA adapters (no has_lora field: any active LoRA is one)."""
        return self.num_active_loras > 0


class BatchQuery(NamedTuple):
    """One batch as ``dispatch`` is asked about it, its arguments checked (vLLM's
    ``dispatch`` and ``_is_compatible`` take these as separate arguments)."""

    num_reqs: int
    num_tokens: int
    uniform_token_count: int | None
    num_active_loras: int
    max_query_len: int | None
    num_ubatches: int


def is_compatible(desc: BatchExecutionDescriptor, batch: BatchQuery) -> bool:
    """vLLM's ``_is_compatible``: whether graph ``desc`` can run ``batch`` (vLLM passes the
    batch's six fields as separate arguments)."""
    num_reqs, num_tokens, uniform_token_count, num_active_loras, max_query_len, ubatches = batch
    return (
        (desc.uniform_token_count is None or desc.uniform_token_count == uniform_token_count)
        and (
            desc.max_query_len is None
            or (max_query_len is not None and desc.max_query_len >= max_query_len)
        )
        and (desc.num_reqs is None or desc.num_reqs >= num_reqs)
        and desc.num_tokens >= num_tokens
        and desc.num_active_loras == num_active_loras
        and desc.num_ubatches == ubatches
    )


def _gen2_config(config: GraphConfig | None) -> GraphConfig:
    if config is None:
        return GraphConfig(vllm_version=_v2.RELEASE)
    if not isinstance(config, GraphConfig):
        raise ValueError(f"config={config!r} is invalid: pass a cgdispatch.GraphConfig")
    if config.vllm_version is None:  # left unset: CudaGraphManager's own generation
        return config.replace(vllm_version=_v2.RELEASE)
    if config.generation.graphs.dispatcher_class is not CudaGraphManager:
        raise ValueError(
            f"this GraphConfig has vllm_version={config.vllm_version!r}, whose graphs are "
            f"keyed on one token list: use cgdispatch.{config.generation.dispatcher_name} for it "
            "(make_graph_dispatcher(config) builds it), "
            f"or build the config with vllm_version={_v2.RELEASE!r} for CudaGraphManager"
        )
    return config


class CudaGraphManager:
    """Descriptors to capture and per-batch dispatch, with vLLM 0.34's rules.

    ``config`` should be resolved (``config.resolve(attention_support)``) as the runner
    resolves it; its ``cudagraph_mode`` is the mode the manager is built with.
    ``decode_query_lens`` maps each uniform decode query length to the most requests its
    batches have (vLLM's ``get_decode_cudagraph_query_lens``; default
    ``{1 + num_speculative_tokens: max_num_seqs}``; dynamic speculative decoding has
    several). ``varlen_decode`` (default: ``config.enable_adaptive_verification``) gives
    decode batches token-keyed FULL graphs bounded by query length instead.
    """

    def __init__(
        self,
        config: GraphConfig | None = None,
        *,
        decode_query_lens: Mapping[int, int] | None = None,
        lora_capture_cases: list[int] | None = None,
        varlen_decode: bool | None = None,
        decode_request_sizes: list[int] | None = None,
    ) -> None:
        config = _gen2_config(config)
        self.config = config
        self.cudagraph_mode: CUDAGraphMode = config.cudagraph_mode
        self.max_num_reqs = config.max_num_seqs
        q = config.uniform_decode_query_len
        if decode_query_lens is None:
            decode_query_lens = {q: self.max_num_reqs}
        if not decode_query_lens:
            raise ValueError("decode_query_lens is empty: map at least one query length")
        for ql, n in decode_query_lens.items():
            check_int("decode query length", ql, 1)
            check_int(f"max requests of query length {ql}", n, 1)
        self.decode_max_reqs = {
            ql: min(n, self.max_num_reqs) for ql, n in sorted(decode_query_lens.items())
        }
        self.decode_query_len = max(self.decode_max_reqs)
        self.varlen_decode = (
            config.enable_adaptive_verification if varlen_decode is None else bool(varlen_decode)
        )
        self.decode_request_sizes = decode_request_sizes
        if lora_capture_cases is None:
            lora_capture_cases = _v2.get_lora_capture_cases(
                config.max_loras, config.specialize_active_lora, config.cudagraph_specialize_lora
            )
        self.lora_capture_cases = list(lora_capture_cases) or [0]
        self.use_ubatching = config.enable_dbo or config.ubatch_size > 1
        # maybe_build_ubatch_runner: a microbatch runner only with DP > 1
        self.has_ubatch_runner = self.use_ubatching and config.data_parallel_size > 1
        self.num_ubatches = (
            (2 if config.enable_dbo else config.ubatch_size) if self.use_ubatching else 1
        )
        self._lora_dispatch_map, self._max_lora_case = self._build_lora_dispatch_map()
        self._candidates: dict[tuple[int, int], list[BatchExecutionDescriptor]] = {}
        # per LoRA case, per mode (FULL first): (num_tokens, descriptors) ascending
        self._grids: dict[int, list[list[tuple[int, list[BatchExecutionDescriptor]]]]] = {}
        self._decode_descs: dict[tuple[int, int, int], list[BatchExecutionDescriptor]] = {}
        self._capture_descs: dict[CUDAGraphMode, list[BatchExecutionDescriptor]] = {}
        self._memo: dict[tuple, BatchExecutionDescriptor] = {}
        self._init_candidates()
        self._init_fast_path()

    # ----- construction ------------------------------------------------------------------
    def _build_lora_dispatch_map(self) -> tuple[dict[int, int], int]:
        captured = sorted(c for c in self.lora_capture_cases if c > 0)
        if not captured:
            return {}, 0
        table, i = {}, 0
        for n in range(1, captured[-1] + 1):
            while captured[i] < n:
                i += 1
            table[n] = captured[i]
        return table, captured[-1]

    def _resolve_effective_loras(self, num_active_loras: int) -> int:
        """An active-LoRA count mapped to the smallest captured case >= it (clamped)."""
        if num_active_loras <= 0 or not self._lora_dispatch_map:
            return num_active_loras
        return self._lora_dispatch_map.get(num_active_loras, self._max_lora_case)

    def _maybe_ubatch_twin(self, desc: BatchExecutionDescriptor) -> BatchExecutionDescriptor | None:
        if not self.has_ubatch_runner or desc.cg_mode is not M.FULL or desc.num_reqs is None:
            return None
        uniform, remainder = divmod(desc.num_tokens, desc.num_reqs)
        if remainder or desc.uniform_token_count not in (None, uniform):
            return None
        if desc.num_tokens < self.num_ubatches:
            return None
        if desc.num_tokens < self.config.dbo_decode_token_threshold:
            return None
        return replace(desc, num_ubatches=self.num_ubatches, uniform_token_count=uniform)

    def _init_candidates(self) -> None:
        if self.cudagraph_mode is M.NONE:
            return
        decode_descs, token_keyed = self._build_descs()
        self._index_descs(decode_descs, token_keyed)

    def _build_descs(
        self,
    ) -> tuple[list[BatchExecutionDescriptor], list[BatchExecutionDescriptor]]:
        """The graphs vLLM captures: decode graphs keyed by query length and requests, and
        token-keyed graphs (varlen decode, mixed/prefill), microbatch twins included."""
        cfg = self.config
        prefill_sizes = sorted(cfg.prefill_cudagraph_capture_token_sizes or [])
        decode_sizes = self.decode_request_sizes
        if decode_sizes is None:
            decode_sizes = cfg.decode_cudagraph_capture_request_sizes
        decode_sizes = decode_sizes or []
        decode_mode = self.cudagraph_mode.decode_mode()
        mixed_mode = self.cudagraph_mode.mixed_mode()
        loras = self.lora_capture_cases
        decode_descs: list[BatchExecutionDescriptor] = []
        token_keyed: list[BatchExecutionDescriptor] = []
        capture_decode = self.cudagraph_mode.separate_routine() and decode_mode is not M.NONE
        if capture_decode and self.varlen_decode:
            varlen_sizes = _v2.varlen_token_sizes(
                cfg,
                cfg.max_decode_cudagraph_capture_requests or 0,
                cfg.max_decode_cudagraph_capture_tokens,
                self.decode_query_len,
            )
            for num_tokens, lora in product(varlen_sizes, loras):
                token_keyed.append(
                    BatchExecutionDescriptor(
                        decode_mode,
                        num_tokens,
                        min(num_tokens, self.max_num_reqs),
                        max_query_len=self.decode_query_len,
                        num_active_loras=lora,
                    )
                )
        elif capture_decode:
            shapes = _v2.decode_cudagraph_capture_shapes(
                decode_sizes, self.decode_max_reqs, _v2.decode_cudagraph_capture_max_tokens(cfg)
            )
            for (n, q), lora in product(shapes, loras):
                desc = BatchExecutionDescriptor(
                    decode_mode, n * q, n, uniform_token_count=q, num_active_loras=lora
                )
                decode_descs.append(desc)
                twin = self._maybe_ubatch_twin(desc)
                if twin is not None:
                    decode_descs.append(twin)
        if mixed_mode is not M.NONE:
            for num_tokens, lora in product(prefill_sizes, loras):
                num_reqs = min(num_tokens, self.max_num_reqs) if mixed_mode is M.FULL else None
                desc = BatchExecutionDescriptor(
                    mixed_mode, num_tokens, num_reqs, num_active_loras=lora
                )
                token_keyed.append(desc)
                twin = self._maybe_ubatch_twin(desc)
                if twin is not None:
                    token_keyed.append(twin)
        return decode_descs, token_keyed

    def _index_descs(
        self,
        decode_descs: list[BatchExecutionDescriptor],
        token_keyed: list[BatchExecutionDescriptor],
    ) -> None:
        """Capture order per mode, the decode tables and the token-keyed candidates."""
        loras = self.lora_capture_cases
        by_mode: defaultdict[CUDAGraphMode, list[BatchExecutionDescriptor]] = defaultdict(list)
        for desc in decode_descs + token_keyed:
            by_mode[desc.cg_mode].append(desc)
        for mode, descs in by_mode.items():
            descs.sort(key=lambda d: d.num_tokens, reverse=True)
            self._capture_descs[mode] = descs

        groups: defaultdict[tuple[int, int, int], list[BatchExecutionDescriptor]] = defaultdict(
            list
        )
        for desc in decode_descs:
            groups[(desc.uniform_token_count, desc.num_active_loras, desc.num_ubatches)].append(
                desc
            )
        for key, group in groups.items():
            table: list[BatchExecutionDescriptor] = []
            for desc in sorted(group, key=lambda d: d.num_tokens):
                table.extend([desc] * (desc.num_reqs + 1 - len(table)))
            self._decode_descs[key] = table

        for mode in (M.FULL, M.PIECEWISE):
            mode_descs = sorted(
                (d for d in token_keyed if d.cg_mode is mode), key=lambda d: d.num_tokens
            )
            for lora in loras:
                start = 0
                lora_descs = [d for d in mode_descs if d.num_active_loras == lora]
                grid: list[tuple[int, list[BatchExecutionDescriptor]]] = []
                for num_tokens, group in groupby(lora_descs, lambda d: d.num_tokens):
                    matching = list(group)
                    grid.append((num_tokens, matching))
                    # vLLM's table holds every count; here the counts up to
                    # DENSE_TABLE_LIMIT, and _candidates_for bisects the grid above it
                    for i in range(start, min(num_tokens, DENSE_TABLE_LIMIT) + 1):
                        self._candidates.setdefault((i, lora), []).extend(matching)
                    start = num_tokens + 1
                if grid:
                    self._grids.setdefault(lora, []).append(grid)

    def _init_fast_path(self) -> None:
        """Flat tables for batches without LoRA, query bound or microbatching: per query
        length the decode table, and per token count the token-keyed candidates such a
        batch can take, in dispatch order, each with the most requests it holds.

        Why: benchmarks/bench_dispatch_v2.py (target >= 5x the plain rules). A batch that
        misses them all runs eagerly; its answer depends on (num_tokens, num_reqs) alone
        and is kept in ``_eager_answers`` once the checked path has built it, so repeated
        eager steps (above the largest graph, or more requests than any graph holds)
        allocate nothing and are not validated again.
        """
        self._fast_decode = {
            u: table
            for (u, lora, nub), table in self._decode_descs.items()
            if lora == 0 and nub == 1
        }
        self._fast_max = max((t for t, lora in self._candidates if lora == 0), default=0)
        self._fast_mixed: list[tuple[tuple[int, BatchExecutionDescriptor], ...]] = [()] * (
            self._fast_max + 1
        )
        for t in range(1, self._fast_max + 1):
            self._fast_mixed[t] = tuple(
                (desc.num_reqs if desc.num_reqs is not None else 1 << 62, desc)
                for desc in self._candidates.get((t, 0), ())
                if desc.uniform_token_count is None
                and desc.max_query_len is None
                and desc.num_ubatches == 1
            )
        # no graph holds more tokens than this: every batch above it runs eagerly
        self._max_graph_tokens = max(
            (d.num_tokens for descs in self._capture_descs.values() for d in descs), default=0
        )
        # num_tokens -> num_reqs -> eager answer (no LoRA, no query bound, one microbatch)
        self._eager_answers: dict[int, dict[int, BatchExecutionDescriptor]] = {}
        self._eager_count = 0

    # ----- queries -----------------------------------------------------------------------
    @property
    def capture_descs(self) -> dict[CUDAGraphMode, list[BatchExecutionDescriptor]]:
        """Descriptors to capture per mode, in vLLM's capture order: PIECEWISE before
        FULL, each widest first (so narrower graphs reuse the shared pool's blocks)."""
        return {
            mode: list(self._capture_descs[mode])
            for mode in (M.PIECEWISE, M.FULL)
            if mode in self._capture_descs
        }

    def needs_capture(self) -> bool:
        return len(self._capture_descs) > 0

    def capture_order(self) -> list[BatchExecutionDescriptor]:
        """Every descriptor in the order vLLM's ``capture`` visits them."""
        return [d for descs in self.capture_descs.values() for d in descs]

    def dispatch(
        self,
        num_reqs: int,
        num_tokens: int,
        uniform_token_count: int | None,
        num_active_loras: int,
        max_query_len: int | None = None,
        num_ubatches: int = 1,
    ) -> BatchExecutionDescriptor:
        """The graph to run a batch with, else an eager (NONE) descriptor.

        A uniform decode batch (``uniform_token_count`` set) takes the smallest decode
        graph of its query length holding ``cdiv(num_tokens, q)`` requests if compatible;
        otherwise the smallest token-keyed FULL graph, then PIECEWISE graph, with
        ``num_tokens`` tokens or more that is compatible (``is_compatible``).
        """
        # fast path: no LoRA, no query bound, no microbatching (answers equal the tables')
        if (
            max_query_len is None
            and num_ubatches == 1
            and num_active_loras == 0
            and type(num_tokens) is int
            and num_tokens > 0
            and type(num_reqs) is int
            and num_reqs >= 0
        ):
            ints = type(num_active_loras) is int and type(num_ubatches) is int
            desc = self._dispatch_fast(num_reqs, num_tokens, uniform_token_count, ints)
            if desc is not None:
                return desc
        key = (
            num_reqs,
            num_tokens,
            uniform_token_count,
            num_active_loras,
            max_query_len,
            num_ubatches,
        )
        hit = self._memo.get(key) if all(type(v) is int or v is None for v in key) else None
        if hit is not None:
            return hit
        key = _check_dispatch_args(*key)  # numpy integers become ints
        desc = self._dispatch(key)
        if desc.cg_mode is M.NONE and key[3:] == (0, None, 1):
            # one eager answer per (num_tokens, num_reqs), whatever the query length
            by_reqs = self._eager_answers.setdefault(key[1], {})
            kept = by_reqs.get(key[0])
            if kept is not None:
                desc = kept
            elif self._eager_count < _EAGER_ANSWER_LIMIT:
                by_reqs[key[0]] = desc
                self._eager_count += 1
        if len(self._memo) >= _MEMO_LIMIT:
            self._memo.clear()
        self._memo[key] = desc
        return desc

    def _dispatch_fast(
        self, num_reqs: int, num_tokens: int, uniform_token_count: int | None, ints: bool
    ) -> BatchExecutionDescriptor | None:
        """A batch without LoRA, query bound or microbatching, answered from the flat tables
        or the eager answers kept (``ints``: its LoRA and microbatch counts are ints, so an
        eager answer kept may stand); None: the checked path decides."""
        known = True  # a batch whose answer the flat tables decide
        if num_tokens <= self._fast_max:
            if uniform_token_count is not None:
                # an unknown query length (0 and text included) falls to the checked path
                table = self._fast_decode.get(uniform_token_count)
                if table is not None:
                    n = cdiv(num_tokens, uniform_token_count)
                    if n < len(table):
                        desc = table[n]
                        if desc.num_reqs >= num_reqs:
                            return desc
                known = table is not None and type(uniform_token_count) is int
            if known:
                # the token-keyed graphs treat uniform and mixed batches alike
                for limit, desc in self._fast_mixed[num_tokens]:
                    if num_reqs <= limit:
                        return desc
        elif num_tokens <= self._max_graph_tokens:
            known = False
        if (
            known
            and ints
            and (
                uniform_token_count is None
                or (type(uniform_token_count) is int and 0 < uniform_token_count <= MAX_STEP_TOKENS)
            )
        ):
            # eager: answered before (the checked path below fills this table, so
            # num_tokens and num_reqs were checked then)
            by_reqs = self._eager_answers.get(num_tokens)
            if by_reqs is not None:
                answer = by_reqs.get(num_reqs)
                if answer is not None:
                    return answer
        return None

    def _candidates_for(self, num_tokens: int, loras: int) -> list[BatchExecutionDescriptor]:
        """Token-keyed graphs a batch of ``num_tokens`` may take: per mode, the narrowest
        ones with at least that many tokens (vLLM's ``_candidates`` entry)."""
        if num_tokens <= DENSE_TABLE_LIMIT:
            return self._candidates.get((num_tokens, loras), [])
        out: list[BatchExecutionDescriptor] = []
        for grid in self._grids.get(loras, []):
            i = bisect.bisect_left(grid, num_tokens, key=lambda entry: entry[0])
            if i < len(grid):
                out += grid[i][1]
        return out

    def _dispatch(self, batch: BatchQuery) -> BatchExecutionDescriptor:
        num_reqs, num_tokens, uniform_token_count, num_active_loras, _, num_ubatches = batch
        loras = self._resolve_effective_loras(num_active_loras)
        if num_tokens > 0 and self._capture_descs:
            candidates = self._candidates_for(num_tokens, loras)
            if uniform_token_count is not None:
                table = self._decode_descs.get((uniform_token_count, loras, num_ubatches), [])
                n = cdiv(num_tokens, uniform_token_count)
                if n < len(table):
                    candidates = [table[n], *candidates]
            # compatibility is judged with the effective LoRA count
            asked = batch._replace(num_active_loras=loras)
            for desc in candidates:
                if is_compatible(desc, asked):
                    return desc
        return BatchExecutionDescriptor(
            M.NONE, num_tokens, num_reqs, num_active_loras=loras, num_ubatches=num_ubatches
        )

    def __repr__(self) -> str:
        counts = {str(m): len(d) for m, d in self.capture_descs.items()}
        return f"CudaGraphManager(mode={self.cudagraph_mode}, graphs={counts})"


def _check_dispatch_args(
    num_reqs: Any,
    num_tokens: Any,
    uniform_token_count: Any,
    num_active_loras: Any,
    max_query_len: Any,
    num_ubatches: Any,
) -> BatchQuery:
    """Refuse what no scheduler forms (off the fast path only, so the common call stays
    cheap); the arguments as Python ints."""
    return BatchQuery(
        check_int("num_reqs", num_reqs, 0, MAX_STEP_TOKENS),
        check_int("num_tokens", num_tokens, 0, MAX_STEP_TOKENS),
        None
        if uniform_token_count is None
        else check_int("uniform_token_count", uniform_token_count, 1, MAX_STEP_TOKENS),
        check_int("num_active_loras", num_active_loras, 0, MAX_STEP_TOKENS),
        None if max_query_len is None else check_int("max_query_len", max_query_len, 1),
        check_int("num_ubatches", num_ubatches, 1, MAX_STEP_TOKENS),
    )
