"""A decoder's :class:`~cgdispatch.models.published.PublishedModel` fields from its ``config.json``.

Reads a Hugging Face config (a path to ``config.json`` or its folder, a dict, or a
``transformers`` config object) into the same fields a row of
``cgdispatch/data/model_architectures.csv`` holds, so that any dense, GQA, mixture-of-experts,
multi-head-latent-attention or sliding-window decoder of a supported ``model_type`` gets
the start-up and step-time estimates of the published models. It reads files only: no hub
access. It does not check that the numbers describe a real checkpoint; a missing required
field, a ``model_type`` it cannot build or a field value that changes the architecture in a
way it does not model is a ValueError naming the field.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..core.validate import MAX_MODEL_WIDTH, check_nesting, check_text, read_json_file
from .shape_rules import FIELD_RANGES

__all__ = ["MODEL_TYPES", "config_fields", "config_model_name", "is_config_source"]


@dataclass(frozen=True)
class _Kind:
    """What a ``model_type`` implies beyond its config's numbers."""

    family: str
    qkv_bias: bool = False  # default of ``attention_bias`` (Qwen2 always has q/k/v biases)
    tied: bool = False  # default of ``tie_word_embeddings``
    norms_per_layer: int = 2
    qk_norm: bool = False
    gated_mlp: bool = True
    sliding_every: int = 1  # layers per full-attention layer when the config does not say


MODEL_TYPES: dict[str, _Kind] = {
    "llama": _Kind("Llama"),
    "mistral": _Kind("Mistral/Mixtral"),
    "mixtral": _Kind("Mistral/Mixtral"),
    "qwen2": _Kind("Qwen", qkv_bias=True),
    "qwen2_moe": _Kind("Qwen", qkv_bias=True),
    "qwen3": _Kind("Qwen", qk_norm=True),
    "qwen3_moe": _Kind("Qwen", qk_norm=True),
    "gemma": _Kind("Gemma", tied=True),
    "gemma2": _Kind("Gemma", tied=True, norms_per_layer=4, sliding_every=2),
    "gemma3": _Kind("Gemma", tied=True, norms_per_layer=4, qk_norm=True, sliding_every=6),
    "gemma3_text": _Kind("Gemma", tied=True, norms_per_layer=4, qk_norm=True, sliding_every=6),
    "granite": _Kind("Granite"),
    "phi3": _Kind("Phi"),
    "phi": _Kind("Phi", qkv_bias=True, norms_per_layer=1, gated_mlp=False),
    "deepseek_v2": _Kind("DeepSeek"),
    "deepseek_v3": _Kind("DeepSeek"),
    "kimi_k2": _Kind("Kimi"),
    "gpt_oss": _Kind("gpt-oss", qkv_bias=True, sliding_every=2),
}
# quantization_config.quant_method -> vLLM's name of the scheme (QUANT_WEIGHT_BYTES)
_QUANT = {
    "fp8": "fp8",
    "compressed-tensors": "compressed",
    "mxfp4": "mxfp4",
    "gptq": "gptq_marlin",
    "awq": "awq_marlin",
}
_DTYPES = ("bfloat16", "float16", "float32")
# config.json field -> the PublishedModel field whose bound it takes (shape_rules.FIELD_RANGES;
# any other integer field: a width, at most MAX_MODEL_WIDTH)
_BOUND_OF = {
    "num_hidden_layers": "layers",
    "first_k_dense_replace": "layers",
    "sliding_window_pattern": "layers",
    "num_attention_heads": "num_heads",
    "num_key_value_heads": "num_heads",
    "vocab_size": "vocab_size",
    "num_local_experts": "num_experts",
    "num_experts": "num_experts",
    "n_routed_experts": "num_experts",
    "num_experts_per_tok": "num_experts",
    "n_shared_experts": "num_experts",
    "max_position_embeddings": "max_position_embeddings",
}
_MOST = {name: FIELD_RANGES[field][1] for name, field in _BOUND_OF.items()}


