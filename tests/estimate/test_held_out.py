"""Held-out start-ups (issue 28): runs from other sources than the fitted ones, never fitted,
scored by cgdispatch.estimate.held_out; docs/calibration.md quotes its tables."""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

import cgdispatch as cg
from cgdispatch.estimate import held_out, startup, startup_pricing
from cgdispatch.estimate.devices import DEVICE_PRESETS
from cgdispatch.estimate.pool_factors import predict_run
from cgdispatch.estimate.startup_data import reference_startups
from cgdispatch.estimate.startup_pricing import GIB

ROOT = Path(__file__).resolve().parents[2]
DATA = ROOT / "cgdispatch" / "data"


@pytest.fixture(scope="module")
def errors() -> pd.DataFrame:
    return held_out.held_out_errors()


def test_held_out_rows_carry_their_log_and_differ_from_the_fitted_runs() -> None:
    fit = pd.read_csv(DATA / "reference_vllm_startups.csv")
    rows = pd.read_csv(DATA / "reference_vllm_startups_held_out.csv")
    assert list(rows.columns) == [*fit.columns, "note"]
    assert len(rows) >= 3 and rows["run"].is_unique
    assert not set(rows["run"]) & set(fit["run"])
    assert rows["source"].str.startswith("https://github.com/").all()
    for column in ("model", "device", "device_name", "vllm_version", "graph_memory_gib", "note"):
        assert rows[column].notna().all(), column
    # other GPUs and other releases than the fitted H100 / 0.19.0 runs
    assert set(rows["device"]) - set(fit["device"])
    assert set(rows["vllm_version"].astype(str)) - {"0.19.0"}


def test_the_fit_uses_the_fit_split_only() -> None:
    fitted = cg.reference_startups()
    assert (fitted["split"] == "fit").all() and len(fitted) == startup_pricing.CALIBRATION.fitted_on
    kept_out = cg.reference_startups(split="held_out")
    assert len(kept_out) and (kept_out["split"] == "held_out").all()
    device_fit = cg.reference_startups(split="device_fit")
    assert len(device_fit) == startup_pricing.CALIBRATION.pool_factor_runs
    everything = cg.reference_startups(split=None)
    assert len(everything) == len(fitted) + len(kept_out) + len(device_fit)
    with pytest.raises(ValueError, match="split='test' is invalid"):
        cg.reference_startups(split="test")


def test_graph_memory_is_scored_on_every_run_capture_and_kv_on_known_gpus(errors) -> None:
    assert len(errors) == len(cg.reference_startups(split="held_out"))
    assert errors["graph_memory_error"].notna().all()
    known = errors["device"].isin(list(DEVICE_PRESETS))
    assert errors.loc[known, "capture_error"].notna().all()
    assert errors.loc[~known, ["capture_error", "kv_tokens_error"]].isna().all().all()
    assert (errors.loc[~known, "skipped"].str.contains("preset")).all()
    row = errors.set_index("run").loc["tokenkaki-qwen3-8b--a100-40gb--v0.19.1"]
    assert row["max_num_seqs_from"] == "largest FULL size" and row["keys"] == "51 PW + 35 FULL"
    assert row["graph_memory_error"] == pytest.approx(row["graph_memory_gib_model"] / 2.44 - 1)


def test_a_run_counts_for_capture_and_kv_once_its_gpu_has_a_preset(monkeypatch) -> None:
    # stand-in L4 figures, only to show the switch; the real preset comes with its own data
    monkeypatch.setitem(DEVICE_PRESETS, "L4", DEVICE_PRESETS["A100"].replace(name="L4 (test)"))
    monkeypatch.setitem(startup.DEVICE_MEMORY_BYTES, "L4", 22.03 * startup_pricing.GIB)
    rows = cg.reference_startups(split="held_out")
    errors = held_out.held_out_errors(rows[rows["device"] == "L4"])
    assert errors["capture_error"].notna().all() and errors["kv_tokens_error"].notna().all()
    assert (errors["skipped"] == "").all()


def test_tables_group_by_gpu_and_release_with_an_all_row(errors) -> None:
    by_gpu = held_out.held_out_table(errors, by="device")
    assert by_gpu["device"].iloc[-1] == "all" and by_gpu["runs"].iloc[-1] == len(errors)
    by_release = held_out.held_out_table(errors, by="vllm_version")
    releases = list(by_release["vllm_version"].iloc[:-1])
    assert releases == sorted(releases, key=lambda v: tuple(int(p) for p in v.split(".")))
    assert by_gpu["graph max"].iloc[-1] == pytest.approx(errors["graph_memory_error"].abs().max())
    with pytest.raises(ValueError, match="by='model' is invalid"):
        held_out.held_out_table(errors, by="model")
    targets = held_out.held_out_targets(errors).set_index("target")
    assert set(targets.index) == set(held_out.TARGETS)
    within = float((np.abs(errors["graph_memory_error"]) <= 0.35).mean())
    assert targets.loc["graph memory within 35%, share of runs", "value"] == pytest.approx(within)
    assert targets.loc["graph memory within 35%, share of runs", "met"] == (within >= 0.90)


