"""The aiconfigurator fixtures in tests/data: schema, provenance and internal consistency.

Runs everywhere (no aiconfigurator package, no network); test_aic_tables.py checks that the
files agree with a fresh computation where the package is installed."""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pandas as pd

from cgdispatch.estimate.aic_reference import (
    BREAKDOWN_COLUMNS,
    FIXTURE_CASES,
    FIXTURE_DEVICES,
    OP_COLUMNS,
    STEP_COLUMNS,
)

DATA = Path(__file__).resolve().parents[1] / "data"
STEPS = DATA / "aic_reference_steps.csv"
SAMPLES = DATA / "aic_op_samples.csv"


def _header(path: Path) -> list[str]:
    lines = []
    with path.open(encoding="utf-8") as f:
        for line in f:
            if not line.startswith("#"):
                break
            lines.append(line)
    return lines


def test_fixtures_name_their_source_licence_and_table_versions():
    for path in (STEPS, SAMPLES):
        header = "".join(_header(path))
        assert (
            "aiconfigurator-core 0.12.0" in header and "NVIDIA" in header and "Apache-2.0" in header
        ), path
        assert path.stat().st_size < 1_000_000, f"{path.name} must stay under 1 MB"
        for device in FIXTURE_DEVICES:
            (line,) = [x for x in _header(path) if x.startswith(f"# table {device}:")]
            for op in OP_COLUMNS:  # every table with its GPU folder and framework version
                assert re.search(rf"{op}=\w+_sxm \w+/(vllm|nccl)/[\d.]+", line), (device, op, line)


def test_step_fixture_schema_and_totals():
    steps = pd.read_csv(STEPS, comment="#")
    assert list(steps.columns) == STEP_COLUMNS
    assert set(steps["device"]) == set(FIXTURE_DEVICES)
    assert set(steps["kind"]) == {"decode", "prefill", "mixed"}
    parts = steps[BREAKDOWN_COLUMNS]
    assert np.isfinite(parts.to_numpy()).all() and (parts >= 0).all().all()
    np.testing.assert_allclose(steps["measured_ms"], parts.sum(axis=1), rtol=1e-5)
    for device in FIXTURE_DEVICES:
        for _model, tps in FIXTURE_CASES:
            assert set(tps) <= set(steps.loc[steps["device"] == device, "tp"])
    # the op columns follow the step's shape
    assert ((steps["tp"] > 1) == (steps["allreduce_ms"] > 0)).all()
    assert ((steps["num_prompts"] > 0) == (steps["attn_prefill_ms"] > 0)).all()
    assert ((steps["num_decode"] > 0) == (steps["attn_decode_ms"] > 0)).all()
    moe = steps["model"].str.contains("A3B")
    assert (steps.loc[moe, "moe_ms"] > 0).all() and (steps.loc[~moe, "moe_ms"] == 0).all()


def test_decode_attention_grows_with_context_and_batch():
    steps = pd.read_csv(STEPS, comment="#")
    decode = steps[steps["kind"] == "decode"]
    for _, group in decode.groupby(["device", "model", "tp", "num_decode"]):
        assert group.sort_values("decode_context")["attn_decode_ms"].is_monotonic_increasing
    for _, group in decode.groupby(["device", "model", "tp", "decode_context"]):
        assert group.sort_values("num_decode")["attn_decode_ms"].is_monotonic_increasing


def test_op_sample_fixture_schema():
    samples = pd.read_csv(SAMPLES, comment="#")
    shapes = list(dict.fromkeys(c for columns in OP_COLUMNS.values() for c in columns))
    assert list(samples.columns) == [
        "op",
        "device",
        "version",
        "kernel_source",
        *shapes,
        "measured_ms",
    ]
    assert set(samples["op"]) == set(OP_COLUMNS)
    assert set(samples["device"]) == set(FIXTURE_DEVICES)
    assert (samples["measured_ms"] > 0).all()
    for (op, _device), group in samples.groupby(["op", "device"]):
        assert 0 < len(group) <= 200
        assert group[OP_COLUMNS[op]].notna().all().all(), op
