"""Any decoder transformers builds (issue 35, item 3): with the hf extra, a model_type outside
the hand-kept table is counted on the model transformers builds on torch's meta device, and
the hand-kept table agrees with that count on every shipped config."""

from __future__ import annotations

import json
from dataclasses import fields, replace
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("transformers", reason="the hf extra (pip install 'cgdispatch[hf]') is absent")
torch = pytest.importorskip("torch")

from cgdispatch.models import config_json  # noqa: E402
from cgdispatch.models.config_json import MODEL_TYPES  # noqa: E402
from cgdispatch.models.hf.meta_config import meta_count, meta_fields, meta_model  # noqa: E402
from cgdispatch.models.published import (  # noqa: E402
    PUBLISHED_MODELS,
    QUANT_WEIGHT_BYTES,
    published_model,
)

CONFIGS = Path(__file__).resolve().parents[1] / "data" / "configs"
SHIPPED = sorted(CONFIGS.glob("*.json"))


def _numel(model) -> int:
    """Every distinct parameter of a module (tied ones once): the independent count."""
    return sum(p.numel() for p in {id(p): p for p in model.parameters()}.values())


def _layer_linear(cfg: dict) -> int:
    """Weights of the linear projections and routed experts inside the decoder layers (what
    a quantized checkpoint quantizes), read off the model."""
    model = meta_model(cfg)
    layers = max(
        (m for m in model.modules() if isinstance(m, torch.nn.ModuleList)),
        key=lambda m: sum(p.numel() for p in m.parameters()),
    )
    linear = sum(  # nn.Linear, and GPT-2's Conv1D (a linear layer stored transposed)
        m.weight.numel()
        for m in layers.modules()
        if isinstance(m, torch.nn.Linear) or type(m).__name__ == "Conv1D"
    )
    routers = sum(
        m.weight.numel()
        for m in layers.modules()
        if isinstance(m, torch.nn.Linear) and m.out_features == cfg.get("num_experts", -1)
    )
    experts = sum(p.numel() for p in layers.parameters() if p.dim() == 3)
    return linear - routers + experts


@pytest.mark.parametrize("path", SHIPPED, ids=[p.stem for p in SHIPPED])
def test_the_hand_kept_table_agrees_with_the_meta_device_count(path: Path) -> None:
    cfg = json.loads(path.read_text())
    assert cfg["model_type"] in MODEL_TYPES
    table = published_model(cfg)
    assert table.param_count is None  # the table prices it, not the count
    counted = _numel(meta_model(cfg))
    assert meta_count(cfg).total == counted
    # fp32, no quantization: bytes / 4 are the parameters; biases, norm offsets and
    # attention sinks the table leaves out stay below 0.1%
    params = table.weight_bytes(dtype="float32", quantization="") / 4
    padding = (table.padded_vocab(1) - table.vocab_size) * table.hidden_size
    padding *= 1 if table.tied_embeddings else 2
    assert params - padding == pytest.approx(counted, rel=1e-3)
    if not table.is_mla:  # the shapes read off the modules are the table's
        shapes, _ = meta_fields(cfg)
        for field, value in shapes.items():
            if field != "family":
                assert getattr(table, field) == value, field


def _random_config(model_type: str, rng: np.random.Generator) -> dict:
    heads = int(rng.choice([4, 8]))
    head_dim = int(rng.choice([16, 32]))
    kv = int(rng.choice([h for h in (1, 2, 4) if heads % h == 0]))
    return {
        "model_type": model_type,
        "hidden_size": heads * head_dim,
        "num_attention_heads": heads,
        "num_key_value_heads": kv,
        "num_hidden_layers": int(rng.integers(1, 5)),
        "intermediate_size": 64 * int(rng.integers(1, 6)),
        "vocab_size": 64 * int(rng.integers(2, 20)),  # a multiple of 64: vLLM pads none
        "max_position_embeddings": 256,
        "torch_dtype": "bfloat16",
    }


def _falcon(rng: np.random.Generator) -> dict:
    cfg = _random_config("falcon", rng)
    new = bool(rng.integers(2))
    cfg.update(
        new_decoder_architecture=new,
        multi_query=bool(rng.integers(2)),
        parallel_attn=bool(rng.integers(2)) or new,
        num_kv_heads=cfg.pop("num_key_value_heads"),
        ffn_hidden_size=cfg.pop("intermediate_size"),
        bias=bool(rng.integers(2)),
        alibi=False,
    )
    return cfg


