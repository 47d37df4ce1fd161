"""Weights priced from a checkpoint's quantization_config (issue 35, item 3): one test per
scheme on the quantization_config of a published checkpoint (URL beside each), against a
byte count of every tensor of the model transformers builds on the meta device, written
here from each scheme's storage format (vLLM's quantization/<scheme>.py)."""

from __future__ import annotations

import json
import math
import re
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("transformers", reason="the hf extra (pip install 'cgdispatch[hf]') is absent")
torch = pytest.importorskip("torch")

from cgdispatch.models.hf.meta_config import meta_model  # noqa: E402
from cgdispatch.models.published import (  # noqa: E402
    PUBLISHED_MODELS,
    QUANT_WEIGHT_BYTES,
    published_model,
)

CONFIGS = Path(__file__).resolve().parents[1] / "data" / "configs"
GIB = float(1 << 30)

# quantization_config blocks as the checkpoints' config.json files hold them
GPTQ_4 = {  # huggingface.co/TheBloke/Llama-2-7B-GPTQ/blob/main/config.json
    "bits": 4, "group_size": 128, "damp_percent": 0.01, "desc_act": False, "sym": True,
    "true_sequential": True, "model_name_or_path": None, "model_file_base_name": "model",
    "quant_method": "gptq",
}  # fmt: skip
GPTQ_8 = {  # huggingface.co/Qwen/Qwen2.5-7B-Instruct-GPTQ-Int8/blob/main/config.json
    "bits": 8, "damp_percent": 0.01, "desc_act": False, "group_size": 128,
    "model_file_base_name": None, "model_name_or_path": None, "quant_method": "gptq",
    "static_groups": False, "sym": True, "true_sequential": True,
}  # fmt: skip
AWQ = {  # huggingface.co/Qwen/Qwen2.5-7B-Instruct-AWQ/blob/main/config.json
    "bits": 4, "group_size": 128, "modules_to_not_convert": None, "quant_method": "awq",
    "version": "gemm", "zero_point": True,
}  # fmt: skip
FP8_BLOCK = {  # huggingface.co/Qwen/Qwen3-235B-A22B-FP8/blob/main/config.json
    "activation_scheme": "dynamic", "fmt": "e4m3", "quant_method": "fp8",
    "weight_block_size": [128, 128],
}  # fmt: skip
FP8_TENSOR = {  # huggingface.co/neuralmagic/Meta-Llama-3-70B-Instruct-FP8 (AutoFP8)
    "quant_method": "fp8", "activation_scheme": "static", "ignored_layers": ["lm_head"],
}  # fmt: skip
BNB_4 = {  # huggingface.co/unsloth/llama-3-70b-bnb-4bit/blob/main/config.json
    "_load_in_4bit": True, "_load_in_8bit": False, "bnb_4bit_compute_dtype": "bfloat16",
    "bnb_4bit_quant_storage": "uint8", "bnb_4bit_quant_type": "nf4",
    "bnb_4bit_use_double_quant": True, "llm_int8_enable_fp32_cpu_offload": False,
    "llm_int8_has_fp16_weight": False, "llm_int8_skip_modules": None, "llm_int8_threshold": 6.0,
    "load_in_4bit": True, "load_in_8bit": False, "quant_method": "bitsandbytes",
}  # fmt: skip
CT_W4A16 = {  # huggingface.co/RedHatAI/Meta-Llama-3.1-8B-Instruct-quantized.w4a16
    "config_groups": {"group_0": {
        "input_activations": None, "output_activations": None, "targets": ["Linear"],
        "weights": {"actorder": None, "block_structure": None, "dynamic": False,
                    "group_size": 128, "num_bits": 4, "observer": "minmax",
                    "observer_kwargs": {}, "strategy": "group", "symmetric": True,
                    "type": "int"}}},
    "format": "pack-quantized", "ignore": ["lm_head"], "quant_method": "compressed-tensors",
}  # fmt: skip


def _config(name: str, quant: dict | None) -> dict:
    cfg = json.loads((CONFIGS / f"{name}.json").read_text())
    cfg.pop("quantization_config", None)
    return cfg if quant is None else {**cfg, "quantization_config": quant}


def _layers(model):
    return max(
        (m for m in model.modules() if isinstance(m, torch.nn.ModuleList)),
        key=lambda m: sum(p.numel() for p in m.parameters()),
    )


