"""Any decoder ``transformers`` can build, read off the model it builds on torch's meta device.

With the ``hf`` extra (``pip install 'cgdispatch[hf]'``), a ``config.json`` whose
``model_type`` the hand-kept table of :mod:`cgdispatch.models.config_json` does not list
(falcon, mpt, starcoder2, olmo2, cohere, nemotron, ...) is instantiated with
``AutoModelForCausalLM.from_config`` under ``torch.device("meta")``: shapes only, no weights,
no download, no memory. :func:`meta_count` counts its parameters per decoder layer (linear
projections, routed experts, the rest) and outside the layers (embeddings, LM head, final
norm); :func:`meta_fields` reads the :class:`~cgdispatch.models.published.PublishedModel`
fields (heads, KV heads, head size, MLP size, experts, norms, biases) off the modules, so
weights are priced from the count and the kernel profile is traced on the shapes.

What it does not do: trace the Hugging Face forward itself (the kernel profile is the
package's decoder on the counted shapes, so a parallel-attention block such as Falcon's
is profiled as a sequential one), read multi-head latent attention outside the table, or
build hybrid (Mamba, linear-attention) decoders: those raise ValueError naming the reason.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from typing import Any

from ...core import cache
from ..weights import ParamCount
from .support import require_transformers

__all__ = ["hf_available", "meta_count", "meta_fields", "meta_model"]

_ATTENTION_NAMES = ("self_attn", "self_attention", "attention", "attn", "mixer")
_MLP_NAMES = ("mlp", "feed_forward", "ffn", "block_sparse_moe")
_EXPERT_COUNT = ("num_local_experts", "num_experts", "n_routed_experts", "moe_num_experts")
# class names of sequence mixers other than attention (state-space, linear attention)
_NOT_ATTENTION = re.compile(
    r"Mamba|LinearAttention|DeltaNet|Rwkv|RWKV|ShortConv|SSM|Mixer$|Conv1d$"
)
_EXPERT_TOPK = ("num_experts_per_tok", "num_experts_per_token", "moe_top_k", "top_k")


def hf_available() -> bool:
    """True when ``transformers`` can be imported (the ``hf`` extra is installed)."""
    try:
        require_transformers()
    except ImportError:
        return False
    return True


def _config(cfg: Mapping[str, Any]) -> Any:
    """The ``transformers`` config of a ``config.json`` dict (its text part for multimodal
    configs); ValueError naming ``model_type`` when transformers does not know it."""
    transformers = require_transformers()
    data = {k: v for k, v in cfg.items() if k not in ("quantization_config", "auto_map")}
    if isinstance(data.get("text_config"), Mapping):
        data = {**data["text_config"]}
    model_type = data.pop("model_type", None)
    try:
        config = transformers.AutoConfig.for_model(model_type, **data)
    except (ValueError, KeyError, TypeError) as err:
        raise ValueError(
            f"config.json field 'model_type'={model_type!r} is unsupported: transformers "
            f"{transformers.__version__} cannot build it ({err}); update transformers or give "
            "a model_type it knows"
        ) from None
    from transformers.models.auto import modeling_auto

    masked = getattr(modeling_auto, "MODEL_FOR_MASKED_LM_MAPPING_NAMES", {})
    if getattr(config, "is_encoder_decoder", False) or model_type in masked:
        raise ValueError(
            f"config.json field 'model_type'={model_type!r} is unsupported: it is an "
            f"{'encoder-decoder' if config.is_encoder_decoder else 'encoder (masked LM)'} "
            "model; give a decoder-only causal LM"
        )
    return config


def meta_model(cfg: Mapping[str, Any]) -> Any:
    """``AutoModelForCausalLM.from_config`` of the config on torch's meta device."""
    import torch

    transformers = require_transformers()
    config = _config(cfg)
    try:
        with torch.device("meta"):
            return transformers.AutoModelForCausalLM.from_config(config)
    except (ValueError, KeyError, TypeError, AttributeError) as err:
        raise ValueError(
            f"config.json (model_type {config.model_type!r}) is unsupported: transformers "
            f"could not build a causal LM from it ({type(err).__name__}: {err}); check the "
            "config's fields against the model's documentation"
        ) from None


def _linear(module: Any) -> tuple[int, int] | None:
    """(in, out) features of a linear projection: ``nn.Linear`` or transformers' ``Conv1D``
    (GPT-2's, weight stored [in, out]); None for any other module."""
    from torch import nn

    if isinstance(module, nn.Linear):
        return module.in_features, module.out_features
    weight = getattr(module, "weight", None)
    if type(module).__name__ == "Conv1D" and weight is not None and weight.dim() == 2:
        return int(weight.shape[0]), int(weight.shape[1])
    return None


