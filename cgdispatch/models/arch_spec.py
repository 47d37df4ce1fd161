"""Published shapes of widely deployed LLMs: :class:`ArchSpec` (a model's ``config.json``
numbers and its tensor-parallel size) and the :data:`ARCHITECTURES` registry of them.

Plain data, no torch: ``tune`` reads shapes (KV bytes per token, the start-up estimate's
published model) without building anything. The per-rank decoder on meta tensors that
these shapes describe is :mod:`cgdispatch.models.architectures`.
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["ArchSpec", "ARCHITECTURES", "DTYPE_BYTES"]

# bytes of one element of each dtype a published config names (torch_dtype)
DTYPE_BYTES = {"bfloat16": 2, "float16": 2, "float32": 4}


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
    # the fields below let published models other than Llama be traced (models/published.py);
    # their defaults are the Llama block above
    head_size: int = 0  # head_dim when it is not hidden_size // num_heads (0: derived)
    qkv_bias: bool = False  # attention_bias / Qwen's qkv bias
    gated_mlp: bool = True  # SwiGLU (gate, up, down); False: fc1, GELU, fc2 (phi-2)
    norms_per_layer: int = 2  # RMSNorms per layer (Gemma 2/3: 4, sandwich norms)
    qk_norm: bool = False  # RMSNorm on q and k heads (Qwen3, Gemma 3)
    num_experts: int = 0  # routed experts (0: dense MLP)
    experts_per_token: int = 0  # num_experts_per_tok
    moe_intermediate_size: int = 0  # each expert's MLP size
    shared_intermediate_size: int = 0  # shared experts' MLP size (0: none)
    dense_layers: int = 0  # leading layers with a dense MLP in a mixture-of-experts model
    kv_lora_rank: int = 0  # multi-head latent attention's KV rank (0: plain attention)
    qk_rope_head_dim: int = 0  # latent attention: the rotary part of each head
    q_lora_rank: int = 0  # latent attention: queries through a rank-r bottleneck (0: none)
    layer_offset: int = 0  # index of the first layer (a pipeline stage after the first)
    has_embedding: bool = True  # the first pipeline stage holds the token embedding
    has_head: bool = True  # the last pipeline stage holds the final norm and LM head
    published: str = ""  # Hugging Face id in models/published.py: calibrated start-up costs

    def __post_init__(self) -> None:
        tp = self.tensor_parallel_size
        for name in ("num_heads", "intermediate_size", "vocab_size"):
            if getattr(self, name) % tp:
                raise ValueError(
                    f"{name}={getattr(self, name)} is not divisible by tensor_parallel_size={tp}: "
                    "choose a TP size that divides heads, KV heads, intermediate and vocab"
                )
        if self.num_heads % max(self.num_kv_heads, 1) or (
            not self.head_size and self.hidden_size % self.num_heads
        ):
            raise ValueError(
                f"hidden_size={self.hidden_size}, num_heads={self.num_heads}, num_kv_heads="
                f"{self.num_kv_heads} are invalid: hidden must divide by heads, heads by KV heads"
            )

    @property
    def head_dim(self) -> int:
        return self.head_size or self.hidden_size // self.num_heads

    def shard(self, name: str) -> int:
        """A sharded dimension on one rank (``num_heads``, ``num_kv_heads``, ...); KV heads
        are replicated when there are fewer than ranks (at least one per rank)."""
        value = getattr(self, name) // self.tensor_parallel_size
        return max(value, 1) if name == "num_kv_heads" else value


ARCHITECTURES: dict[str, ArchSpec] = {
    "llama-3.1-8b": ArchSpec(
        32,
        4096,
        32,
        8,
        14336,
        128256,
        source="meta-llama/Llama-3.1-8B config.json",
        published="meta-llama/Llama-3.1-8B-Instruct",
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
        published="Qwen/Qwen2.5-7B-Instruct",
    ),
    "qwen2.5-1.5b": ArchSpec(
        28,
        1536,
        12,
        2,
        8960,
        151936,
        source="Qwen/Qwen2.5-1.5B-Instruct config.json",
        rope_theta=1_000_000.0,
        qkv_bias=True,
        published="Qwen/Qwen2.5-1.5B-Instruct",
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
        published="meta-llama/Llama-3.1-70B-Instruct",
    ),
}
