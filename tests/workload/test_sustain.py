"""Whether one replica holds its traffic: the waiting queue and token rates of a replay of
vLLM's scheduler, checked against direct counts from the replay's arrivals, first tokens
and steps, and the rule against traffic whose load is known from a constant step clock."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from cgdispatch.workload.latency import simulate_latencies
from cgdispatch.workload.scheduler import SchedulerLimits
from cgdispatch.workload.sustain import (
    EDGE_SHARE,
    QUEUE_GROWTH_MIN,
    QUEUE_GROWTH_SHARE,
    RATE_TOLERANCE,
    sustainability,
    waiting_seen_by_arrivals,
)

STEP_MS = 5.0  # the constant clock: every step that runs takes this long
BUDGET = 512  # max_num_batched_tokens: at most BUDGET / STEP_MS tokens a ms


def _clock(num_tokens: int, num_reqs: int) -> float:
    return STEP_MS if num_tokens else 0.0


def _requests(rng: np.random.Generator, n: int, window_s: float) -> pd.DataFrame:
    return pd.DataFrame(
        {
            "arrival_s": np.sort(rng.uniform(0, window_s, n)),
            "prompt_tokens": rng.integers(50, 400, n),
            "output_tokens": rng.integers(2, 60, n),
        }
    )


def _replay(requests: pd.DataFrame, version: str):
    limits = SchedulerLimits(vllm_version=version, max_num_seqs=16, max_num_batched_tokens=BUDGET)
    return simulate_latencies(requests, limits, step_time_ms=_clock)


def _direct(requests: pd.DataFrame, times: pd.DataFrame, steps: pd.DataFrame) -> dict:
    """The figures by plain loops: the queue each arrival sees, the window's work and the
    tokens of the steps inside it."""
    a = times["arrival_s"].to_numpy()
    f = times["first_token_s"].to_numpy()
    seen = np.array([sum(1 for j in range(len(a)) if a[j] <= t < f[j]) for t in a], dtype=float)
    t0, t1 = a.min(), a.max()
    edge = EDGE_SHARE * (t1 - t0)
    work = sum(
        max(0, int(p) + int(o) - 1) for p, o in zip(times["prompt_tokens"], times["output_tokens"])
    )
    served = sum(int(n) for t, n in zip(steps["time_s"], steps["num_tokens"]) if t0 <= t < t1)
    out = {
        "queue_start": seen[a <= t0 + edge].mean(),
        "queue_end": seen[a >= t1 - edge].mean(),
        "offered_tok_s": work / (t1 - t0),
        "served_tok_s": served / (t1 - t0),
    }
    grew = out["queue_end"] - out["queue_start"] > max(
        QUEUE_GROWTH_MIN, QUEUE_GROWTH_SHARE * len(a)
    )
    short = out["served_tok_s"] < (1 - RATE_TOLERANCE) * out["offered_tok_s"]
    out["sustainable"] = not (grew and short)
    return out


def test_the_queue_seen_by_arrivals_is_a_direct_count() -> None:
    rng = np.random.default_rng()
    n = int(rng.integers(20, 200))
    a = rng.uniform(0, 10, n)
    a[: n // 4] = a[0]  # ties at one instant
    f = a + rng.exponential(rng.uniform(0.1, 5), n)
    want = [sum(1 for j in range(n) if a[j] <= t < f[j]) for t in a]
    np.testing.assert_array_equal(waiting_seen_by_arrivals(a, f), want)


@pytest.mark.parametrize("version", ["0.33", "0.34"])
@pytest.mark.parametrize("load", [0.2, 1.0, 4.0])
def test_the_figures_are_the_replays_counted_directly(version: str, load: float) -> None:
    rng = np.random.default_rng()
    n = int(rng.integers(80, 200))
    req = _requests(rng, n, 1.0)
    work = float((req["prompt_tokens"] + req["output_tokens"] - 1).sum())
    # arrivals spread so that work / window is ``load`` times the most a step clock serves
    window = work / (load * BUDGET / (STEP_MS / 1e3))
    req["arrival_s"] = req["arrival_s"] * window
    run = _replay(req, version)
    got = sustainability(run.requests, run.steps)
    want = _direct(req, run.requests, run.steps)
    for key in ("queue_start", "queue_end", "offered_tok_s", "served_tok_s"):
        assert getattr(got, key) == pytest.approx(want[key]), key
    assert got.sustainable == want["sustainable"]
    assert got.num_requests == n and got.window_s == pytest.approx(np.ptp(req["arrival_s"]))


@pytest.mark.parametrize("version", ["0.33", "0.34"])
def test_traffic_far_above_what_steps_can_serve_is_unsustainable(version: str) -> None:
    """Offered at 3-6x the most the clock can serve (BUDGET tokens a step): the queue grows
    and the served rate falls short, whatever the draw."""
    rng = np.random.default_rng()
    req = _requests(rng, int(rng.integers(150, 300)), 1.0)
    work = float((req["prompt_tokens"] + req["output_tokens"] - 1).sum())
    ceiling = BUDGET / (STEP_MS / 1e3)  # tokens a second at full steps
    req["arrival_s"] *= work / (rng.uniform(3, 6) * ceiling) / req["arrival_s"].max()
    run = _replay(req, version)
    held = sustainability(run.requests, run.steps)
    assert not held.sustainable
    assert held.served_tok_s <= ceiling * (1 + 1e-9) < held.offered_tok_s
    assert held.queue_end > held.queue_start


@pytest.mark.parametrize("version", ["0.33", "0.34"])
def test_traffic_a_replica_keeps_up_with_is_sustainable(version: str) -> None:
    """Arrivals spaced by about one request's own service time (prefill steps plus one step
    per output token): a few requests at a time, far below 16 running."""
    rng = np.random.default_rng()
    n = int(rng.integers(100, 250))
    req = _requests(rng, n, 1.0)
    alone_s = (np.ceil(req["prompt_tokens"] / BUDGET) + req["output_tokens"]) * STEP_MS / 1e3
    gaps = rng.exponential(float(alone_s.mean()), n)
    req["arrival_s"] = np.cumsum(gaps) - gaps[0]
    run = _replay(req, version)
    held = sustainability(run.requests, run.steps)
    assert held.sustainable
    assert held.queue_end - held.queue_start <= max(QUEUE_GROWTH_MIN, QUEUE_GROWTH_SHARE * n)


def test_one_instant_and_bad_frames() -> None:
    times = pd.DataFrame(
        {"arrival_s": [1.0, 1.0], "first_token_s": [2.0, 3.0], "prompt_tokens": [5, 5],
         "output_tokens": [2, 2]}
    )  # fmt: skip
    steps = pd.DataFrame({"time_s": [1.0, 2.0], "num_tokens": [10, 2]})
    assert sustainability(times, steps).sustainable  # no window: no rate to judge
    with pytest.raises(ValueError, match="lacks columns"):
        sustainability(times.drop(columns="first_token_s"), steps)
    with pytest.raises(ValueError, match="empty"):
        sustainability(times.iloc[:0], steps)