def _layers(model: Any, count: int) -> Any:
    """The decoder layers: the ModuleList of ``count`` entries holding the most parameters."""
    from torch import nn

    lists = [m for m in model.modules() if isinstance(m, nn.ModuleList) and len(m) == count]
    if not lists:
        raise ValueError(
            f"{type(model).__name__} has no list of {count} decoder layers: unsupported layout"
        )
    return max(lists, key=lambda m: sum(p.numel() for p in m.parameters()))


def _split_layer(layer: Any, experts: int) -> tuple[int, int, int]:
    """(linear, expert, other) parameters of one decoder layer."""

    linear = expert = other = 0
    for path, module in layer.named_modules():
        for name, param in module.named_parameters(recurse=False):
            n = param.numel()
            in_experts = "experts" in path.split(".") and "shared" not in path
            if param.dim() == 3:  # fused experts [E, ...]
                expert += n
            elif _linear(module) and name == "weight":
                if in_experts:
                    expert += n
                elif experts and _linear(module)[1] == experts:  # a router as a linear
                    other += n
                else:
                    linear += n
            else:
                other += n
    return linear, expert, other


def _first(config: Any, names: tuple[str, ...], default: int = 0) -> int:
    for name in names:
        value = getattr(config, name, None)
        if isinstance(value, int) and not isinstance(value, bool) and value > 0:
            return value
    return default


@cache.memo(32)
def _count_json(text: str) -> tuple[ParamCount, dict[str, Any] | str]:
    from torch import nn

    cfg = json.loads(text)
    model = meta_model(cfg)
    text_cfg = model.config.get_text_config(decoder=True)
    experts = _first(text_cfg, _EXPERT_COUNT)
    layers = _layers(model, text_cfg.num_hidden_layers)
    counts = tuple(_split_layer(layer, experts) for layer in layers)
    embed = model.get_input_embeddings()
    head = model.get_output_embeddings()
    in_layers = {id(p) for p in layers.parameters()}
    embeddings = {id(embed.weight)}
    embedding = embed.weight.numel()
    for module in model.modules():  # position embeddings (GPT-2 style) go with the tokens
        if isinstance(module, nn.Embedding) and id(module.weight) not in in_layers | embeddings:
            embeddings.add(id(module.weight))
            embedding += module.weight.numel()
    tied = head is None or head.weight is embed.weight
    head_params = 0 if tied else head.weight.numel()
    skip = in_layers | embeddings | ({id(head.weight)} if head is not None else set())
    final = sum(p.numel() for p in model.parameters() if id(p) not in skip)
    count = ParamCount(counts, embedding, head_params, final)
    try:  # the count stands for any layout; the shape fields only for those modelled
        return count, _shape_fields(text_cfg, layers, counts, experts, tied)
    except ValueError as err:
        return count, str(err)


def _shape_fields(
    cfg: Any, layers: Any, counts: tuple[tuple[int, int, int], ...], experts: int, tied: bool
) -> dict[str, Any]:
    """The PublishedModel shape fields read off the modules of the first layer (and the
    first layer with routed experts)."""
    _refuse_unmodelled(cfg, layers)
    hidden = cfg.hidden_size
    attention = _attention_fields(cfg, layers[0])
    mlp = _mlp_fields(cfg, layers, counts, experts, hidden)
    return dict(
        family=str(cfg.model_type),
        layers=len(layers),
        hidden_size=hidden,
        vocab_size=cfg.vocab_size,
        tied_embeddings=tied,
        **attention,
        **mlp,
    )


def _refuse_unmodelled(cfg: Any, layers: Any) -> None:
    """ValueError for what the package's decoder does not model: multi-head latent
    attention outside the hand-kept table, and hybrid layers (no attention) anywhere."""
    if getattr(cfg, "kv_lora_rank", None):
        raise ValueError(
            f"config.json field 'kv_lora_rank'={cfg.kv_lora_rank!r} is unsupported for "
            f"model_type {cfg.model_type!r}: multi-head latent attention is modelled for "
            "the model types of cgdispatch.models.config_json.MODEL_TYPES only"
        )
    for index, path, module in (
        (i, path, module)
        for i, block in enumerate(layers)
        for path, module in block.named_modules()
    ):
        if _NOT_ATTENTION.search(type(module).__name__):
            raise ValueError(
                f"config.json field 'model_type'={cfg.model_type!r} is unsupported: its "
                f"layer {index} holds {type(module).__name__} ({path}), not attention; hybrid "
                "decoders are not modelled"
            )


