"""The GPU check's rules fail on rows broken on purpose, and hold on healthy ones."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest

from cgdispatch.measure.gpu_checks import MEMORY_COLUMNS, gpu_check_table

MODES = ["FULL", "FULL_DECODE_ONLY", "PIECEWISE", "FULL_AND_PIECEWISE"]


def healthy(rng: np.random.Generator) -> tuple[pd.DataFrame, pd.DataFrame, pd.DataFrame]:
    """Tables of a run where every rule holds, with random figures."""
    summary = pd.DataFrame(
        {
            "mode": MODES,
            "replay_checks": rng.integers(1, 50, len(MODES)),
            "failed": 0,
        }
    )
    steps = []
    for mode in MODES:
        for n in (1, 2, 4):
            for batch in ("decode", "mixed"):
                graph = float(rng.uniform(0.1, 1.0))
                eager = graph * float(rng.uniform(1.0, 5.0))
                runtime = "NONE" if (mode == "FULL_DECODE_ONLY" and batch == "mixed") else "FULL"
                steps.append(
                    {
                        "mode": mode,
                        "batch": batch,
                        "num_tokens": n,
                        "runtime_mode": runtime,
                        "eager_ms": eager,
                        "graph_ms": graph,
                    }
                )
    pools = []
    for mode in MODES:
        predicted = float(rng.uniform(10, 1000))
        weak = dict(zip(MEMORY_COLUMNS, rng.uniform(1, 100, len(MEMORY_COLUMNS))))
        weak["device_MiB"] = predicted * float(rng.uniform(0.55, 1.9))
        strong = {c: v + float(rng.uniform(0.5, 50)) for c, v in weak.items()}
        for outputs, memory in (("weak", weak), ("strong", strong)):
            pools.append({"mode": mode, "outputs": outputs, **memory, "predicted_MiB": predicted})
    return summary, pd.DataFrame(steps), pd.DataFrame(pools)


def failing(summary, steps, pools, *, on_gpu: bool = True) -> set[tuple[str, str]]:
    table = gpu_check_table(summary, steps, pools, modes=MODES, on_gpu=on_gpu)
    return {(r.check, r.subject) for r in table.itertuples() if not r.ok}


def test_every_rule_holds_on_a_healthy_run():
    table = gpu_check_table(*healthy(np.random.default_rng()), modes=MODES, on_gpu=True)
    assert table["ok"].all()
    assert set(table["check"]) == {
        "checked", "replay", "memory", "weak<strong", "decode@1", "prediction"
    }  # fmt: skip


def _mode(rng) -> str:
    return MODES[int(rng.integers(len(MODES)))]


def test_a_replay_mismatch_fails():
    rng = np.random.default_rng()
    summary, steps, pools = healthy(rng)
    mode = _mode(rng)
    summary.loc[summary["mode"] == mode, "failed"] = int(rng.integers(1, 5))
    assert failing(summary, steps, pools) == {("replay", mode)}
    assert failing(summary, steps, pools, on_gpu=False) == {("replay", mode)}


def test_a_mode_with_zero_checks_fails_and_so_does_a_missing_mode():
    rng = np.random.default_rng()
    summary, steps, pools = healthy(rng)
    mode = _mode(rng)
    summary.loc[summary["mode"] == mode, "replay_checks"] = 0
    assert failing(summary, steps, pools, on_gpu=False) == {("checked", mode)}
    other = next(m for m in MODES if m != mode)
    dropped = summary[summary["mode"] != other]
    assert ("checked", other) in failing(dropped, steps, pools, on_gpu=False)


@pytest.mark.parametrize("column", MEMORY_COLUMNS)
@pytest.mark.parametrize("bad", [math.nan, -2.0])
def test_nan_or_negative_memory_fails(column, bad):
    rng = np.random.default_rng()
    summary, steps, pools = healthy(rng)
    i = int(rng.integers(len(pools)))
    pools.loc[i, column] = bad
    found = failing(summary, steps, pools)
    subject = f"{pools.loc[i, 'mode']} {pools.loc[i, 'outputs']} {column}"
    assert ("memory", subject) in found
    others = {f for f in found if f[0] == "memory"}
    assert others == {("memory", subject)}  # the other figures still pass
    assert failing(summary, steps, pools.iloc[0:0]) >= {("memory", "all")}  # nothing measured


def test_weak_not_below_strong_fails():
    rng = np.random.default_rng()
    summary, steps, pools = healthy(rng)
    mode = _mode(rng)
    weak = (pools["mode"] == mode) & (pools["outputs"] == "weak")
    strong = (pools["mode"] == mode) & (pools["outputs"] == "strong")
    pools.loc[weak, "allocated_MiB"] = float(pools.loc[strong, "allocated_MiB"].iloc[0])
    assert failing(summary, steps, pools) == {("weak<strong", mode)}


def test_a_replayed_decode_slower_than_eager_at_batch_1_fails():
    rng = np.random.default_rng()
    summary, steps, pools = healthy(rng)
    mode = _mode(rng)
    one = (steps["mode"] == mode) & (steps["batch"] == "decode") & (steps["num_tokens"] == 1)
    steps.loc[one, "graph_ms"] = steps.loc[one, "eager_ms"] * float(rng.uniform(1.01, 3))
    assert failing(summary, steps, pools) == {("decode@1", mode)}
    assert failing(summary, steps, pools, on_gpu=False) == set()  # CPU: no speed-up to expect
    # a decode at one token that was not replayed is no evidence: it fails too
    steps.loc[one, "runtime_mode"] = "CUDAGraphMode.NONE"
    assert failing(summary, steps, pools) == {("decode@1", mode)}


@pytest.mark.parametrize("factor", [2.2, 1 / 2.2, math.nan])
def test_graph_memory_more_than_2x_off_the_prediction_fails(factor):
    rng = np.random.default_rng()
    summary, steps, pools = healthy(rng)
    mode = _mode(rng)
    weak = (pools["mode"] == mode) & (pools["outputs"] == "weak")
    if math.isnan(factor):  # no prediction at all
        pools.loc[weak, "predicted_MiB"] = math.nan
    else:
        pools.loc[weak, "device_MiB"] = pools.loc[weak, "predicted_MiB"] * factor
    assert failing(summary, steps, pools) == {("prediction", mode)}


def test_bad_ratio_is_a_value_error():
    with pytest.raises(ValueError, match="max_ratio=1 is invalid"):
        gpu_check_table(*healthy(np.random.default_rng()), modes=MODES, on_gpu=True, max_ratio=1)
