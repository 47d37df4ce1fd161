"""The graph-pool factor per GPU architecture (issue 28): fitted on the "device_fit" runs only,
by a split rule fixed before any error was looked at, applied the same way by the start-up
estimate and by the per-graph prices the planner adds up."""

from __future__ import annotations

import dataclasses
import hashlib
import math

import numpy as np
import pandas as pd
import pytest

import cgdispatch as cg
from cgdispatch.core.config import GraphConfig
from cgdispatch.estimate import pool_factors, startup, startup_pricing
from cgdispatch.estimate.devices import DEVICE_PRESETS
from cgdispatch.estimate.pool_factors import POOL_GROUPS, fit_pool_factors, pool_factor_table

FIRST_HELD_OUT = 6  # the held-out runs of the previous round stay held out whole


def _setup(row: pd.Series) -> str:
    repo = "/".join(str(row["source"]).split("/")[3:5])
    return f"{repo}|{row['model']}|{int(row['tensor_parallel_size'])}|{row['device']}"


def test_committed_factors_equal_a_refit_on_the_device_fit_runs() -> None:
    fresh = fit_pool_factors()
    assert fresh.pool_factor_runs == startup_pricing.CALIBRATION.pool_factor_runs
    committed = dict(startup_pricing.CALIBRATION.pool_factors)
    assert set(dict(fresh.pool_factors)) == set(committed)
    for arch, factor in fresh.pool_factors:
        assert factor == pytest.approx(committed[arch], rel=1e-9), f"set {arch} to {factor!r}"


def test_the_factor_is_the_geometric_mean_of_logged_over_modelled() -> None:
    table = pool_factor_table()
    ratios = table["graph_memory_gib"] / table["model_without_factor_gib"]
    factors = dict(startup_pricing.CALIBRATION.pool_factors)
    # the architecture group's factor: over all the group's runs
    expected = math.exp(sum(math.log(r) for r in ratios) / len(ratios))
    assert factors["Ampere"] == pytest.approx(expected, rel=1e-9)
    assert factors["Ada"] == pytest.approx(expected, rel=1e-9)
    # each GPU's factor: over its own runs only, recomputed here from the table's ratios
    gpus = [DEVICE_PRESETS[d].name for d in table["device"]]
    for gpu in set(gpus):
        own = [math.log(r) for r, g in zip(ratios, gpus) if g == gpu]
        assert factors[gpu] == pytest.approx(math.exp(sum(own) / len(own)), rel=1e-9)
    # with the factor, each run is the model without it scaled by its GPU's factor
    scale = table["model_gib"] / table["model_without_factor_gib"]
    assert scale.to_numpy() == pytest.approx([factors[g] for g in gpus], rel=1e-9)


def test_a_gpu_factor_is_fitted_on_its_own_runs_only() -> None:
    """Refitting on a random subset of the device_fit runs: a GPU left without runs falls
    back to its group's factor, a GPU with runs gets the geometric mean of its own."""
    rng = np.random.default_rng()
    rows = cg.reference_startups(split="device_fit")
    keep = rng.random(len(rows)) < 0.5
    keep[rng.integers(len(rows))] = True
    subset = rows[keep].reset_index(drop=True)
    fitted = fit_pool_factors(subset)
    plain = dataclasses.replace(startup_pricing.CALIBRATION, pool_factors=(), pool_factor_runs=0)
    logs: dict[str, list[float]] = {}
    for _, row in subset.iterrows():
        est, _, _ = pool_factors.predict_run(row, plain)
        logs.setdefault(DEVICE_PRESETS[row["device"]].name, []).append(
            math.log(row["graph_memory_gib"] / (est.graph_memory_bytes / (1 << 30)))
        )
    every = [v for values in logs.values() for v in values]
    group = math.exp(sum(every) / len(every))
    for device in ("A100-40GB", "A100-80GB", "L40S", "RTX-3090", "RTX-4090", "L4", "A10G"):
        name = DEVICE_PRESETS[device].name
        want = math.exp(sum(logs[name]) / len(logs[name])) if name in logs else group
        assert fitted.pool_factor(device) == pytest.approx(want, rel=1e-9), device
    assert fitted.pool_factor("H100") == 1.0


