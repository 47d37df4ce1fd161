"""A small decoder-only LM with a static KV cache, for capturing and replaying graphs.

Inputs are flat, as in vLLM: ``input_ids[T]``, ``positions[T]`` and ``slots[T]`` (the
request slot each token belongs to), so one step mixes decodes and prefill chunks.
Embedding -> N x (RMSNorm, attention with rotary positions, RMSNorm, SwiGLU MLP) ->
RMSNorm -> LM head. Attention is a registered custom op (``cgdispatch::attention``) with
fixed shapes per ``num_tokens``. The KV cache has one extra slot, ``dummy_slot``, where
padding tokens write, so that padding never touches a real request's cache.

The model is traceable by ``torch.compile`` with no graph break; the attention op stays
one opaque node. It is a test and measurement vehicle, not a trained model: weights are
random (seeded). It does not schedule requests or free slots.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import NamedTuple

import torch
from torch import nn

from ..capture.model import SlotsFromConfig
from ..core.modes import AttentionCGSupport
from . import attention as _attention_ops  # noqa: F401 - registers the custom ops

__all__ = ["ToyConfig", "ToyLM", "PRESETS", "StepRows", "build_toy_model"]

_ATTENTION = {
    "general": (torch.ops.cgdispatch.attention, AttentionCGSupport.ALWAYS),
    "uniform": (torch.ops.cgdispatch.attention_uniform, AttentionCGSupport.UNIFORM_BATCH),
}
_DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}


@dataclass(frozen=True)
class ToyConfig:
    """Shapes of the toy LM and its KV cache."""

    vocab_size: int = 512
    hidden_size: int = 64
    num_layers: int = 2
    num_heads: int = 4
    num_kv_heads: int = 2  # grouped-query attention when < num_heads
    intermediate_size: int = 128  # SwiGLU hidden width
    num_slots: int = 16  # request slots in the KV cache; one dummy slot is added for padding
    max_seq_len: int = 64  # positions per slot
    rope_theta: float = 10_000.0
    attention: str = "general"  # "general" (ALWAYS) or "uniform" (UNIFORM_BATCH)
    dtype: str = "float32"  # "float32", "bfloat16" or "float16"

    def __post_init__(self) -> None:
        for name in (
            "vocab_size",
            "hidden_size",
            "num_layers",
            "num_heads",
            "num_kv_heads",
            "intermediate_size",
            "num_slots",
            "max_seq_len",
        ):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(f"{name}={value!r} is invalid: it must be an integer >= 1")
        if self.hidden_size % self.num_heads or self.num_heads % self.num_kv_heads:
            raise ValueError(
                f"hidden_size={self.hidden_size}, num_heads={self.num_heads}, num_kv_heads="
                f"{self.num_kv_heads} are invalid: hidden_size must be a multiple of num_heads "
                "and num_heads a multiple of num_kv_heads"
            )
        if (self.hidden_size // self.num_heads) % 2:
            raise ValueError(
                f"head_dim={self.head_dim} is invalid: rotary embeddings need an even head_dim"
            )
        if self.attention not in _ATTENTION:
            raise ValueError(
                f"attention={self.attention!r} is unknown: use one of {sorted(_ATTENTION)}"
            )
        if self.dtype not in _DTYPES:
            raise ValueError(f"dtype={self.dtype!r} is unknown: use one of {sorted(_DTYPES)}")

    @property
    def head_dim(self) -> int:
        return self.hidden_size // self.num_heads

    @property
    def torch_dtype(self) -> torch.dtype:
        return _DTYPES[self.dtype]

    def replace(self, **changes: object) -> ToyConfig:
        return dataclasses.replace(self, **changes)


PRESETS: dict[str, ToyConfig] = {
    # tests: runs a step in about a millisecond on CPU
    "toy-tiny": ToyConfig(),
    # GPU sweeps up to 512 tokens; KV cache 4 layers x 513 slots x 256 positions
    "toy-small": ToyConfig(
        vocab_size=8192,
        hidden_size=512,
        num_layers=4,
        num_heads=8,
        num_kv_heads=4,
        intermediate_size=1408,
        num_slots=512,
        max_seq_len=256,
    ),
    # Llama-3.2-1B-like shapes (hidden 2048, 16 layers, 32/8 heads, 8192 MLP, 128256 vocab)
    "toy-1b": ToyConfig(
        vocab_size=128_256,
        hidden_size=2048,
        num_layers=16,
        num_heads=32,
        num_kv_heads=8,
        intermediate_size=8192,
        num_slots=512,
        max_seq_len=512,
        rope_theta=500_000.0,
        dtype="bfloat16",
    ),
}


class RMSNorm(nn.Module):
    def __init__(self, dim: int, eps: float = 1e-6) -> None:
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(dim))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x32 = x.float()
        x32 = x32 * torch.rsqrt(x32.pow(2).mean(-1, keepdim=True) + self.eps)
        return x32.to(x.dtype) * self.weight


def _rotate(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """Rotary embedding (half-split form). x: [T, H, D]; cos, sin: [T, 1, D/2]."""
    x1, x2 = x.float().chunk(2, dim=-1)
    return torch.cat((x1 * cos - x2 * sin, x2 * cos + x1 * sin), dim=-1).to(x.dtype)


class StepRows(NamedTuple):
    """What every layer reads of a step besides its activations, built once per forward by
    :meth:`of`: the rotary tables at each token's position, the positions and the slots."""

    cos: torch.Tensor  # [T, 1, D/2]
    sin: torch.Tensor  # [T, 1, D/2]
    positions: torch.Tensor  # [T]
    slots: torch.Tensor  # [T]

    @classmethod
    def of(cls, model: nn.Module, positions: torch.Tensor, slots: torch.Tensor) -> StepRows:
        """The rows of a step on ``model``'s ``rope_cos`` and ``rope_sin`` tables [L, D/2]."""
        cos = model.rope_cos[positions].unsqueeze(1)
        return cls(cos, model.rope_sin[positions].unsqueeze(1), positions, slots)


