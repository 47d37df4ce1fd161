"""Generation 2 of vLLM's graph configuration (vLLM 0.34.0): size grids, size resolution,
LoRA capture cases and mode lowering, with vLLM's names. Pure Python.

`GraphConfig(vllm_version="0.34", ...)` calls :func:`derive_sizes` on construction (vLLM
resolves sizes when it builds its ``VllmConfig``) and :func:`resolve_mode` in ``resolve()``
(the model runner lowers the mode for the attention backend). docs/semantics_v2.md maps
every rule here to its vLLM 0.34.0 file and function.
"""

from __future__ import annotations

import bisect
import math
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from ..arith import cdiv
from ..ladder_shape import SPLIT_LADDERS
from ..lora import captured_lora_counts
from ..modes import (
    DEFAULT_SPLITTING_OPS,
    AttentionCGSupport,
    CUDAGraphMode,
    lower_for_attention_support,
    lower_without_splitting,
)
from ..validate import (
    MAX_CAPTURE_SIZE,
    MAX_PARALLEL,
    MAX_STEP_TOKENS,
    check_bool,
    check_int,
    check_size_list,
)
from ..warn import warn_user

# core.config.GraphConfig, typed loosely here: the config reaches this module through the
# registry, so importing it back would make a cycle
GraphConfig = Any

__all__ = [
    "RELEASE",
    "GEN2_FIELDS",
    "GEN2_OWN_FIELDS",
    "GEN2_COMPILATION_KEYS",
    "check_fields",
    "prefill_cudagraph_capture_grid",
    "decode_cudagraph_capture_grid",
    "varlen_decode_cudagraph_capture_grid",
    "decode_cudagraph_capture_shapes",
    "decode_cudagraph_capture_max_tokens",
    "get_lora_capture_cases",
    "lora_cases",
    "derive_sizes",
    "resolve",
    "resolve_mode",
    "compilation_sizes",
    "splitting_ops_contain_attention",
]

M = CUDAGraphMode

RELEASE = "0.34"  # the value of GraphConfig.vllm_version for generation 2

# GraphConfig fields that exist only in generation 2 beyond its ladder shape's size fields
# (cgdispatch.core.ladder_shape.SplitLadders), with their defaults
GEN2_OWN_FIELDS: dict[str, Any] = {
    "performance_mode": "balanced",
    "speculative_method": None,
    "enable_adaptive_verification": False,
    "data_parallel_size": 1,
    "enable_dbo": False,
    "ubatch_size": 0,
    "dbo_decode_token_threshold": 32,
}
# every field only generation 2 reads: its shape's, then its own
GEN2_FIELDS: dict[str, Any] = {**SPLIT_LADDERS.own_fields, **GEN2_OWN_FIELDS}
# the gen-2 keys of vLLM's --compilation-config JSON: its ladder shape's
GEN2_COMPILATION_KEYS = SPLIT_LADDERS.compilation_keys
PERFORMANCE_MODES = ("balanced", "interactivity", "throughput")
# vllm/config/compilation.py CompilationConfig._attention_ops (0.34.0)
VLLM_ATTENTION_OPS = (
    "vllm::unified_attention_with_output",
    "vllm::unified_mla_attention_with_output",
    "vllm::mamba_mixer2",
    "vllm::mamba_mixer",
    "vllm::short_conv",
    "vllm::zaya_cca",
    "vllm::qwen4_exp_ple_short_conv",
    "vllm::qwen4_exp_qsa_with_output",
    "vllm::qwen4_exp_qsa_prepare_with_output",
    "vllm::linear_attention",
)
# speculative methods whose later draft steps decode one token (get_draft_decode_...)
ONE_TOKEN_DRAFT_METHODS = ("eagle", "eagle3", "mtp", "draft_model")


