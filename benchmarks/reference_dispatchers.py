"""Plain, slow reference dispatchers, one per generation, shared by the tests and the
benchmarks (both import this module; pytest finds it through ``pythonpath`` in
pyproject.toml, a benchmark script because it sits beside it).

- V1: a dispatcher written straight from vLLM 0.33.0's ``vllm/v1/cudagraph_dispatcher.py``
  (``expected_keys``, ``brute_dispatch``), which the table-driven ``CudagraphDispatcher`` is
  checked against; docs/semantics_v1.md lists the rules.
- Generation 2: ``ReferenceManager``, built straight from the rules in docs/semantics_v2.md.
  It builds the same descriptors as vLLM 0.34's ``CudaGraphManager._init_candidates`` with
  plain loops and answers ``dispatch`` by scanning every descriptor: the baseline of
  benchmarks/bench_dispatch_v2.py and the judge of cgdispatch's fast ``CudaGraphManager``
  in the property tests. It shares only the resolved config (sizes, mode) with it.
"""

from __future__ import annotations

from cgdispatch import BatchDescriptor, BatchExecutionDescriptor, CUDAGraphMode, GraphConfig

M = CUDAGraphMode
D = BatchExecutionDescriptor


# ----- V1 (vLLM 0.33 CudagraphDispatcher) ----------------------------------------------
def v1_lora_cases(config: GraphConfig) -> list[int]:
    """``_get_lora_cases`` with ``vllm/lora/utils.py get_captured_lora_counts``."""
    if config.max_loras == 0:
        return [0]
    top = config.max_loras + 1
    if not config.cudagraph_specialize_lora:
        return [top]
    if config.specialize_active_lora:
        counts = [n for n in range(1, top + 1) if n & (n - 1) == 0 or n == top]
    else:
        counts = [top]
    return [0, *counts]


