"""V1 (vLLM 0.33) config rules: capture sizes as ``VllmConfig._set_cudagraph_sizes`` makes
them, mode and size resolution for the attention backend, and LoRA capture cases.

Every function takes a ``GraphConfig`` and returns the fields it derives; the config
builds its new value from them (``cgdispatch.core.config``). docs/semantics.md maps each
rule to its vLLM 0.33 file and function.
"""

from __future__ import annotations

from typing import Any

from ..arith import round_up
from ..ladders import vllm_ladder
from ..lora import captured_lora_counts
from ..modes import (
    AttentionCGSupport,
    CUDAGraphMode,
    lower_for_attention_support,
    lower_without_splitting,
)
from ..validate import MAX_CAPTURE_SIZE, MAX_STEP_TOKENS, check_int, check_size_list
from ..warn import warn_user

__all__ = ["RELEASE", "derive_sizes", "resolve", "lora_cases", "compilation_sizes"]

RELEASE = "0.33"  # the value of GraphConfig.vllm_version for V1

# a GraphConfig (typed loosely: the config module builds on the release modules' registry)
GraphConfig = Any


def derive_sizes(config: GraphConfig) -> dict[str, Any]:
    """Capture sizes and max, ``compile_sizes`` as ints, and the mode lowered for
    ``splitting_ops == []`` (vLLM 0.33 ``CompilationConfig.set_splitting_ops_for_v1``:
    no piecewise graphs; sizes are kept as derived)."""
    sizes, largest = _sizes(config)
    out: dict[str, Any] = {
        "cudagraph_capture_sizes": sizes,
        "max_cudagraph_capture_size": largest,
        "compile_sizes": _compile_sizes(config, sizes),
    }
    if config.splitting_ops == []:
        out["cudagraph_mode"] = lower_without_splitting(config.cudagraph_mode)
    return out


def _sizes(config: GraphConfig) -> tuple[list[int], int]:
    """Capture sizes and max as vLLM 0.33 ``VllmConfig._set_cudagraph_sizes`` makes them."""
    mode, tokens = config.cudagraph_mode, config.max_num_batched_tokens
    user_sizes, user_max = config.cudagraph_capture_sizes, config.max_cudagraph_capture_size
    if user_max is not None:
        user_max = check_int("max_cudagraph_capture_size", user_max, 0, MAX_CAPTURE_SIZE)
    if user_sizes is not None:
        user_sizes = check_size_list("cudagraph_capture_sizes", user_sizes)
    if mode is CUDAGraphMode.NONE:
        return [], 0  # vLLM: no graphs, sizes [] and max 0 whatever was asked
    if user_max == 0:
        raise ValueError(
            f"max_cudagraph_capture_size=0 is invalid with cudagraph_mode={mode}: "
            "graphs need a size >= 1; set the mode to NONE or give a positive max"
        )
    if user_sizes is not None and not user_sizes:
        raise ValueError(
            f"cudagraph_capture_sizes=[] leaves no capture size for cudagraph_mode={mode}: "
            "give at least one size, None for the default ladder, or set "
            "cudagraph_mode='NONE'"
        )
    if user_sizes is None:
        sizes = vllm_ladder(
            user_max,
            max_num_seqs=config.max_num_seqs,
            max_num_batched_tokens=tokens,
            num_speculative_tokens=config.num_speculative_tokens,
            device_capability=config.device_capability,
        )
        if user_max is not None and sizes[-1] != user_max:
            warn_user(
                f"max_cudagraph_capture_size={user_max} is not on vLLM's ladder within "
                f"max_num_batched_tokens={tokens}: truncated to {sizes[-1]}"
            )
    else:
        sizes = sorted(set(user_sizes))
        dropped = [s for s in sizes if s > tokens]
        if dropped:
            warn_user(
                f"capture sizes {dropped} exceed max_num_batched_tokens={tokens} and are dropped"
            )
        sizes = [s for s in sizes if s <= tokens]
    if config.sequence_parallel and config.tensor_parallel_size > 1:
        # cgdispatch's own rule (not in vLLM 0.33): sequence parallelism splits tokens
        # evenly across ranks
        tp = config.tensor_parallel_size
        bad = [s for s in sizes if s % tp]
        if bad:
            warn_user(
                f"capture sizes {bad} are not multiples of tensor_parallel_size={tp} and "
                "are dropped (sequence parallelism splits tokens evenly across ranks)"
            )
        sizes = [s for s in sizes if s % tp == 0]
        if not sizes:
            raise ValueError(
                f"no capture size is left for cudagraph_mode={mode} with sequence "
                f"parallelism over tensor_parallel_size={tp}: give sizes that are "
                f"multiples of {tp}, or set cudagraph_mode='NONE'"
            )
    largest = sizes[-1] if sizes else 0
    if user_max is not None and user_sizes is not None and user_max != largest:
        raise ValueError(
            f"max_cudagraph_capture_size={user_max} disagrees with the largest usable "
            f"capture size {largest} of cudagraph_capture_sizes (sizes above "
            f"max_num_batched_tokens={tokens} are dropped): drop one of the two, or "
            "make the max equal to the largest size"
        )
    if not sizes:
        warn_user(
            f"no capture size <= max_num_batched_tokens={tokens} is left: every batch "
            "runs eagerly (as in vLLM, the mode is kept)"
        )
    return sizes, largest