@pytest.mark.parametrize("seed", range(6))
def test_the_table_kinds_added_for_issue_35_match_transformers(seed: int) -> None:
    rng = np.random.default_rng(seed)
    for cfg in (_falcon(rng), _random_config("starcoder2", rng), _random_config("olmo2", rng)):
        table = published_model(cfg)
        counted = _numel(meta_model(cfg))
        got = table.weight_bytes(dtype="float32", quantization="") / 4
        # tiny models: the biases and LayerNorm offsets the table leaves out weigh up to 0.9%
        assert got == pytest.approx(counted, rel=0.01), cfg
        shapes, _ = meta_fields(cfg)
        for field in ("num_kv_heads", "intermediate_size", "gated_mlp", "qk_norm", "qkv_bias"):
            assert getattr(table, field) == shapes[field], (field, cfg)
        assert table.kv_bytes_per_token() == (
            cfg["num_hidden_layers"] * 2 * shapes["num_kv_heads"] * table.head_dim * 2
        )


OUTSIDE = ["mpt", "cohere", "gpt2", "gpt_neox", "stablelm", "olmoe", "granitemoe", "phimoe"]


@pytest.mark.parametrize("model_type", OUTSIDE)
def test_a_model_type_outside_the_table_weighs_what_transformers_builds(model_type: str) -> None:
    assert model_type not in MODEL_TYPES
    rng = np.random.default_rng(sum(map(ord, model_type)))
    cfg = _random_config(model_type, rng)
    if model_type in ("olmoe", "granitemoe", "phimoe"):
        experts = int(rng.integers(2, 9))
        cfg.update(num_experts=experts, num_local_experts=experts, num_experts_per_tok=2)
    pm = published_model(cfg)
    assert pm.param_count is not None and pm.family == model_type
    model = meta_model(cfg)
    assert pm.weight_bytes(dtype="bfloat16", quantization="") == 2 * _numel(model)
    # KV cache: K and V of every KV head of every layer, read off the attention module
    assert pm.kv_bytes_per_token() == pm.layers * 2 * pm.num_kv_heads * pm.head_dim * 2
    # 8-bit weights: every linear projection of the layers costs one byte instead of two
    linear = _layer_linear(cfg)
    fp8 = pm.weight_bytes(dtype="bfloat16", quantization="fp8")
    assert fp8 == pytest.approx(2 * _numel(model) - linear * (2 - QUANT_WEIGHT_BYTES["fp8"]))


def test_tensor_and_pipeline_parallel_split_the_count_as_the_formula_splits() -> None:
    rng = np.random.default_rng(7)
    for path in SHIPPED:
        cfg = json.loads(path.read_text())
        table = published_model(cfg)
        if table.is_mla or table.full_attention_every > 1:
            continue
        # the table's own counts as a ParamCount: splitting must reproduce the formula
        count = _formula_count(table)
        counted = replace(table, param_count=count)
        tp = int(rng.choice([t for t in (1, 2, 4, 8) if _tp_ok(table, t)]))
        pp = int(rng.integers(1, 4))
        for quant in ("", "fp8", "gptq_marlin"):
            want = table.weight_bytes(
                tensor_parallel_size=tp, pipeline_parallel_size=pp, quantization=quant
            )
            got = counted.weight_bytes(
                tensor_parallel_size=tp, pipeline_parallel_size=pp, quantization=quant
            )
            assert got == pytest.approx(want, rel=1e-9), (path.stem, tp, pp, quant)


def _tp_ok(model, tp: int) -> bool:
    try:
        model.check_parallel(tp, 1)
    except ValueError:
        return False
    return True


def _formula_count(model):
    from cgdispatch.models.published import ParamCount

    layers = tuple(
        tuple(int(x) for x in model._layer_params(1, dense=i < model.dense_layers))
        for i in range(model.layers)
    )
    table = model.vocab_size * model.hidden_size
    head = 0 if model.tied_embeddings else table
    return ParamCount(layers, table, head, model.hidden_size)


def test_encoders_and_hybrid_decoders_are_refused_naming_the_model_type() -> None:
    with pytest.raises(ValueError, match=r"'model_type'='bert' is unsupported: it is an encoder"):
        published_model({**_random_config("bert", np.random.default_rng(0))})
    with pytest.raises(ValueError, match="'model_type'='no_such_model' is unsupported"):
        published_model({"model_type": "no_such_model"})
    hybrid = {**_random_config("jamba", np.random.default_rng(1)), "num_experts": 2}
    with pytest.raises(ValueError, match="hybrid decoders are not modelled"):
        published_model(hybrid)
    # a Mamba-2 mixer beside attention (IBM's Bamba), a gated delta net (Qwen3-Next)
    for model_type, mixer in (("bamba", "BambaMixer"), ("qwen3_next", "GatedDeltaNet")):
        cfg = {**_random_config(model_type, np.random.default_rng(2)), "num_experts": 2}
        with pytest.raises(ValueError, match=f"holds \\w*{mixer}"):
            published_model(cfg)