def is_config_source(model: object) -> bool:
    """True when ``model`` is meant as a config: a dict, a ``transformers`` config, a
    :class:`~pathlib.Path`, or a string naming a ``.json`` file or an existing path."""
    if isinstance(model, (Mapping, Path)) or callable(getattr(model, "to_dict", None)):
        return True
    return isinstance(model, str) and (model.endswith(".json") or Path(model).exists())


def _read(source: Any) -> tuple[dict[str, Any], str]:
    """The config as a dict, and the name a path or dict gives the model."""
    if isinstance(source, (str, Path)):
        path = Path(source)
        if path.is_dir():
            path = path / "config.json"
        if not path.is_file():
            raise ValueError(f"model={str(source)!r}: no such config.json file")
        data = read_json_file(path, f"config file {path}")
        name = str(path)
    elif isinstance(source, Mapping):
        data, name = dict(source), ""
    elif callable(getattr(source, "to_dict", None)):  # a transformers PretrainedConfig
        data, name = source.to_dict(), ""
    else:
        raise ValueError(f"model={source!r} is invalid: give a config.json path, dict or config")
    if not isinstance(data, dict):
        raise ValueError(f"model={name or source!r}: config.json must hold a JSON object")
    check_nesting(f"config file {name}" if name else "config", data)
    given = data.get("_name_or_path")
    if given:  # printed in the verdict and the vllm serve line: one line of text
        check_text("config.json field '_name_or_path'", given)
    return data, str(given or name or f"{data.get('model_type')} config")


def config_model_name(source: Any) -> str:
    """The config's ``_name_or_path`` (the checkpoint it was saved from), or "" when it has
    none: what ``vllm serve`` can load, where the file's own path is only a config."""
    data, _ = _read(source)
    return str(data.get("_name_or_path") or "")


def _int(cfg: Mapping[str, Any], field: str, default: int | None = None) -> int:
    value = cfg.get(field, default)
    if value is None:
        if default is None:
            raise ValueError(f"config.json field {field!r} is missing: it is required")
        value = default
    most = _MOST.get(field, MAX_MODEL_WIDTH)
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= most:
        raise ValueError(
            f"config.json field {field!r}={value!r} is invalid: give an integer from 0 to "
            f"{most:_} (cgdispatch.core.validate.BOUNDS)"
        )
    return value


def _flag(cfg: Mapping[str, Any], field: str, default: bool) -> bool:
    value = cfg.get(field, default)
    if value is None:
        return default
    if not isinstance(value, bool):
        raise ValueError(f"config.json field {field!r}={value!r} is invalid: give true or false")
    return value


def _full_attention_every(cfg: Mapping[str, Any], kind: _Kind, layers: int) -> int:
    """Layers per full-attention layer (1: all full, or all sliding)."""
    types = cfg.get("layer_types")
    if types is not None:
        if not isinstance(types, list) or len(types) != layers:
            raise ValueError(
                f"config.json field 'layer_types' is invalid: give one entry per layer ({layers})"
            )
        odd = next((t for t in types if not isinstance(t, str)), None)
        if odd is not None:
            raise ValueError(
                f"config.json field 'layer_types' holds {odd!r}: each entry is a text, "
                "'full_attention' or 'sliding_attention'"
            )
        unknown = set(types) - {"full_attention", "sliding_attention"}
        if unknown:
            raise ValueError(
                f"config.json field 'layer_types' holds {sorted(unknown)}: unsupported"
            )
        full = types.count("full_attention")
        if full in (0, layers):
            return 1
        for every in range(2, layers + 1):
            if layers // every == full:
                return every
        raise ValueError(
            f"config.json field 'layer_types' ({full} full of {layers}) is unsupported"
        )
    if cfg.get("sliding_window_pattern") is not None:
        return _int(cfg, "sliding_window_pattern") or 1
    return kind.sliding_every if cfg.get("sliding_window") else 1


