"""`CudagraphDispatcher`: maps each runtime batch to a captured graph key, or to none.

The dispatcher holds the set of valid keys per runtime mode (the only source of truth for
which graphs exist) and answers ``dispatch()`` with a :class:`DispatchResult` (runtime
mode, padded descriptor); :func:`ready_dispatcher` builds one with its keys initialised.
It never captures or runs anything and never imports torch: the forward context carries
its answer to the wrappers. Dispatch is one list lookup in a table precomputed from the
keys, rebuilt whenever the keys change.
"""

from __future__ import annotations

import bisect
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, Any, NamedTuple

from ..batch import BatchDescriptor
from ..config import GraphConfig
from ..modes import DEFAULT_SPLITTING_OPS, CUDAGraphMode
from ..stats import stats_table
from ..validate import DENSE_TABLE_LIMIT, MAX_STEP_TOKENS, check_bool, check_int
from .config import RELEASE

if TYPE_CHECKING:
    import pandas as pd

__all__ = ["CudagraphDispatcher", "DispatchResult", "ready_dispatcher"]

_NONE, _PIECEWISE, _FULL = CUDAGraphMode.NONE, CUDAGraphMode.PIECEWISE, CUDAGraphMode.FULL
_RUNTIME_MODES = frozenset({_NONE, _PIECEWISE, _FULL})
_ALL_GRAPH_MODES = frozenset({_PIECEWISE, _FULL})


class DispatchResult(NamedTuple):
    """What ``dispatch`` answers: unpacks as ``mode, descriptor = dispatcher.dispatch(n)``."""

    runtime_mode: CUDAGraphMode  # NONE, PIECEWISE or FULL: what this step runs as
    batch_descriptor: BatchDescriptor  # the graph key (padded); BatchDescriptor(n) when eager


class _Table:
    """Precomputed answers for one (uniform, LoRA case, allowed modes) combination.

    Why a table: vLLM's dispatcher pads, builds a descriptor and probes two key sets on
    every call; here that work is done once per count 0..max capture size and dispatch is
    a list index. ``benchmarks/bench_dispatch.py`` measures it against that straightforward
    algorithm (target >= 5x; 7-9x on a 2-core CPU). The answers are shared immutable
    ``DispatchResult`` tuples, so a call allocates nothing.
    """

    __slots__ = ("answers", "calls", "answer", "sparse_calls")

    def __init__(
        self, answers: list[DispatchResult], answer: Callable[[int], DispatchResult]
    ) -> None:
        self.answers = answers  # index: unpadded num_tokens 0..min(max, DENSE_TABLE_LIMIT)
        self.calls = [0] * len(answers)  # dispatch count per unpadded num_tokens
        self.answer = answer  # the answer for any count (above the dense part: bisect)
        self.sparse_calls: dict[int, int] = {}  # counts above the dense part

    def lookup(self, n: int, record: bool) -> DispatchResult:
        """The answer for ``n`` tokens (at most the max capture size), counted if ``record``."""
        if n < len(self.answers):
            if record:
                self.calls[n] += 1
            return self.answers[n]
        if record:
            self.sparse_calls[n] = self.sparse_calls.get(n, 0) + 1
        return self.answer(n)

    def counts(self) -> Iterable[tuple[int, int]]:
        """(num_tokens, calls) of every count dispatched at least once."""
        yield from ((n, c) for n, c in enumerate(self.calls) if c)
        yield from self.sparse_calls.items()


