"""A step priced from what it holds: its decode requests (each with its own context) and its
prompt chunks (tokens already computed, new tokens), at the runtime mode and padded size the
dispatcher gives it.

Each kernel of the model's profile (:class:`~cgdispatch.estimate.profiles.LinearProfile`,
counted on fake tensors) is one of:

- a **GEMM** on the step's padded tokens, timed by the fitted GEMM formula
  (:func:`~cgdispatch.estimate.kernel_model.gemm_us`);
- the **LM head**, the model's last GEMM, on the sampled rows only: vLLM computes logits for
  one token per request (plus its drafts), not for every prompt token;
- **attention**, one kernel a layer, priced per request: decodes read their own KV cache,
  prompt chunks run causal attention over their cached and new tokens
  (:func:`~cgdispatch.estimate.kernel_model.decode_attention_us`,
  :func:`~cgdispatch.estimate.kernel_model.prefill_attention_us`);
- an **all-reduce** of the activation after attention and after the MLP when the model is
  sharded over ``tensor_parallel_size`` GPUs;
- anything else (fused pointwise runs, gathers): the roofline of
  :func:`~cgdispatch.estimate.step_time.kernel_times_us`.

How the host issues the kernels in each mode (launches, graph pieces, eager attention) is
:func:`~cgdispatch.estimate.step_time.step_us`, on top. For one (mode, padded size) the
step time is the largest of a few lines in two unknowns, the per-layer attention time and
the LM head's time (:meth:`StepPricer.lines`); a replay of vLLM's scheduler prices each of
its steps with one small ``max`` (about 3 us) instead of a kernel matrix.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from typing import TYPE_CHECKING, Protocol

import numpy as np

from ..core.modes import CUDAGraphMode
from ..core.step_content import StepContent
from .kernel_model import (
    allreduce_us,
    decode_attention_fn,
    decode_attention_scalar_us,
    decode_attention_us,
    gemm_us,
    kernel_coefficients,
    prefill_attention_us,
)
from .step_time import issue_items, kernel_times_us

# bytes of one weight element per weight dtype a checkpoint may use
WEIGHT_BYTES = {"bfloat16": 2.0, "float16": 2.0, "fp8": 1.0, "int8": 1.0, "int4": 0.5}

if TYPE_CHECKING:
    from .devices import DeviceSpec
    from .profiles import AttentionShape, LinearProfile


class PricedModel(Protocol):
    """What a step pricer reads of a cost model (:class:`~cgdispatch.estimate.device_model.DeviceCostModel`)."""

    model_name: str
    spec: DeviceSpec
    profile: LinearProfile
    attention: AttentionShape | None
    weight_dtype: str
    num_experts: int

    def pricer(self) -> StepPricer: ...


__all__ = ["StepContent", "StepPricer", "PricedModel", "price_step", "KERNEL_KINDS"]

_GEMMS = ("aten::mm", "aten::addmm", "aten::bmm", "aten::baddbmm")
# what each profile kernel is priced as (StepPricer.kinds)
KERNEL_KINDS = ("other", "gemm", "head", "attention", "allreduce")
_OTHER, _GEMM, _HEAD, _ATTN, _AR = range(5)


def classify(names: Sequence[str], splitting: np.ndarray, tensor_parallel_size: int) -> np.ndarray:
    """Each profile kernel's kind (indices into :data:`KERNEL_KINDS`)."""
    kinds = np.full(len(names), _OTHER, dtype=np.int64)
    gemms = [i for i, n in enumerate(names) if n.startswith(_GEMMS)]
    kinds[gemms] = _GEMM
    if gemms:
        kinds[gemms[-1]] = _HEAD  # the last GEMM is the LM head (logits)
    kinds[np.asarray(splitting, dtype=bool)] = _ATTN
    if tensor_parallel_size > 1:
        kinds[[i for i, n in enumerate(names) if n.startswith("aten::clone")]] = _AR
    return kinds


