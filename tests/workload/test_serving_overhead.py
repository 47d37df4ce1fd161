"""The host-side serving overhead on the replay's clock: per step (paced by the slower of GPU
and host), per request at the front end (shared by the requests in it) and in the tokenizer's
micro-batches (first come first served), off by default for exact steps."""

from __future__ import annotations

import heapq
import math

import numpy as np
import pandas as pd
import pytest

from cgdispatch.core.config import GraphConfig
from cgdispatch.core.modes import CUDAGraphMode
from cgdispatch.workload.closed_loop import with_max_concurrency
from cgdispatch.workload.latency import dispatched_step_time, serving_step_time, simulate_latencies
from cgdispatch.workload.limits import SchedulerLimits
from cgdispatch.workload.serving_overhead import (
    NO_SERVING_OVERHEAD,
    TOKENIZER_BATCH_WAIT_S,
    TOKENIZER_MAX_BATCH,
    VLLM_SERVING_OVERHEAD,
    ServingOverhead,
    front_end_arrivals_s,
    tokenizer_batches_s,
)


class Constant:
    """A cost model whose every step takes ``ms`` (model)."""

    def __init__(self, ms: float) -> None:
        self.ms = ms

    def step_time_ms(self, mode: CUDAGraphMode, num_tokens: np.ndarray) -> np.ndarray:
        return np.full(len(np.atleast_1d(num_tokens)), self.ms)


CFG = GraphConfig(cudagraph_capture_sizes=[1, 2, 4, 8], cudagraph_mode="FULL_AND_PIECEWISE")


def _requests(rng: np.random.Generator, n: int, gap_s: float) -> pd.DataFrame:
    return pd.DataFrame(
        {
            "arrival_s": np.cumsum(rng.uniform(gap_s, 2 * gap_s, n)),
            "prompt_tokens": rng.integers(1, 500, n),
            "output_tokens": rng.integers(1, 40, n),
        }
    )


@pytest.mark.parametrize("bad", [-1.0, math.nan, math.inf, "x", True, 1e9])
def test_bad_overheads_are_refused_by_name(bad: object) -> None:
    for name in ("front_end_ms", "step_ms", "step_request_ms", "request_latency_ms", "tokenize_ms"):
        with pytest.raises(ValueError, match=name):
            ServingOverhead(**{name: bad})  # type: ignore[arg-type]


def test_step_overhead_is_monotone_in_requests_and_zero_when_off() -> None:
    rng = np.random.default_rng()
    for _ in range(20):
        over = ServingOverhead(*rng.uniform(0, 5, 4))
        reqs = np.sort(rng.integers(1, 2000, 30))
        host = [over.step_overhead_ms(int(n)) for n in reqs]
        assert np.all(np.diff(host) >= 0)
        assert host == pytest.approx(over.step_ms + over.step_request_ms * reqs)
        assert over.step_overhead_ms(0) == 0.0
        assert NO_SERVING_OVERHEAD.step_overhead_ms(int(reqs[-1])) == 0.0
        gpu = float(rng.uniform(0, 50))
        assert over.paced_ms(gpu, int(reqs[0])) == max(gpu, host[0])
    assert NO_SERVING_OVERHEAD.is_off and not VLLM_SERVING_OVERHEAD.is_off


def _shared_by_remaining_work(sent: np.ndarray, cost_s: float) -> np.ndarray:
    """Processor sharing simulated the plain way, without its order property: every request
    in the front end keeps its remaining work, all of it shrinks at 1 / (requests inside)
    per second, and the next event is the nearest send or the first to run out."""
    left = {}  # request -> remaining work (s)
    done = np.full(len(sent), math.nan)
    clock, nxt = float(sent[0]), 0
    while nxt < len(sent) or left:
        k = len(left)
        out_s = clock + min(left.values()) * k if k else math.inf
        in_s = float(sent[nxt]) if nxt < len(sent) else math.inf
        t = min(in_s, out_s)
        for i in left:
            left[i] -= (t - clock) / k
        clock = t
        for i in [i for i, w in left.items() if w <= 1e-12]:
            done[i] = clock
            del left[i]
        while nxt < len(sent) and float(sent[nxt]) <= clock:
            left[nxt] = cost_s
            nxt += 1
    return done


def _bursty_times(
    rng: np.random.Generator, n: int, span_s: tuple[float, float], together: float
) -> np.ndarray:
    """``n`` sorted times over a span drawn from ``span_s`` (seconds), a share ``together``
    of them equal to the first (sent or ready at once)."""
    times = np.sort(rng.uniform(0, float(rng.uniform(*span_s)), n))
    times[rng.random(n) < together] = times[0]
    return np.sort(times)


