"""One transformer step priced as the sum of kernels aiconfigurator measured in vLLM.

This is the "measured" reference that the built-in device model is fitted against. Like
aiconfigurator's own step (``aiconfigurator_core.sdk.engine``), it adds kernel times and
nothing else: no launch cost, no idle gaps, no CPU work, no overlap. Per decoder layer of one
TP rank (heads / TP, KV heads / TP (at least 1), MLP / TP, vocabulary / TP):

- measured GEMMs on all ``T`` tokens of the step: QKV, O projection, gate/up and down (dense
  layers), or the router GEMM plus the fused MoE kernel (MoE layers, experts sharded by TP);
- measured attention: context (prefill) attention over the prompt chunks, generation
  (decode) attention over the decoding requests;
- measured all-reduce (vLLM's custom all-reduce in a CUDA graph) of ``T x hidden`` elements
  twice per layer and once after the vocabulary-parallel embedding, when TP > 1;
- the measured LM-head GEMM on one sampled token per request (each decode and each chunk);
- **estimated**, not measured (``elementwise_ms``): the memory-bound ops aiconfigurator
  prices with its own formula ``bytes / (mem_bw * 0.8) + 3 us`` from ``systems/<gpu>.yaml``:
  two residual-add + RMSNorm per layer, SiLU-and-mul on dense layers, the embedding gather,
  and the 13.2 us its engine adds to every context-attention call for its RoPE and KV-write
  memory ops, 26.4 us more with QK-norm (Qwen3) (``sdk/operations/attention.py``; the
  figures are its per-op output less the table's: the same on H100, H200 and A100, for
  batch 1-16 and prompts of 16-8192 tokens). Decode attention gets no such extra there.

Shapes the tables do not hold exactly: a cached prefix of ``p`` tokens ahead of ``n`` new
ones is priced as the full ``p + n`` prompt times the share of its causal attention the new
rows do, ``n (p + n/2) / ((p + n)**2 / 2)`` (what aiconfigurator's engine does), but never
below the same chunk with no prefix (the share alone drops under the kernel's floor for a
short chunk behind a long prefix, where the engine's figure is too low); prompts of
different lengths as one batch of the root-mean-square length, scaled to the same attention
work; decodes of different contexts as one batch at the mean context (KV read is linear in
it). Context lengths are the KV tokens each decode reads; one token per decode (no draft
tokens); sliding-window layers are priced as full attention. Agreement with aiconfigurator's own
engine (within 2% on H100/H200, 5.2% on A100): ``docs/references_kernels.md``.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import yaml

from ..core import cache
from ..models.published import PublishedModel, published_model
from .aic_data import AIC_DEVICE_FOLDERS
from .aic_tables import AicTables, aic_tables

__all__ = ["StepBreakdown", "aic_model", "measured_step_breakdown"]

# short names -> Hugging Face ids of cgdispatch/data/model_architectures.csv (base and
# instruct checkpoints share their shapes)
_MODEL_ALIASES = {
    "llama-3.1-8b": "meta-llama/Llama-3.1-8B-Instruct",
    "meta-llama/llama-3.1-8b": "meta-llama/Llama-3.1-8B-Instruct",
    "llama-3.1-70b": "meta-llama/Llama-3.1-70B-Instruct",
    "meta-llama/llama-3.1-70b": "meta-llama/Llama-3.1-70B-Instruct",
    "llama-3.1-70b-tp8": "meta-llama/Llama-3.1-70B-Instruct",
    "qwen2.5-7b": "Qwen/Qwen2.5-7B-Instruct",
    "qwen3-8b": "Qwen/Qwen3-8B",
    "qwen3-30b-a3b": "Qwen/Qwen3-30B-A3B",
    "mixtral-8x7b": "mistralai/Mixtral-8x7B-Instruct-v0.1",
}
# aiconfigurator's engine's per-layer extras on a context-attention call (module docstring)
_CONTEXT_ATTENTION_EXTRA_MS = 0.0132  # RoPE + KV-cache write
_CONTEXT_QK_NORM_EXTRA_MS = 0.0264  # QK-norm, models that have it


def aic_model(model: object) -> PublishedModel:
    """The published config of ``model``: a :class:`PublishedModel`, a short name
    (``llama-3.1-8b``, ``llama-3.1-70b``, ``qwen3-8b``, ``qwen3-30b-a3b``, ``mixtral-8x7b``),
    a Hugging Face id of ``model_architectures.csv`` or a ``config.json`` source."""
    if isinstance(model, str) and model.lower() in _MODEL_ALIASES:
        model = _MODEL_ALIASES[model.lower()]
    return published_model(model)


@dataclass(frozen=True)
class StepBreakdown:
    """The time (ms) of one step on one GPU, by kind of kernel; ``total_ms`` is their sum."""

    gemm_ms: float  # QKV, O, gate/up, down, router: measured
    attn_prefill_ms: float  # context attention: measured
    attn_decode_ms: float  # generation attention: measured
    allreduce_ms: float  # custom all-reduce (TP > 1): measured
    moe_ms: float  # fused MoE experts: measured
    lm_head_ms: float  # LM head on the sampled tokens: measured
    elementwise_ms: float  # norms, activation, embedding, RoPE/KV write: estimated

    @property
    def total_ms(self) -> float:
        return sum(asdict(self).values())


@cache.memo(maxsize=8)
def _memory_op_constants(device: str, data_dir: Path) -> tuple[float, float]:
    """(effective bytes/s, fixed seconds) of aiconfigurator's memory-op formula."""
    spec = yaml.safe_load((data_dir.parent / f"{AIC_DEVICE_FOLDERS[device]}.yaml").read_text())[
        "gpu"
    ]
    return spec["mem_bw"] * spec["mem_bw_empirical_scaling_factor"], spec[
        "mem_empirical_constant_latency"
    ]