def test_without_the_hf_extra_an_unknown_model_type_names_the_install(monkeypatch) -> None:
    monkeypatch.setattr(config_json, "_hf_available", lambda: False)
    cfg = json.loads((CONFIGS / "falcon-7b.json").read_text())
    assert published_model(cfg).param_count is None  # in the table: no transformers needed
    with pytest.raises(ValueError, match=r"pip install 'cgdispatch\[hf\]'"):
        published_model({**cfg, "model_type": "mpt"})


def test_param_count_must_describe_the_same_layers() -> None:
    cfg = _random_config("mpt", np.random.default_rng(3))
    pm = published_model(cfg)
    short = replace(pm.param_count, layers=pm.param_count.layers[:-1])
    values = {f.name: getattr(pm, f.name) for f in fields(pm)}
    with pytest.raises(ValueError, match="param_count has"):
        type(pm)(**{**values, "param_count": short})


def _model_type(pm) -> str:
    """The transformers model_type whose layout a row of model_architectures.csv has."""
    family = pm.family
    if family == "Llama":
        return "llama4_text" if pm.is_moe else "llama"
    if family in ("Qwen", "Kimi") and not pm.is_mla:
        if pm.is_moe:
            return "qwen3_moe" if pm.qk_norm else "qwen2_moe"
        return "qwen3" if pm.qk_norm else "qwen2"
    if family == "Gemma":
        if pm.norms_per_layer == 4:
            return "gemma3_text" if pm.qk_norm else "gemma2"
        return "gemma"
    return {
        "Mistral/Mixtral": "mixtral" if pm.is_moe else "mistral",
        "Granite": "granite",
        "Phi": "phi3" if pm.gated_mlp else "phi",
        "DeepSeek": "deepseek_v3" if pm.q_lora_rank else "deepseek_v2",
        "Kimi": "deepseek_v3",
        "gpt-oss": "gpt_oss",
    }[family]


def _row_config(pm) -> dict:
    """A config.json of a CSV row's numbers (its text decoder: the vision tower is not
    built), in the field names of its model_type."""
    model_type = _model_type(pm)
    cfg = dict(
        model_type=model_type, num_hidden_layers=pm.layers, hidden_size=pm.hidden_size,
        num_attention_heads=pm.num_heads, num_key_value_heads=pm.num_kv_heads,
        head_dim=pm.head_dim, intermediate_size=pm.intermediate_size,
        vocab_size=pm.vocab_size, tie_word_embeddings=pm.tied_embeddings,
        attention_bias=pm.qkv_bias,
    )  # fmt: skip
    if model_type == "llama4_text":  # every layer routed + shared, as Llama 4 Scout
        cfg.update(
            intermediate_size=pm.moe_intermediate_size, intermediate_size_mlp=pm.intermediate_size,
            num_local_experts=pm.num_experts, num_experts_per_tok=pm.experts_per_token,
            interleave_moe_layer_step=1, use_qk_norm=pm.qk_norm,
        )  # fmt: skip
        return cfg
    if pm.is_moe:
        cfg.update(
            num_local_experts=pm.num_experts, num_experts=pm.num_experts,
            n_routed_experts=pm.num_experts, num_experts_per_tok=pm.experts_per_token,
            moe_intermediate_size=pm.moe_intermediate_size,
            shared_expert_intermediate_size=pm.shared_intermediate_size,
            n_shared_experts=pm.shared_intermediate_size // pm.moe_intermediate_size,
            first_k_dense_replace=pm.dense_layers, n_group=1, topk_group=1,
        )  # fmt: skip
    if pm.is_mla:
        cfg.update(
            kv_lora_rank=pm.kv_lora_rank, q_lora_rank=pm.q_lora_rank or None,
            qk_rope_head_dim=pm.qk_rope_head_dim, qk_nope_head_dim=pm.qk_nope_head_dim,
            v_head_dim=pm.v_head_dim,
        )  # fmt: skip
    every = pm.full_attention_every
    if every > 1:
        cfg.update(
            sliding_window=4096,
            layer_types=[
                "full_attention" if (i + 1) % every == 0 else "sliding_attention"
                for i in range(pm.layers)
            ],
        )
    return cfg


ROWS = sorted(PUBLISHED_MODELS)


@pytest.mark.parametrize("key", ROWS)
def test_every_shipped_model_row_agrees_with_the_meta_device_count(key: str) -> None:
    """cgdispatch/data/model_architectures.csv: each row's weight formula against the
    parameters transformers builds from its numbers (the vision tower left out); the
    largest gap, gpt-oss's attention sinks and expert biases, is 0.035%."""
    pm = PUBLISHED_MODELS[key]
    counted = _numel(meta_model(_row_config(pm)))
    params = pm.weight_bytes(dtype="float32", quantization="") / 4 - pm.vision_params
    padding = (pm.padded_vocab(1) - pm.vocab_size) * pm.hidden_size
    padding *= 1 if pm.tied_embeddings else 2
    assert params - padding == pytest.approx(counted, rel=1e-3)
