"""A plain, slow dispatcher written straight from docs/semantics.md, to check the real one against."""

from __future__ import annotations

from cgdispatch import BatchDescriptor, CUDAGraphMode, GraphConfig

M = CUDAGraphMode


def lora_cases(config: GraphConfig) -> list[int]:
    if config.max_loras == 0:
        return [0]
    if config.specialize_active_lora:
        counts = [c for c in (1, 2, 4, 8, 16, 32, 64) if c < config.max_loras] + [config.max_loras]
    else:
        counts = [config.max_loras]
    return [0] + counts if config.cudagraph_specialize_lora else counts


def expected_keys(config: GraphConfig) -> dict[CUDAGraphMode, set[BatchDescriptor]]:
    """The key sets docs/semantics.md prescribes for a config."""
    mode, q, seqs = config.cudagraph_mode, config.uniform_decode_query_len, config.max_num_seqs
    keys: dict[CUDAGraphMode, set[BatchDescriptor]] = {M.PIECEWISE: set(), M.FULL: set()}
    for lora in lora_cases(config):
        for s in config.cudagraph_capture_sizes:
            if mode in (M.PIECEWISE, M.FULL_AND_PIECEWISE):
                keys[M.PIECEWISE].add(BatchDescriptor(s, None, False, lora > 0, lora))
            if mode is M.FULL:
                keys[M.FULL].add(BatchDescriptor(s, min(s, seqs), False, lora > 0, lora))
            if mode in (M.FULL_DECODE_ONLY, M.FULL_AND_PIECEWISE) and q <= s <= q * seqs:
                keys[M.FULL].add(BatchDescriptor(s, s // q, True, lora > 0, lora))
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
    cases = lora_cases(config)
    if config.max_loras == 0:
        if num_active_loras:
            return eager
        lora = 0
    elif not config.cudagraph_specialize_lora:
        lora = cases[0]
    elif num_active_loras == 0:
        lora = 0
    else:
        fitting = [c for c in cases if c >= num_active_loras]
        if not fitting:
            return eager
        lora = fitting[0]
    q = config.uniform_decode_query_len
    separate = config.cudagraph_mode in (M.FULL_DECODE_ONLY, M.FULL_AND_PIECEWISE)
    if uniform_decode and separate and padded % q == 0:
        desc = BatchDescriptor(padded, padded // q, True, lora > 0, lora)
    else:
        desc = BatchDescriptor(padded, min(padded, config.max_num_seqs), False, lora > 0, lora)
    relaxed = BatchDescriptor(padded, None, False, lora > 0, lora)
    if not exclude_full and desc in keys[M.FULL]:
        return M.FULL, desc
    if not exclude_piecewise and relaxed in keys[M.PIECEWISE]:
        return M.PIECEWISE, relaxed
    return eager