def _chunks(prompt_chunks: Sequence[object]) -> list[tuple[int, int]]:
    out = []
    for chunk in prompt_chunks:
        cached, new = (0, chunk) if not isinstance(chunk, tuple) else chunk
        if not (isinstance(new, int) and new >= 1 and isinstance(cached, int) and cached >= 0):
            raise ValueError(
                f"prompt chunk {chunk!r} is invalid: give new tokens (int >= 1) or a "
                "(cached_tokens, new_tokens) pair with cached_tokens >= 0"
            )
        out.append((new, cached))
    return out


def _prefill_attention_ms(tables: AicTables, chunks, heads, kv_heads, head_dim, kv_dtype) -> float:
    def batch_ms(lengths: list[float], work: float) -> float:
        # one batch of the root-mean-square length, scaled to the same causal work
        seq = math.sqrt(sum(s * s for s in lengths) / len(lengths))
        scale = work / (len(lengths) * seq * seq / 2)
        return (
            tables.context_attention_ms(len(lengths), seq, heads, kv_heads, head_dim, kv_dtype)
            * scale
        )

    with_prefix = batch_ms(
        [new + cached for new, cached in chunks],
        sum(new * (cached + new / 2) for new, cached in chunks),
    )
    if all(cached == 0 for _, cached in chunks):
        return with_prefix
    # a short chunk behind a long prefix: the work share alone would fall below the
    # kernel's floor, so never price it under the same chunks with no prefix
    return max(
        with_prefix, batch_ms([new for new, _ in chunks], sum(new * new / 2 for new, _ in chunks))
    )


