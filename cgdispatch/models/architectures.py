"""Published architectures of widely deployed LLMs, as one tensor-parallel rank on meta tensors.

Each :class:`ArchSpec` holds the numbers of a model's published ``config.json`` (layers,
hidden size, heads, KV heads, intermediate size, vocabulary; bf16) and its source
(docs/references_models.md). :func:`build_arch_model` builds the per-rank decoder of that
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

from dataclasses import dataclass

import torch
from torch import nn

from ..core.modes import AttentionCGSupport
from . import attention as _attention_ops  # noqa: F401 - registers the custom ops
from .toy import RMSNorm, _rotate

__all__ = ["ArchSpec", "ARCHITECTURES", "ArchLM", "build_arch_model"]


@dataclass(frozen=True)
class ArchSpec:
    """A model's published shapes (``config.json`` field names in comments) and TP size."""

    num_layers: int  # num_hidden_layers
    hidden_size: int  # hidden_size
    num_heads: int  # num_attention_heads
    num_kv_heads: int  # num_key_value_heads
    intermediate_size: int  # intermediate_size
    vocab_size: int  # vocab_size
    source: str  # where the numbers come from (docs/references_models.md)
    tensor_parallel_size: int = 1  # heads, KV heads, intermediate and vocab are split by it
    rope_theta: float = 500_000.0  # rope_theta
    dtype: str = "bfloat16"  # torch_dtype
    max_seq_len: int = 1024  # KV positions per slot in the stand-in cache (context length)
    num_slots: int = 256  # request slots in the stand-in cache (max_num_seqs)

    def __post_init__(self) -> None:
        tp = self.tensor_parallel_size
        for name in ("num_heads", "num_kv_heads", "intermediate_size", "vocab_size"):
            if getattr(self, name) % tp:
                raise ValueError(
                    f"{name}={getattr(self, name)} is not divisible by tensor_parallel_size={tp}: "
                    "choose a TP size that divides heads, KV heads, intermediate and vocab"
                )
        if self.hidden_size % self.num_heads or self.num_heads % self.num_kv_heads:
            raise ValueError(
                f"hidden_size={self.hidden_size}, num_heads={self.num_heads}, num_kv_heads="
                f"{self.num_kv_heads} are invalid: hidden must divide by heads, heads by KV heads"
            )

    @property
    def head_dim(self) -> int:
        return self.hidden_size // self.num_heads

    def shard(self, name: str) -> int:
        """A sharded dimension on one rank (``num_heads``, ``num_kv_heads``, ...)."""
        return getattr(self, name) // self.tensor_parallel_size


ARCHITECTURES: dict[str, ArchSpec] = {
    "llama-3.1-8b": ArchSpec(
        32, 4096, 32, 8, 14336, 128256, source="meta-llama/Llama-3.1-8B config.json"
    ),
    "qwen2.5-7b": ArchSpec(
        28,
        3584,
        28,
        4,
        18944,
        152064,
        source="Qwen/Qwen2.5-7B config.json",
        rope_theta=1_000_000.0,
    ),
    "llama-3.1-70b-tp8": ArchSpec(
        80,
        8192,
        64,
        8,
        28672,
        128256,
        source="meta-llama/Llama-3.1-70B config.json; tensor parallel 8",
        tensor_parallel_size=8,
    ),
}


