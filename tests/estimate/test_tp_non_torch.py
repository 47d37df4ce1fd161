"""Tensor-parallel non-torch memory by whether the GPUs can use NCCL's NVLink SHARP (issue
35): the fitted TP value (H100 SXM runs) only there, one GPU's elsewhere; checked against
the device table and against the TP logs of GPUs without it."""

from __future__ import annotations

import csv
from importlib import resources

import numpy as np
import pandas as pd
import pytest

import cgdispatch as cg
from cgdispatch.core.config import GraphConfig
from cgdispatch.estimate import startup
from cgdispatch.estimate.devices import DEVICE_PRESETS
from cgdispatch.estimate.pool_factors import predict_run
from cgdispatch.estimate.startup_pricing import CALIBRATION

GIB = float(1 << 30)


def _device_rows() -> list[dict[str, str]]:
    with resources.files("cgdispatch.data").joinpath("device_specs.csv").open() as f:
        return list(csv.DictReader(f))


def test_nvlink_sharp_follows_the_device_table() -> None:
    """Independently of the rates: from the table's architecture and link kind columns."""
    rows = _device_rows()
    assert rows
    for row in rows:
        expected = (
            row["architecture"] not in ("Volta", "Turing", "Ampere", "Ada")
            and row["link"] != "PCIe"
        )
        assert startup.has_nvlink_sharp(row["name"]) == expected, row["name"]
    # a spec with neither generation nor link keeps the fitted (larger) TP value
    bare = DEVICE_PRESETS["L40S"].replace(name="bare", architecture="", link_bytes_per_s=0.0)
    assert startup.has_nvlink_sharp(bare)


@pytest.mark.parametrize("device", ["A100-80GB", "L40S", "H100-PCIe"])
def test_a_tp_rank_without_nvlink_sharp_keeps_one_gpus_non_torch_memory(device: str) -> None:
    rng = np.random.default_rng()
    spec = DEVICE_PRESETS[device]
    # the same GPU relabelled as a Hopper on NVLink: only the non-torch memory differs
    nvls = spec.replace(name=f"{device} as NVLS", architecture="Hopper", link_bytes_per_s=450e9)
    assert not startup.has_nvlink_sharp(spec) and startup.has_nvlink_sharp(nvls)
    tp = int(rng.choice([2, 4]))
    gmu = float(rng.uniform(0.6, 0.95))
    config = GraphConfig(max_num_seqs=int(rng.choice([64, 128, 256]))).resolve()
    args = {"tensor_parallel_size": tp, "gpu_memory_utilization": gmu}
    without = startup.estimate_startup("Qwen/Qwen2.5-7B-Instruct", spec, config, **args)
    with_nvls = startup.estimate_startup("Qwen/Qwen2.5-7B-Instruct", nvls, config, **args)
    assert without.non_torch_bytes == pytest.approx(CALIBRATION.non_torch_single_gib * GIB)
    assert with_nvls.non_torch_bytes == pytest.approx(CALIBRATION.non_torch_tp_gib * GIB)
    extra = (CALIBRATION.non_torch_tp_gib - CALIBRATION.non_torch_single_gib) * GIB
    gap = without.kv_cache_bytes - with_nvls.kv_cache_bytes
    # the graph pool differs by the two specs' pool factors only where the release subtracts it
    if without.graph_memory_subtracted:
        gap += without.graph_memory_bytes - with_nvls.graph_memory_bytes
    assert gap == pytest.approx(extra, rel=1e-9)
    # one GPU: no change either way
    one = startup.estimate_startup("Qwen/Qwen2.5-7B-Instruct", spec, config)
    assert one.non_torch_bytes == pytest.approx(CALIBRATION.non_torch_single_gib * GIB)


def test_tp_logs_without_nvlink_sharp_are_closer_to_one_gpus_non_torch_memory() -> None:
    """On every logged TP run (held out or device_fit) whose GPU has no NVLink SHARP, the
    non-KV memory the log implies beyond its weights and activations is nearer one GPU's
    fitted non-torch memory than the fitted TP value."""
    rows = pd.concat(
        [cg.reference_startups(split="held_out"), cg.reference_startups(split="device_fit")]
    )
    checked = 0
    for _, row in rows.iterrows():
        device = str(row["device"])
        if int(row["tensor_parallel_size"]) < 2 or device not in DEVICE_PRESETS:
            continue
        if startup.has_nvlink_sharp(device) or pd.isna(row["kv_cache_gib"]):
            continue
        est, _, _ = predict_run(row)
        budget = DEVICE_PRESETS[device].memory_bytes * float(row["gpu_memory_utilization"]) / GIB
        other_log = budget - float(row["weights_gib"]) - float(row["kv_cache_gib"])
        activation = est.activation_bytes / GIB
        implied = other_log - activation
        if est.graph_memory_subtracted:
            implied -= est.graph_memory_bytes / GIB
        assert abs(implied - CALIBRATION.non_torch_single_gib) < abs(
            implied - CALIBRATION.non_torch_tp_gib
        ), row["run"]
        checked += 1
    assert checked >= 3
