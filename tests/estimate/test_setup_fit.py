"""Fitting a calibration profile on one setup's logs (cgdispatch.estimate.setup_fit) and
storing it (setup_profile): the fit reproduces the logs it was fitted on, its factors are
the geometric means they are documented to be (checked on logs edited with random
figures), step scales come from bench results and gpu_check CSVs as documented, and a
profile file edited by hand is refused."""

from __future__ import annotations

import dataclasses
import json
import math
import random
import re
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from cgdispatch.core.release_table import release_defaults
from cgdispatch.estimate.setup_fit import LoggedRun, estimate_run, file_sha256, fit_setup
from cgdispatch.estimate.setup_profile import (
    FLOORS,
    LoggedFile,
    check_same_setup,
    load_profile,
    same_model,
    save_profile,
)
from cgdispatch.estimate.startup_pricing import CALIBRATION
from cgdispatch.estimate.step_measurements import read_bench_json, read_step_csv
from cgdispatch.estimate.uncertainty import MODEL_ERRORS
from cgdispatch.estimate.vllm_logs import parse_startup_log, read_startup_log
from cgdispatch.plan.costs import FunctionCostModel

LOGS = Path(__file__).resolve().parents[1] / "data" / "vllm_logs"
GIB = float(1 << 30)
# the fixture setups: (file prefix, model, device)
SETUPS = [
    ("llama-3.1-8b-h100-tp1", "meta-llama/Llama-3.1-8B-Instruct", "H100"),  # 3 runs
    ("qwen2.5-3b-rtx4090", "Qwen/Qwen2.5-3B-Instruct", "RTX-4090"),  # 2 runs, local paths
    ("qwen3-30b-a3b-h100", "Qwen/Qwen3-30B-A3B", "H100"),  # 1 run, MoE
    ("llama-3.1-8b-h100-tp2", "meta-llama/Llama-3.1-8B-Instruct", "H100"),  # 1 run, TP2
]


def _runs(prefix: str) -> list[LoggedRun]:
    paths = sorted(LOGS.glob(f"{prefix}*.log"))
    return [LoggedRun(str(p), file_sha256(p), read_startup_log(p)) for p in paths]


@pytest.mark.parametrize(("prefix", "model", "device"), SETUPS, ids=[s[0] for s in SETUPS])
def test_the_profile_reproduces_the_logs_it_was_fitted_on(prefix, model, device):
    runs = _runs(prefix)
    profile, _ = fit_setup("p", model, device, runs)
    assert profile.runs == len(runs) and profile.label == (
        f"calibrated on your logs ({len(runs)} run{'s' if len(runs) > 1 else ''})"
    )
    for run in runs:
        est = estimate_run(run, model, device, profile.coefficients())
        text = Path(run.path).read_text()  # the logged figures, read here by hand
        pool = float(re.search(r"secs, took ([0-9.]+) GiB", text).group(1))
        secs = float(re.search(r"finished in ([0-9.]+) secs", text).group(1))
        tokens = int(re.search(r"KV cache size: ([0-9,]+) tokens", text).group(1).replace(",", ""))
        assert est.graph_memory_bytes / GIB == pytest.approx(pool, rel=0.05)
        assert est.capture_s == pytest.approx(secs, rel=0.05)
        assert est.kv_cache_tokens == pytest.approx(tokens, rel=0.05)
    if len(runs) == 1:  # zero residual by construction: the bands are the floors
        assert (
            profile.kv_tokens_residuals == (0.0,)
            and profile.band("kv_tokens") == FLOORS["kv_tokens"]
        )