def _tensor_bytes(cfg: dict, quantized_bytes, skipped=lambda name: False) -> float:
    """Bytes of every tensor of the meta-device model: each weight of a linear layer or
    routed experts inside the decoder layers (its name not ``skipped``) as
    ``quantized_bytes(rows, cols)`` gives, every other parameter 2 bytes (16-bit)."""
    model = meta_model({k: v for k, v in cfg.items() if k != "quantization_config"})
    layers = _layers(model)
    quantized, total = set(), 0.0
    for index, layer in enumerate(layers):
        for path, module in layer.named_modules():
            name = f"model.layers.{index}.{path}"
            for pname, param in module.named_parameters(recurse=False):
                if isinstance(module, torch.nn.Linear) and pname == "weight":
                    if not skipped(name):
                        total += quantized_bytes(*param.shape)
                        quantized.add(id(param))
                elif param.dim() == 3:  # fused experts [E, out, in] (Mixtral, Qwen3-MoE)
                    expert = f"model.layers.{index}.mlp.experts.0.gate_proj"
                    if not skipped(expert):
                        total += param.shape[0] * quantized_bytes(*param.shape[1:])
                        quantized.add(id(param))
    distinct = {id(p): p for p in model.parameters()}
    total += sum(2 * p.numel() for i, p in distinct.items() if i not in quantized)
    return total


def _gptq(bits: int, group: int, zeros: bool):
    def cost(rows: int, cols: int) -> float:  # weight [out=rows, in=cols]
        groups = math.ceil(cols / group)
        return rows * cols * bits / 8 + groups * rows * (2 + (bits / 8 if zeros else 0))

    return cost


def _check(name: str, quant: dict, cost, skipped=lambda n: False, rel: float = 2e-3) -> None:
    cfg = _config(name, quant)
    pm = published_model(cfg)
    expected = _tensor_bytes(cfg, cost, skipped)
    padding = (pm.padded_vocab(1) - pm.vocab_size) * pm.hidden_size * 2
    padding *= 1 if pm.tied_embeddings else 2
    got = pm.weight_bytes(dtype="bfloat16")
    assert got - padding == pytest.approx(expected, rel=rel), (name, pm.quant_scheme)


def test_gptq_4_bit_group_128():
    _check("llama-3-70b", GPTQ_4, _gptq(4, 128, zeros=False))


def test_gptq_8_bit_and_asymmetric_and_per_channel():
    _check("qwen2-7b", GPTQ_8, _gptq(8, 128, zeros=False))
    rng = np.random.default_rng(8)
    bits, group = int(rng.choice([2, 3, 4, 8])), int(rng.choice([32, 64]))
    quant = {**GPTQ_8, "bits": bits, "group_size": group, "sym": False}
    _check("qwen2-7b", quant, _gptq(bits, group, zeros=True))
    per_channel = {**GPTQ_8, "group_size": -1}  # one scale per output row: ~ 1 byte a weight
    _check("qwen2-7b", per_channel, lambda r, c: r * c + 2 * r)


def test_gptq_with_a_quantized_lm_head_prices_the_head_at_its_bits():
    cfg = _config("qwen2-7b", {**GPTQ_4, "lm_head": True})
    plain = published_model(_config("qwen2-7b", GPTQ_4))
    pm = published_model(cfg)
    head = pm.padded_vocab(1) * pm.hidden_size
    saved = head * (2 - pm.quant_scheme.bytes_per_weight)
    assert pm.weight_bytes() == pytest.approx(plain.weight_bytes() - saved, rel=1e-12)


def test_awq_4_bit_with_zero_points_on_a_moe():
    _check("qwen2-7b", AWQ, _gptq(4, 128, zeros=True))
    _check("mixtral-8x22b", AWQ, _gptq(4, 128, zeros=True))


def test_fp8_block_scales_and_per_tensor_scales():
    def block(rows: int, cols: int) -> float:
        return rows * cols + math.ceil(rows / 128) * math.ceil(cols / 128) * 4

    _check("qwen3-235b-a22b", FP8_BLOCK, block)
    _check("llama-3-70b", FP8_TENSOR, lambda r, c: r * c + 4)


def test_bitsandbytes_4_bit_double_quantized_and_8_bit():
    def nf4_double(rows: int, cols: int) -> float:
        n = rows * cols
        return n / 2 + math.ceil(n / 64) + math.ceil(n / 64 / 256) * 4

    _check("llama-3-70b", BNB_4, nf4_double)

    def nf4(rows: int, cols: int) -> float:
        return rows * cols / 2 + math.ceil(rows * cols / 64) * 4

    _check("llama-3-70b", {**BNB_4, "bnb_4bit_use_double_quant": False}, nf4)
    eight = {**BNB_4, "load_in_4bit": False, "_load_in_4bit": False, "load_in_8bit": True}
    _check("llama-3-70b", eight, lambda r, c: r * c + 4 * r)


