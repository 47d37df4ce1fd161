"""tune's bands: the step difference splits into padding and mode parts that add up to it;
a gain whose parts cancel is not measurable, and tune then says so and keeps vLLM's
default; the Pareto set keeps exactly the ladders no other beats (against brute force)."""

from __future__ import annotations

import itertools

import numpy as np
import pytest

from cgdispatch import GraphConfig
from cgdispatch.estimate.uncertainty import MODEL_ERRORS
from cgdispatch.plan.costs import AffineCostModel
from cgdispatch.plan.tune import tune
from cgdispatch.plan.tune_bands import pareto_set, step_band
from cgdispatch.views.numbers import duration
from cgdispatch.views.tune_verdict import verdict_lines
from cgdispatch.workload.trace import make_trace


class MemoryAffine(AffineCostModel):
    def capture_time_s(self, mode, n):  # noqa: ANN001, ANN201
        return 0.01 + 1e-4 * np.asarray(n, dtype=np.float64)


def _v1(sizes: list[int]) -> GraphConfig:
    return GraphConfig(
        vllm_version="0.33", cudagraph_capture_sizes=sizes, max_num_seqs=64,
        max_num_batched_tokens=512,
    ).resolve()  # fmt: skip


def test_parts_add_up_and_a_cancelling_trade_is_inside_the_band():
    """The plan pads 3- and 5-token decodes to 8 (a graph); the default runs them eager.
    With an eager overhead equal to the padding's cost the mean difference is near 0 while
    both parts are large: the model band (step error x both parts) exceeds the gain."""
    rng = np.random.default_rng()
    sizes = rng.choice([3, 5], 400)
    trace = make_trace(sizes, uniform_decode=True)
    per_token = float(rng.uniform(0.01, 0.05))
    pad = per_token * (8 - sizes).mean()  # mean padding cost of the plan
    model = AffineCostModel(base_ms={"NONE": 2.0 + pad, "PIECEWISE": 2.0, "FULL": 2.0},
                            per_token_ms=per_token)  # fmt: skip
    band = step_band(trace, _v1([8]), _v1([2]), model, MODEL_ERRORS.step_time)
    assert band.padding_ms + band.mode_ms == pytest.approx(band.delta_ms)
    assert band.padding_ms == pytest.approx(pad) and band.mode_ms == pytest.approx(-pad)
    assert abs(band.delta_ms) < 1e-9 < band.band_ms
    assert band.model_ms == pytest.approx(MODEL_ERRORS.step_time * 2 * pad)
    # the padding part carries the kernel error, the mode part the launch-overhead error
    split = step_band(trace, _v1([8]), _v1([2]), model, MODEL_ERRORS.step_kernels,
                      MODEL_ERRORS.step_time)  # fmt: skip
    expected = (MODEL_ERRORS.step_kernels + MODEL_ERRORS.step_time) * pad
    assert split.model_ms == pytest.approx(expected)


def test_tune_says_no_measurable_difference_when_the_plan_cannot_beat_the_default():
    """Traffic on vLLM's own sizes only: the plan pads nothing the default pads, so its
    gain is zero, and tune keeps the default with the words of the verdict."""
    rng = np.random.default_rng()
    config = GraphConfig(vllm_version="0.33", max_num_seqs=32, max_num_batched_tokens=512)
    config = config.resolve()
    sizes = rng.choice([1, 2, 4, 8, 16, 24, 32], 900)
    trace = make_trace(sizes, uniform_decode=True)
    result = tune(trace, config=config, cost_model=MemoryAffine(), max_graphs=40)
    assert result.objective == "step" and result.gain == pytest.approx(0.0, abs=1e-12)
    assert result.reason == "no measurable difference"
    assert result.recommendation == "vllm default"
    lines = verdict_lines(result, model="m", device="d")
    assert lines[0].startswith("recommendation: no measurable difference: keep vLLM's default")
    assert "--compilation-config" not in lines[-1]