def test_front_end_is_shared_by_the_requests_in_it() -> None:
    rng = np.random.default_rng()
    for _ in range(30):
        sent = _bursty_times(rng, int(rng.integers(1, 120)), (0.01, 3), 0.3)  # as at rate inf
        cost_ms = float(rng.uniform(1, 30))
        want = _shared_by_remaining_work(sent, cost_ms / 1e3)
        np.testing.assert_allclose(front_end_arrivals_s(sent, cost_ms), want, rtol=0, atol=1e-9)
        lat_ms = float(rng.uniform(1, 100))  # in flight after the front end, not shared
        np.testing.assert_allclose(
            front_end_arrivals_s(sent, cost_ms, lat_ms), want + lat_ms / 1e3, atol=1e-9
        )
    np.testing.assert_array_equal(front_end_arrivals_s(sent, 0.0), sent)
    with pytest.raises(ValueError, match="sorted"):
        front_end_arrivals_s(np.array([1.0, 0.5]), cost_ms)


def test_a_burst_reaches_the_scheduler_together_and_a_lone_request_at_once() -> None:
    """n requests sent at one instant all leave it n front ends later (not one every front
    end); requests farther apart than the front end's time each wait it alone."""
    rng = np.random.default_rng()
    n, cost_ms, t0 = int(rng.integers(2, 500)), float(rng.uniform(1, 30)), float(rng.uniform(0, 9))
    got = front_end_arrivals_s(np.full(n, t0), cost_ms)
    np.testing.assert_allclose(got, t0 + n * cost_ms / 1e3, rtol=1e-12)
    apart = np.cumsum(rng.uniform(1.01, 3.0, n)) * cost_ms / 1e3
    np.testing.assert_allclose(front_end_arrivals_s(apart, cost_ms), apart + cost_ms / 1e3)


def test_off_is_the_plain_dispatched_clock() -> None:
    rng = np.random.default_rng()
    req = _requests(rng, 60, 0.01)
    lim = SchedulerLimits(max_num_seqs=8, max_num_batched_tokens=512)
    plain = simulate_latencies(req, lim, step_time_ms=dispatched_step_time(CFG, Constant(7.0)))
    off = simulate_latencies(
        req, lim, step_time_ms=serving_step_time(CFG, Constant(7.0), overhead=None)
    )
    pd.testing.assert_frame_equal(plain.steps, off.steps)
    pd.testing.assert_frame_equal(plain.requests, off.requests)


def test_front_end_adds_its_time_to_each_lone_request() -> None:
    """Requests far apart never share a step: with the front end each one's TTFT and end to
    end grow by exactly its time, and nothing else changes."""
    rng = np.random.default_rng()
    step_ms, front_ms = float(rng.uniform(2, 10)), float(rng.uniform(5, 60))
    lat_ms = float(rng.uniform(0, 60))
    req = _requests(rng, 40, 5.0)
    lim = SchedulerLimits(max_num_seqs=8, max_num_batched_tokens=512)
    base = simulate_latencies(req, lim, step_time_ms=dispatched_step_time(CFG, Constant(step_ms)))
    over = ServingOverhead(front_end_ms=front_ms, request_latency_ms=lat_ms)
    front_ms += lat_ms  # what a lone request waits before the scheduler sees it
    got = simulate_latencies(
        req, lim, step_time_ms=dispatched_step_time(CFG, Constant(step_ms), overhead=over)
    )
    b, g = base.requests, got.requests
    np.testing.assert_allclose(g["arrival_s"], b["arrival_s"])  # counted from the send
    np.testing.assert_allclose(g["ttft_s"], b["ttft_s"] + front_ms / 1e3, atol=1e-9)
    np.testing.assert_allclose(g["e2e_s"], b["e2e_s"] + front_ms / 1e3, atol=1e-9)
    assert len(got.steps) == len(base.steps)


def test_host_time_paces_steps_it_exceeds() -> None:
    """Each step lasts the slower of the GPU step and the host's time for its requests:
    the gaps between step starts, recomputed from each step's request count."""
    rng = np.random.default_rng()
    gpu_ms = float(rng.uniform(1, 5))
    over = ServingOverhead(
        step_ms=float(rng.uniform(0, 2)), step_request_ms=float(rng.uniform(0.2, 1))
    )
    req = _requests(rng, 80, 1e-4)
    req["arrival_s"] = 0.0  # all at once: steps follow each other with no idle gap
    lim = SchedulerLimits(max_num_seqs=16, max_num_batched_tokens=256)
    run = simulate_latencies(
        req, lim, step_time_ms=dispatched_step_time(CFG, Constant(gpu_ms), overhead=over)
    )
    steps = run.steps[run.steps["num_tokens"] > 0]
    want = [max(gpu_ms, over.step_ms + over.step_request_ms * n) for n in steps["num_reqs"]]
    np.testing.assert_allclose(np.diff(steps["time_s"].to_numpy()) * 1e3, want[:-1], rtol=1e-9)
    base = simulate_latencies(req, lim, step_time_ms=dispatched_step_time(CFG, Constant(gpu_ms)))
    assert run.requests["finish_s"].max() >= base.requests["finish_s"].max()