class StepPricer:
    """Prices steps of one :class:`~cgdispatch.estimate.device_model.DeviceCostModel` from
    what they hold. It keeps a table of lines per (mode, padded size) it has priced; it does
    not decide the mode or the padding (the dispatcher does)."""

    def __init__(self, cost_model: PricedModel) -> None:
        shape = cost_model.attention
        if shape is None:
            raise ValueError(
                f"{cost_model.model_name}: its cost model has no attention shape to price "
                "requests with; rebuild it with device_cost_model()"
            )
        self.model, self.shape, self.spec = cost_model, shape, cost_model.spec
        self.coeffs = kernel_coefficients(self.spec)
        profile = cost_model.profile
        self.kinds = classify(profile.names, profile.splitting, shape.tensor_parallel_size)
        # the profile is in 16 bits: a GEMM's bytes at zero tokens are its weights
        weights = profile.bytes_at_zero
        self.weight_scale = WEIGHT_BYTES[cost_model.weight_dtype] / 2.0
        self.fp8 = cost_model.weight_dtype in ("fp8", "int8") and (
            self.coeffs.gemm_fp8 is not None or cost_model.weight_dtype == "int8"
        )
        # routed experts: rows = tokens x top-k through one expert's weights, so FLOPs per
        # token over weight elements is top-k (1 for a dense GEMM)
        ratio = np.divide(
            profile.flops_per_token, weights, out=np.zeros_like(weights), where=weights > 0
        )
        self.top_k = np.where((self.kinds == _GEMM) & (ratio > 1.5), np.round(ratio), 1.0)
        self.num_experts = cost_model.num_experts
        self.num_layers = int((self.kinds == _ATTN).sum())
        self._lines: dict[tuple[CUDAGraphMode, int], tuple[np.ndarray, ...]] = {}
        self._heads: dict[int, float] = {}
        self._decode_fns: dict[int, Callable[[float], float]] = {}

    # ----- the two content-dependent terms ------------------------------------------------
    def attention_us(self, content: StepContent, *, l2_warm: bool = False) -> float:
        """One layer's attention (us) of the step's decodes and prompt chunks (``l2_warm``:
        as a measured table times it, :func:`~.kernel_model.decode_attention_us`)."""
        c, s = self.coeffs, self.shape
        t = t0 = 0.0
        if content.decode_reqs:  # scalar arithmetic: the replay prices every step
            n, kv_tokens = content.decode_reqs, content.decode_kv_tokens
            if l2_warm:  # the measured tables' conditions: not kept per batch size
                per = s.kv_bytes_per_token
                t = decode_attention_scalar_us(
                    kv_tokens * per, n, s.heads, s.kv_heads, per, self.spec, c, l2_warm=True
                )
            else:
                t = self._decode_us(n, kv_tokens)
            t0 = c.decode["t0_us"]
        if content.chunks:
            done, new = np.array(content.chunks, dtype=np.float64).T
            t += float(
                prefill_attention_us(
                    done, new, s.heads, s.kv_heads, s.head_dim, s.kv_dtype_bytes, self.spec, c
                ).sum()
            )
            t0 = max(t0, c.prefill["t0_us"])
        return t + t0

    def decode_attention_rows(self, num_tokens: np.ndarray, context_len: int) -> np.ndarray:
        """Per-layer attention (us) of steps of ``num_tokens`` decodes at ``context_len``."""
        n = np.asarray(num_tokens, dtype=np.float64)
        s = self.shape
        kv_bytes = n * context_len * s.kv_bytes_per_token
        work = decode_attention_us(
            kv_bytes, n, s.heads, s.kv_heads, s.kv_bytes_per_token, self.spec, self.coeffs
        )
        return work + self.coeffs.decode["t0_us"]

    def _decode_fn(self, num_reqs: int) -> Callable[[float], float]:
        """:func:`decode_attention_fn` of ``num_reqs`` requests (one per batch size, kept)."""
        fn = self._decode_fns.get(num_reqs)
        if fn is None:
            s = self.shape
            fn = self._decode_fns[num_reqs] = decode_attention_fn(
                num_reqs, s.heads, s.kv_heads, s.kv_bytes_per_token, self.spec, self.coeffs
            )
        return fn

    def _decode_us(self, num_reqs: int, kv_tokens: float) -> float:
        """One layer's decode attention (us, no ``t0``) of ``num_reqs`` requests holding
        ``kv_tokens`` of context in all."""
        return self._decode_fn(num_reqs)(kv_tokens * self.shape.kv_bytes_per_token)

    # ----- kernels ------------------------------------------------------------------------
    def kernel_rows(
        self, padded: np.ndarray, sampled: np.ndarray, attention_us: np.ndarray
    ) -> np.ndarray:
        """Each kernel's device time (us), ``[rows, kernels]``."""
        profile, kinds, spec = self.model.profile, self.kinds, self.spec
        padded = np.asarray(padded, dtype=np.float64)
        flops, nbytes = profile.at(padded)
        out = kernel_times_us(flops, nbytes, profile.half, spec)
        gemm = kinds == _GEMM
        if gemm.any():
            out[:, gemm] = self._gemm_rows(padded, flops[:, gemm], gemm)
        head = np.flatnonzero(kinds == _HEAD)
        if head.size:
            s = np.asarray(sampled, dtype=np.float64)
            h_flops, h_bytes = profile.at(s)
            out[:, head] = gemm_us(
                h_flops[:, head], h_bytes[:, head], s[:, None], spec, self.coeffs
            )
        attn = kinds == _ATTN
        out[:, attn] = np.asarray(attention_us, dtype=np.float64)[:, None]
        ar = kinds == _AR
        if ar.any():  # a clone moves the activation twice (read and write): msg = bytes / 2
            out[:, ar] = allreduce_us(
                nbytes[:, ar] / 2, self.shape.tensor_parallel_size, spec, self.coeffs
            )
        return out

    def _gemm_rows(self, padded: np.ndarray, flops: np.ndarray, gemm: np.ndarray) -> np.ndarray:
        """The model's GEMMs at ``padded`` tokens: weights in the checkpoint's dtype, and a
        routed expert's weights read once per expert the tokens reach."""
        profile = self.model.profile
        weights = profile.bytes_at_zero[gemm] * self.weight_scale
        acts = profile.bytes_per_token[gemm] * padded[:, None]
        k = self.top_k[gemm]
        m = np.broadcast_to(padded[:, None], flops.shape).astype(np.float64)
        experts = self.num_experts
        if experts and (k > 1).any():
            # distinct experts that top-k routing of the step's tokens reaches (uniform)
            active = experts * (1 - (1 - np.minimum(k, experts) / experts) ** padded[:, None])
            routed = k > 1
            weights = np.where(routed, weights * active, weights)
            m = np.where(routed, padded[:, None] * k / np.maximum(active, 1.0), m)
        fp8 = self.fp8 and self.coeffs.gemm_fp8 is not None
        rate = self.spec
        if self.fp8 and not fp8:  # int8 W8A8 without fitted fp8 GEMMs: twice the bf16 rate
            rate = self.spec.replace(
                peak_flops=self.spec.peak_fp8_flops or 2 * self.spec.peak_flops
            )
        return gemm_us(flops, weights + acts, m, rate, self.coeffs, fp8=fp8)

    # ----- one step -----------------------------------------------------------------------
    def lines(self, mode: CUDAGraphMode, padded: int) -> tuple[np.ndarray, ...]:
        """``(c, a, h)``: the step takes ``max(c + a * attention_us + h * head_us)`` us.

        Each issued item ``j`` gives one line: its issue time plus the device work from it
        to the end (``c``), with ``a`` attention kernels and ``h`` LM heads in that work.
        Lines with the same ``(a, h)`` keep the largest ``c``.
        """
        key = (mode, int(padded))
        found = self._lines.get(key)
        if found is not None:
            return found
        spec = self.spec
        zero = self.kernel_rows(np.array([padded]), np.array([0.0]), np.zeros(1))[0]
        head = self.kinds == _HEAD
        zero[head] = 0.0
        starts, host, gap = issue_items(self.model.profile.splitting, mode, spec)
        if len(starts) == 0:
            found = (np.array([spec.step_overhead_us]), np.zeros(1), np.zeros(1))
        else:
            work = np.add.reduceat(zero, starts) + gap
            issued = spec.step_overhead_us + np.cumsum(host)
            c = issued + np.cumsum(work[::-1])[::-1]
            a = np.cumsum(np.add.reduceat((self.kinds == _ATTN) * 1.0, starts)[::-1])[::-1]
            h = np.cumsum(np.add.reduceat(head * 1.0, starts)[::-1])[::-1]
            best: dict[tuple[float, float], float] = {}
            for cj, aj, hj in zip(c, a, h):
                if cj > best.get((aj, hj), -np.inf):
                    best[(aj, hj)] = cj
            keys = list(best)
            found = (
                np.array([best[k] for k in keys]),
                np.array([k[0] for k in keys]),
                np.array([k[1] for k in keys]),
            )
        self._lines[key] = found
        return found

    def head_us(self, sampled: int) -> float:  # the LM head stays in 16 bits
        """The LM head's time (us) on ``sampled`` rows (cached per count)."""
        found = self._heads.get(sampled)
        if found is None:
            head = np.flatnonzero(self.kinds == _HEAD)
            found = 0.0
            if head.size and sampled > 0:
                flops, nbytes = self.model.profile.at(np.array([float(sampled)]))
                found = float(
                    gemm_us(flops[0, head], nbytes[0, head], sampled, self.spec, self.coeffs)[0]
                )
            self._heads[sampled] = found
        return found

    def device_ms(
        self, content: StepContent, padded: int | None = None, *, l2_warm: bool = False
    ) -> float:
        """The step's kernels' device work alone (ms): no launches, gaps or host time, the
        sum a per-kernel measurement adds up (what bench_step_costs.py compares, with
        ``l2_warm`` as those measurements ran)."""
        padded = content.num_tokens if padded is None else padded
        rows = self.kernel_rows(
            np.array([padded]),
            np.array([content.sampled_tokens]),
            np.array([self.attention_us(content, l2_warm=l2_warm)]),
        )
        return float(rows.sum()) / 1e3

    def decode_step_ms(
        self, num_reqs: int, mode: CUDAGraphMode, padded: int
    ) -> Callable[[int], float]:
        """:meth:`step_ms` of a step of ``num_reqs`` one-token decodes and nothing else, as a
        function of their summed context (``decode_kv_tokens``): the same arithmetic in the
        same order, so the same floats, without building a step's content each time (a
        steady stretch prices thousands of such steps that differ only in context)."""
        c, a, h = self.lines(mode, padded)
        x_head = self.head_us(num_reqs)
        s = self.shape
        kv_bytes_per_token, t0 = s.kv_bytes_per_token, self.coeffs.decode["t0_us"]
        decode = self._decode_fn(num_reqs)
        if len(c) == 1:
            c0, a0, h_part = float(c[0]), float(a[0]), float(h[0]) * x_head

            def one_line(kv_tokens: int) -> float:
                x_attn = decode(kv_tokens * kv_bytes_per_token) + t0
                return (c0 + a0 * x_attn + h_part) / 1e3

            return one_line
        lines = list(zip(c.tolist(), a.tolist(), (h * x_head).tolist()))

        def most(kv_tokens: int) -> float:
            x_attn = decode(kv_tokens * kv_bytes_per_token) + t0
            return max([cj + aj * x_attn + hj for cj, aj, hj in lines]) / 1e3

        return most

    def step_ms(self, content: StepContent, mode: CUDAGraphMode, padded: int) -> float:
        """The step's time (ms) in a runtime mode at ``padded`` tokens."""
        c, a, h = self.lines(mode, padded)
        x_attn = self.attention_us(content)
        x_head = self.head_us(content.sampled_tokens)
        if len(c) == 1:  # FULL: one graph launch, one line
            return (float(c[0]) + float(a[0]) * x_attn + float(h[0]) * x_head) / 1e3
        return float(np.max(c + a * x_attn + h * x_head)) / 1e3