@pytest.mark.parametrize(("prefix", "model", "device"), SETUPS, ids=[s[0] for s in SETUPS])
def test_each_log_is_priced_under_its_own_release_and_non_torch_stays_physical(
    prefix, model, device
):
    """The KV budget of a logged run is its own release's (the graph estimate comes off it
    only from 0.20), so the fitted non-torch memory is >= 0 and near what vLLM logged."""
    runs = _runs(prefix)
    profile, _ = fit_setup("p", model, device, runs)
    assert profile.non_torch_gib >= 0.0
    logged = []
    for run in runs:
        text = Path(run.path).read_text()
        version = re.search(r"Initializing a V1 LLM engine \(v([0-9.]+)\)", text).group(1)
        est = estimate_run(run, model, device, profile.coefficients())
        assert est.graph_memory_subtracted == release_defaults(version).subtracts_graph_estimate
        logged += [
            float(v) for v in re.findall(r"non-torch forward increase memory: ([0-9.]+)GiB", text)
        ]
    if logged:  # vLLM's own figure: the fit stays within 0.15 GiB of it
        assert abs(profile.non_torch_gib - float(np.mean(logged))) <= 0.15


@pytest.mark.parametrize("release", ["0.20.0", "0.21.0", "0.26.1"])
def test_a_log_of_a_release_that_subtracts_the_graph_estimate_has_that_much_less_kv(release):
    run = _runs("qwen2.5-7b-h100")[0]
    text = Path(run.path).read_text()
    assert "(v0.19.0)" in text
    edited = LoggedRun(
        "x.log", "0" * 64, parse_startup_log(text.replace("(v0.19.0)", f"(v{release})"))
    )
    model, device = "Qwen/Qwen2.5-7B-Instruct", "H100"
    before = estimate_run(run, model, device, CALIBRATION)
    after = estimate_run(edited, model, device, CALIBRATION)
    assert not before.graph_memory_subtracted and after.graph_memory_subtracted
    assert before.kv_cache_bytes - after.kv_cache_bytes == pytest.approx(after.graph_memory_bytes)


def _edited(text: str, pool_gib: float, capture_s: int, tokens: int) -> str:
    text = re.sub(r"secs, took [0-9.]+ GiB", f"secs, took {pool_gib:.2f} GiB", text)
    text = re.sub(r"finished in [0-9]+ secs", f"finished in {capture_s} secs", text)
    return re.sub(r"KV cache size: [0-9,]+ tokens", f"KV cache size: {tokens:,} tokens", text)


@pytest.mark.parametrize("seed", range(3))
def test_factors_are_geometric_means_and_kv_the_mean_need(seed):
    """Two runs of one config with random logged figures: the calibrated pool and capture
    time are the geometric means of the logged ones, the KV tokens their mean."""
    rng = random.Random(seed)
    base = _runs("qwen2.5-3b-rtx4090")[0]
    text = Path(base.path).read_text()
    figures = [  # KV tokens up to beyond what the GPU holds with no non-torch memory at all
        (rng.uniform(0.05, 2.0), rng.randint(1, 60), rng.randint(100_000, 900_000))
        for _ in range(2)
    ]
    figures = [(round(p, 2), c, t) for p, c, t in figures]
    runs = [
        LoggedRun(f"run{i}.log", "0" * 64, parse_startup_log(_edited(text, *f)))
        for i, f in enumerate(figures)
    ]
    model, device = "Qwen/Qwen2.5-3B-Instruct", "RTX-4090"
    profile, rows = fit_setup("p", model, device, runs)
    est = estimate_run(runs[0], model, device, profile.coefficients())
    assert est.graph_memory_bytes / GIB == pytest.approx(math.sqrt(figures[0][0] * figures[1][0]))
    assert est.capture_s == pytest.approx(math.sqrt(figures[0][1] * figures[1][1]))
    # the mean need, unless it asks for negative non-torch memory: then none (the bound)
    ceiling = estimate_run(
        runs[0], model, device, dataclasses.replace(profile, non_torch_gib=0.0).coefficients()
    ).kv_cache_tokens
    assert profile.non_torch_gib >= 0.0
    wanted = (figures[0][2] + figures[1][2]) / 2
    assert abs(est.kv_cache_tokens - min(wanted, ceiling)) <= 32  # two blocks
    assert (profile.non_torch_gib == 0.0) == (wanted > ceiling + 16)
    expected = [est.kv_cache_tokens / t - 1 for _, _, t in figures]
    assert profile.kv_tokens_residuals == pytest.approx(expected)
    worst = max(abs(r) for r in expected)
    assert profile.band("kv_tokens") == pytest.approx(max(worst, FLOORS["kv_tokens"]))