def test_closed_loop_waits_on_the_front_end() -> None:
    """One request in flight at a time: each is sent when the previous one finished and
    its TTFT is the front end's time plus its steps."""
    rng = np.random.default_rng()
    step_ms, front_ms = float(rng.uniform(2, 10)), float(rng.uniform(5, 60))
    req = _requests(rng, 30, 0.0)
    req["arrival_s"] = 0.0
    lim = SchedulerLimits(max_num_seqs=8, max_num_batched_tokens=512)
    lat_ms = float(rng.uniform(0, 60))
    over = ServingOverhead(front_end_ms=front_ms, request_latency_ms=lat_ms)
    front_ms += lat_ms
    step = dispatched_step_time(CFG, Constant(step_ms), overhead=over)
    got = simulate_latencies(with_max_concurrency(req, 1), lim, step_time_ms=step).requests
    got = got.sort_values("arrival_s")
    prefill_steps = np.ceil(got["prompt_tokens"] / 512)
    np.testing.assert_allclose(
        got["ttft_s"], front_ms / 1e3 + prefill_steps * step_ms / 1e3, rtol=1e-9
    )
    # the next request is sent when the previous one finished
    np.testing.assert_allclose(
        got["arrival_s"].to_numpy()[1:], got["finish_s"].to_numpy()[:-1], rtol=1e-9
    )


def test_the_serving_clock_carries_the_fitted_overhead_and_the_plain_one_none() -> None:
    assert serving_step_time(CFG, Constant(1.0)).serving_overhead == VLLM_SERVING_OVERHEAD
    assert dispatched_step_time(CFG, Constant(1.0)).serving_overhead.is_off
    with pytest.raises(ValueError, match="overhead"):
        dispatched_step_time(CFG, Constant(1.0), overhead=3.0)  # type: ignore[arg-type]


def _batcher_by_events(ready: np.ndarray, cost_s: float, size: int, wait_s: float) -> np.ndarray:
    """The tokenizer's batching task walked event by event (a heap of arrivals, window ends
    and batch ends), the way its loop reads: idle, it waits for a request; with one, it
    collects until ``size`` or ``wait_s`` after it began; then it runs the batch."""
    events = [(float(t), 0, i) for i, t in enumerate(ready)]  # (time, kind, request)
    heapq.heapify(events)  # kind 0: a request ready; 1: the window ends; 2: the batch ends
    queue: list[int] = []
    batch: list[int] = []
    state, done, serial = "idle", np.full(len(ready), math.nan), 0  # serial: the batch's number

    def close(t: float) -> None:
        nonlocal state
        state = "running"
        heapq.heappush(events, (t + cost_s * len(batch), 2, -1))

    def begin(t: float) -> None:
        nonlocal state, serial
        state, serial = "collecting", serial + 1
        while queue and len(batch) < size:
            batch.append(queue.pop(0))
        if len(batch) == size:
            close(t)
        else:
            heapq.heappush(events, (t + wait_s, 1, serial))  # a stale one is ignored

    while events:
        t, kind, i = heapq.heappop(events)
        if kind == 0:
            queue.append(i)
            if state == "idle":
                begin(t)
            elif state == "collecting":
                batch.append(queue.pop(0))
                if len(batch) == size:
                    close(t)
        elif kind == 1 and state == "collecting" and i == serial:
            close(t)
        elif kind == 2:
            done[batch] = t
            batch = []
            state = "idle"
            if queue:
                begin(t)
    return done


def test_tokenizer_batches_match_an_event_walk() -> None:
    rng = np.random.default_rng()
    for _ in range(40):
        n = int(rng.integers(1, 300))
        ready = _bursty_times(rng, n, (0.001, 2), 0.4)  # bursts, as a shared front end lets out
        cost_ms, size = float(rng.uniform(0.05, 20)), int(rng.integers(1, 40))
        wait_s = float(rng.choice([0.0, TOKENIZER_BATCH_WAIT_S, rng.uniform(0, 0.02)]))
        want = _batcher_by_events(ready, cost_ms / 1e3, size, wait_s)
        got = tokenizer_batches_s(ready, cost_ms, size, wait_s)
        np.testing.assert_allclose(got, want, rtol=0, atol=1e-9)
    np.testing.assert_array_equal(tokenizer_batches_s(ready, 0.0), ready)  # 0: no stage
    with pytest.raises(ValueError, match="sorted"):
        tokenizer_batches_s(np.array([1.0, 0.5]), 1.0)
    with pytest.raises(ValueError, match="max_batch"):
        tokenizer_batches_s(ready, 1.0, 0)