def measured_step_breakdown(
    model: object,
    device: str,
    *,
    decode_contexts: Sequence[int] = (),
    prompt_chunks: Sequence[int | tuple[int, int]] = (),  # new tokens, or (cached, new)
    tensor_parallel_size: int = 1,
    dtype: str = "bfloat16",
    kv_dtype: str = "bfloat16",
    data_dir: str | None = None,
) -> StepBreakdown:
    """The step of ``decode_contexts`` (one decode per request, each reading that many KV
    tokens) and ``prompt_chunks`` (new tokens, or ``(cached, new)`` pairs: tokens already in the
    KV cache first, as vLLM's ``num_computed_tokens`` comes before the new ones) on one GPU of a
    TP group, by kind of kernel (module docstring). ``dtype``: the GEMM dtype (``fp8`` where
    measured); ``data_dir``: aiconfigurator's ``systems/data`` (default: the installed one)."""
    m = aic_model(model)
    tp = tensor_parallel_size
    m.check_parallel(tp, 1)
    if m.is_mla:
        raise ValueError(f"{m.model} uses latent attention (MLA): its tables are not read here")
    contexts = [int(c) for c in decode_contexts]
    if any(c < 1 for c in contexts):
        raise ValueError(
            f"decode_contexts={list(decode_contexts)!r} is invalid: each must be >= 1 KV token"
        )
    chunks = _chunks(prompt_chunks)
    tokens = len(contexts) + sum(new for new, _ in chunks)
    if tokens == 0:
        raise ValueError("the step is empty: give decode_contexts and/or prompt_chunks")
    tables = aic_tables(device, data_dir)
    h, d = m.hidden_size, m.head_dim
    heads, kv_heads = m.num_heads // tp, m.kv_heads_per_rank(tp)
    moe_layers = m.layers - m.dense_layers if m.is_moe else 0
    dense_layers = m.layers - moe_layers
    inter = m.intermediate_size // tp
    gemm, moe = _gemm_and_moe_ms(m, tables, tokens, tp, dtype)
    prefill = decode = 0.0
    if chunks:
        prefill = m.layers * _prefill_attention_ms(tables, chunks, heads, kv_heads, d, kv_dtype)
    if contexts:
        mean_context = sum(contexts) / len(contexts)
        decode = m.layers * tables.generation_attention_ms(
            len(contexts), mean_context, heads, kv_heads, d, kv_dtype
        )
    allreduce = (2 * m.layers + 1) * tables.allreduce_ms(tokens * h, tp)
    sampled = len(contexts) + len(chunks)
    lm_head = tables.gemm_ms(sampled, m.padded_vocab(tp) // tp, h, "bfloat16")

    elementwise = _elementwise_ms(m, device, tables, tokens, inter, dense_layers, bool(chunks))
    return StepBreakdown(gemm, prefill, decode, allreduce, moe, lm_head, elementwise)


def _gemm_and_moe_ms(m: Any, tables: Any, tokens: int, tp: int, dtype: str) -> tuple[float, float]:
    """The step's dense GEMMs (attention projections, dense MLPs, router and shared experts)
    and its routed-expert MoE kernels, ms, on one GPU of the TP group."""
    h, d = m.hidden_size, m.head_dim
    heads, kv_heads = m.num_heads // tp, m.kv_heads_per_rank(tp)
    moe_layers = m.layers - m.dense_layers if m.is_moe else 0
    dense_layers = m.layers - moe_layers
    inter = m.intermediate_size // tp

    attn_gemm = tables.gemm_ms(tokens, (heads + 2 * kv_heads) * d, h, dtype) + tables.gemm_ms(
        tokens, h, heads * d, dtype
    )
    mlp_gemm = tables.gemm_ms(tokens, 2 * inter, h, dtype) + tables.gemm_ms(tokens, h, inter, dtype)
    gemm = m.layers * attn_gemm + dense_layers * mlp_gemm
    moe = 0.0
    if moe_layers:
        expert = m.moe_intermediate_size // tp
        per_layer = tables.gemm_ms(tokens, m.num_experts, h, dtype)
        if m.shared_intermediate_size:
            shared = m.shared_intermediate_size // tp
            per_layer += tables.gemm_ms(tokens, 2 * shared, h, dtype) + tables.gemm_ms(
                tokens, h, shared, dtype
            )
        gemm += moe_layers * per_layer
        moe = moe_layers * tables.moe_ms(
            tokens, h, expert, m.experts_per_token, m.num_experts, tp, dtype
        )

    return gemm, moe


def _elementwise_ms(
    m: Any, device: str, tables: Any, tokens: int, inter: int, dense_layers: int, chunks: bool
) -> float:
    """The memory-bound element-wise kernels (embedding, add + RMSNorm, SiLU-and-mul) and
    the context-attention extras, ms."""
    h = m.hidden_size
    bandwidth, fixed_s = _memory_op_constants(device, tables.data_dir)

    def memory_op_ms(bytes_: float) -> float:
        return (bytes_ / bandwidth + fixed_s) * 1e3

    elementwise = memory_op_ms(tokens * h * 2)  # embedding gather, bf16
    elementwise += 2 * m.layers * memory_op_ms(tokens * 4 * h * 2)  # add + RMSNorm: 2h in, 2h out
    elementwise += dense_layers * memory_op_ms(tokens * 3 * inter * 2)  # SiLU-and-mul: 2I in, I out
    if chunks:
        elementwise += m.layers * (
            _CONTEXT_ATTENTION_EXTRA_MS + (_CONTEXT_QK_NORM_EXTRA_MS if m.qk_norm else 0.0)
        )
    return elementwise