def _compile_sizes(config: GraphConfig, sizes: list[int]) -> tuple[int, ...]:
    """``compile_sizes`` as ints (vLLM's ``"cudagraph_capture_sizes"`` entry expanded)."""
    out: set[int] = set()
    for s in tuple(config.compile_sizes or ()):
        if s == "cudagraph_capture_sizes":
            out.update(sizes)
            continue
        out.add(check_int(f"compile size {s!r}", s, 1, MAX_STEP_TOKENS))
    return tuple(sorted(out))


def resolve(
    config: GraphConfig, support: AttentionCGSupport, piecewise_capture_available: bool
) -> dict[str, Any]:
    """The mode lowered to what can run, and sizes fit for speculative decoding.

    vLLM 0.33 ``CompilationConfig.resolve_cudagraph_mode_and_sizes`` (the V1 model
    runner's ``_check_and_update_cudagraph_mode`` calls it with the least support of the
    attention backends); see ``GraphConfig.resolve``. V1 has no
    ``piecewise_capture_available`` switch: the argument is ignored.
    """
    if config.cudagraph_mode is CUDAGraphMode.NONE:
        return {}
    q = config.uniform_decode_query_len
    mode = lower_for_attention_support(
        config.cudagraph_mode, support, config.splitting_ops_contain_attention(), q
    )
    sizes, largest = config.cudagraph_capture_sizes, config.max_cudagraph_capture_size
    if mode.decode_mode() is CUDAGraphMode.FULL and q > 1 and sizes:
        rounded = sorted({round_up(s, q) for s in sizes if round_up(s, q) <= largest})
        if not rounded and q <= largest:
            rounded = [q]
        if not rounded:
            raise ValueError(
                f"no capture size is left after rounding {sizes} up to multiples of "
                f"q={q} (1 + {config.num_speculative_tokens} speculative tokens) within the max "
                f"{largest}: add a size >= {q}, or lower num_speculative_tokens"
            )
        sizes, largest = rounded, rounded[-1]
    if mode is config.cudagraph_mode and sizes == config.cudagraph_capture_sizes:
        return {}
    return {
        "cudagraph_mode": mode,
        "cudagraph_capture_sizes": list(sizes),
        "max_cudagraph_capture_size": largest,
    }


def lora_cases(config: GraphConfig) -> list[int]:
    """vLLM 0.33 ``CudagraphDispatcher._get_lora_cases``: with ``cudagraph_specialize_lora``
    0 plus the captured counts, else only ``max_loras + 1`` (batches without LoRA then
    find no graph)."""
    if config.max_loras <= 0:
        return [0]
    if not config.cudagraph_specialize_lora:
        return [config.max_loras + 1]
    return [0, *captured_lora_counts(config.max_loras, config.specialize_active_lora)]


def compilation_sizes(config: GraphConfig) -> dict[str, Any]:
    """The size keys of vLLM 0.33's ``--compilation-config``: the one token list and max."""
    return {
        "cudagraph_capture_sizes": list(config.cudagraph_capture_sizes),
        "max_cudagraph_capture_size": config.max_cudagraph_capture_size,
    }
