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

import re
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, NamedTuple

from ..core.validate import MAX_MODEL_WIDTH, check_nesting, check_text, read_json_file
from .shape_rules import FIELD_RANGES
from .weights import QuantScheme

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
    bias_field: str = "attention_bias"  # the config field that turns attention biases on


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
    # the layouts below are those of transformers 5.x's modeling_<type>.py and vLLM's
    # vllm/model_executor/models/<type>.py (0.33.0); config field names as in the checkpoints
    # of tests/data/configs (falcon-7b, starcoder2-3b, olmo-2-7b)
    # Falcon: GELU MLP h -> ffn_hidden_size (default 4h) -> h, LayerNorm(s), tied head;
    # KV heads: num_kv_heads with new_decoder_architecture, else one with multi_query, else
    # every head (vLLM's FalconAttention); biases with "bias"
    "falcon": _Kind("Falcon", tied=True, norms_per_layer=1, gated_mlp=False, bias_field="bias"),
    # StarCoder2: biased GELU MLP (c_fc, c_proj) and attention ("use_bias"), two LayerNorms
    "starcoder2": _Kind(
        "StarCoder", qkv_bias=True, tied=True, gated_mlp=False, bias_field="use_bias"
    ),
    # OLMo 2: Llama's SwiGLU with norms after attention and MLP and q/k RMSNorms
    "olmo2": _Kind("OLMo", qk_norm=True),
}
# quantization_config.quant_method -> vLLM's name of the scheme (QUANT_WEIGHT_BYTES)
_QUANT = {
    "bitsandbytes": "bitsandbytes",
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
    "num_kv_heads": "num_heads",  # Falcon's name of it
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


def _qint(quant: Mapping[str, Any], field: str, default: int, allowed: tuple[int, ...]) -> int:
    value = quant.get(field, default)
    value = default if value is None else value
    if isinstance(value, bool) or value not in allowed:
        raise ValueError(
            f"config.json field 'quantization_config.{field}'={value!r} is unsupported: use "
            f"one of {list(allowed)}"
        )
    return value


def _scheme(cfg: Mapping[str, Any], layers: int) -> QuantScheme | None:
    """The checkpoint's :class:`~cgdispatch.models.weights.QuantScheme` from its
    ``quantization_config`` (None without one); ``layers`` decoder layers are checked
    against its lists of modules left unquantized. Each scheme's bytes per weight, with
    its source, is in the function that reads it."""
    quant = cfg.get("quantization_config")
    if not quant:
        return None
    method = quant.get("quant_method") if isinstance(quant, Mapping) else None
    if not isinstance(method, str):
        raise ValueError(
            f"config.json field 'quantization_config.quant_method'={method!r} is invalid: "
            f"give one of {sorted(_QUANT)} as text"
        )
    if method == "mxfp4":
        return QuantScheme("mxfp4", 0.5 + 1 / 32, rule="mxfp4 experts (block of 32)")
    reader = _SCHEME_READERS.get(method)
    if reader is None:
        raise ValueError(
            f"config.json field 'quantization_config.quant_method'={method!r} is unsupported: "
            f"use one of {sorted(_QUANT)} (or drop quantization_config for 16-bit weights); "
            "a GGUF file is priced with the run's quantization, e.g. 'gguf_q4_k'"
        )
    read = reader(quant, method)
    unquantized = _unquantized(read.skip, read.match, layers)
    rule = read.rule + (f"; {len(read.skip)} module name(s) left 16-bit" if read.skip else "")
    return QuantScheme(read.name, read.weight, head=read.head, unquantized=unquantized, rule=rule)


class _Read(NamedTuple):
    """One scheme as its ``quantization_config`` gives it: kernel name, bytes per weight,
    the rule in words, the modules left 16-bit and how a skip entry names a module
    (vLLM's rule per scheme: ``substring`` or ``exact``), and whether lm_head is quantized."""

    name: str
    weight: float
    rule: str
    skip: list[str]
    match: str = "substring"
    head: bool = False


def _gptq_awq(quant: Mapping[str, Any], method: str) -> _Read:
    """GPTQ (vllm/model_executor/layers/quantization/gptq.py, gptq_marlin.py): packed
    ``bits`` ints, an fp16 scale per group of ``group_size`` inputs and output (-1: one per
    output channel), packed zero points unless ``sym``; desc_act adds one int32 g_idx per
    input row (under 0.1%, not counted). AWQ (awq.py): 4 bits, a scale and a packed zero
    point per group (``zero_point``); skip list ``modules_to_not_convert`` (vLLM's
    is_layer_skipped_awq: substring of the module's name)."""
    awq = method == "awq"
    bits = _qint(quant, "bits", quant.get("w_bit", 4), (4,) if awq else (2, 3, 4, 8))
    group = _qint(quant, "group_size", quant.get("q_group_size", 128), (-1, 32, 64, 128, 256, 1024))
    zeros = quant.get("zero_point", True) if awq else not quant.get("sym", True)
    per_group = 2 + (bits / 8 if zeros else 0)
    weight = bits / 8 + (per_group / group if group > 0 else 0.0)
    head = bool(quant.get("lm_head", False)) and not awq
    rule = (
        f"{method} {bits}-bit, group {group}{', zero points' if zeros else ''}"
        f"{', lm_head quantized' if head else ''}"
    )
    skip = list(quant.get("modules_to_not_convert") or [])
    return _Read("awq_marlin" if awq else "gptq_marlin", weight, rule, skip, head=head)


def _fp8(quant: Mapping[str, Any], method: str) -> _Read:
    """vLLM's Fp8Config (vllm/model_executor/layers/quantization/fp8.py): one byte a weight,
    an fp32 scale per tensor or per ``weight_block_size`` block; skip list
    ``ignored_layers`` (exact module names)."""
    block = quant.get("weight_block_size")
    if block is not None and (
        not isinstance(block, list)
        or len(block) != 2
        or not all(isinstance(b, int) and not isinstance(b, bool) and b > 0 for b in block)
    ):
        raise ValueError(
            f"config.json field 'quantization_config.weight_block_size'={block!r} is "
            "invalid: give two positive integers, e.g. [128, 128]"
        )
    weight = 1.0 + (4 / (block[0] * block[1]) if block else 0.0)
    rule = f"fp8, {'block ' + 'x'.join(map(str, block)) if block else 'per-tensor'} scales"
    return _Read("fp8", weight, rule, list(quant.get("ignored_layers") or []), "exact")


def _bitsandbytes(quant: Mapping[str, Any], method: str) -> _Read:
    """bitsandbytes (vllm/model_executor/layers/quantization/bitsandbytes.py): 4-bit
    nf4/fp4 in blocks of 64 with an fp32 absmax each, or with double quantization an 8-bit
    absmax and an fp32 scale per 256 blocks; 8-bit (LLM.int8) one byte and an fp32 scale per
    row; skip list ``llm_int8_skip_modules`` (substring)."""
    if quant.get("load_in_8bit") or quant.get("_load_in_8bit"):
        weight, rule = 1.0, "bitsandbytes 8-bit"
    elif quant.get("load_in_4bit", quant.get("_load_in_4bit", True)):
        double = bool(quant.get("bnb_4bit_use_double_quant", False))
        weight = 0.5 + (1 / 64 + 4 / (64 * 256) if double else 4 / 64)
        kind = quant.get("bnb_4bit_quant_type", "fp4")
        rule = f"bitsandbytes 4-bit {kind}{', double quantization' if double else ''}"
    else:
        raise ValueError(
            "config.json field 'quantization_config' (bitsandbytes) sets neither "
            "load_in_4bit nor load_in_8bit: give one"
        )
    return _Read("bitsandbytes", weight, rule, list(quant.get("llm_int8_skip_modules") or []))


def _compressed(quant: Mapping[str, Any], method: str) -> _Read:
    """compressed-tensors: bits per group as :func:`_compressed_bytes` reads them; skip list
    ``ignore`` (exact module names)."""
    weight, rule = _compressed_bytes(quant)
    name = "compressed" if weight >= 1 else "compressed_w4a16"
    return _Read(name, weight, rule, list(quant.get("ignore") or []), "exact")


_SCHEME_READERS = {
    "gptq": _gptq_awq,
    "awq": _gptq_awq,
    "fp8": _fp8,
    "bitsandbytes": _bitsandbytes,
    "compressed-tensors": _compressed,
}


# projections of each part of a layer, as transformers names them (vLLM matches skip lists
# against these names before fusing them)
_PARTS = {
    "attn": ("self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj", "self_attn.o_proj"),
    "mlp": ("mlp.gate_proj", "mlp.up_proj", "mlp.down_proj"),
    "experts": ("mlp.experts.0.gate_proj", "mlp.experts.0.up_proj", "mlp.experts.0.down_proj"),
}


def _unquantized(skip: list[Any], match: str, layers: int) -> tuple[tuple[int, str], ...]:
    """(layer, part) whose every projection a skip entry names: a substring of the module
    name (AWQ, bitsandbytes), or the exact name or a ``re:`` pattern (fp8,
    compressed-tensors). A part with only some projections named counts as quantized."""
    for entry in skip:
        if not isinstance(entry, str):
            raise ValueError(
                f"config.json quantization_config skip list entry {entry!r} is invalid: give "
                "module names as text"
            )
    patterns = [re.compile(e[3:]) for e in skip if e.startswith("re:")]
    names = {e for e in skip if not e.startswith("re:")}

    def named(module: str) -> bool:
        if match == "substring":
            return any(e in module for e in names)
        return module in names or any(p.match(module) for p in patterns)

    out = []
    for layer in range(layers):
        for part, projections in _PARTS.items():
            if all(named(f"model.layers.{layer}.{p}") for p in projections):
                out.append((layer, part))
    return tuple(out)


def _compressed_bytes(quant: Mapping[str, Any]) -> tuple[float, str]:
    """compressed-tensors (vllm/model_executor/layers/quantization/compressed_tensors):
    every config group's ``weights``: ``num_bits`` per weight, an fp16 scale per group of
    ``group_size`` (strategy "group"; per channel or tensor: negligible), a packed zero
    point per group unless ``symmetric``; one width for every group."""
    groups = quant.get("config_groups")
    widths = set()
    if isinstance(groups, Mapping):
        for group in groups.values():
            weights = group.get("weights") if isinstance(group, Mapping) else None
            if isinstance(weights, Mapping):
                bits = weights.get("num_bits")
                size = weights.get("group_size")
                if weights.get("strategy", "group" if size else None) != "group":
                    size = 0  # per channel or tensor: one scale a row or tensor
                zeros = weights.get("symmetric", True) is False
                widths.add((bits, size or 0, zeros))
    if not widths:
        return 1.0, "compressed-tensors 8-bit"
    bits_seen = {w[0] for w in widths}
    if len(widths) > 1 or not bits_seen <= {4, 8}:
        raise ValueError(
            f"config.json field 'quantization_config.config_groups' weights num_bits="
            f"{sorted(bits_seen, key=str)} is unsupported: compressed-tensors is modelled at 8 "
            "or 4 bits (one width for every group)"
        )
    bits, size, zeros = widths.pop()
    if size and (isinstance(size, bool) or not isinstance(size, int) or size < 1):
        raise ValueError(
            f"config.json field 'quantization_config.config_groups' weights group_size="
            f"{size!r} is invalid: give a positive integer"
        )
    per_group = 2 + (bits / 8 if zeros else 0)
    weight = bits / 8 + (per_group / size if size else 0.0)
    return weight, f"compressed-tensors {bits}-bit" + (f", group {size}" if size else "")


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


def _hf_available() -> bool:
    from .hf.meta_config import hf_available

    return hf_available()


def _counted_fields(
    data: dict[str, Any], cfg: Mapping[str, Any], default_name: str, name: str | None
) -> dict[str, Any]:
    """The fields of a ``model_type`` outside :data:`MODEL_TYPES`, read off the model
    transformers builds on the meta device (:mod:`cgdispatch.models.hf.meta_config`)."""
    from .hf.meta_config import meta_fields
    from .shape_rules import check_shapes

    _check_structure(cfg)
    shapes, count = meta_fields(data)
    scheme = _scheme(cfg, shapes["layers"])
    dtype = cfg.get("torch_dtype") or cfg.get("dtype") or "bfloat16"
    if not isinstance(dtype, str) or dtype not in _DTYPES:
        raise ValueError(f"config.json field 'torch_dtype'={dtype!r} is unsupported: use {_DTYPES}")
    context = cfg.get("max_position_embeddings")
    out = dict(
        model=name or default_name,
        **shapes,
        kv_lora_rank=0,
        qk_rope_head_dim=0,
        qk_nope_head_dim=0,
        v_head_dim=0,
        full_attention_every=_full_attention_every(cfg, _Kind(""), shapes["layers"]),
        vision_params=0,
        dtype=dtype,
        quantization=scheme.method if scheme else "",
        source=f"config.json {default_name} (counted on transformers' meta-device model)",
        q_lora_rank=0,
        max_position_embeddings=_int(cfg, "max_position_embeddings", 0) if context else 0,
        param_count=count,
        quant_scheme=scheme if scheme and scheme.method != "mxfp4" else None,
    )
    check_shapes(out, "config.json")
    return out


def _fields(data: dict[str, Any], default_name: str, name: str | None) -> dict[str, Any]:
    from .shape_rules import check_shapes

    cfg = dict(data)
    vision_note = ""
    if isinstance(data.get("text_config"), Mapping):
        cfg = {**data, **data["text_config"]}
        vision_note = " (text_config; vision tower not counted)"
    model_type = cfg.get("model_type")
    if isinstance(model_type, str) and model_type not in MODEL_TYPES and _hf_available():
        return _counted_fields(data, cfg, default_name, name)
    if not isinstance(model_type, str) or model_type not in MODEL_TYPES:
        raise ValueError(
            f"config.json field 'model_type'={model_type!r} is unsupported: use a decoder of "
            f"{sorted(MODEL_TYPES)}, or install the hf extra (pip install 'cgdispatch[hf]') "
            "for any decoder transformers builds"
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
    kv_heads = heads if mla else _int(cfg, "num_key_value_heads", heads)
    norms = kind.norms_per_layer
    if model_type == "falcon":  # transformers' FalconAttention, vLLM's falcon.py
        new = _flag(cfg, "new_decoder_architecture", False)
        multi_query = _flag(cfg, "multi_query", True)
        kv_heads = _int(cfg, "num_kv_heads", heads) if new else 1 if multi_query else heads
        cfg = {**cfg, "intermediate_size": _int(cfg, "ffn_hidden_size", 4 * hidden)}
        if new:  # ln_attn and ln_mlp (num_ln_in_parallel_attn, default 2)
            norms = _int(cfg, "num_ln_in_parallel_attn", 2)
        elif not _flag(cfg, "parallel_attn", True):  # a post-attention LayerNorm too
            norms = 2
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
    scheme = _scheme(cfg, layers)
    if experts and not _int(cfg, "num_experts_per_tok"):
        raise ValueError("config.json field 'num_experts_per_tok' must be > 0 with experts")
    out = dict(
        model=name or default_name,
        family=kind.family,
        layers=layers,
        hidden_size=hidden,
        num_heads=heads,
        num_kv_heads=kv_heads,
        head_dim=head_dim,
        intermediate_size=_int(cfg, "intermediate_size", moe_inter),
        vocab_size=_int(cfg, "vocab_size"),
        tied_embeddings=_flag(cfg, "tie_word_embeddings", kind.tied),
        qkv_bias=_flag(cfg, kind.bias_field, kind.qkv_bias),
        gated_mlp=kind.gated_mlp,
        norms_per_layer=norms,
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
        quantization=scheme.method if scheme else "",
        source=f"config.json {default_name}{vision_note}",
        q_lora_rank=_int(cfg, "q_lora_rank", 0) if mla else 0,
        max_position_embeddings=_int(cfg, "max_position_embeddings", 0),
        # mxfp4 (gpt-oss) quantizes the experts only: its nominal bytes say so
        quant_scheme=scheme if scheme and scheme.method != "mxfp4" else None,
    )
    check_shapes(out, "config.json")
    return out
