"""Default capture-size ladders of the engines cgdispatch compares against.

Facts from the engines' documentation and source as summarised in docs/references.md
(vLLM V1 mid-2026, SGLang 2025-2026, TensorRT-LLM PyTorch backend, Hugging Face TGI).
Each function returns a sorted list of distinct sizes.
"""

from __future__ import annotations

from .validate import (
    MAX_CAPTURE_SIZE,
    MAX_CAPTURE_SIZES,
    MAX_NUM_SEQS,
    MAX_SPECULATIVE_TOKENS,
    MAX_STEP_TOKENS,
    check_int,
)

__all__ = [
    "vllm_max_capture_size",
    "vllm_ladder",
    "sglang_ladder",
    "trtllm_ladder",
    "tgi_ladder",
    "powers_of_two_ladder",
    "every_size_ladder",
    "ENGINE_LADDERS",
]


_LIMITS = {
    "max_num_seqs": MAX_NUM_SEQS,
    "max_num_batched_tokens": MAX_STEP_TOKENS,
    "num_speculative_tokens": MAX_SPECULATIVE_TOKENS,
}


def _positive(name: str, value: int) -> int:
    """``value`` >= 1 within its bound (a ladder's largest size: MAX_CAPTURE_SIZE)."""
    return check_int(name, value, 1, _LIMITS.get(name, MAX_CAPTURE_SIZE))


def vllm_max_capture_size(
    max_num_seqs: int = 256, max_num_batched_tokens: int = 8192, num_speculative_tokens: int = 0
) -> int:
    """vLLM's default largest capture size: ``min(2 * max_num_seqs * q, 512)``, capped by tokens."""
    _positive("max_num_seqs", max_num_seqs)
    _positive("max_num_batched_tokens", max_num_batched_tokens)
    spec = num_speculative_tokens
    if isinstance(spec, bool) or not isinstance(spec, int) or spec < 0:
        raise ValueError(f"num_speculative_tokens={spec!r} is invalid: it must be an integer >= 0")
    q = 1 + spec
    return min(2 * max_num_seqs * q, 512, max_num_batched_tokens)


def _vllm_default_max(device_capability: tuple[int, int] | None) -> int:
    """512, or 1024 on the SM100 family (``is_device_capability_family(100)``)."""
    return 1024 if device_capability is not None and device_capability[0] == 10 else 512


def vllm_ladder(
    max_size: int | None = None,
    *,
    max_num_seqs: int = 256,
    max_num_batched_tokens: int = 8192,
    num_speculative_tokens: int = 0,
    device_capability: tuple[int, int] | None = None,
) -> list[int]:
    """vLLM 0.33's default capture sizes (``vllm/config/vllm.py _set_cudagraph_sizes``).

    ``max = min(2 * max_num_seqs * q, 512)`` (1024 on SM100) unless ``max_size`` is
    given, then capped by ``max_num_batched_tokens``; the ladder is
    ``[1, 2, 4] + range(8, 256, 8) + range(256, max + 1, 16)`` cut at max, plus
    ``max_num_batched_tokens`` when it is <= max. Only when the max is vLLM's default,
    uniform-decode sizes are added: ``max_num_seqs`` when q = 1 (if it fits), else
    ``n * q`` for the request counts ``n`` of the same ladder up to ``max_num_seqs``
    (plus ``max_num_seqs``) that fit under the uncapped max.
    """
    _positive("max_num_seqs", max_num_seqs)
    tokens = _positive("max_num_batched_tokens", max_num_batched_tokens)
    spec = num_speculative_tokens
    if isinstance(spec, bool) or not isinstance(spec, int) or spec < 0:
        raise ValueError(f"num_speculative_tokens={spec!r} is invalid: it must be an integer >= 0")
    q = 1 + spec
    decode_sizes: list[int] = []
    if max_size is None:
        default_max = _vllm_default_max(device_capability)
        max_size = min(max_num_seqs * q * 2, default_max)
        if q > 1:
            reqs = min(max_num_seqs, default_max)
            counts = [n for n in (1, 2, 4) if n <= reqs]
            counts += [*range(8, min(reqs + 1, 256), 8), *range(256, reqs + 1, 16), reqs]
            decode_sizes = sorted({n * q for n in counts if n * q <= max_size})
        elif max_num_seqs <= max_size:
            decode_sizes = [max_num_seqs]
    _positive("max_size", max_size)
    max_size = min(tokens, max_size)
    sizes = [s for s in (1, 2, 4) if s <= max_size]
    if max_size >= 8:
        sizes += range(8, min(max_size + 1, 256), 8)
    if max_size >= 256:
        sizes += range(256, max_size + 1, 16)
    if tokens <= max_size:
        sizes.append(tokens)
    sizes += [s for s in decode_sizes if s <= tokens]
    return sorted(set(sizes))


def sglang_ladder(max_size: int = 256) -> list[int]:
    """SGLang: ``[1, 2, 4, 8, 12] + range(16, 257, 8) + range(272, 512, 16) + range(512, max+1, 32)``."""
    _positive("max_size", max_size)
    base = [1, 2, 4, 8, 12, *range(16, 257, 8), *range(272, 512, 16), *range(512, max_size + 1, 32)]
    return sorted({s for s in base if s <= max_size})


def trtllm_ladder(max_batch_size: int = 128) -> list[int]:
    """TensorRT-LLM (PyTorch backend, padding on): ``[1, 2, 4] + range(8, 129, 8)``, then +64 steps, max appended."""
    _positive("max_batch_size", max_batch_size)
    base = [1, 2, 4, *range(8, 129, 8), *range(192, max_batch_size + 1, 64)]
    return sorted({s for s in base if s <= max_batch_size} | {max_batch_size})


def tgi_ladder(max_size: int | None = None) -> list[int]:
    """Hugging Face TGI's ``--cuda-graphs`` default ``1,2,4,8,16,32``."""
    sizes = [1, 2, 4, 8, 16, 32]
    if max_size is None:
        return sizes
    return [s for s in sizes if s <= _positive("max_size", max_size)]


def powers_of_two_ladder(max_size: int) -> list[int]:
    """1, 2, 4, ... up to ``max_size``, which is always included."""
    _positive("max_size", max_size)
    sizes, s = [], 1
    while s < max_size:
        sizes.append(s)
        s *= 2
    return [*sizes, max_size]


def every_size_ladder(max_size: int) -> list[int]:
    """Every size 1..max (no padding at all; SGLang with padding disabled)."""
    return list(range(1, check_int("max_size", max_size, 1, MAX_CAPTURE_SIZES) + 1))


ENGINE_LADDERS = {
    "vllm": vllm_ladder,
    "sglang": sglang_ladder,
    "trtllm": trtllm_ladder,
    "tgi": tgi_ladder,
    "pow2": powers_of_two_ladder,
    "every": every_size_ladder,
}
