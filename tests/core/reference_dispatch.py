"""A plain, slow dispatcher written straight from vLLM 0.33.0's ``vllm/v1/cudagraph_dispatcher.py``.

It checks the real (table-driven) one against; docs/semantics_v1.md lists the rules.
"""

from __future__ import annotations

from cgdispatch import BatchDescriptor, CUDAGraphMode, GraphConfig

M = CUDAGraphMode


def lora_cases(config: GraphConfig) -> list[int]:
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
    for lora in lora_cases(config):
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
            captured = [c for c in lora_cases(config) if c]
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