def _attention_fields(cfg: Any, layer: Any) -> dict[str, Any]:
    """Heads, KV heads (from the q/k/v/o weights), head size, biases and norms of one layer."""
    hidden, heads = cfg.hidden_size, cfg.num_attention_heads
    head_dim = getattr(cfg, "head_dim", None) or hidden // heads
    attention = next(
        (m for n, m in layer.named_children() if n in _ATTENTION_NAMES or "attn" in n), None
    )
    if attention is None:
        raise ValueError(
            f"{type(layer).__name__} has no attention module ({_ATTENTION_NAMES}): unsupported"
        )
    attn_linear = [m for m in attention.modules() if _linear(m)]
    total = sum(m.weight.numel() for m in attn_linear)
    kv = (total / (hidden * head_dim) - 2 * heads) / 2  # q and o: heads; k and v: kv heads
    if kv < 1 or kv != int(kv):
        raise ValueError(
            f"{type(attention).__name__}'s projections ({total:_} weights) are not q, k, v "
            f"and o of {heads} heads of {head_dim}: unsupported attention layout"
        )
    attention_norms = [m for m in attention.modules() if "norm" in type(m).__name__.lower()]
    norms = [
        m
        for m in layer.modules()
        if "norm" in type(m).__name__.lower()
        and all(m is not a for a in attention_norms)
        and m is not layer
    ]
    return dict(
        num_heads=heads,
        num_kv_heads=int(kv),
        head_dim=head_dim,
        qkv_bias=any(getattr(m, "bias", None) is not None for m in attn_linear),
        norms_per_layer=len(norms),
        qk_norm=bool(attention_norms),
    )


def _mlp_of(block: Any) -> Any:
    return next((m for n, m in block.named_children() if n in _MLP_NAMES), None)


def _mlp_fields(
    cfg: Any, layers: Any, counts: tuple[tuple[int, int, int], ...], experts: int, hidden: int
) -> dict[str, Any]:
    """The dense MLP's width and gating, and the routed and shared experts' sizes."""
    layer = layers[0]
    gated, inter = True, getattr(cfg, "intermediate_size", 0) or 0
    dense_layers = 0
    moe_layer = None
    for i, block in enumerate(layers):
        if counts[i][1]:
            moe_layer = block
            break
        dense_layers = i + 1
    if moe_layer is None or dense_layers:
        dense_mlp = _mlp_of(layer)
        lin = [_linear(m) for m in dense_mlp.modules()] if dense_mlp else []
        lin = [shape for shape in lin if shape]
        # the projection back to the hidden size (with an MLP as wide as the model, any)
        down = next((i for i, o in lin if o == hidden and i != hidden), None)
        if down is None and any(o == hidden for _, o in lin):
            down = hidden
        if down is None:
            raise ValueError(
                f"{type(layer).__name__} has no MLP down projection to {hidden}: unsupported"
            )
        inter = down
        gated = sum(i * o for i, o in lin) == 3 * hidden * inter
    moe_inter = shared = 0
    per_token = 0
    if moe_layer is not None:
        if not experts:
            raise ValueError(
                f"{cfg.model_type} has routed experts but none of {_EXPERT_COUNT} in its "
                "config: unsupported"
            )
        per_token = _first(cfg, _EXPERT_TOPK)
        expert_params = counts[dense_layers][1]
        moe_inter = expert_params // (3 * hidden * experts)
        block = _mlp_of(moe_layer)
        shared_mod = next(
            (m for n, m in (block.named_children() if block else []) if "shared" in n), None
        )
        if shared_mod is not None:
            shared = sum(m.weight.numel() for m in shared_mod.modules() if _linear(m)) // (
                3 * hidden
            )
    return dict(
        intermediate_size=inter,
        gated_mlp=gated,
        num_experts=experts if moe_layer is not None else 0,
        experts_per_token=per_token,
        moe_intermediate_size=moe_inter,
        shared_intermediate_size=shared,
        dense_layers=dense_layers if moe_layer is not None else 0,
    )


def meta_count(cfg: Mapping[str, Any]) -> ParamCount:
    """The parameters of the model transformers builds from ``cfg`` (a config.json dict),
    counted on the meta device: per layer (linear, expert, other), embeddings, head, rest."""
    return _count_json(json.dumps(dict(cfg), sort_keys=True, default=str))[0]


def meta_fields(cfg: Mapping[str, Any]) -> tuple[dict[str, Any], ParamCount]:
    """The shape fields of :class:`~cgdispatch.models.published.PublishedModel` read off the
    meta-device model of ``cfg``, and its :class:`ParamCount`."""
    count, fields = _count_json(json.dumps(dict(cfg), sort_keys=True, default=str))
    if isinstance(fields, str):  # why the layout cannot be read
        raise ValueError(fields)
    return dict(fields), count