def test_compressed_tensors_4_bit_groups():
    _check("llama-3-70b", CT_W4A16, _gptq(4, 128, zeros=False))


@pytest.mark.parametrize("seed", range(3))
def test_skip_lists_leave_the_named_modules_16_bit(seed: int) -> None:
    """compressed-tensors ``ignore`` (exact names and ``re:`` patterns, every projection of
    some layers' attention) and AWQ ``modules_to_not_convert`` (substrings: some layers'
    whole MLP), priced against the tensors those names leave 16-bit."""
    rng = np.random.default_rng(seed)
    layers = json.loads((CONFIGS / "qwen2-7b.json").read_text())["num_hidden_layers"]
    attn = sorted(int(i) for i in rng.choice(layers, size=3, replace=False))
    ignore = ["lm_head"] + [
        f"model.layers.{i}.self_attn.{p}_proj" for i in attn[:2] for p in "qkvo"
    ]
    ignore.append(f"re:model\\.layers\\.{attn[2]}\\.self_attn\\..*")
    patterns = [re.compile(e[3:]) for e in ignore if e.startswith("re:")]

    def ct_skipped(name: str) -> bool:
        return name in ignore or any(p.match(name) for p in patterns)

    _check("qwen2-7b", {**CT_W4A16, "ignore": ignore}, _gptq(4, 128, False), ct_skipped)
    mlp = [f"model.layers.{int(i)}.mlp" for i in rng.choice(layers, size=2, replace=False)]

    def awq_skipped(name: str) -> bool:
        return any(entry in name for entry in mlp)

    _check("qwen2-7b", {**AWQ, "modules_to_not_convert": mlp}, _gptq(4, 128, True), awq_skipped)


@pytest.mark.parametrize("kind", ["gguf_q8_0", "gguf_q4_k", "gguf_q6_k"])
def test_a_gguf_run_quantizes_embeddings_and_head_too(kind: str) -> None:
    """vLLM loads a GGUF file's token embeddings and output head quantized; every other
    weight matrix is at the block type's bytes (llama.cpp ggml-common.h: Q8_0 34 bytes per
    32 weights, Q4_K 144 per 256, Q6_K 210 per 256); norms stay 16-bit."""
    per_block = {"gguf_q8_0": (34, 32), "gguf_q4_k": (144, 256), "gguf_q6_k": (210, 256)}[kind]
    cfg = _config("qwen2-7b", None)
    pm = published_model(cfg)
    model = meta_model(cfg)
    matrices = sum(p.numel() for p in model.parameters() if p.dim() == 2)
    rest = sum(p.numel() for p in model.parameters() if p.dim() != 2)
    expected = matrices * per_block[0] / per_block[1] + 2 * rest
    assert pm.weight_bytes(dtype="bfloat16", quantization=kind) == pytest.approx(expected)
    assert QUANT_WEIGHT_BYTES[kind] == per_block[0] / per_block[1]


def test_the_logged_w4a16_start_up_weighs_within_5_percent():
    """Issue 35: RedHatAI/Meta-Llama-3.1-8B-Instruct-quantized.w4a16 logged 5.38 GiB of
    weights (reference_vllm_startups.csv, run 54); its config.json's quantization_config
    prices it."""
    row = PUBLISHED_MODELS["meta-llama/Llama-3.1-8B-Instruct"]
    cfg = {
        "model_type": "llama", "hidden_size": row.hidden_size,
        "num_hidden_layers": row.layers, "num_attention_heads": row.num_heads,
        "num_key_value_heads": row.num_kv_heads, "intermediate_size": row.intermediate_size,
        "vocab_size": row.vocab_size, "tie_word_embeddings": False, "torch_dtype": "float16",
        "quantization_config": CT_W4A16,
    }  # fmt: skip
    gib = published_model(cfg).weight_bytes() / GIB
    assert abs(gib / 5.38 - 1) <= 0.05


def test_a_bad_quantization_config_names_the_field():
    for quant, field in (
        ({**GPTQ_4, "bits": 5}, "'quantization_config.bits'=5 is unsupported"),
        ({**FP8_BLOCK, "weight_block_size": [128]}, "'quantization_config.weight_block_size'"),
        ({**BNB_4, "load_in_4bit": False, "_load_in_4bit": False}, "neither load_in_4bit"),
        ({**AWQ, "modules_to_not_convert": [3]}, "skip list entry 3 is invalid"),
    ):
        with pytest.raises(ValueError, match=re.escape(field)):
            published_model(_config("qwen2-7b", quant))