def _bench(rng: random.Random, path: Path) -> dict:
    """A `vllm bench serve --save-result` JSON (keys of vllm/benchmarks/serve.py) with
    random figures."""
    data = {
        "backend": "vllm", "model_id": "meta-llama/Llama-3.1-8B-Instruct",
        "num_prompts": rng.randint(50, 2000), "request_rate": "inf",
        "max_concurrency": rng.choice([None, rng.randint(4, 512)]),
        "request_throughput": rng.uniform(1, 40), "mean_e2el_ms": rng.uniform(500, 20000),
        "median_ttft_ms": rng.uniform(10, 500), "median_tpot_ms": rng.uniform(5, 60),
        "median_itl_ms": rng.uniform(5, 60), "p99_itl_ms": 99.0,
    }  # fmt: skip
    path.write_text(json.dumps(data))
    return data


@pytest.mark.parametrize("seed", range(3))
def test_step_scale_from_bench_results(seed, tmp_path):
    rng = random.Random(seed)
    c0, c1 = rng.uniform(2, 8), rng.uniform(0.001, 0.05)
    costs = FunctionCostModel(lambda mode, n: c0 + c1 * n)
    ratios, steps = [], []
    for i in range(2):
        data = _bench(rng, tmp_path / f"b{i}.json")
        caps = [c for c in (data["max_concurrency"], data["num_prompts"]) if c]
        batch = max(1, round(min([data["request_throughput"] * data["mean_e2el_ms"] / 1e3, *caps])))
        batch = min(batch, 1024)
        ratios.append(data["median_itl_ms"] / (c0 + c1 * batch))
        point = read_bench_json(tmp_path / f"b{i}.json").step_point(1024)
        assert point.num_tokens == batch
        steps.append((LoggedFile(f"b{i}.json", "0" * 64, "bench json"), [point]))
    profile, _ = fit_setup(
        "p", "meta-llama/Llama-3.1-8B-Instruct", "H100", _runs("llama-3.1-8b-h100-tp1")[:1],
        steps=steps, cost_model=lambda: costs,
    )  # fmt: skip
    scale = math.sqrt(ratios[0] * ratios[1])
    assert profile.step_scale == pytest.approx(scale)
    assert profile.step_residuals == pytest.approx([r / scale - 1 for r in ratios])
    assert profile.errors(MODEL_ERRORS).step_time == pytest.approx(
        max(max(abs(r / scale - 1) for r in ratios), FLOORS["step_time"])
    )


def test_step_scale_from_a_gpu_check_csv(tmp_path):
    rng = np.random.default_rng(4)
    n = rng.integers(1, 512, 6)
    table = pd.DataFrame({
        "mode": "FULL", "batch": "decode", "num_tokens": n, "runtime_mode": "CUDAGraphMode.FULL",
        "padded_size": n + 1, "eager_ms": rng.uniform(5, 20, 6), "graph_ms": rng.uniform(1, 10, 6),
        "speedup_x": 1.0, "source": "measured (NVIDIA H100 80GB HBM3)",
    })  # fmt: skip
    table.to_csv(tmp_path / "gpu_check.csv", index=False)
    points, gpu = read_step_csv(tmp_path / "gpu_check.csv")
    assert gpu == "NVIDIA H100 80GB HBM3"
    price = {"FULL": 2.0, "NONE": 5.0}  # ms per step, whatever the size
    costs = FunctionCostModel(lambda mode, k: price[mode.name])
    profile, _ = fit_setup(
        "p", "meta-llama/Llama-3.1-8B-Instruct", "H100", _runs("llama-3.1-8b-h100-tp1")[:1],
        steps=[(LoggedFile("gpu_check.csv", "0" * 64, "gpu_check csv"), points)],
        cost_model=lambda: costs,
    )  # fmt: skip
    ratios = np.concatenate([table["graph_ms"] / 2.0, table["eager_ms"] / 5.0])
    assert profile.step_scale == pytest.approx(float(np.exp(np.log(ratios).mean())))
    assert profile.step_points == 12