# ----- grids (vllm/config/compilation.py) ----------------------------------------------
def _walk_grid(limit: int, step: Callable[[int], float]) -> list[int]:
    """1, ..., ``limit``: each next size the next multiple of the largest power of two
    not above ``step(size)`` (``_walk_grid``)."""
    grid, size = [], 1
    while size < limit:
        grid.append(size)
        stride = 1 << max(0, math.floor(math.log2(max(1.0, step(size)))))
        size = (size // stride + 1) * stride
    return [*grid, limit] if limit else []


def prefill_cudagraph_capture_grid(max_tokens: int, dense_head: bool = False) -> list[int]:
    """Token-count grid up to ``max_tokens`` (54 sizes at 8192); ``dense_head`` (the
    interactivity performance mode) adds every count up to 32."""
    grid = _walk_grid(max_tokens, lambda t: min(t, max(8, t / 4), 0.07 * max(t, 4096)))
    if dense_head:
        grid = sorted({*grid, *(t for t in range(1, 33) if t < max_tokens)})
    return grid


def varlen_decode_cudagraph_capture_grid(max_tokens: int, dense_head: bool = False) -> list[int]:
    """Token-count grid of adaptive verification's (varlen) decode graphs."""
    grid = set(range(1, 33)) if dense_head else {1, 2, 4}
    low = 8
    grid.add(low)
    while low < 1024:
        grid.update(range(low + low // 4, 2 * low + 1, low // 4))
        low *= 2
    grid.update(range(1024, 4096, 128), range(4096, max_tokens, 256))
    return sorted({s for s in grid if s < max_tokens} | {max_tokens}) if max_tokens else []


def decode_cudagraph_capture_grid(max_requests: int) -> list[int]:
    """Request-count grid up to ``max_requests`` (64 sizes at 1024)."""
    return _walk_grid(max_requests, lambda n: 0.65 * n ** (2 / 3))


def decode_cudagraph_capture_shapes(
    sizes: Iterable[int], query_lens: Mapping[int, int], max_tokens: int
) -> list[tuple[int, int]]:
    """``(num_reqs, query_len)`` of the uniform decode graphs: per query length, the
    request counts up to ``min(max_reqs, max_tokens // q)``, the first size above that
    limit captured at the limit; sorted by (q, n)."""
    sizes = sorted(set(sizes))
    shapes: set[tuple[int, int]] = set()
    for q, max_reqs in query_lens.items():
        limit = min(max_reqs, max_tokens // q)
        reachable = sizes[: bisect.bisect_left(sizes, limit) + 1]
        shapes.update((min(n, limit), q) for n in reachable if limit >= 1)
    return sorted(shapes, key=lambda shape: (shape[1], shape[0]))


def decode_cudagraph_capture_max_tokens(config: GraphConfig) -> int:
    """The most tokens a uniform decode graph holds: the recorded max within the decode
    token budget."""
    max_tokens = config.max_cudagraph_capture_size or 0
    return min(max_tokens, config.max_decode_cudagraph_capture_tokens or max_tokens)


# ----- LoRA (vllm/lora/utils.py, vllm/v1/worker/gpu/lora_utils.py) ----------------------
def get_lora_capture_cases(
    max_loras: int, specialize_active_lora: bool, cudagraph_specialize_lora: bool
) -> list[int]:
    """num_active_loras values captured: [0] without LoRA; ``[0, *counts]`` with
    ``cudagraph_specialize_lora``, else ``[0, max_loras + 1]``."""
    if max_loras <= 0:
        return [0]
    if cudagraph_specialize_lora:
        return [0, *captured_lora_counts(max_loras, specialize_active_lora)]
    return [0, max_loras + 1]


def lora_cases(config: GraphConfig) -> list[int]:
    """vLLM 0.34 ``get_lora_capture_cases`` for the config (counts the no-adapter slot)."""
    return get_lora_capture_cases(
        config.max_loras, config.specialize_active_lora, config.cudagraph_specialize_lora
    )


# ----- validation of the gen-2 fields -----------------------------------------------------
def check_fields(config: GraphConfig) -> dict[str, Any]:
    """The gen-2 fields checked and normalised (lists of ints, ints, bools, a tuple)."""
    # the scheduler refusals (max_num_batched_tokens against max_num_seqs, LoRA with spec
    # decode) are the same in both generations: GraphConfig checks them
    out: dict[str, Any] = SPLIT_LADDERS.check_fields(config)  # the two ladders' fields first
    for name, minimum, bound in (
        ("data_parallel_size", 1, MAX_PARALLEL),
        ("ubatch_size", 0, MAX_STEP_TOKENS),
        ("dbo_decode_token_threshold", 0, MAX_STEP_TOKENS),
    ):
        out[name] = check_int(name, getattr(config, name), minimum, bound)
    for flag in ("enable_dbo", "enable_adaptive_verification"):
        out[flag] = check_bool(flag, getattr(config, flag))
    if config.performance_mode not in PERFORMANCE_MODES:
        raise ValueError(
            f"performance_mode={config.performance_mode!r} is invalid: use one of "
            f"{', '.join(PERFORMANCE_MODES)}"
        )
    cap = config.device_capability
    if cap is not None:
        if (
            not isinstance(cap, (tuple, list))
            or len(cap) != 2
            or not all(isinstance(x, int) and not isinstance(x, bool) for x in cap)
        ):
            raise ValueError(
                f"device_capability={cap!r} is invalid: give (major, minor), e.g. (9, 0) "
                "for H100/H200 or (10, 0) for B200, or None"
            )
        out["device_capability"] = tuple(cap)
    if out["enable_adaptive_verification"]:
        # vllm/config/vllm.py VllmConfig._validate_adaptive_verification
        if config.num_speculative_tokens == 0:
            raise ValueError(
                "enable_adaptive_verification needs speculative decoding: set "
                "num_speculative_tokens >= 1 or disable adaptive verification"
            )
        if config.max_loras > 0:
            raise ValueError(
                "Adaptive verification is not currently compatible with LoRA: set "
                "max_loras=0 or disable adaptive verification"
            )
        if not config.cudagraph_mode.has_full_cudagraphs():
            raise ValueError(
                "Adaptive verification requires full CUDA graphs. Use cudagraph mode FULL, "
                "FULL_DECODE_ONLY, or FULL_AND_PIECEWISE, or disable adaptive verification."
            )
    return out


# ----- sizes (vllm/config/vllm.py) -------------------------------------------------------
def _is_sm100(config: GraphConfig) -> bool:
    """current_platform.is_device_capability_family(100): any 10.x device."""
    cap = config.device_capability
    return cap is not None and cap[0] == 10


def _uses_draft_decode_graphs(config: GraphConfig) -> bool:
    return (
        config.num_speculative_tokens >= 2 and config.speculative_method in ONE_TOKEN_DRAFT_METHODS
    )


def derive_sizes(config: GraphConfig) -> dict[str, Any]:
    """Every size field resolved as vLLM 0.34's ``VllmConfig._set_cudagraph_sizes`` and
    ``_split_cudagraph_capture_sizes`` resolve them (warnings as Python warnings), then
    ``compile_sizes`` (``post_init_cudagraph_sizes``) and the mode lowered for
    ``splitting_ops == []`` (``set_splitting_ops_for_v1``, which runs after the sizes)."""
    out = _derive_sizes(config)
    compile_sizes: list[int] = []
    for size in set(config.compile_sizes or ()):
        if size == "cudagraph_capture_sizes":
            compile_sizes.extend(out["cudagraph_capture_sizes"])
        elif isinstance(size, bool) or not isinstance(size, int):
            raise ValueError(
                f"compile size {size!r} is invalid: give integers or the string "
                "'cudagraph_capture_sizes'"
            )
        else:
            compile_sizes.append(size)
    out["compile_sizes"] = tuple(sorted(compile_sizes))
    mode = out.get("cudagraph_mode", config.cudagraph_mode)
    if config.splitting_ops == []:
        lowered = lower_without_splitting(mode)
        if lowered is not mode:
            warn_user(
                f"Piecewise compilation with empty splitting_ops does not contain piecewise "
                f"cudagraph. Setting cudagraph_mode to {lowered}."
            )
            out["cudagraph_mode"] = lowered
    return out


def _derive_sizes(config: GraphConfig) -> dict[str, Any]:
    mode = config.cudagraph_mode
    out: dict[str, Any] = {}
    if mode is M.NONE:
        out["cudagraph_capture_sizes"], out["max_cudagraph_capture_size"] = [], 0
        return out
    user_sizes = config.cudagraph_capture_sizes
    user_max = config.max_cudagraph_capture_size
    legacy = user_max is not None or user_sizes is not None
    if user_sizes is not None:  # with vLLM 0.34 prefer the prefill and decode lists
        user_sizes = check_size_list("cudagraph_capture_sizes", user_sizes)
    if user_max is not None:
        user_max = check_int("max_cudagraph_capture_size", user_max, 0, MAX_CAPTURE_SIZE)
    q = config.uniform_decode_query_len
    max_num_seqs, max_num_tokens = config.max_num_seqs, config.max_num_batched_tokens
    target_query_lens = {q: max_num_seqs}
    uniform_decode_sizes: list[int] = []
    max_size = user_max
    if max_size is None:
        default_max = 1024 if _is_sm100(config) else 512
        max_size = min(max_num_seqs * q * 2, default_max)
        if q > 1:

            def request_counts(max_reqs: int) -> list[int]:
                max_reqs = min(max_reqs, default_max)
                counts = [n for n in (1, 2, 4) if n <= max_reqs]
                counts += list(range(8, min(max_reqs + 1, 256), 8))
                counts += list(range(256, max_reqs + 1, 16))
                return sorted(set(counts + [max_reqs]))

            uniform_decode_sizes = sorted(
                {
                    n * ql
                    for ql, tier_max in target_query_lens.items()
                    for n in request_counts(tier_max)
                    if n * ql <= max_size
                }
            )
        elif max_num_seqs <= max_size:
            uniform_decode_sizes = [max_num_seqs]
    max_size = min(max_num_tokens, max_size)
    if max_size < 1:
        raise ValueError(
            f"max_cudagraph_capture_size={user_max} leaves no CUDA graph for "
            f"cudagraph_mode={mode}: give a size >= 1 or set cudagraph_mode='NONE'"
        )
    if user_sizes is not None:
        if not user_sizes:
            raise ValueError(
                "cudagraph_capture_sizes=[] is invalid with cudagraph_mode="
                f"{mode}: give at least one size, or None, or set cudagraph_mode='NONE'"
            )
        sizes = sorted(i for i in set(user_sizes) if i <= max_num_tokens)
    else:
        if config.performance_mode == "interactivity":
            sizes = list(range(1, min(max_size, 32) + 1))
        else:
            sizes = [i for i in (1, 2, 4) if i <= max_size]
        if max_size >= 8:
            sizes += list(range(8, min(max_size + 1, 256), 8))
        if max_size >= 256:
            sizes += list(range(256, max_size + 1, 16))
        if max_num_tokens <= max_size and max_num_tokens not in sizes:
            sizes.append(max_num_tokens)
        sizes += [s for s in uniform_decode_sizes if s <= max_num_tokens]
        sizes = sorted(set(sizes))
    valid_max = sizes[-1] if sizes else 0
    if user_max is not None and user_max != valid_max:
        if user_sizes is not None:
            raise ValueError(
                f"customized max_cudagraph_capture_size(={user_max}) should be consistent "
                f"with the max value of cudagraph_capture_sizes(={valid_max}): drop one of "
                "them (with vLLM 0.34, set max_prefill_cudagraph_capture_tokens instead)"
            )
        warn_user(f"Truncating max_cudagraph_capture_size to {valid_max}")
    if user_sizes is not None and len(sizes) < len(user_sizes):
        warn_user(f"cudagraph_capture_sizes specified {user_sizes} is overridden by {sizes}")
    return _split_sizes(config, legacy, target_query_lens, sizes, valid_max, out)


def _explicit(sizes: list[int], limit: int, cap: int | None, name: str, cap_name: str) -> list[int]:
    kept = sorted({s for s in sizes if 1 <= s <= limit})
    if len(kept) < len(set(sizes)):
        warn_user(f"Dropping {sorted(set(sizes) - set(kept))} from {name}: outside [1, {limit}].")
    if cap is not None and kept and kept[-1] > cap:
        raise ValueError(
            f"{name} holds {kept[-1]}, above {cap_name}={cap}: drop the larger sizes or "
            f"raise {cap_name}"
        )
    return kept


def _split_sizes(
    config: GraphConfig,
    legacy: bool,
    target_query_lens: dict[int, int],
    shared_sizes: list[int],
    shared_max: int,
    out: dict[str, Any],
) -> dict[str, Any]:
    uses_split = any(
        x is not None
        for x in (
            config.prefill_cudagraph_capture_token_sizes,
            config.max_prefill_cudagraph_capture_tokens,
            config.decode_cudagraph_capture_request_sizes,
            config.max_decode_cudagraph_capture_requests,
        )
    )
    if legacy and not uses_split:
        warn_user(
            "cudagraph_capture_sizes and max_cudagraph_capture_size are deprecated in vLLM "
            "0.34. Set the token counts of prefill CUDA graphs with "
            "prefill_cudagraph_capture_token_sizes or max_prefill_cudagraph_capture_tokens, "
            "and the request counts of decode CUDA graphs with "
            "decode_cudagraph_capture_request_sizes or max_decode_cudagraph_capture_requests."
        )
    wide_defaults = not legacy and _is_sm100(config)
    max_decode_tokens = config.max_decode_cudagraph_capture_tokens
    if wide_defaults and max_decode_tokens is None:
        max_decode_tokens = 8192
    prefill_sizes = _prefill_sizes(config, wide_defaults, shared_sizes)
    decode_sizes = _decode_sizes(config, wide_defaults, target_query_lens, shared_sizes, shared_max)
    mode = config.cudagraph_mode
    if (
        config.enable_adaptive_verification
        and not decode_sizes
        and mode.separate_routine()
        and mode.decode_mode() is M.FULL
    ):
        raise ValueError(
            "Adaptive verification needs decode CUDA graphs, but "
            "decode_cudagraph_capture_request_sizes is empty. Capture decode graphs, "
            "or disable adaptive verification."
        )
    out["prefill_cudagraph_capture_token_sizes"] = prefill_sizes
    out["max_prefill_cudagraph_capture_tokens"] = max(prefill_sizes, default=0)
    out["decode_cudagraph_capture_request_sizes"] = decode_sizes
    out["max_decode_cudagraph_capture_requests"] = max(decode_sizes, default=0)
    out["max_decode_cudagraph_capture_tokens"] = max_decode_tokens
    token_sizes = _token_sizes(
        config, target_query_lens, prefill_sizes, decode_sizes, max_decode_tokens,
        legacy and not uses_split,
    )  # fmt: skip
    if legacy and uses_split:
        if shared_sizes not in (
            sorted(token_sizes.decode | set(prefill_sizes)),
            sorted(token_sizes.decode),
        ):
            raise ValueError(
                "The deprecated cudagraph_capture_sizes and max_cudagraph_capture_size "
                "cannot be combined with the prefill and decode CUDA graph capture sizes; "
                "set only the latter."
            )
        sizes: set[int] = set(shared_sizes)
    else:
        sizes = token_sizes.all
    out["cudagraph_capture_sizes"] = sorted(sizes)
    out["max_cudagraph_capture_size"] = max(sizes, default=0)
    if not sizes:
        out["cudagraph_mode"] = M.NONE
        if config.enable_adaptive_verification:  # validated after the sizes, as in vLLM
            raise ValueError(
                "Adaptive verification requires full CUDA graphs, but no CUDA graph capture "
                "size is left: give prefill or decode sizes, or disable adaptive verification."
            )
    return out


def _prefill_sizes(config: GraphConfig, wide_defaults: bool, shared_sizes: list[int]) -> list[int]:
    """The prefill token sizes: explicit, a grid up to the prefill limit, or the shared list."""
    sizes, limit = (
        config.prefill_cudagraph_capture_token_sizes,
        config.max_prefill_cudagraph_capture_tokens,
    )
    if sizes is not None:
        return _explicit(
            sizes,
            config.max_num_batched_tokens,
            limit,
            "prefill_cudagraph_capture_token_sizes",
            "max_prefill_cudagraph_capture_tokens",
        )
    if limit is not None or wide_defaults:
        top = min(8192 if limit is None else limit, config.max_num_batched_tokens)
        return prefill_cudagraph_capture_grid(top, config.performance_mode == "interactivity")
    return list(shared_sizes)


def _decode_sizes(
    config: GraphConfig,
    wide_defaults: bool,
    target_query_lens: dict[int, int],
    shared_sizes: list[int],
    shared_max: int,
) -> list[int]:
    """The decode request sizes: explicit, a grid up to the request limit, or derived from the
    shared token list (each size's requests at every query length that fits)."""
    sizes, limit = (
        config.decode_cudagraph_capture_request_sizes,
        config.max_decode_cudagraph_capture_requests,
    )
    max_num_seqs = config.max_num_seqs
    if sizes is not None:
        return _explicit(
            sizes,
            max_num_seqs,
            limit,
            "decode_cudagraph_capture_request_sizes",
            "max_decode_cudagraph_capture_requests",
        )
    if limit is not None or wide_defaults:
        return decode_cudagraph_capture_grid(
            max_num_seqs if limit is None else min(limit, max_num_seqs)
        )
    return sorted(
        {
            min(cdiv(s, q), max_num_seqs)
            for s in shared_sizes
            for q in target_query_lens
            if cdiv(s, q) * q <= shared_max
        }
    )


@dataclass(frozen=True)
class _TokenSizes:
    decode: set[int]  # the token counts of the decode graphs
    all: set[int]  # every captured token count (prefill too unless mixed graphs are off)


def _token_sizes(
    config: GraphConfig,
    target_query_lens: dict[int, int],
    prefill_sizes: list[int],
    decode_sizes: list[int],
    max_decode_tokens: int | None,
    legacy_only: bool,
) -> _TokenSizes:
    """The token counts captured: each decode size at each query length, the draft model's
    decode graphs, adaptive verification's varlen sizes, then the prefill sizes."""
    max_num_tokens = config.max_num_batched_tokens
    decode_max = min(max_num_tokens, max_decode_tokens or max_num_tokens)
    token_sizes: set[int] = {
        n * q
        for n, q in decode_cudagraph_capture_shapes(decode_sizes, target_query_lens, decode_max)
    }
    if decode_sizes and _uses_draft_decode_graphs(config):
        draft = decode_cudagraph_capture_grid(config.max_num_seqs)
        token_sizes.update(
            n
            for n, _ in decode_cudagraph_capture_shapes(draft, {1: config.max_num_seqs}, decode_max)
        )
    if config.enable_adaptive_verification:
        token_sizes.update(
            varlen_token_sizes(config, max(decode_sizes, default=0), max_decode_tokens)
        )
    decode = set(token_sizes)
    token_sizes.update(prefill_sizes)
    if not legacy_only and config.cudagraph_mode.mixed_mode() is M.NONE:
        token_sizes = set(decode)
    return _TokenSizes(decode, token_sizes)


def varlen_token_sizes(
    config: GraphConfig,
    max_requests: int,
    max_decode_tokens: int | None,
    query_len: int | None = None,
) -> list[int]:
    """VllmConfig.get_varlen_decode_cudagraph_token_sizes (default: the target's q)."""
    q = config.uniform_decode_query_len if query_len is None else query_len
    return varlen_decode_cudagraph_capture_grid(
        min(
            max_requests * q,
            config.max_num_batched_tokens,
            max_decode_tokens or max_requests * q,
        ),
        config.performance_mode == "interactivity",
    )


# ----- mode (vllm/config/compilation.py, model runner) ------------------------------------
def splitting_ops_contain_attention(config: GraphConfig) -> bool:
    """CompilationConfig.splitting_ops_contain_attention after set_splitting_ops_for_v1:
    None becomes the attention ops; a list must hold all of vLLM's attention ops (or one
    of cgdispatch's own attention ops, which stand for them in this package's models)."""
    ops = config.splitting_ops
    if ops is None:
        return True
    return all(op in ops for op in VLLM_ATTENTION_OPS) or any(
        op in ops for op in DEFAULT_SPLITTING_OPS
    )


def resolve_mode(
    config: GraphConfig,
    attention_support: AttentionCGSupport,
    piecewise_capture_available: bool = True,
) -> CUDAGraphMode:
    """The mode the runner builds its CudaGraphManager with (vLLM 0.34)."""
    support = AttentionCGSupport(attention_support)
    mode = config.cudagraph_mode
    contain_attention = splitting_ops_contain_attention(config)
    # CompilationConfig.set_splitting_ops_for_v1: splitting_ops == [] (after sizes)
    if config.splitting_ops == []:
        mode = lower_without_splitting(mode)
    # GPUModelRunner: resolve_adaptive_cudagraph_mode before the backend check
    if config.enable_adaptive_verification and mode.has_full_cudagraphs():
        if mode is M.FULL_DECODE_ONLY or not piecewise_capture_available:
            mode = M.FULL_DECODE_ONLY
        else:
            mode = M.FULL_AND_PIECEWISE
    # CompilationConfig.resolve_cudagraph_mode_and_sizes
    mode = lower_for_attention_support(
        mode, support, contain_attention, config.uniform_decode_query_len
    )
    if mode is M.NONE:
        return mode
    if not piecewise_capture_available and mode.requires_piecewise_compilation():
        mode = {M.PIECEWISE: M.NONE, M.FULL_AND_PIECEWISE: M.FULL_DECODE_ONLY}.get(mode, mode)
    if mode.has_full_cudagraphs() and support == AttentionCGSupport.NEVER:
        raise ValueError(
            f"CUDAGraphMode.{mode.name} is not supported with an attention backend of "
            f"support {support}; please try cudagraph_mode=PIECEWISE"
        )
    return mode


def resolve(
    config: GraphConfig, support: AttentionCGSupport, piecewise_capture_available: bool
) -> dict[str, Any]:
    """Only the mode changes (:func:`resolve_mode`): sizes were resolved with the config."""
    mode = resolve_mode(config, support, piecewise_capture_available)
    return {} if mode is config.cudagraph_mode else {"cudagraph_mode": mode}


def compilation_sizes(config: GraphConfig) -> dict[str, Any]:
    """The size keys of vLLM 0.34's ``--compilation-config``: the prefill and decode lists
    and their bounds (not the deprecated ``cudagraph_capture_sizes``)."""
    out: dict[str, Any] = {}
    for key in GEN2_COMPILATION_KEYS:
        value = getattr(config, key)
        if value is not None:
            out[key] = list(value) if isinstance(value, list) else value
    return out
