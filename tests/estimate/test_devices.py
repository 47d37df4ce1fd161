"""Any GPU from a spec (issue 28, item 2) and a model that does not fit refused (item 6)."""

from __future__ import annotations

import csv
import json
from importlib import resources

import numpy as np
import pytest

from cgdispatch.core.config import GraphConfig
from cgdispatch.estimate.device_model import device_cost_model
from cgdispatch.estimate.devices import (
    DEVICE_PRESETS,
    DeviceSpec,
    device_spec,
    load_device_spec,
)
from cgdispatch.estimate.startup import estimate_startup
from cgdispatch.estimate.startup_pricing import CALIBRATION

GIB = float(1 << 30)
LISTED = (
    "L4", "L40S", "A10G", "A100-40GB", "A100-80GB", "H100-SXM", "H100-PCIe", "H200-SXM",
    "B200", "RTX-3090", "RTX-4090", "RTX-A5000", "MI300X",
)  # fmt: skip


def test_the_table_lists_the_issues_gpus_each_with_a_source():
    with resources.files("cgdispatch.data").joinpath("device_specs.csv").open() as f:
        rows = {row["name"]: row for row in csv.DictReader(f)}
    assert set(LISTED) <= set(rows)
    for name, row in rows.items():
        assert row["source"].startswith("https://"), name
        spec = DEVICE_PRESETS[name]
        assert spec.peak_flops > spec.peak_fp32_flops > 0 and spec.bandwidth_bytes_per_s > 0
        # what torch reports: 90-100% of the marketed size read as GiB (an "80 GB" H100 shows
        # 79.19 GiB, a "24 GB" L4 22.03), with its source where it is not the share rule
        marketed = float(row["memory_gb"]) * GIB
        assert 0.9 * marketed <= spec.memory_bytes <= marketed, name
        if row["memory_gib_reported"] and name not in ("H100-SXM", "H200-SXM"):
            assert "reported memory: https://" in row["source"], name
        # an SM count (the split-KV decode waves) comes with its source, else it is 0
        assert spec.sms == int(row["sms"] or 0) and bool(row["sms"]) == bool(row["sms_source"])


ISSUE_35 = ("A800", "H800", "H20", "L20", "L40", "A40", "RTX-A6000", "RTX-6000-Ada", "V100")


def test_the_gpus_of_published_logs_are_presets_with_sources():
    """Issue 35: GPUs common in published vLLM logs. The export variants are their
    originals' silicon: the A800 is the A100 80GB and the H800 the H100 SXM but for a
    400 GB/s NVLink (200 per direction)."""
    with resources.files("cgdispatch.data").joinpath("device_specs.csv").open() as f:
        rows = list(csv.DictReader(f))
    named = {alias: row for row in rows for alias in (row["name"], *row["aliases"].split())}
    for name in ISSUE_35:
        row = named[name]
        assert row["source"].startswith("https://") and row["link_source"], name
        assert row["architecture"] in ("Volta", "Ampere", "Ada", "Hopper"), name
    for variant, original in (("A800", "A100"), ("H800", "H100")):
        cut = DEVICE_PRESETS[variant]
        assert cut.link_bytes_per_s == 200e9
        assert cut.replace(name="x", link_bytes_per_s=0) == DEVICE_PRESETS[original].replace(
            name="x", link_bytes_per_s=0, memory_bytes=cut.memory_bytes
        )
    # vLLM's V1 engine runs on compute capability 7.0 from v0.10.2 (vllm-project/vllm#23614)
    assert "v0.10.2" in named["V100"]["source"] and DEVICE_PRESETS["V100"].architecture == "Volta"


def test_the_calibrated_presets_keep_their_figures():
    """H100, H200 and A100 are aliases whose numbers are issue 18's, unchanged but the
    A100's memory: 79.15 GiB, what torch reports on an A100 80GB (vllm-project/vllm#4408),
    where issue 18 assumed the H100's 79.19."""
    assert DEVICE_PRESETS["H100"] == DEVICE_PRESETS["H100-SXM"]
    assert DEVICE_PRESETS["H200"] == DEVICE_PRESETS["H200-SXM"]
    assert DEVICE_PRESETS["A100"] == DEVICE_PRESETS["A100-80GB"]
    old = {
        "H100": ("H100 SXM", 989e12, 67e12, 3.35e12, 79.19),
        "H200": ("H200 SXM", 989e12, 67e12, 4.8e12, 139.0),
        "A100": ("A100 SXM 80GB", 312e12, 19.5e12, 2.0e12, 79.15),
    }
    for name, (label, flops, fp32, bandwidth, gib) in old.items():
        spec = DEVICE_PRESETS[name]
        assert (spec.name, spec.peak_flops, spec.peak_fp32_flops) == (label, flops, fp32)
        assert spec.bandwidth_bytes_per_s == bandwidth and spec.memory_bytes == gib * GIB