class Attention(nn.Module):
    """Projections, rotary positions and the attention custom op over this layer's cache."""

    def __init__(self, cfg: ToyConfig) -> None:
        super().__init__()
        self.num_heads, self.num_kv_heads, self.head_dim = (
            cfg.num_heads,
            cfg.num_kv_heads,
            cfg.head_dim,
        )
        self.scale = self.head_dim**-0.5
        self.qkv = nn.Linear(
            cfg.hidden_size, (cfg.num_heads + 2 * cfg.num_kv_heads) * cfg.head_dim, bias=False
        )
        self.o_proj = nn.Linear(cfg.hidden_size, cfg.hidden_size, bias=False)
        self.op = _ATTENTION[cfg.attention][0]
        # [K|V, slots + dummy, positions, kv heads, head_dim]; written in place by the op
        shape = (2, cfg.num_slots + 1, cfg.max_seq_len, cfg.num_kv_heads, cfg.head_dim)
        self.register_buffer("kv_cache", torch.zeros(shape), persistent=False)

    def forward(self, x: torch.Tensor, rows: StepRows) -> torch.Tensor:
        num_tokens = x.shape[0]
        q_size, kv_size = self.num_heads * self.head_dim, self.num_kv_heads * self.head_dim
        q, k, v = self.qkv(x).split([q_size, kv_size, kv_size], dim=-1)
        q = _rotate(q.view(num_tokens, self.num_heads, self.head_dim), rows.cos, rows.sin)
        k = _rotate(k.view(num_tokens, self.num_kv_heads, self.head_dim), rows.cos, rows.sin)
        v = v.view(num_tokens, self.num_kv_heads, self.head_dim)
        out = self.op(q, k, v, self.kv_cache, rows.positions, rows.slots, self.scale)  # [T, H, D]
        return self.o_proj(out.reshape(num_tokens, q_size))


class Block(nn.Module):
    def __init__(self, cfg: ToyConfig) -> None:
        super().__init__()
        self.attn_norm, self.mlp_norm = RMSNorm(cfg.hidden_size), RMSNorm(cfg.hidden_size)
        self.attn = Attention(cfg)
        self.gate_up = nn.Linear(cfg.hidden_size, 2 * cfg.intermediate_size, bias=False)
        self.down = nn.Linear(cfg.intermediate_size, cfg.hidden_size, bias=False)

    def forward(self, x: torch.Tensor, rows: StepRows) -> torch.Tensor:
        x = x + self.attn(self.attn_norm(x), rows)
        gate, up = self.gate_up(self.mlp_norm(x)).chunk(2, dim=-1)
        return x + self.down(nn.functional.silu(gate) * up)