def test_a_burst_leaves_the_tokenizer_in_full_batches_and_a_lone_request_after_the_window() -> None:
    """n requests ready at once leave in batches of 32, batch k at k * 32 tokenizer times
    (no window: each batch is full when taken), the last, partial one after the window too;
    a lone request waits the window and its own time."""
    rng = np.random.default_rng()
    n, cost_ms, t0 = (
        int(rng.integers(33, 2000)),
        float(rng.uniform(0.1, 10)),
        float(rng.uniform(0, 9)),
    )
    got = tokenizer_batches_s(np.full(n, t0), cost_ms)
    k, b = np.arange(n) // TOKENIZER_MAX_BATCH, TOKENIZER_MAX_BATCH
    want = t0 + (k + 1) * b * cost_ms / 1e3
    tail = n % b
    if tail:  # the last batch waits out the window, then takes its `tail` requests' time
        want[-tail:] = (
            t0 + (n // b) * b * cost_ms / 1e3 + TOKENIZER_BATCH_WAIT_S + tail * cost_ms / 1e3
        )
    np.testing.assert_allclose(got, want, rtol=1e-12)
    apart = np.cumsum(rng.uniform(1.01, 3.0, 50)) * (cost_ms / 1e3 + TOKENIZER_BATCH_WAIT_S)
    np.testing.assert_allclose(
        tokenizer_batches_s(apart, cost_ms), apart + TOKENIZER_BATCH_WAIT_S + cost_ms / 1e3
    )


def test_reach_is_the_shared_front_end_then_the_tokenizer_then_flight() -> None:
    """ServingOverhead.reach_s against the two stages walked independently: processor
    sharing by remaining work, then the batching task event by event, then the flight."""
    rng = np.random.default_rng()
    for _ in range(20):
        n = int(rng.integers(1, 200))
        sent = np.sort(rng.uniform(0, float(rng.uniform(0.01, 2)), n))
        sent[rng.random(n) < 0.5] = sent[0]
        sent = np.sort(sent)
        front, tok, lat = rng.uniform(0.5, 25), rng.uniform(0.05, 15), rng.uniform(0, 60)
        over = ServingOverhead(front_end_ms=front, tokenize_ms=tok, request_latency_ms=lat)
        shared = _shared_by_remaining_work(sent, front / 1e3)
        order = np.argsort(shared, kind="stable")  # leaving order: the batcher's queue order
        batched = np.empty(n)
        batched[order] = _batcher_by_events(
            shared[order], tok / 1e3, TOKENIZER_MAX_BATCH, TOKENIZER_BATCH_WAIT_S
        )
        np.testing.assert_allclose(over.reach_s(sent), batched + lat / 1e3, rtol=0, atol=1e-9)


def test_tokenizer_adds_its_window_and_time_to_each_lone_request() -> None:
    """Requests far apart, open loop and closed loop (one in flight): each TTFT grows by
    the front end, the batching window, the tokenizer's time and the flight, exactly."""
    rng = np.random.default_rng()
    step_ms, front_ms = float(rng.uniform(2, 10)), float(rng.uniform(5, 60))
    tok_ms, lat_ms = float(rng.uniform(0.1, 20)), float(rng.uniform(0, 60))
    req = _requests(rng, 30, 5.0)
    lim = SchedulerLimits(max_num_seqs=8, max_num_batched_tokens=512)
    over = ServingOverhead(front_end_ms=front_ms, tokenize_ms=tok_ms, request_latency_ms=lat_ms)
    added_s = (front_ms + tok_ms + lat_ms) / 1e3 + TOKENIZER_BATCH_WAIT_S
    base = simulate_latencies(req, lim, step_time_ms=dispatched_step_time(CFG, Constant(step_ms)))
    step = dispatched_step_time(CFG, Constant(step_ms), overhead=over)
    got = simulate_latencies(req, lim, step_time_ms=step)
    np.testing.assert_allclose(got.requests["ttft_s"], base.requests["ttft_s"] + added_s, atol=1e-9)
    req["arrival_s"] = 0.0
    closed = simulate_latencies(with_max_concurrency(req, 1), lim, step_time_ms=step).requests
    closed = closed.sort_values("arrival_s")
    prefill_steps = np.ceil(closed["prompt_tokens"] / 512)
    np.testing.assert_allclose(closed["ttft_s"], added_s + prefill_steps * step_ms / 1e3, rtol=1e-9)