def price_step(
    cost_model: PricedModel,
    *,
    decode_contexts: Iterable[int] = (),
    prompt_chunks: Iterable[tuple[int, int]] = (),
    mode: CUDAGraphMode | str = "FULL",
    padded_tokens: int | None = None,
) -> float:
    """One step's time in milliseconds (``model``), priced from what it holds.

    ``decode_contexts``: each decoding request's context length (the tokens its attention
    reads, its new token included); ``prompt_chunks``: ``(computed, new)`` per prompt chunk
    (tokens already in the KV cache, tokens computed this step); ``mode``: the runtime mode
    (NONE, PIECEWISE or FULL, as the dispatcher answers); ``padded_tokens``: the graph's
    size (default: the step's own token count). ``cost_model`` from
    :func:`~cgdispatch.estimate.device_model.device_cost_model`.
    """
    content = StepContent.of(decode_contexts, prompt_chunks)
    runtime = CUDAGraphMode.parse(mode)
    if not runtime.is_valid_runtime_mode():
        raise ValueError(
            f"mode={runtime} is invalid: price a step in the runtime mode the dispatcher "
            "gives it (NONE, PIECEWISE or FULL)"
        )
    padded = content.num_tokens if padded_tokens is None else padded_tokens
    if isinstance(padded, bool) or not isinstance(padded, (int, np.integer)):
        raise ValueError(f"padded_tokens={padded!r} is invalid: give a whole number of tokens")
    if padded < content.num_tokens:
        raise ValueError(
            f"padded_tokens={padded} is below the step's {content.num_tokens} tokens: a graph "
            "pads a step up to its size, never down"
        )
    return cost_model.pricer().step_ms(content, runtime, int(padded))
