"""Releasing runners: graphs, pools and compiled pieces go, so a long sweep does not grow."""

import gc
import weakref

import pytest
import torch

from cgdispatch import GraphConfig
from cgdispatch.capture.backends import live_graph_count, stand_in_pool_bytes
from cgdispatch.capture.runner import GraphRunner
from cgdispatch.models.toy import PRESETS, build_toy_model

TINY = PRESETS["toy-tiny"].replace(num_layers=1)
MODES = ["FULL", "PIECEWISE", "FULL_AND_PIECEWISE", "FULL_DECODE_ONLY", "NONE"]


def test_ten_runners_created_and_released_leave_nothing_behind():
    """Two runners per mode, one with weak outputs and one without (i and i + 5)."""
    gc.collect()
    graphs0, pool0 = live_graph_count(), stand_in_pool_bytes()
    model = build_toy_model(TINY)
    batch = None
    gone = []
    for i in range(10):
        mode = MODES[i % len(MODES)]
        config = GraphConfig(
            cudagraph_mode=mode, cudagraph_capture_sizes=[1, 2, 4], max_num_seqs=TINY.num_slots
        )
        with GraphRunner(model, config, weak_outputs=i % 2 == 0) as runner:
            runner.capture_all(progress=False)
            batch = batch or runner.make_decode_batch(2, seed=i)
            result = runner.execute_batch(batch).clone()  # a copy outlives the runner
            if mode != "NONE":
                assert live_graph_count() > graphs0 and stand_in_pool_bytes() > pool0
        assert live_graph_count() == graphs0, f"runner {i} ({mode}) left graphs alive"
        assert stand_in_pool_bytes() == pool0, f"runner {i} ({mode}) left pool bytes"
        assert torch.isfinite(result).all()
        gone.append(weakref.ref(runner))
        del runner
    gc.collect()
    assert all(ref() is None for ref in gone)  # nothing (dynamo's cache included) holds them


def test_a_released_runner_refuses_steps_and_release_is_idempotent():
    model = build_toy_model(TINY)
    config = GraphConfig(cudagraph_mode="PIECEWISE", cudagraph_capture_sizes=[1, 2])
    runner = GraphRunner(model, config)
    runner.capture_all(progress=False)
    batch = runner.make_decode_batch(2, seed=1)
    runner.execute_batch(batch)
    runner.release_graphs()
    runner.release_graphs()
    assert runner.released and runner.wrappers == [] and runner.captured_keys == []
    with pytest.raises(RuntimeError, match="released"):
        runner.execute_batch(batch)


def test_a_sweep_releases_each_units_runner():
    from cgdispatch.sweep.run import SweepSpec, iter_unit

    spec = SweepSpec(
        name="release",
        model="toy-tiny",
        modes=("FULL", "PIECEWISE"),
        ladders={"two": [2, 4]},
        max_capture_size=4,
        num_tokens=(1, 3),
        max_num_seqs=16,
        repeats=1,
        warmup=0,
        input_sets=2,
    )
    gc.collect()
    graphs0, pool0 = live_graph_count(), stand_in_pool_bytes()
    for mode in spec.modes:
        unit = iter_unit(spec, mode, "two", spec.shapes)
        rows = [next(unit)]  # the runner has captured; its graphs are alive now
        assert live_graph_count() > graphs0
        rows += list(unit)  # the unit ends: its runner is released
        assert {getattr(r, "status", "ok") for r in rows} == {"ok"}
        assert live_graph_count() == graphs0 and stand_in_pool_bytes() == pool0


def test_toy_and_hugging_face_models_are_runner_models():
    from cgdispatch.capture.model import RunnerModel

    toy = build_toy_model(TINY)
    assert isinstance(toy, RunnerModel) and toy.supports_mixed_batches is True
    pytest.importorskip("transformers")
    from cgdispatch.models.hf.presets import build_hf_model

    hf = build_hf_model("hf-llama-tiny")
    assert isinstance(hf, RunnerModel) and hf.supports_mixed_batches is False
    assert not isinstance(object(), RunnerModel)
