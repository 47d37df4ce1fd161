"""Checkpoints as people serve them (issue 35): a config.json's quantization_config prices
its weights at the scheme's bit width (AWQ, compressed-tensors 4- or 8-bit)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from cgdispatch.models.published import QUANT_WEIGHT_BYTES, published_model

CONFIGS = Path(__file__).resolve().parents[1] / "data" / "configs"


def _config(name: str, quant: dict | None) -> dict:
    cfg = json.loads((CONFIGS / f"{name}.json").read_text())
    cfg.pop("quantization_config", None)
    if quant is not None:
        cfg["quantization_config"] = quant
    return cfg


def _compressed(bits: int, groups: int) -> dict:
    # as RedHatAI's W4A16 (group of 128) and W8A8 (per channel) checkpoints write them
    grouped = bits == 4
    weights = {
        "num_bits": bits,
        "type": "int",
        "symmetric": True,
        "group_size": 128 if grouped else None,
        "strategy": "group" if grouped else "channel",
    }
    return {
        "quant_method": "compressed-tensors",
        "config_groups": {
            f"group_{i}": {"weights": weights, "targets": ["Linear"]} for i in range(groups)
        },
    }


@pytest.mark.parametrize("name", ["qwen3-235b-a22b", "qwen2-7b", "llama-3-70b"])
def test_quantized_weights_cost_the_schemes_bytes_per_weight(name: str) -> None:
    rng = np.random.default_rng(sum(map(ord, name)))
    tp = int(rng.choice([1, 2, 4]))
    plain = published_model(_config(name, None))
    bf16 = plain.weight_bytes(tensor_parallel_size=tp, dtype="bfloat16", quantization="")
    fp8 = plain.weight_bytes(tensor_parallel_size=tp, dtype="bfloat16", quantization="fp8")
    quantized = bf16 - fp8  # parameters of the quantized layers (8 bits save a byte each)
    cases = {
        "awq_marlin": {"quant_method": "awq", "bits": 4, "group_size": 128, "zero_point": True},
        "compressed_w4a16": _compressed(4, int(rng.integers(1, 4))),
        "compressed": _compressed(8, 1),
    }
    for scheme, quant in cases.items():
        pm = published_model(_config(name, quant))
        assert pm.quantization == scheme
        got = pm.weight_bytes(tensor_parallel_size=tp, dtype="bfloat16")
        expected = bf16 - quantized * (2 - QUANT_WEIGHT_BYTES[scheme])
        assert got == pytest.approx(expected, rel=1e-9), scheme


def test_a_4_bit_compressed_tensors_moe_is_priced_at_4_bits() -> None:
    """Issue 35's Qwen3-30B-A3B W4A16 start-up logged 15.6 GiB of weights; 8-bit pricing
    gave 29.0 GiB."""
    pm = published_model("Qwen/Qwen3-30B-A3B")
    gib = pm.weight_bytes(quantization="compressed_w4a16") / 2**30
    assert abs(gib / 15.6 - 1) <= 0.05
    assert abs(pm.weight_bytes(quantization="compressed") / 2**30 / 15.6 - 1) > 0.5


@pytest.mark.parametrize(
    ("quant", "message"),
    [
        ({"quant_method": "awq", "bits": 8}, r"bits.=8 is unsupported: use one of \[4\]"),
        (_compressed(3, 1), r"num_bits=\[3\] is unsupported"),
    ],
)
def test_unmodelled_widths_are_refused_naming_the_field(quant: dict, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        published_model(_config("qwen2-7b", quant))
