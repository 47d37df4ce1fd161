"""What vLLM needs of a decoder's shapes before it loads one, checked before any arithmetic.

Two checks on a :class:`~cgdispatch.models.published.PublishedModel`'s fields:
:func:`check_shapes` (every size an integer within its bound of
:data:`cgdispatch.core.validate.BOUNDS`, and the structure vLLM's layers assume) and
:func:`check_tensor_parallel` (the divisibility vLLM's tensor-parallel layers require of a
TP size). Each rule names the vLLM code that enforces it; the lines are the same in vLLM
0.33.0 and 0.34.0. Errors name the ``config.json`` field, its value, the rule and a fix
(for TP, the sizes that pass). It checks shapes only: whether vLLM has a kernel for a
quantization or head size on a GPU is not checked here.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ..core.validate import (
    MAX_EXPERTS,
    MAX_HEADS,
    MAX_LAYERS,
    MAX_MODEL_LEN,
    MAX_MODEL_WIDTH,
    MAX_VOCAB,
    as_index,
)

__all__ = [
    "CONFIG_NAMES",
    "FIELD_RANGES",
    "check_shapes",
    "check_tensor_parallel",
    "valid_tp_sizes",
]

# PublishedModel field -> the config.json field a person wrote (messages name the latter)
CONFIG_NAMES: dict[str, str] = {
    "layers": "num_hidden_layers",
    "num_heads": "num_attention_heads",
    "num_kv_heads": "num_key_value_heads",
    "experts_per_token": "num_experts_per_tok",
    "shared_intermediate_size": "shared_expert_intermediate_size",
    "dense_layers": "first_k_dense_replace",
    "full_attention_every": "layer_types / sliding_window_pattern",
}
_WIDTHS = ("intermediate_size", "moe_intermediate_size", "shared_intermediate_size",
           "kv_lora_rank", "qk_rope_head_dim", "qk_nope_head_dim", "v_head_dim",
           "q_lora_rank")  # fmt: skip
# PublishedModel field -> (least, most), checked in this order; the widths: (0, MAX_MODEL_WIDTH)
FIELD_RANGES: dict[str, tuple[int, int]] = {
    **{f: (0, MAX_MODEL_WIDTH) for f in _WIDTHS},
    "layers": (1, MAX_LAYERS),
    "hidden_size": (1, MAX_MODEL_WIDTH),
    "num_heads": (1, MAX_HEADS),
    "num_kv_heads": (1, MAX_HEADS),
    "head_dim": (1, MAX_MODEL_WIDTH),
    "vocab_size": (1, MAX_VOCAB),
    "num_experts": (0, MAX_EXPERTS),
    "experts_per_token": (0, MAX_EXPERTS),
    "dense_layers": (0, MAX_LAYERS),
    "full_attention_every": (1, MAX_LAYERS),
    "norms_per_layer": (0, 8),
    "vision_params": (0, 10**13),
    "max_position_embeddings": (0, MAX_MODEL_LEN),
}
_VOCAB_PADDING = 64  # vLLM's DEFAULT_VOCAB_PADDING_SIZE (vocab_parallel_embedding.py)


def _name(field: str) -> str:
    return CONFIG_NAMES.get(field, field)


def check_shapes(fields: Mapping[str, Any], where: str) -> None:
    """ValueError unless ``fields`` (a PublishedModel's, by name) are integers within their
    bounds that vLLM can build: at least one KV head, attention heads a multiple of KV heads
    (``Attention.__init__``, vllm/model_executor/layers/attention/attention.py), an even head
    size (the rotary embedding turns pairs of channels), experts per token at most the
    experts, an MLP size where layers are dense. ``where`` names the file or model."""
    for field, (least, most) in FIELD_RANGES.items():
        if field not in fields:
            continue
        value = fields[field]
        number = as_index(value)
        if number is None or not least <= number <= most:
            raise ValueError(
                f"{where} field {_name(field)!r}={value!r} is invalid: it must be an integer "
                f"from {least} to {most:_} (cgdispatch.core.validate.BOUNDS)"
            )
    f = dict(fields)
    mla = f.get("kv_lora_rank", 0) > 0
    if not mla and f["num_heads"] % f["num_kv_heads"]:
        raise ValueError(
            f"{where} field 'num_attention_heads'={f['num_heads']} is not a multiple of "
            f"'num_key_value_heads'={f['num_kv_heads']}: vLLM's attention gives each KV head "
            "the same number of query heads; give a KV head count that divides the heads"
        )
    rotary = f.get("qk_rope_head_dim", 0) if mla else f["head_dim"]
    if rotary % 2:
        raise ValueError(
            f"{where} field {'qk_rope_head_dim' if mla else 'head_dim'!r}={rotary} is odd: "
            "the rotary embedding turns each head's channels in pairs; give an even size "
            "(or drop head_dim: hidden_size / num_attention_heads)"
        )
    experts, per_token = f.get("num_experts", 0), f.get("experts_per_token", 0)
    if experts and not 1 <= per_token <= experts:
        raise ValueError(
            f"{where} field 'num_experts_per_tok'={per_token} is invalid with {experts} "
            "experts: each token is routed to between 1 and num_experts experts"
        )
    if experts and not f.get("moe_intermediate_size", 1):
        raise ValueError(f"{where} field 'moe_intermediate_size' must be >= 1 with experts")
    dense = not experts or f.get("dense_layers", 0) > 0
    if dense and not f.get("intermediate_size", 1):
        raise ValueError(f"{where} field 'intermediate_size' must be >= 1 (a dense MLP)")


def _tp_problem(model: Any, tp: int) -> str:
    """Why vLLM cannot shard ``model`` over ``tp`` GPUs ("" when it can)."""
    name = model.model
    if model.num_heads % tp:
        return (
            f"does not divide {name}'s {model.num_heads} attention heads "
            "(num_attention_heads; vLLM: ModelConfig.verify_with_parallel_config, "
            "vllm/config/model.py)"
        )
    kv = model.num_kv_heads
    if not model.is_mla and (kv % tp if kv >= tp else tp % kv):
        return (
            f"neither splits nor evenly replicates {name}'s {kv} KV heads "
            "(num_key_value_heads; vLLM: "
            "QKVParallelLinear shards KV heads when TP <= KV heads, else needs TP a multiple "
            "of them; vllm/model_executor/layers/linear.py)"
        )
    dense = not model.is_moe or model.dense_layers > 0
    sizes = [("intermediate_size", model.intermediate_size, dense,
              "MergedColumnParallelLinear / RowParallelLinear split the MLP; "
              "vllm/model_executor/layers/linear.py"),
             ("moe_intermediate_size", model.moe_intermediate_size, model.is_moe,
              "FusedMoEConfig splits each expert; "
              "vllm/model_executor/layers/fused_moe/config.py"),
             ("shared_expert_intermediate_size", model.shared_intermediate_size,
              model.is_moe, "the shared experts' MergedColumnParallelLinear; "
              "vllm/model_executor/layers/linear.py")]  # fmt: skip
    for field, size, used, rule in sizes:
        if used and size % tp:
            return f"does not divide {name}'s {field}={size} (vLLM: {rule})"
    padded = -(-model.vocab_size // _VOCAB_PADDING) * _VOCAB_PADDING
    if padded % tp:
        return (
            f"does not divide {name}'s vocabulary ({model.vocab_size}, padded to {padded}, "
            f"a multiple of {_VOCAB_PADDING}; vLLM: "
            "VocabParallelEmbedding, vllm/model_executor/layers/vocab_parallel_embedding.py)"
        )
    return ""


def valid_tp_sizes(model: Any, up_to: int = 64) -> list[int]:
    """The TP sizes up to ``up_to`` that vLLM can shard ``model`` over."""
    return [tp for tp in range(1, up_to + 1) if not _tp_problem(model, tp)]


def check_tensor_parallel(model: Any, tp: int) -> None:
    """ValueError unless vLLM can shard ``model`` (a PublishedModel) over ``tp`` GPUs:
    attention heads, KV heads (split or replicated), the MLP, expert and shared-expert sizes
    and the 64-padded vocabulary, each by vLLM's own rule (named in the message)."""
    problem = _tp_problem(model, tp)
    if problem:
        sizes = ", ".join(map(str, valid_tp_sizes(model, max(64, tp))))
        raise ValueError(
            f"tensor_parallel_size={tp} {problem}: vLLM would not load the model on {tp} "
            f"GPUs; use a TP size of {sizes}"
        )