def expected_keys(config: GraphConfig) -> dict[CUDAGraphMode, set[BatchDescriptor]]:
    """The key sets docs/semantics.md prescribes for a config."""
    mode, q, seqs = config.cudagraph_mode, config.uniform_decode_query_len, config.max_num_seqs
    keys: dict[CUDAGraphMode, set[BatchDescriptor]] = {M.PIECEWISE: set(), M.FULL: set()}
    if mode is M.NONE:
        return keys
    for lora in v1_lora_cases(config):
        for s in config.cudagraph_capture_sizes:
            if mode in (M.PIECEWISE, M.FULL_AND_PIECEWISE):
                keys[M.PIECEWISE].add(BatchDescriptor(s, None, False, lora > 0, lora))
            if mode is M.FULL:
                keys[M.FULL].add(BatchDescriptor(s, min(s, seqs), False, lora > 0, lora))
            if mode in (M.FULL_DECODE_ONLY, M.FULL_AND_PIECEWISE) and q <= s <= q * seqs:
                keys[M.FULL].add(BatchDescriptor(s, min(s // q, seqs), True, lora > 0, lora))
    return keys


def brute_dispatch(
    config: GraphConfig,
    keys: dict[CUDAGraphMode, set[BatchDescriptor]],
    num_tokens: int,
    uniform_decode: bool = False,
    num_active_loras: int = 0,
    exclude_full: bool = False,
    exclude_piecewise: bool = False,
) -> tuple[CUDAGraphMode, BatchDescriptor]:
    sizes = config.cudagraph_capture_sizes
    eager = (M.NONE, BatchDescriptor(num_tokens))
    if config.cudagraph_mode is M.NONE or not sizes or num_tokens > max(sizes) or num_tokens == 0:
        return eager
    padded = min(s for s in sizes if s >= num_tokens)
    has_lora = num_active_loras > 0
    lora = num_active_loras
    if config.max_loras == 0:
        if has_lora:
            return eager  # vLLM asserts a LoRA config here
    elif has_lora:
        if config.specialize_active_lora:
            captured = [c for c in v1_lora_cases(config) if c]
            lora = next((c for c in captured if c >= num_active_loras), num_active_loras)
        else:
            lora = config.max_loras + 1
    q = config.uniform_decode_query_len
    separate = config.cudagraph_mode in (M.FULL_DECODE_ONLY, M.FULL_AND_PIECEWISE)
    if uniform_decode and separate and padded % q == 0:
        desc = BatchDescriptor(padded, min(padded // q, config.max_num_seqs), True, has_lora, lora)
    else:
        desc = BatchDescriptor(padded, min(padded, config.max_num_seqs), False, has_lora, lora)
    relaxed = BatchDescriptor(padded, None, False, has_lora, lora)
    if not exclude_full and desc in keys[M.FULL]:
        return M.FULL, desc
    if not exclude_piecewise and relaxed in keys[M.PIECEWISE]:
        return M.PIECEWISE, relaxed
    return eager


# ----- generation 2 (vLLM 0.34 CudaGraphManager) ----------------------------------------
def manager_lora_cases(config: GraphConfig) -> list[int]:
    if config.max_loras == 0:
        return [0]
    top = config.max_loras + 1
    if not config.cudagraph_specialize_lora:
        return [0, top]
    if not config.specialize_active_lora:
        return [0, top]
    return [0] + [n for n in range(1, top + 1) if n & (n - 1) == 0 or n == top]


def decode_shapes(sizes, query_lens: dict[int, int], max_tokens: int) -> list[tuple[int, int]]:
    shapes = set()
    for q, max_reqs in query_lens.items():
        limit = min(max_reqs, max_tokens // q)
        if limit < 1:
            continue
        for n in sorted(set(sizes)):
            shapes.add((min(n, limit), q))
            if n >= limit:
                break
    return sorted(shapes, key=lambda s: (s[1], s[0]))


class ReferenceManager:
    def __init__(self, config: GraphConfig, decode_query_lens: dict[int, int] | None = None):
        self.config = config
        self.mode = config.cudagraph_mode
        self.max_reqs = config.max_num_seqs
        q = config.uniform_decode_query_len
        query_lens = decode_query_lens or {q: config.max_num_seqs}
        self.query_lens = {k: min(v, self.max_reqs) for k, v in sorted(query_lens.items())}
        self.loras = manager_lora_cases(config)
        ubatching = config.enable_dbo or config.ubatch_size > 1
        self.ubatch = ubatching and config.data_parallel_size > 1
        self.num_ub = 2 if config.enable_dbo else config.ubatch_size
        self.decode: list[D] = []
        self.token_keyed: list[D] = []
        if self.mode is not M.NONE:
            self._build()

    def _twin(self, d: D) -> D | None:
        if not self.ubatch or d.cg_mode is not M.FULL or d.num_reqs is None:
            return None
        if d.num_tokens % d.num_reqs:
            return None
        u = d.num_tokens // d.num_reqs
        if d.uniform_token_count not in (None, u):
            return None
        if d.num_tokens < self.num_ub or d.num_tokens < self.config.dbo_decode_token_threshold:
            return None
        return D(
            d.cg_mode, d.num_tokens, d.num_reqs, u, d.max_query_len, d.num_active_loras, self.num_ub
        )

    def _build(self) -> None:
        cfg, mode = self.config, self.mode
        widest_q = max(self.query_lens)
        if mode.separate_routine() and mode.decode_mode() is not M.NONE:
            if cfg.enable_adaptive_verification:
                from cgdispatch.core.v2.config import varlen_decode_cudagraph_capture_grid

                reqs = cfg.max_decode_cudagraph_capture_requests or 0
                top = min(
                    reqs * widest_q,
                    cfg.max_num_batched_tokens,
                    cfg.max_decode_cudagraph_capture_tokens or reqs * widest_q,
                )
                grid = varlen_decode_cudagraph_capture_grid(
                    top, cfg.performance_mode == "interactivity"
                )
                for t in grid:
                    for lora in self.loras:
                        self.token_keyed.append(
                            D(M.FULL, t, min(t, self.max_reqs), None, widest_q, lora)
                        )
            else:
                rec = cfg.max_cudagraph_capture_size or 0
                max_tokens = min(rec, cfg.max_decode_cudagraph_capture_tokens or rec)
                sizes = cfg.decode_cudagraph_capture_request_sizes or []
                for n, q in decode_shapes(sizes, self.query_lens, max_tokens):
                    for lora in self.loras:
                        d = D(mode.decode_mode(), n * q, n, q, None, lora)
                        self.decode.append(d)
                        twin = self._twin(d)
                        if twin:
                            self.decode.append(twin)
        mixed = mode.mixed_mode()
        if mixed is not M.NONE:
            for t in sorted(cfg.prefill_cudagraph_capture_token_sizes or []):
                for lora in self.loras:
                    reqs = min(t, self.max_reqs) if mixed is M.FULL else None
                    d = D(mixed, t, reqs, None, None, lora)
                    self.token_keyed.append(d)
                    twin = self._twin(d)
                    if twin:
                        self.token_keyed.append(twin)

    def capture_descs(self) -> dict[CUDAGraphMode, list[D]]:
        out = {}
        for mode in (M.PIECEWISE, M.FULL):
            descs = [d for d in self.decode + self.token_keyed if d.cg_mode is mode]
            if descs:
                out[mode] = sorted(descs, key=lambda d: -d.num_tokens)
        return out

    def effective_loras(self, n: int) -> int:
        captured = [c for c in self.loras if c > 0]
        if n <= 0 or not captured:
            return n
        bigger = [c for c in captured if c >= n]
        return min(bigger) if bigger else max(captured)

    @staticmethod
    def compatible(d: D, reqs, tokens, u, loras, mql, nub) -> bool:
        if d.uniform_token_count is not None and d.uniform_token_count != u:
            return False
        if d.max_query_len is not None and (mql is None or d.max_query_len < mql):
            return False
        if d.num_reqs is not None and d.num_reqs < reqs:
            return False
        return d.num_tokens >= tokens and d.num_active_loras == loras and d.num_ubatches == nub

    def dispatch(
        self,
        num_reqs,
        num_tokens,
        uniform_token_count,
        num_active_loras,
        max_query_len=None,
        num_ubatches=1,
    ) -> D:
        loras = self.effective_loras(num_active_loras)
        if num_tokens > 0 and (self.decode or self.token_keyed):
            candidates = []
            if uniform_token_count is not None:
                n = -(-num_tokens // uniform_token_count)
                fits = [
                    d
                    for d in self.decode
                    if d.uniform_token_count == uniform_token_count
                    and d.num_active_loras == loras
                    and d.num_ubatches == num_ubatches
                    and d.num_reqs >= n
                ]
                if fits:
                    candidates.append(min(fits, key=lambda d: d.num_tokens))
            for mode in (M.FULL, M.PIECEWISE):
                big = [
                    d
                    for d in self.token_keyed
                    if d.cg_mode is mode
                    and d.num_active_loras == loras
                    and d.num_tokens >= num_tokens
                ]
                if big:
                    smallest = min(d.num_tokens for d in big)
                    candidates += [d for d in big if d.num_tokens == smallest]
            for d in candidates:
                if self.compatible(
                    d, num_reqs, num_tokens, uniform_token_count, loras, max_query_len, num_ubatches
                ):
                    return d
        return D(M.NONE, num_tokens, num_reqs, None, None, loras, num_ubatches)