def test_a_measurable_gain_is_recommended_and_its_band_printed():
    """Decodes between vLLM's sizes (5, 7, 13 pad to 8, 8, 16): a plan with those sizes
    gains more than its band."""
    config = GraphConfig(vllm_version="0.33", max_num_seqs=32, max_num_batched_tokens=512)
    trace = make_trace(np.tile([5, 7, 13], 300), uniform_decode=True)
    result = tune(trace, config=config.resolve(), cost_model=MemoryAffine(), max_graphs=8)
    assert result.gain > result.band > 0 and result.recommendation == "planned"
    row = next(line for line in verdict_lines(result, model="m", device="d")
               if line.startswith("mean step time"))  # fmt: skip
    assert "(judged)" in row and "\u00b1" in row


def test_pareto_set_equals_brute_force():
    rng = np.random.default_rng()
    keys = ("mean_step_ms", "graph_memory_bytes", "capture_s")
    figures = {
        f"l{i}": {k: float(rng.integers(1, 6)) for k in keys} for i in range(9)
    }  # small integers: ties and dominance both occur
    expected = []
    for name, f in figures.items():
        dominated = any(
            all(g[k] <= f[k] for k in keys) and any(g[k] < f[k] for k in keys)
            for other, g in figures.items() if other != name
        )  # fmt: skip
        if not dominated:
            expected.append(name)
    assert pareto_set(figures) == expected
    for a, b in itertools.combinations(pareto_set(figures), 2):
        fa, fb = figures[a], figures[b]
        assert not all(fa[k] <= fb[k] for k in keys) or fa == fb or any(fa[k] > fb[k] for k in keys)


@pytest.mark.parametrize(("device", "expected"), [("H200", "fitted"), ("A100", "other")])
def test_tune_judges_with_the_errors_of_its_device(device: str, expected: str) -> None:
    """On the fitted runs' architecture (Hopper) the bands are the H100 fit's; on another
    GPU they are the held-out errors logged on other GPUs, wider, so a startup gain that
    clears the H200's band may not clear the A100's."""
    from cgdispatch.estimate.device_model import device_cost_model
    from cgdispatch.estimate.uncertainty import OTHER_GPU_ERRORS

    rng = np.random.default_rng()
    config = GraphConfig(vllm_version="0.33", max_num_seqs=32, max_num_batched_tokens=512)
    trace = make_trace(rng.choice([3, 5, 7, 13, 21], 600), uniform_decode=True)
    model = device_cost_model("llama-3.1-8b", device)
    result = tune(trace, config=config.resolve(), cost_model=model, max_graphs=8,
                  objective="startup")  # fmt: skip
    errors = MODEL_ERRORS if expected == "fitted" else OTHER_GPU_ERRORS
    assert result.errors is errors
    assert result.band == pytest.approx(errors.capture * abs(result.gain), rel=1e-9)


def test_a_loss_inside_the_band_is_said_as_worse_never_as_a_negative_gain():
    import dataclasses

    rng = np.random.default_rng()
    config = GraphConfig(vllm_version="0.33", max_num_seqs=32, max_num_batched_tokens=512)
    trace = make_trace(rng.choice([1, 2, 4, 8, 16], 600), uniform_decode=True)
    result = tune(trace, config=config.resolve(), cost_model=MemoryAffine(), max_graphs=40)
    loss = float(rng.uniform(0.01, 5.0))
    worse = dataclasses.replace(result, gain=-loss, band=2 * loss)
    head = verdict_lines(worse, model="m", device="d")[0]
    assert f"is worse by {duration(loss)}, inside the" in head and "gain of -" not in head
    better = dataclasses.replace(result, gain=loss, band=2 * loss)
    assert (
        f"gain of {duration(loss, sign=True)} is inside the"
        in verdict_lines(better, model="m", device="d")[0]
    )