def test_every_miss_is_listed_once_with_a_note_and_its_memory_adds_up(errors) -> None:
    misses = held_out.held_out_misses()
    expected = {
        (r["run"], quantity)
        for r in errors.to_dict("records")
        for quantity, (column, bound) in held_out.MISS_BOUNDS.items()
        if not pd.isna(r[column]) and abs(r[column]) > bound
    }
    assert set(zip(misses["run"], misses["quantity"])) == expected and len(misses) == len(expected)
    assert (misses["note"].str.len() > 20).all()  # every missing run is explained
    rows = reference_startups(split="held_out")
    for r in misses[misses["quantity"] == "KV tokens"].to_dict("records"):
        numbers = [float(v) for v in re.findall(r"(\d+\.\d+)", r["log shows"])]
        w_model, w_log, other_model, other_log, budget, kv_log = numbers
        row = rows[rows["run"] == r["run"]].iloc[0]
        assert w_log == pytest.approx(float(row["weights_gib"]), abs=0.005)
        assert kv_log == pytest.approx(float(row["kv_cache_gib"]), abs=0.005)
        assert w_log + other_log + kv_log == pytest.approx(budget, abs=0.02)
        # the model's side adds up to the same budget with its own KV cache
        est = predict_run(row)[0]
        assert w_model + other_model + est.kv_cache_bytes / GIB == pytest.approx(budget, abs=0.02)


def test_docs_quote_the_held_out_tables_the_code_computes(errors) -> None:
    text = (ROOT / "docs" / "calibration.md").read_text()
    block = re.search(
        r"<!-- held-out tables: [^>]*-->\n(.*?)\n<!-- end of held-out tables -->", text, re.S
    )
    assert block, "docs/calibration.md lacks the held-out tables block"
    assert block.group(1) == held_out.held_out_markdown(errors), (
        "docs/calibration.md's held-out tables are stale: paste "
        "cgdispatch.estimate.held_out.held_out_markdown() between the markers"
    )
    for run in errors["run"]:
        assert text.count(run) >= 2, f"{run}: list it and explain its errors in the doc"


def test_docs_quote_the_pool_factor_table_the_code_computes() -> None:
    from cgdispatch.estimate.pool_factors import pool_factor_markdown

    text = (ROOT / "docs" / "calibration.md").read_text()
    block = re.search(
        r"<!-- pool-factor table: [^>]*-->\n(.*?)\n<!-- end of pool-factor table -->", text, re.S
    )
    assert block, "docs/calibration.md lacks the pool-factor table block"
    assert block.group(1) == pool_factor_markdown(), (
        "docs/calibration.md's pool-factor table is stale: paste "
        "cgdispatch.estimate.pool_factors.pool_factor_markdown() between the markers"
    )


def test_ladder_groups_count_each_runs_capture_sizes(errors: pd.DataFrame) -> None:
    """issue 35: errors by ladder size; each run's group from its own logged list."""
    rows = cg.reference_startups(split="held_out")
    sizes = rows["cudagraph_capture_sizes"].astype(str).str.split().str.len()
    expected = np.select([sizes <= 8, sizes <= 64], ["1-8", "9-64"], "65+")
    assert list(errors["ladder"]) == list(expected)
    table = held_out.held_out_table(errors, by="ladder")
    assert list(table["ladder"])[-1] == "all"
    for label in table["ladder"][:-1]:
        group = errors[errors["ladder"] == label]
        row = table.set_index("ladder").loc[label]
        assert row["runs"] == len(group)
        assert row["graph median"] == pytest.approx(group["graph_memory_error"].abs().median())
    rng = np.random.default_rng(35)
    for n in rng.integers(1, 600, 50):
        assert held_out.ladder_bin(int(n)) == ("1-8" if n <= 8 else "9-64" if n <= 64 else "65+")
    with pytest.raises(ValueError, match="num_sizes=0 is invalid"):
        held_out.ladder_bin(0)
    with pytest.raises(ValueError, match="by='size' is invalid"):
        held_out.held_out_table(errors, by="size")