def _quantization(cfg: Mapping[str, Any]) -> str:
    quant = cfg.get("quantization_config")
    if not quant:
        return ""
    method = quant.get("quant_method") if isinstance(quant, Mapping) else None
    if not isinstance(method, str):
        raise ValueError(
            f"config.json field 'quantization_config.quant_method'={method!r} is invalid: "
            f"give one of {sorted(_QUANT)} as text"
        )
    if method == "gptq" and quant.get("bits") != 4:
        raise ValueError(
            f"config.json field 'quantization_config.bits'={quant.get('bits')!r} is "
            "unsupported: GPTQ is modelled at 4 bits"
        )
    if method == "awq" and quant.get("bits", quant.get("w_bit")) != 4:
        raise ValueError(
            f"config.json field 'quantization_config.bits'={quant.get('bits')!r} is "
            "unsupported: AWQ is modelled at 4 bits"
        )
    if method == "compressed-tensors":
        return _compressed_scheme(quant)
    if method not in _QUANT:
        raise ValueError(
            f"config.json field 'quantization_config.quant_method'={method!r} is unsupported: "
            f"use one of {sorted(_QUANT)} (or drop quantization_config for 16-bit weights)"
        )
    return _QUANT[method]


def _compressed_scheme(quant: Mapping[str, Any]) -> str:
    """compressed-tensors priced at its weights' bit width: every config group's
    ``weights.num_bits`` (8: one byte a weight; 4: W4A16 groups)."""
    groups = quant.get("config_groups")
    bits = set()
    if isinstance(groups, Mapping):
        for group in groups.values():
            weights = group.get("weights") if isinstance(group, Mapping) else None
            if isinstance(weights, Mapping):
                bits.add(weights.get("num_bits"))
    if not bits or bits == {8}:
        return "compressed"
    if bits == {4}:
        return "compressed_w4a16"
    raise ValueError(
        f"config.json field 'quantization_config.config_groups' weights num_bits="
        f"{sorted(bits, key=str)} is unsupported: compressed-tensors is modelled at 8 or 4 bits "
        "(one width for every group)"
    )


def _check_structure(cfg: Mapping[str, Any]) -> None:
    """Fields whose values give layer layouts the published-model fields cannot express."""
    if cfg.get("mlp_only_layers"):
        raise ValueError("config.json field 'mlp_only_layers' is unsupported: it must be empty")
    for field in ("decoder_sparse_step", "moe_layer_freq"):
        if cfg.get(field, 1) != 1:
            raise ValueError(f"config.json field {field!r}={cfg[field]!r} is unsupported: use 1")


def config_fields(source: Any, *, name: str | None = None) -> dict[str, Any]:
    """The :class:`~cgdispatch.models.published.PublishedModel` fields of a decoder's
    ``config.json`` (path, dict or ``transformers`` config); ``name`` overrides the model name (default: the config's
    ``_name_or_path``, else the file's path). Multimodal configs use their ``text_config``
    (the vision tower is not counted)."""
    path = str(source) if isinstance(source, (str, Path)) else ""
    try:
        data, default_name = _read(source)
        return _fields(data, default_name, name)
    except ValueError as err:  # name the file: a person may be trying several
        if path and path not in str(err):
            raise ValueError(f"config file {path}: {err}") from None
        raise