AMPERE_POOL_FACTOR = dict(CALIBRATION.pool_factors)["Ampere"]  # fitted: pool_factors.py


def test_a_slower_gpu_is_modelled_slower_and_says_it_has_no_logged_start_ups():
    h100, l4 = device_cost_model("llama-3.1-8b", "H100"), device_cost_model("llama-3.1-8b", "L4")
    n = np.array([1, 64, 512])
    assert np.all(l4.step_time_ms("FULL", n) > 2 * h100.step_time_ms("FULL", n))
    assert h100.source == "model (H100 SXM)"
    assert l4.source.startswith(
        "model (L4, no logged start-ups on this GPU; calibrated on 59 vLLM startups on H100; "
        f"graph pool x{AMPERE_POOL_FACTOR:.2f} for Ampere and Ada GPUs"
    )
    assert l4.memory_source == l4.source


def test_a_device_spec_file_is_a_gpu(tmp_path):
    fields = {
        "name": "my-gpu",
        "peak_flops": 400e12,
        "peak_fp32_flops": 50e12,
        "bandwidth_bytes_per_s": 1.0e12,
        "memory_bytes": 40 * GIB,
    }
    path = tmp_path / "gpu.json"
    path.write_text(json.dumps({**fields, "kernel_launch_us": 12}))
    spec = load_device_spec(path)
    assert spec == DeviceSpec(**fields, kernel_launch_us=12.0) and device_spec(spec) is spec
    est = estimate_startup("meta-llama/Llama-3.1-8B-Instruct", spec, GraphConfig().resolve())
    assert est.device == "my-gpu" and "my-gpu, no logged start-ups" in est.source
    less = estimate_startup(
        "meta-llama/Llama-3.1-8B-Instruct", spec.replace(memory_bytes=30 * GIB),
        GraphConfig().resolve(),
    )  # fmt: skip
    assert less.kv_cache_bytes == pytest.approx(est.kv_cache_bytes - 0.9 * 10 * GIB)


@pytest.mark.parametrize(
    ("data", "message"),
    [
        ({"peak_flops": 1e12}, "field 'name' is missing"),
        ({"name": "x", "peak_flop": 1}, "field 'peak_flop' is unknown"),
        ({"name": "x", "peak_flops": "fast"}, "field 'peak_flops'='fast' is invalid"),
        ([1, 2], "give a JSON object"),
    ],
)
def test_a_bad_device_spec_file_names_the_field(tmp_path, data, message):
    path = tmp_path / "gpu.json"
    path.write_text(json.dumps(data))
    with pytest.raises(ValueError, match=message):
        load_device_spec(path)


@pytest.mark.parametrize(
    ("model", "utilization", "weights_gib"),
    [
        ("meta-llama/Llama-3.1-70B-Instruct", 0.9, 131.4),  # 70B in bf16 on one 80 GB GPU
        ("meta-llama/Llama-3.1-8B-Instruct", 0.05, 15.0),  # 4 GiB of 79 for 15 GiB of weights
    ],
)
def test_a_model_that_does_not_fit_is_refused_not_zero(model, utilization, weights_gib):
    with pytest.raises(ValueError) as err:
        estimate_startup(model, "H100", GraphConfig().resolve(), gpu_memory_utilization=utilization)
    text = str(err.value)
    assert text.startswith(f"{model} does not fit on H100 (TP1 PP1): of 79.2 GiB")
    assert f"gpu_memory_utilization={utilization}" in text
    assert f"weights take {weights_gib} GiB per GPU" in text
    assert "tensor_parallel_size" in text and "quantized" in text
    # the fix works: eight GPUs (70B) or vLLM's default share (8B) leave KV blocks
    fixed = estimate_startup(
        model, "H100", GraphConfig().resolve(), tensor_parallel_size=8 if "70B" in model else 1
    )
    assert fixed.kv_cache_tokens > 0