class ToyLM(SlotsFromConfig, nn.Module):
    """Decoder-only LM: ``forward(input_ids[T], positions[T], slots[T]) -> logits[T, vocab]``.

    ``slots`` index the KV cache (0..num_slots-1 for requests, ``dummy_slot`` for padding);
    ``positions`` must be < ``max_seq_len``. Indices are not checked here. Satisfies
    ``cgdispatch.capture.model.RunnerModel``.
    """

    supports_mixed_batches = True  # any mix of decodes and prefill chunks in one step

    def __init__(self, cfg: ToyConfig) -> None:
        super().__init__()
        self.config = cfg
        self.embed = nn.Embedding(cfg.vocab_size, cfg.hidden_size)
        self.layers = nn.ModuleList(Block(cfg) for _ in range(cfg.num_layers))
        self.norm = RMSNorm(cfg.hidden_size)
        self.lm_head = nn.Linear(cfg.hidden_size, cfg.vocab_size, bias=False)
        half = cfg.head_dim // 2
        inv_freq = cfg.rope_theta ** (-torch.arange(half, dtype=torch.float64) / half)
        angles = torch.arange(cfg.max_seq_len, dtype=torch.float64)[:, None] * inv_freq[None, :]
        self.register_buffer("rope_cos", angles.cos().float(), persistent=False)  # [L, D/2]
        self.register_buffer("rope_sin", angles.sin().float(), persistent=False)

    @property
    def attention_cg_support(self) -> AttentionCGSupport:
        """What the attention op allows inside a FULL graph (feeds ``GraphConfig.resolve``)."""
        return _ATTENTION[self.config.attention][1]

    @property
    def device(self) -> torch.device:
        return self.embed.weight.device

    def kv_caches(self) -> list[torch.Tensor]:
        """Each layer's cache tensor [2, num_slots + 1, max_seq_len, n_kv_heads, head_dim]."""
        return [layer.attn.kv_cache for layer in self.layers]

    @torch.no_grad()
    def fill_kv_cache_(self, seed: int = 0) -> None:
        """Fill every cache with seeded random values (a stand-in for earlier steps' K/V)."""
        gen = torch.Generator().manual_seed(seed)
        for cache in self.kv_caches():
            cache.copy_(torch.randn(cache.shape, generator=gen, dtype=torch.float32))

    def forward(
        self, input_ids: torch.Tensor, positions: torch.Tensor, slots: torch.Tensor
    ) -> torch.Tensor:
        rows = StepRows.of(self, positions, slots)
        x = self.embed(input_ids)  # [T, hidden]
        for layer in self.layers:
            x = layer(x, rows)
        return self.lm_head(self.norm(x))  # [T, vocab]


def build_toy_model(
    preset: str | ToyConfig = "toy-tiny",
    *,
    device: torch.device | str | None = None,
    dtype: str | None = None,
    seed: int = 0,
    max_num_tokens: int | None = None,
    attention: str | None = None,
) -> ToyLM:
    """A seeded random-weight ToyLM from a preset name or a config, in eval mode (the
    registry's toy builder).

    ``dtype`` overrides the preset's (weights and KV cache; norms and softmax run in fp32),
    ``attention`` its attention op ("general" or "uniform"). ``max_num_tokens`` is ignored:
    the toy LM runs steps of any size.
    """
    if isinstance(preset, str):
        if preset not in PRESETS:
            raise ValueError(f"model preset {preset!r} is unknown: use one of {sorted(PRESETS)}")
        cfg = PRESETS[preset]
    elif isinstance(preset, ToyConfig):
        cfg = preset
    else:
        raise ValueError(f"preset={preset!r} is invalid: pass a preset name or a ToyConfig")
    if dtype is not None:
        cfg = cfg.replace(dtype=dtype)
    if attention is not None:
        cfg = cfg.replace(attention=attention)
    torch.manual_seed(seed)
    device = torch.device("cpu" if device is None else device)
    if device.type == "cuda" and not torch.cuda.is_available():
        raise ValueError(
            f"device={str(device)!r} is invalid here: torch {torch.__version__} sees no CUDA "
            "device; use device='cpu' (graphs then replay on the CPU stand-in)"
        )
    with torch.device(device):
        model = ToyLM(cfg)
    for name, param in model.named_parameters():
        if name.endswith("weight") and param.dim() == 2:
            nn.init.normal_(param, std=0.02 if "embed" in name else param.shape[1] ** -0.5)
    model = model.to(cfg.torch_dtype).eval().requires_grad_(False)
    model.rope_cos, model.rope_sin = model.rope_cos.float(), model.rope_sin.float()  # keep fp32
    return model
