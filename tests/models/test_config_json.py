"""Any decoder from its config.json (issue 28, item 1): configs of models the package does not
ship (tests/data/configs, numbers of the published config.json files, source in each file's
``_comment``) weigh their published parameter counts, and the start-up estimate runs
offline on a GPU without logged start-ups."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import pytest

from cgdispatch.core.config import GraphConfig
from cgdispatch.estimate.startup import estimate_startup
from cgdispatch.estimate.startup_pricing import CALIBRATION
from cgdispatch.models.published import PUBLISHED_MODELS, model_from_config, published_model

CONFIGS = Path(__file__).resolve().parents[1] / "data" / "configs"

# total parameters as each model card states them (the checkpoint's, embeddings included;
# DeepSeek-V3: 671B main model, its 14B multi-token-prediction module is not loaded by vLLM)
PUBLISHED_PARAMS = {
    "qwen2-7b": 7.62e9,  # huggingface.co/Qwen/Qwen2-7B (7.6B; the card's 7.07B is non-embedding)
    "llama-3-70b": 70.6e9,  # huggingface.co/meta-llama/Meta-Llama-3-70B
    "mixtral-8x22b": 141e9,  # huggingface.co/mistralai/Mixtral-8x22B-v0.1 (141B, 39B active)
    "qwen3-235b-a22b": 235e9,  # huggingface.co/Qwen/Qwen3-235B-A22B
    "deepseek-v3": 671e9,  # huggingface.co/deepseek-ai/DeepSeek-V3
    "gpt-oss-120b": 116.8e9,  # openai.com/index/introducing-gpt-oss (117B, 5.1B active)
    "gemma-3-1b-it": 1.0e9,  # huggingface.co/google/gemma-3-1b-it
}


def _config(name: str) -> dict:
    return json.loads((CONFIGS / f"{name}.json").read_text())


def _params(model) -> float:
    return published_model(model).weight_bytes(dtype="bfloat16", quantization="") / 2


@pytest.mark.parametrize("name", sorted(PUBLISHED_PARAMS))
def test_a_config_weighs_its_published_parameter_count(name):
    path = CONFIGS / f"{name}.json"
    assert path.name.split(".json")[0] not in PUBLISHED_MODELS
    assert _params(str(path)) == pytest.approx(PUBLISHED_PARAMS[name], rel=0.02)


def test_each_architecture_kind_is_read_as_such():
    dense = published_model(str(CONFIGS / "llama-3-70b.json"))
    assert (dense.num_kv_heads, dense.head_dim, dense.is_moe, dense.is_mla) == (
        8,
        128,
        False,
        False,
    )
    qwen = published_model(str(CONFIGS / "qwen2-7b.json"))
    assert qwen.qkv_bias and qwen.full_attention_every == 1  # use_sliding_window is false
    moe = published_model(_config("mixtral-8x22b"))
    assert (moe.num_experts, moe.experts_per_token, moe.moe_intermediate_size) == (8, 2, 16384)
    mla = published_model(CONFIGS / "deepseek-v3.json")
    assert mla.is_mla and mla.q_lora_rank == 1536 and mla.dense_layers == 3
    assert mla.shared_intermediate_size == 2048 and mla.quantization == "fp8"
    assert mla.kv_bytes_per_token() == 61 * (512 + 64) * 2  # one latent per layer
    oss = published_model(CONFIGS / "gpt-oss-120b.json")
    assert oss.full_attention_every == 2 and oss.quantization == "mxfp4"
    gemma = published_model(CONFIGS / "gemma-3-1b-it.json")
    assert gemma.full_attention_every == 6 and gemma.tied_embeddings and gemma.qk_norm
    # the hybrid allocator's slots: 26 layers, 4 full and 22 sliding, in groups of 4
    assert gemma.kv_layer_slots(26) == 4 + 24


def test_a_dict_or_transformers_config_reads_as_the_file():
    path = CONFIGS / "qwen3-235b-a22b.json"
    from_dict = model_from_config(_config("qwen3-235b-a22b"), name="Qwen/Qwen3-235B-A22B")
    from_file = model_from_config(path, name="Qwen/Qwen3-235B-A22B")
    assert replace(from_dict, source="") == replace(from_file, source="")
    assert from_file.source == f"config.json {path}"
    transformers = pytest.importorskip("transformers")
    hf = transformers.Qwen3MoeConfig(**{k: v for k, v in _config("qwen3-235b-a22b").items()})
    assert _params(hf) == pytest.approx(_params(from_dict), rel=1e-9)


@pytest.mark.parametrize(
    ("name", "device", "tp"),
    [
        ("qwen2-7b", "L40S", 1),
        ("mixtral-8x22b", "H100", 4),
        ("deepseek-v3", "H200", 8),
        ("gpt-oss-120b", "H100", 1),
        ("gemma-3-1b-it", "L4", 1),
    ],
)
def test_the_start_up_estimate_runs_offline_on_any_listed_gpu(name, device, tp):
    est = estimate_startup(
        str(CONFIGS / f"{name}.json"), device, GraphConfig().resolve(), tensor_parallel_size=tp
    )
    assert est.kv_cache_tokens > 0 and est.graph_memory_bytes > 0 and est.capture_s > 0
    assert est.model.endswith(f"{name}.json")
    if device != "H100":  # only the fitted runs' GPU is labelled as calibrated
        assert est.source.startswith(f"model ({device}, ")
        assert "; calibrated on 59 vLLM startups on H100" in est.source
        factor = CALIBRATION.pool_factor(device)  # the GPU's or its group's fitted factor
        assert (f"graph pool x{factor:.2f}" in est.source) == (device != "H200")


@pytest.mark.parametrize(
    ("change", "field"),
    [
        ({"model_type": "bert"}, "'model_type'='bert' is unsupported"),
        ({"hidden_size": None}, "'hidden_size' is missing"),
        ({"num_hidden_layers": "eighty"}, "'num_hidden_layers'='eighty' is invalid"),
        ({"torch_dtype": "int8"}, "'torch_dtype'='int8' is unsupported"),
        (
            {"quantization_config": {"quant_method": "quanto"}},  # not one vLLM loads
            "'quantization_config.quant_method'='quanto'",
        ),
        ({"layer_types": ["full_attention"]}, "'layer_types' is invalid"),
        ({"mlp_only_layers": [3]}, "'mlp_only_layers' is unsupported"),
    ],
)
def test_an_unsupported_field_is_one_error_naming_it(change, field):
    config = {**_config("llama-3-70b"), **change}
    if change.get("hidden_size", 0) is None:
        del config["hidden_size"]
    with pytest.raises(ValueError, match=f"config.json field {field}".replace("(", r"\(")):
        published_model(config)


def test_a_missing_file_or_unknown_name_is_a_value_error(tmp_path):
    with pytest.raises(ValueError, match="no such config.json"):
        published_model(str(tmp_path / "nope" / "config.json"))
    (tmp_path / "config.json").write_text("[1, 2]")
    with pytest.raises(ValueError, match="must hold a JSON object"):
        published_model(tmp_path)  # a folder: its config.json
    with pytest.raises(ValueError, match="a path to its config.json"):
        published_model("org/not-a-model")