class CudagraphDispatcher:
    """Decides, per batch, the runtime mode and the graph key (vLLM V1 semantics).

    Keys are the only source of truth for valid graphs: ``dispatch`` returns a graph mode
    only with a registered key. It does not know whether a graph is captured yet; the
    wrapper captures a key on first use. Counting of dispatches (``stats_frame``) is on by
    default and can be switched off with ``record_stats = False``.

    Capture sizes and mode are taken from the config as given: call
    ``config.resolve(attention_support)`` first (the runner does) so that the mode is
    lowered and, with speculative decoding, sizes are multiples of q as vLLM makes them;
    unrounded sizes leave most uniform-decode FULL keys unreachable.
    """

    def __init__(self, config: GraphConfig | None = None, *, record_stats: bool = True) -> None:
        config = GraphConfig(vllm_version=RELEASE) if config is None else config
        if not isinstance(config, GraphConfig):
            raise ValueError(f"config={config!r} is invalid: pass a cgdispatch.GraphConfig")
        if config.generation.graphs.dispatcher_class is not CudagraphDispatcher:
            raise ValueError(
                f"this GraphConfig has vllm_version={config.vllm_version!r}, not V1: use "
                f"cgdispatch.{config.generation.dispatcher_name} for it (make_graph_dispatcher("
                "config) builds it), or build the config with "
                f"vllm_version={RELEASE!r} for CudagraphDispatcher"
            )
        mode = config.cudagraph_mode
        if mode.requires_piecewise_compilation() and not config.splitting_ops_contain_attention():
            # vLLM 0.33 asserts this in CudagraphDispatcher.__init__
            raise ValueError(
                f"cudagraph_mode={mode} needs piecewise compilation with every attention op "
                f"as a split point, but splitting_ops={config.splitting_ops!r}: set "
                "splitting_ops=None (the attention ops) or add all of "
                f"{list(DEFAULT_SPLITTING_OPS)}, or use a mode without PIECEWISE"
            )
        self.config = config
        self.cudagraph_mode: CUDAGraphMode = mode
        self.uniform_decode_query_len: int = config.uniform_decode_query_len
        self.cudagraph_keys: dict[CUDAGraphMode, set[BatchDescriptor]] = {
            _PIECEWISE: set(),
            _FULL: set(),
        }
        self.keys_initialized = False
        self.record_stats = record_stats
        sizes = config.cudagraph_capture_sizes
        self._sizes: list[int] = list(sizes)
        self.max_capture_size: int = sizes[-1] if sizes else 0
        # padding table: every count 0..max to the smallest capture size >= it; dense up to
        # DENSE_TABLE_LIMIT tokens (a bisect of the sizes above it)
        self._dense_max: int = min(self.max_capture_size, DENSE_TABLE_LIMIT)
        self._padded: list[int] = [0] * (self._dense_max + 1)
        i = 0
        for n in range(1, self._dense_max + 1):
            while sizes[i] < n:
                i += 1
            self._padded[n] = sizes[i]
        self._lora_cases = config.lora_cases()
        self._captured_lora_counts = [c for c in self._lora_cases if c]
        self._tables: dict[tuple[bool, bool, int, frozenset[CUDAGraphMode]], _Table] = {}
        # (mixed, uniform) tables without LoRA, all modes allowed: the common call is one
        # index into one of these. benchmarks/bench_dispatch.py: 7-9x the per-call
        # algorithm with them, about 1.5x when every call takes the general path (see _Table)
        self._fast = (None, None)
        self._eager_calls: dict[int, int] = {}  # num_tokens above the max or keys missing
        self._carried_rows: list[
            tuple[CUDAGraphMode, int, int, int, int]
        ] = []  # stats of old tables

    # ----- keys -------------------------------------------------------------------------
    def add_cudagraph_key(
        self, runtime_mode: CUDAGraphMode, batch_descriptor: BatchDescriptor
    ) -> None:
        """Register one valid key (PIECEWISE or FULL)."""
        if runtime_mode not in self.cudagraph_keys:
            raise ValueError(
                f"runtime_mode={runtime_mode} is invalid for a key: keys are PIECEWISE or FULL"
            )
        if not isinstance(batch_descriptor, BatchDescriptor):
            raise ValueError(f"batch_descriptor={batch_descriptor!r} is not a BatchDescriptor")
        self.cudagraph_keys[runtime_mode].add(batch_descriptor)
        self._invalidate()

    def initialize_cudagraph_keys(
        self,
        cudagraph_mode: CUDAGraphMode | str | None = None,
        uniform_decode_query_len: int | None = None,
    ) -> None:
        """Create every key the mode needs for the configured capture sizes and LoRA cases."""
        mode = (
            self.cudagraph_mode if cudagraph_mode is None else CUDAGraphMode.parse(cudagraph_mode)
        )
        q = (
            self.uniform_decode_query_len
            if uniform_decode_query_len is None
            else uniform_decode_query_len
        )
        check_int("uniform_decode_query_len", q, 1)
        self.cudagraph_mode, self.uniform_decode_query_len = mode, q
        if mode is _NONE:
            self.keys_initialized = True
            self._invalidate()
            return
        self.config.check_compile_sizes()
        sizes = self.config.cudagraph_capture_sizes
        max_num_seqs = self.config.max_num_seqs
        for lora in self._lora_cases:
            has_lora = lora > 0
            if mode.mixed_mode() is _PIECEWISE:
                for s in sizes:
                    self.cudagraph_keys[_PIECEWISE].add(
                        BatchDescriptor(s, None, False, has_lora, lora)
                    )
            elif mode.mixed_mode() is _FULL:
                for s in sizes:
                    desc = BatchDescriptor(s, min(s, max_num_seqs), False, has_lora, lora)
                    self.cudagraph_keys[_FULL].add(desc)
            if mode.decode_mode() is _FULL and mode.separate_routine():
                for s in sizes:
                    if q <= s <= q * max_num_seqs:
                        desc = BatchDescriptor(s, min(s // q, max_num_seqs), True, has_lora, lora)
                        self.cudagraph_keys[_FULL].add(desc)
        self.keys_initialized = True
        self._invalidate()

    def get_capture_descs(self) -> list[tuple[CUDAGraphMode, list[BatchDescriptor]]]:
        """Keys to capture: PIECEWISE before FULL, each largest first (pool reuse).

        vLLM 0.33 ``get_capture_descs``: sorted by (num_tokens, num_active_loras)
        descending; ties (uniform and mixed keys of one size) in a fixed order here.
        """
        if not self.keys_initialized or self.cudagraph_mode is _NONE:
            return []
        out = []
        for mode in (_PIECEWISE, _FULL):
            keys = self.cudagraph_keys[mode]
            if keys:
                order = sorted(
                    keys, key=lambda d: (d.uniform, d.num_reqs or 0, d.has_lora), reverse=True
                )
                order.sort(key=lambda d: (d.num_tokens, d.num_active_loras), reverse=True)
                out.append((mode, order))
        return out

    def padded_size(self, num_tokens: int) -> int:
        """The capture size a batch of ``num_tokens`` is padded to (itself above the max)."""
        n = _check_num_tokens(num_tokens)
        if n <= self._dense_max:
            return self._padded[n]
        return self._sizes[bisect.bisect_left(self._sizes, n)] if n <= self.max_capture_size else n

    # ----- dispatch -----------------------------------------------------------------------
    def dispatch(
        self,
        num_tokens: int | BatchDescriptor,
        uniform_decode: bool = False,
        has_lora: bool = False,
        num_active_loras: int = 0,
        valid_modes: Iterable[CUDAGraphMode] | None = None,
        invalid_modes: Iterable[CUDAGraphMode] | None = None,
        *,
        use_cascade_attn: bool = False,
    ) -> DispatchResult:
        """(runtime mode, key) for a batch; ``(NONE, BatchDescriptor(num_tokens))`` when eager.

        Also takes the form of vLLM's first V1 dispatcher, ``dispatch(BatchDescriptor(...), use_cascade_attn=...)``.
        Cascade attention (and encoder outputs) exclude FULL.
        """
        # Fast path: plain int, no LoRA, no mode filter. One lookup and one increment.
        if (
            type(num_tokens) is int
            and (uniform_decode is False or uniform_decode is True)
            and has_lora is False
            and not num_active_loras
            and valid_modes is None
            and invalid_modes is None
            and not use_cascade_attn
            and 0 <= num_tokens <= self._dense_max
        ):
            table = self._fast[1 if uniform_decode else 0]
            if table is not None:
                if self.record_stats:
                    table.calls[num_tokens] += 1
                return table.answers[num_tokens]
        return self._dispatch_general(
            num_tokens,
            uniform_decode,
            has_lora,
            num_active_loras,
            valid_modes,
            invalid_modes,
            use_cascade_attn,
        )

    def _dispatch_general(
        self,
        num_tokens: Any,
        uniform_decode: bool,
        has_lora: bool,
        num_active_loras: Any,
        valid_modes: Iterable[CUDAGraphMode] | None,
        invalid_modes: Iterable[CUDAGraphMode] | None,
        use_cascade_attn: bool,
    ) -> DispatchResult:
        if isinstance(num_tokens, BatchDescriptor):  # first V1 form
            desc = num_tokens
            num_tokens, uniform_decode = desc.num_tokens, desc.uniform
            has_lora, num_active_loras = desc.has_lora, desc.num_active_loras
        n = _check_num_tokens(num_tokens)
        loras = _check_num_tokens(num_active_loras, "num_active_loras")
        uniform_decode = check_bool("uniform_decode", uniform_decode)
        has_lora = check_bool("has_lora", has_lora)
        use_cascade_attn = check_bool("use_cascade_attn", use_cascade_attn)
        allowed = self._allowed_modes(valid_modes, invalid_modes, use_cascade_attn)
        if (
            not self.keys_initialized
            or self.cudagraph_mode is _NONE
            or n > self.max_capture_size
            or not allowed
        ):
            return self._eager(n)
        # has_lora is implied by a count > 0 (vLLM's callers always pass both consistently)
        has_lora = bool(has_lora) or loras > 0
        lora_case = self._lora_case(has_lora, loras)
        if lora_case is None:
            return self._eager(n)
        key = (bool(uniform_decode), has_lora, lora_case, allowed)
        table = self._tables.get(key)
        if table is None:
            table = self._tables[key] = self._build_table(*key)
        return table.lookup(n, self.record_stats)

    def _eager(self, n: int) -> DispatchResult:
        if self.record_stats:
            self._eager_calls[n] = self._eager_calls.get(n, 0) + 1
        return DispatchResult(_NONE, BatchDescriptor(n))

    @staticmethod
    def _allowed_modes(valid: Any, invalid: Any, cascade: bool) -> frozenset[CUDAGraphMode]:
        valid = frozenset(valid or ())
        valid = valid or _ALL_GRAPH_MODES  # vLLM: ``valid_modes or valid_runtime_modes()``
        invalid = frozenset(invalid or ())
        bad = [m for m in valid | invalid if m not in _RUNTIME_MODES]
        if bad:
            raise ValueError(
                f"modes {[str(m) for m in bad]} are not runtime modes: valid_modes and "
                "invalid_modes take NONE, PIECEWISE and FULL"
            )
        allowed = (_ALL_GRAPH_MODES & valid) - invalid
        return allowed - {_FULL} if cascade else allowed

    def _lora_case(self, has_lora: bool, loras: int) -> int | None:
        """The num_active_loras of the key that serves this batch, or None for eager.

        vLLM 0.33 ``CudagraphDispatcher.dispatch``: with ``has_lora`` and a count > 0 the
        count becomes the smallest captured count >= it when ``specialize_active_lora``
        (kept when none is), else ``max_loras + 1``; otherwise it is passed through.
        """
        if not self.config.lora_enabled:
            return None if has_lora else loras  # vLLM asserts a LoRA config here
        if has_lora and loras > 0:
            if self.config.specialize_active_lora:
                return next((c for c in self._captured_lora_counts if c >= loras), loras)
            return self.config.max_loras + 1
        return loras

    def _build_table(
        self, uniform: bool, has_lora: bool, lora: int, allowed: frozenset[CUDAGraphMode]
    ) -> _Table:
        """Answers for every count 0..max, by probing the key sets as vLLM does; counts
        above DENSE_TABLE_LIMIT are answered on demand."""
        full_keys = self.cudagraph_keys[_FULL] if _FULL in allowed else set()
        pw_keys = self.cudagraph_keys[_PIECEWISE] if _PIECEWISE in allowed else set()
        mode, q, max_num_seqs = (
            self.cudagraph_mode,
            self.uniform_decode_query_len,
            self.config.max_num_seqs,
        )
        separate = mode.separate_routine() and mode.has_mode(_FULL)

        def answer(n: int) -> DispatchResult:
            padded = self.padded_size(n)
            if uniform and separate and padded % q == 0:
                desc = BatchDescriptor(padded, min(padded // q, max_num_seqs), True, has_lora, lora)
            else:
                desc = BatchDescriptor(padded, min(padded, max_num_seqs), False, has_lora, lora)
            relaxed = desc.relax_for_mixed_batch_cudagraphs()
            # FULL graphs match the exact key only (their attention metadata depends on
            # num_reqs); only PIECEWISE keys are looked up relaxed
            if desc in full_keys:
                return DispatchResult(_FULL, desc)
            if relaxed in pw_keys:
                return DispatchResult(_PIECEWISE, relaxed)
            return DispatchResult(_NONE, BatchDescriptor(n))

        answers = [DispatchResult(_NONE, BatchDescriptor(0))]
        answers += [answer(n) for n in range(1, self._dense_max + 1)]
        return _Table(answers, answer)

    def _invalidate(self) -> None:
        """Rebuild the dispatch tables after the keys changed; counts so far are kept."""
        self._carried_rows += self._stats_rows()
        self._tables.clear()
        if self.keys_initialized and self.cudagraph_mode is not _NONE and self.max_capture_size:
            allowed = _ALL_GRAPH_MODES
            mixed = self._tables[(False, False, 0, allowed)] = self._build_table(
                False, False, 0, allowed
            )
            uni = self._tables[(True, False, 0, allowed)] = self._build_table(
                True, False, 0, allowed
            )
            self._fast = (mixed, uni)
            return
        self._fast = (None, None)

    # ----- statistics ---------------------------------------------------------------------
    def _stats_rows(self) -> list[tuple[CUDAGraphMode, int, int, int, int]]:
        """(mode, padded size, calls, real tokens, padded tokens), one per table cell hit."""
        rows = []
        for table in self._tables.values():
            for n, calls in table.counts():
                mode, desc = table.lookup(n, False)
                rows.append((mode, desc.num_tokens, calls, calls * n, calls * desc.num_tokens))
        return rows

    def stats_frame(self) -> pd.DataFrame:
        """Dispatch counts by (runtime_mode, padded_size): calls, real and padded tokens."""
        rows = self._carried_rows + self._stats_rows()
        rows += [(_NONE, n, c, c * n, c * n) for n, c in self._eager_calls.items()]
        return stats_table(rows)

    def reset_stats(self) -> None:
        """Forget every dispatch counted so far."""
        for table in self._tables.values():
            table.calls = [0] * len(table.calls)
            table.sparse_calls = {}
        self._eager_calls.clear()
        self._carried_rows = []

    def __repr__(self) -> str:
        n_full, n_pw = len(self.cudagraph_keys[_FULL]), len(self.cudagraph_keys[_PIECEWISE])
        return (
            f"CudagraphDispatcher(mode={self.cudagraph_mode}, max_capture_size={self.max_capture_size}, "
            f"keys: FULL={n_full} PIECEWISE={n_pw}, initialized={self.keys_initialized})"
        )


def ready_dispatcher(
    config: GraphConfig | CudagraphDispatcher | None = None, *, record_stats: bool = True
) -> CudagraphDispatcher:
    """A dispatcher for ``config`` with its keys initialised: the one way the package builds
    one. A dispatcher passed in is returned itself (its keys initialised if they were not);
    ``record_stats`` applies only to a new one. ``None`` means V1's default
    ``GraphConfig(vllm_version=RELEASE)``."""
    if isinstance(config, CudagraphDispatcher):
        if not config.keys_initialized:
            config.initialize_cudagraph_keys()
        return config
    if config is not None and not isinstance(config, GraphConfig):
        raise ValueError(
            f"config={config!r} is invalid: pass a cgdispatch.GraphConfig or a CudagraphDispatcher"
        )
    dispatcher = CudagraphDispatcher(config, record_stats=record_stats)
    dispatcher.initialize_cudagraph_keys()
    return dispatcher


def _check_num_tokens(value: Any, name: str = "num_tokens") -> int:
    if type(value) is int and 0 <= value <= MAX_STEP_TOKENS:
        return value
    return check_int(name, value, 0, MAX_STEP_TOKENS)