def test_profile_round_trip_and_an_edited_digit_is_refused(tmp_path):
    profile, _ = fit_setup(
        "mine", "Qwen/Qwen2.5-3B-Instruct", "RTX-4090", _runs("qwen2.5-3b-rtx4090")
    )
    assert [f.path for f in profile.files] == [r.path for r in _runs("qwen2.5-3b-rtx4090")]
    path = save_profile(profile, tmp_path / "profiles" / "mine.json")
    assert load_profile("mine", tmp_path / "profiles") == profile
    head, payload = path.read_text().split("\n", 1)
    digit = re.search(r'"pool_factor":\d\.(\d)', payload)
    changed = str((int(digit.group(1)) + 1) % 10)
    path.write_text(head + "\n" + payload[: digit.start(1)] + changed + payload[digit.end(1) :])
    with pytest.raises(ValueError, match="damaged.*digest.*run `calibrate`"):
        load_profile(path, tmp_path)
    with pytest.raises(ValueError, match="no file"):
        load_profile("absent", tmp_path)


def test_a_profile_of_another_setup_is_refused():
    profile, _ = fit_setup("q", "Qwen/Qwen2.5-3B-Instruct", "RTX-4090", _runs("qwen2.5-3b-rtx4090"))
    profile.check_setup("Qwen/Qwen2.5-3B-Instruct", "RTX-4090", 1)
    for model, device, tp in (("Qwen/Qwen2.5-7B-Instruct", "RTX-4090", 1),
                              ("Qwen/Qwen2.5-3B-Instruct", "H100", 1),
                              ("Qwen/Qwen2.5-3B-Instruct", "RTX-4090", 2)):  # fmt: skip
        with pytest.raises(
            ValueError, match=r"is of Qwen/Qwen2\.5-3B-Instruct on RTX-4090 TP1, not of"
        ):
            profile.check_setup(model, device, tp)


def test_a_log_of_another_setup_is_refused_naming_both():
    llama = _runs("llama-3.1-8b-h100-tp1")[0]
    with pytest.raises(
        ValueError, match=r"is a log of meta-llama/Llama-3\.1-8B-Instruct, not of Qwen/Qwen2\.5-7B"
    ):
        check_same_setup(
            llama.path, llama.log, "Qwen/Qwen2.5-7B-Instruct", "H100", 1, {"model": "--model"}
        )
    with pytest.raises(ValueError, match="TP1, not TP2"):
        check_same_setup(llama.path, llama.log, "meta-llama/Llama-3.1-8B-Instruct", "H100", 2)


@pytest.mark.parametrize(
    ("logged", "name", "same"),
    [("/root/models/qwen/Qwen2___5-3B", "Qwen/Qwen2.5-3B-Instruct", True),
     ("meta-llama/Llama-3.1-8B-Instruct", "meta-llama/Llama-3.1-70B-Instruct", False),
     ("Qwen/Qwen2.5-7B-Instruct", "Qwen/Qwen2.5-72B-Instruct", False),
     ("meta-llama/Meta-Llama-3.1-8B-Instruct", "meta-llama/Llama-3.1-8B-Instruct", True)],
)  # fmt: skip
def test_same_model(logged, name, same):
    assert same_model(logged, name) is same


@pytest.mark.parametrize(
    ("mode", "runtime"),
    [("FULL_AND_PIECEWISE", "FULL"), ("FULL_DECODE_ONLY", "FULL"), ("PIECEWISE", "PIECEWISE"),
     ("NONE", "NONE"), (None, "FULL")],
)  # fmt: skip
def test_a_bench_step_runs_in_the_servers_decode_mode(mode, runtime, tmp_path):
    from cgdispatch.estimate.step_measurements import decode_mode

    _bench(random.Random(1), tmp_path / "b.json")
    point = read_bench_json(tmp_path / "b.json").step_point(None, decode_mode(mode))
    assert point.runtime_mode == runtime