class _Block(nn.Module):
    def __init__(self, spec: ArchSpec) -> None:
        super().__init__()
        heads, kv_heads, d = spec.shard("num_heads"), spec.shard("num_kv_heads"), spec.head_dim
        self.heads, self.kv_heads, self.head_dim, self.tp = (
            heads,
            kv_heads,
            d,
            spec.tensor_parallel_size,
        )
        self.attn_norm, self.mlp_norm = RMSNorm(spec.hidden_size), RMSNorm(spec.hidden_size)
        self.qkv = nn.Linear(spec.hidden_size, (heads + 2 * kv_heads) * d, bias=False)
        self.o_proj = nn.Linear(heads * d, spec.hidden_size, bias=False)
        inter = spec.shard("intermediate_size")
        self.gate_up = nn.Linear(spec.hidden_size, 2 * inter, bias=False)
        self.down = nn.Linear(inter, spec.hidden_size, bias=False)
        shape = (2, spec.num_slots + 1, spec.max_seq_len, kv_heads, d)
        self.register_buffer("kv_cache", torch.zeros(shape), persistent=False)

    def _all_reduce(self, x: torch.Tensor) -> torch.Tensor:
        # one kernel moving the activation stands in for the TP all-reduce (module doc)
        return x.clone() if self.tp > 1 else x

    def forward(
        self,
        x: torch.Tensor,
        cos: torch.Tensor,
        sin: torch.Tensor,
        positions: torch.Tensor,
        slots: torch.Tensor,
    ) -> torch.Tensor:
        t = x.shape[0]
        q_size, kv_size = self.heads * self.head_dim, self.kv_heads * self.head_dim
        q, k, v = self.qkv(self.attn_norm(x)).split([q_size, kv_size, kv_size], dim=-1)
        q = _rotate(q.view(t, self.heads, self.head_dim), cos, sin)
        k = _rotate(k.view(t, self.kv_heads, self.head_dim), cos, sin)
        v = v.view(t, self.kv_heads, self.head_dim)
        scale = self.head_dim**-0.5
        out = torch.ops.cgdispatch.attention(q, k, v, self.kv_cache, positions, slots, scale)
        x = x + self._all_reduce(self.o_proj(out.reshape(t, q_size)))
        gate, up = self.gate_up(self.mlp_norm(x)).chunk(2, dim=-1)
        return x + self._all_reduce(self.down(nn.functional.silu(gate) * up))


class ArchLM(nn.Module):
    """One TP rank of a published architecture: ``forward(input_ids, positions, slots)``.

    Same inputs as the toy LM (so the estimators' dummy steps apply); logits are this
    rank's vocabulary shard. Built on ``meta`` by :func:`build_arch_model`.
    """

    def __init__(self, spec: ArchSpec) -> None:
        super().__init__()
        self.spec = spec
        vocab = spec.shard("vocab_size")
        self.embed = nn.Embedding(vocab, spec.hidden_size)
        self.layers = nn.ModuleList(_Block(spec) for _ in range(spec.num_layers))
        self.norm = RMSNorm(spec.hidden_size)
        self.lm_head = nn.Linear(spec.hidden_size, vocab, bias=False)
        half = spec.head_dim // 2
        self.register_buffer("rope_cos", torch.zeros(spec.max_seq_len, half), persistent=False)
        self.register_buffer("rope_sin", torch.zeros(spec.max_seq_len, half), persistent=False)

    @property
    def config(self) -> ArchSpec:
        return self.spec

    @property
    def attention_cg_support(self) -> AttentionCGSupport:
        return AttentionCGSupport.ALWAYS  # the general attention op runs in any graph

    @property
    def dummy_slot(self) -> int:
        return self.spec.num_slots

    @property
    def device(self) -> torch.device:
        return self.embed.weight.device

    def forward(
        self, input_ids: torch.Tensor, positions: torch.Tensor, slots: torch.Tensor
    ) -> torch.Tensor:
        cos = self.rope_cos[positions].unsqueeze(1)  # [T, 1, D/2]
        sin = self.rope_sin[positions].unsqueeze(1)
        x = self.embed(input_ids)  # [T, hidden]
        for layer in self.layers:
            x = layer(x, cos, sin, positions, slots)
        return self.lm_head(self.norm(x))  # [T, vocab / tp]


def build_arch_model(
    name: str,
    *,
    device: object = None,
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
    model = model.to(torch_dtype).eval().requires_grad_(False)
    model.rope_cos, model.rope_sin = model.rope_cos.float(), model.rope_sin.float()
    return model
