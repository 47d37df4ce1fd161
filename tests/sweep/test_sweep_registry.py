"""Sweeps over any registry model: names checked up front, HF decode-only models swept."""

from __future__ import annotations

import random

import pytest

from cgdispatch.core.config import GraphConfig
from cgdispatch.core.v1.dispatcher import CudagraphDispatcher
from cgdispatch.models.registry import model_names
from cgdispatch.sweep.spec import SweepSpec


def test_spec_accepts_every_registry_name_and_refuses_others():
    for name in model_names():
        assert SweepSpec(vllm_version="0.33", model=name).model == name
    with pytest.raises(ValueError, match="toy-huge.*registry"):
        SweepSpec(vllm_version="0.33", model="toy-huge")


def test_hf_sweep_times_decode_steps_and_records_mixed_ones_as_failed(tmp_path):
    pytest.importorskip("transformers")
    from cgdispatch.sweep.run import run_sweep
    from cgdispatch.views.report import memory_estimates, write_report

    rng = random.Random(7)
    sizes = sorted(rng.sample(range(1, 9), 3))
    tokens = tuple(sorted({rng.randint(1, max(sizes)), rng.randint(1, 12)}))
    spec = SweepSpec(
        vllm_version="0.33",
        name="hf-test",
        model="hf-llama-tiny",
        modes=("FULL_DECODE_ONLY",),
        ladders={"mine": sizes},
        num_tokens=tokens,
        repeats=1,
        warmup=0,
        input_sets=1,
    )
    rows = run_sweep(spec, store=tmp_path, progress=False)
    assert len(rows) == 2 * len(tokens)
    dispatcher = CudagraphDispatcher(
        GraphConfig(
            vllm_version="0.33", cudagraph_mode="FULL_DECODE_ONLY", cudagraph_capture_sizes=sizes
        )
    )
    dispatcher.initialize_cudagraph_keys()
    decode = rows[rows["uniform_decode"]]
    assert (decode["status"] == "ok").all(), decode["error"].tolist()
    for row in decode.itertuples():
        mode, desc = dispatcher.dispatch(int(row.num_tokens), True)
        assert (row.runtime_mode, int(row.padded_size)) == (str(mode), desc.num_tokens)
        assert row.speedup_x == pytest.approx(row.eager_ms / row.graph_ms)
    mixed = rows[~rows["uniform_decode"]]
    assert (mixed["status"] == "failed").all()
    assert mixed["error"].str.contains("does not support mixed batches").all()
    assert set(rows["model"]) == {"hf-llama-tiny"}
    assert int(rows["num_graphs"].iloc[0]) == len(dispatcher.get_capture_descs()[0][1])
    # the report skips what needs a toy LM (memory estimate, device model) and lists failures
    assert memory_estimates(rows).empty
    summary = write_report(tmp_path).read_text()
    assert f"{len(rows)} ({len(decode)} ok, {len(mixed)} failed)" in summary
    assert "does not support mixed batches" in summary
