"""Published architectures of widely deployed LLMs, as one tensor-parallel rank on meta tensors.

Each :class:`~cgdispatch.models.arch_spec.ArchSpec` (re-exported here) holds the numbers of
a model's published ``config.json`` (layers, hidden size, heads, KV heads, intermediate
size, vocabulary; bf16) and its source (docs/references_models.md). :func:`build_arch_model` builds the per-rank decoder of that
model (Llama-style: RMSNorm, rotary GQA attention through the ``cgdispatch::attention`` op,
SwiGLU MLP) with heads, KV heads, intermediate size and vocabulary sharded by the tensor
parallel size, on the ``meta`` device: no weights, no memory. It exists so that kernel
profiles, modelled step times and graph-memory estimates exist for real shapes on any
laptop; it cannot run a real step (use the toy LM or the Hugging Face adapter for that).

Tensor parallelism: each row-parallel projection (attention output, MLP down) is followed
by a stand-in for the all-reduce, one copy kernel of the activation (``clone``): the
launch and the activation traffic are counted, NVLink time is not modelled.
"""

from __future__ import annotations

import torch
from torch import nn

from ..capture.model import SlotsFromConfig
from ..core.modes import AttentionCGSupport
from . import attention as _attention_ops  # noqa: F401 - registers the custom ops
from .arch_spec import ARCHITECTURES, ArchSpec
from .toy import RMSNorm, StepRows, _rotate

__all__ = ["ArchSpec", "ARCHITECTURES", "ArchLM", "build_arch_model"]


class _MoE(nn.Module):
    """Routed experts as vLLM's fused MoE runs them: router GEMM, top-k, the tokens' chosen
    experts as two grouped GEMMs around the activation, weighted sum (plus shared experts)."""

    def __init__(self, spec: ArchSpec) -> None:
        super().__init__()
        tp, h = spec.tensor_parallel_size, spec.hidden_size
        self.top_k = spec.experts_per_token
        self.router = nn.Linear(h, spec.num_experts, bias=False)
        inter = spec.moe_intermediate_size // tp
        self.w13 = nn.Linear(h, 2 * inter, bias=False)  # one expert's shapes: the FLOPs per
        self.w2 = nn.Linear(inter, h, bias=False)  # routed token are those of its expert
        shared = spec.shared_intermediate_size // tp
        self.shared = _Mlp(h, shared, gated=True) if shared else None

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        weights, chosen = torch.topk(self.router(x).softmax(-1), self.top_k, dim=-1)
        rows = x.index_select(0, chosen.flatten() % x.shape[0])  # tokens sorted by expert
        gate, up = self.w13(rows).chunk(2, dim=-1)
        out = self.w2(nn.functional.silu(gate) * up).view(x.shape[0], self.top_k, -1)
        out = (out * weights.unsqueeze(-1).to(out.dtype)).sum(1)
        return out + self.shared(x) if self.shared is not None else out


class _Mlp(nn.Module):
    def __init__(self, hidden: int, inter: int, *, gated: bool) -> None:
        super().__init__()
        self.gated = gated
        self.up = nn.Linear(hidden, (2 if gated else 1) * inter, bias=not gated)
        self.down = nn.Linear(inter, hidden, bias=not gated)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.gated:
            gate, up = self.up(x).chunk(2, dim=-1)
            return self.down(nn.functional.silu(gate) * up)
        return self.down(nn.functional.gelu(self.up(x), approximate="tanh"))


def _layer_kind(spec: ArchSpec, index: int) -> bool:
    """All that layer ``index`` of ``spec`` takes from its index: whether its MLP is dense
    (True) or routed experts. :class:`_Block` reads its index only through this, so two
    layers of one spec with equal kinds are the same module (same shapes, same kernels)."""
    return spec.num_experts == 0 or spec.layer_offset + index < spec.dense_layers