def test_splits_are_disjoint_and_follow_the_setup_rule() -> None:
    everything = cg.reference_startups(split=None, covered_only=False)
    assert everything["run"].is_unique
    fit = everything[everything["split"] == "fit"]
    device_fit = everything[everything["split"] == "device_fit"]
    held = everything[everything["split"] == "held_out"]
    assert len(device_fit) == startup_pricing.CALIBRATION.pool_factor_runs
    assert set(fit["device"]) == {"H100"}
    # the rule: new runs on Ampere/Ada GPUs, grouped by setup (repository, model, TP, GPU),
    # setups ordered by SHA-256, every other one to device_fit; the rest held out
    new = pd.concat([held.iloc[FIRST_HELD_OUT:], device_fit])
    group = new[[DEVICE_PRESETS[d].architecture in POOL_GROUPS if d in DEVICE_PRESETS else False
                 for d in new["device"]]]  # fmt: skip
    keys = sorted({_setup(r) for _, r in group.iterrows()},
                  key=lambda k: hashlib.sha256(k.encode()).hexdigest())  # fmt: skip
    chosen = {k for i, k in enumerate(keys) if i % 2 == 0}
    expected = {r["run"] for _, r in group.iterrows() if _setup(r) in chosen}
    assert set(device_fit["run"]) == expected
    # a setup is on one side only (runs of one machine and model do not leak across)
    assert not {_setup(r) for _, r in device_fit.iterrows()} & {
        _setup(r) for _, r in held.iterrows()
    }


@pytest.mark.parametrize("device", ["A100-40GB", "L40S", "RTX-3090", "L4"])
def test_the_estimate_and_the_per_graph_prices_carry_the_factor(device: str) -> None:
    factor = startup_pricing.CALIBRATION.pool_factor(device)
    factors = dict(startup_pricing.CALIBRATION.pool_factors)
    spec = DEVICE_PRESETS[device]
    # the GPU's own factor where device_fit has its runs, else its architecture's
    assert factor == factors.get(spec.name, factors[spec.architecture])
    assert (spec.name in factors) == (device != "L4")
    plain = DEVICE_PRESETS[device].replace(architecture="", name=f"{device} (no architecture)")
    config = GraphConfig(vllm_version="0.33", max_num_seqs=64).resolve()
    with_factor = startup.estimate_startup("Qwen/Qwen3-8B", device, config)
    without = startup.estimate_startup("Qwen/Qwen3-8B", plain, config)
    assert with_factor.graph_memory_bytes == pytest.approx(factor * without.graph_memory_bytes)
    assert with_factor.capture_s == pytest.approx(without.capture_s)
    # the planner's prices: the base plus one term per captured key add up to the estimate
    pricing = startup_pricing.graph_pricing("Qwen/Qwen3-8B", device)
    assert pricing.pool_factor == factor
    keys = cg.capture_keys(config)
    total = pricing.base_memory_bytes + sum(
        float(pricing.memory_bytes(k.runtime_mode, [k.num_tokens])[0]) for k in keys
    )
    assert total == pytest.approx(with_factor.graph_memory_bytes, rel=1e-9)


def test_hopper_and_unknown_architectures_keep_the_fitted_pool() -> None:
    assert startup_pricing.CALIBRATION.pool_factor("H100") == 1.0
    assert startup_pricing.CALIBRATION.pool_factor("H200") == 1.0
    assert (
        startup_pricing.CALIBRATION.pool_factor(DEVICE_PRESETS["L4"].replace(architecture=""))
        == 1.0
    )


def test_labels_say_what_each_gpu_is_calibrated_on() -> None:
    c = startup_pricing.CALIBRATION
    assert startup.startup_source("H100", c) == "model (H100, calibrated on 59 vLLM startups)"
    h200 = startup.startup_source("H200", c)
    assert h200.startswith("model (H200, no logged start-ups on this GPU; calibrated on 59")
    assert "graph pool" not in h200  # Hopper: the H100 fit as it is
    a100 = startup.startup_source("A100-40GB", c)
    assert "its start-ups fit only the graph-pool factor" in a100
    own = dict(c.pool_factors)["A100 SXM 40GB"]
    assert f"graph pool x{own:.2f} fitted on this GPU's start-ups" in a100
    l4 = startup.startup_source("L4", c)  # no L4 runs: its architecture group's factor
    assert "no logged start-ups on this GPU" in l4
    assert f"graph pool x{dict(c.pool_factors)['Ada']:.2f} for Ampere and Ada GPUs" in l4


def test_predict_run_reads_max_num_seqs_as_documented() -> None:
    rows = cg.reference_startups(split="device_fit")
    row = rows.set_index("run").loc["shanghaoli-qwen2.5-3b--rtx4090--maxseqs1--v0.10.2"]
    assert pool_factors.run_max_num_seqs(row) == (1, "logged")
    row = rows.set_index("run").loc["memsuit-llama-3.1-8b--a100-80gb--v0.17.1"]
    assert pool_factors.run_max_num_seqs(row) == (256, "largest FULL size")