def _fields(data: dict[str, Any], default_name: str, name: str | None) -> dict[str, Any]:
    from .shape_rules import check_shapes

    cfg = dict(data)
    vision_note = ""
    if isinstance(data.get("text_config"), Mapping):
        cfg = {**data, **data["text_config"]}
        vision_note = " (text_config; vision tower not counted)"
    model_type = cfg.get("model_type")
    if not isinstance(model_type, str) or model_type not in MODEL_TYPES:
        raise ValueError(
            f"config.json field 'model_type'={model_type!r} is unsupported: use a decoder of "
            f"{sorted(MODEL_TYPES)}"
        )
    kind = MODEL_TYPES[model_type]
    _check_structure(cfg)
    layers = _int(cfg, "num_hidden_layers")
    hidden = _int(cfg, "hidden_size")
    heads = _int(cfg, "num_attention_heads")
    experts = next(
        (
            _int(cfg, f)
            for f in ("num_local_experts", "num_experts", "n_routed_experts")
            if cfg.get(f)
        ),
        0,
    )
    mla = _int(cfg, "kv_lora_rank", 0) > 0
    nope, rope = _int(cfg, "qk_nope_head_dim", 0), _int(cfg, "qk_rope_head_dim", 0)
    if mla and not (nope and rope and cfg.get("v_head_dim")):
        raise ValueError(
            "config.json fields 'qk_nope_head_dim', 'qk_rope_head_dim' and 'v_head_dim' are "
            "required with 'kv_lora_rank' (multi-head latent attention)"
        )
    head_dim = nope + rope if mla else _int(cfg, "head_dim", hidden // max(heads, 1))
    moe_inter = _int(cfg, "moe_intermediate_size", 0) or (
        _int(cfg, "intermediate_size") if experts else 0
    )
    shared = _int(cfg, "shared_expert_intermediate_size", 0) or (
        _int(cfg, "n_shared_experts", 0) * moe_inter
    )
    dtype = cfg.get("torch_dtype") or cfg.get("dtype") or "bfloat16"
    if not isinstance(dtype, str) or dtype not in _DTYPES:
        raise ValueError(f"config.json field 'torch_dtype'={dtype!r} is unsupported: use {_DTYPES}")
    if not (layers and hidden and heads and _int(cfg, "vocab_size")):
        raise ValueError("config.json fields 'num_hidden_layers', 'hidden_size', "
                         "'num_attention_heads' and 'vocab_size' must be > 0")  # fmt: skip
    if experts and not _int(cfg, "num_experts_per_tok"):
        raise ValueError("config.json field 'num_experts_per_tok' must be > 0 with experts")
    out = dict(
        model=name or default_name,
        family=kind.family,
        layers=layers,
        hidden_size=hidden,
        num_heads=heads,
        num_kv_heads=heads if mla else _int(cfg, "num_key_value_heads", heads),
        head_dim=head_dim,
        intermediate_size=_int(cfg, "intermediate_size", moe_inter),
        vocab_size=_int(cfg, "vocab_size"),
        tied_embeddings=_flag(cfg, "tie_word_embeddings", kind.tied),
        qkv_bias=_flag(cfg, "attention_bias", kind.qkv_bias),
        gated_mlp=kind.gated_mlp,
        norms_per_layer=kind.norms_per_layer,
        qk_norm=kind.qk_norm,
        num_experts=experts,
        experts_per_token=_int(cfg, "num_experts_per_tok", 0) if experts else 0,
        moe_intermediate_size=moe_inter,
        shared_intermediate_size=shared if experts else 0,
        dense_layers=_int(cfg, "first_k_dense_replace", 0) if experts else 0,
        kv_lora_rank=_int(cfg, "kv_lora_rank", 0),
        qk_rope_head_dim=rope if mla else 0,
        qk_nope_head_dim=nope if mla else 0,
        v_head_dim=_int(cfg, "v_head_dim", 0) if mla else 0,
        full_attention_every=_full_attention_every(cfg, kind, layers),
        vision_params=0,
        dtype=dtype,
        quantization=_quantization(cfg),
        source=f"config.json {default_name}{vision_note}",
        q_lora_rank=_int(cfg, "q_lora_rank", 0) if mla else 0,
        max_position_embeddings=_int(cfg, "max_position_embeddings", 0),
    )
    check_shapes(out, "config.json")
    return out