class _Block(nn.Module):
    def __init__(self, spec: ArchSpec, index: int = 0) -> None:
        super().__init__()
        heads, kv_heads, d = spec.shard("num_heads"), spec.shard("num_kv_heads"), spec.head_dim
        self.mla = spec.kv_lora_rank > 0
        if self.mla:  # latent attention: K and V come from one shared latent per token
            kv_heads = heads
        self.heads, self.kv_heads, self.head_dim, self.tp = (
            heads,
            kv_heads,
            d,
            spec.tensor_parallel_size,
        )
        h = spec.hidden_size
        self.norms = nn.ModuleList(RMSNorm(h) for _ in range(max(spec.norms_per_layer, 1)))
        if self.mla:
            rank = spec.kv_lora_rank
            q_rank = spec.q_lora_rank
            self.q_proj = (
                nn.Sequential(
                    nn.Linear(h, q_rank, bias=False),
                    RMSNorm(q_rank),
                    nn.Linear(q_rank, heads * d, bias=False),
                )
                if q_rank
                else nn.Linear(h, heads * d, bias=False)
            )
            self.kv_a = nn.Linear(h, rank + spec.qk_rope_head_dim, bias=False)  # latent, rope
            self.kv_norm = RMSNorm(rank)
            self.kv_b = nn.Linear(rank, 2 * heads * d, bias=False)
            self.rank = rank
        else:
            self.qkv = nn.Linear(h, (heads + 2 * kv_heads) * d, bias=spec.qkv_bias)
        self.q_norm = RMSNorm(d) if spec.qk_norm else None
        self.k_norm = RMSNorm(d) if spec.qk_norm else None
        self.o_proj = nn.Linear(heads * d, h, bias=False)
        dense = _layer_kind(spec, index)  # index is read here only (stage profiles rely on it)
        self.mlp = (
            _Mlp(h, spec.shard("intermediate_size"), gated=spec.gated_mlp) if dense else _MoE(spec)
        )
        shape = (2, spec.num_slots + 1, spec.max_seq_len, kv_heads, d)
        self.register_buffer("kv_cache", torch.zeros(shape), persistent=False)

    def _all_reduce(self, x: torch.Tensor) -> torch.Tensor:
        # one kernel moving the activation stands in for the TP all-reduce (module doc)
        return x.clone() if self.tp > 1 else x

    def _qkv(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        t = x.shape[0]
        if self.mla:
            q = self.q_proj(x)
            latent = self.kv_norm(self.kv_a(x)[:, : self.rank])
            k, v = self.kv_b(latent).chunk(2, dim=-1)
            return q, k, v
        q_size, kv_size = self.heads * self.head_dim, self.kv_heads * self.head_dim
        return self.qkv(x).view(t, -1).split([q_size, kv_size, kv_size], dim=-1)

    def forward(self, x: torch.Tensor, rows: StepRows) -> torch.Tensor:
        t = x.shape[0]
        q, k, v = self._qkv(self.norms[0](x))
        q = q.reshape(t, self.heads, self.head_dim)
        k = k.reshape(t, self.kv_heads, self.head_dim)
        if self.q_norm is not None:
            q, k = self.q_norm(q), self.k_norm(k)
        q, k = _rotate(q, rows.cos, rows.sin), _rotate(k, rows.cos, rows.sin)
        v = v.reshape(t, self.kv_heads, self.head_dim)
        scale = self.head_dim**-0.5
        out = torch.ops.cgdispatch.attention(
            q, k, v, self.kv_cache, rows.positions, rows.slots, scale
        )
        attn = self._all_reduce(self.o_proj(out.reshape(t, self.heads * self.head_dim)))
        if len(self.norms) == 4:  # sandwich norms: after attention and after the MLP too
            attn = self.norms[2](attn)
        x = x + attn
        mlp = self._all_reduce(self.mlp(self.norms[min(1, len(self.norms) - 1)](x)))
        if len(self.norms) == 4:
            mlp = self.norms[3](mlp)
        return x + mlp


class ArchLM(SlotsFromConfig, nn.Module):
    """One TP rank of a published architecture: ``forward(input_ids, positions, slots)``.

    Same inputs as the toy LM (so the estimators' dummy steps apply); logits are this
    rank's vocabulary shard. Built on ``meta`` by :func:`build_arch_model`.
    """

    def __init__(self, spec: ArchSpec) -> None:
        super().__init__()
        self.spec = spec
        vocab = spec.shard("vocab_size")
        self.embed = nn.Embedding(vocab, spec.hidden_size) if spec.has_embedding else None
        self.layers = nn.ModuleList(_Block(spec, i) for i in range(spec.num_layers))
        self.norm = RMSNorm(spec.hidden_size) if spec.has_head else None
        self.lm_head = nn.Linear(spec.hidden_size, vocab, bias=False) if spec.has_head else None
        # a later pipeline stage receives the hidden states: a stand-in buffer holds them
        self.register_buffer("stage_input", torch.zeros(1, spec.hidden_size), persistent=False)
        half = spec.head_dim // 2
        self.register_buffer("rope_cos", torch.zeros(spec.max_seq_len, half), persistent=False)
        self.register_buffer("rope_sin", torch.zeros(spec.max_seq_len, half), persistent=False)

    def for_inference(self, dtype: torch.dtype) -> ArchLM:
        """This model in ``dtype``, in eval mode without gradients, its rotary tables kept in
        fp32 (as vLLM keeps them): what every estimator profiles."""
        net = self.to(dtype).eval().requires_grad_(False)
        net.rope_cos, net.rope_sin = net.rope_cos.float(), net.rope_sin.float()
        return net

    @property
    def config(self) -> ArchSpec:
        return self.spec

    @property
    def attention_cg_support(self) -> AttentionCGSupport:
        return AttentionCGSupport.ALWAYS  # the general attention op runs in any graph

    @property
    def device(self) -> torch.device:
        return self.rope_cos.device

    def forward(
        self, input_ids: torch.Tensor, positions: torch.Tensor, slots: torch.Tensor
    ) -> torch.Tensor:
        rows = StepRows.of(self, positions, slots)
        if self.embed is not None:
            x = self.embed(input_ids)  # [T, hidden]
        else:  # a pipeline stage after the first: the previous stage's hidden states
            x = self.stage_input.expand(input_ids.shape[0], -1).contiguous()
        for layer in self.layers:
            x = layer(x, rows)
        if self.lm_head is None:
            return x  # hidden states for the next stage
        return self.lm_head(self.norm(x))  # [T, vocab / tp]


def build_arch_model(
    name: str,
    *,
    device: torch.device | str | None = None,
    dtype: str | None = None,
    seed: int = 0,
    max_num_tokens: int | None = None,
) -> ArchLM:
    """The per-rank model of a published architecture, on ``meta`` (the registry's builder).

    ``device`` must be None or ``"meta"``: these shapes exist to be counted, not run.
    ``seed`` and ``max_num_tokens`` are ignored (no weights, no fixed work buffers).
    """
    if name not in ARCHITECTURES:
        raise ValueError(f"architecture {name!r} is unknown: use one of {sorted(ARCHITECTURES)}")
    if device is not None and torch.device(device).type != "meta":
        raise ValueError(
            f"device={device!r} is invalid for {name}: architecture presets build on 'meta' only "
            "(no weights); use a toy-* or hf-* model to run steps"
        )
    spec = ARCHITECTURES[name]
    dtypes = {"bfloat16": torch.bfloat16, "float16": torch.float16, "float32": torch.float32}
    if (dtype or spec.dtype) not in dtypes:
        raise ValueError(f"dtype={dtype!r} is unknown: use one of {sorted(dtypes)}")
    torch_dtype = dtypes[dtype or spec.dtype]
    with torch.device("meta"):
        model = ArchLM(spec)
    return model.for_inference(torch_dtype)
