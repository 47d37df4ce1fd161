"""Closed-loop arrivals in the replay of vLLM's scheduler: a client's concurrency limit
(``vllm bench serve --max-concurrency``) and session turns that wait on the previous
answer. Checked on fresh random traffic of every shape the replay models against
independent facts: the run equals the open-loop replay of the arrival times it realised,
the arrivals obey the semaphore's first-come rule and each turn's delay, and an open loop
(no limit, no delays) is untouched."""

from __future__ import annotations

import math
import random
import warnings

import numpy as np
import pandas as pd
import pytest

from cgdispatch.workload.closed_loop import closed_loop_for, with_max_concurrency
from cgdispatch.workload.prefix_presets import prefix_requests
from cgdispatch.workload.scheduler import SchedulerLimits, SchedulerSimulator
from tests.workload.test_vllm_steady_stretch import random_case


def _step_time(num_tokens: int, num_reqs: int) -> float:
    return 0.7 + 0.013 * num_tokens + 0.1 * num_reqs


def _run(req: pd.DataFrame, limits: SchedulerLimits):
    """(steps, request times), or the RuntimeError's text (a thrashing KV cache)."""
    sim = SchedulerSimulator(req, limits, step_time_ms=_step_time)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        try:
            return sim.run(), sim.exact.request_times()
        except RuntimeError as err:
            return str(err)


def _open_replay(req: pd.DataFrame, times: pd.DataFrame, limits: SchedulerLimits):
    """The ordinary (open-loop) replay of ``req`` with each request arriving when the closed
    loop sent it: no limit, no delays.

    Async, a finish is known only at the update of its call, which comes after the next
    call was scheduled at that same clock; so a request sent at a finish misses that call,
    and the open replay must have it arrive just after the finish, not at it."""
    fixed = req.drop(columns=["session_id", "turn", "delay_s"], errors="ignore")
    arrival = times["arrival_s"].to_numpy()
    if limits.is_async:
        at_finish = np.isin(arrival, times["finish_s"].to_numpy())
        arrival = np.where(at_finish, np.nextafter(arrival, np.inf), arrival)
    fixed = with_max_concurrency(fixed, None).assign(arrival_s=arrival)
    return _run(fixed, limits)


def _check_same_as_open_replay(req, limits, seed) -> tuple[pd.DataFrame, pd.DataFrame] | None:
    closed = _run(req, limits)
    if isinstance(closed, str):
        return None
    steps, times = closed
    assert times["arrival_s"].notna().all(), f"seed {seed}: a request never arrived"
    again = _open_replay(req.sort_values("arrival_s", kind="stable"), times, limits)
    assert not isinstance(again, str), f"seed {seed}: {again}"
    pd.testing.assert_frame_equal(steps, again[0], check_exact=True, obj=f"seed {seed} steps")
    expect = again[1].assign(arrival_s=times["arrival_s"])  # the nudge above, undone
    pd.testing.assert_frame_equal(times, expect, check_exact=True, obj=f"seed {seed} times")
    return steps, times


def _check_semaphore(req: pd.DataFrame, times: pd.DataFrame, limit: int, seed: int) -> None:
    """First come, first served on ``limit`` slots: the k-th request (by due time) arrives
    at its due time or when the (k - limit)-th slot frees (the finishes, in time order)."""
    due = req["arrival_s"].to_numpy()
    order = np.argsort(due, kind="stable")
    finishes = np.sort(times["finish_s"].to_numpy())
    for k, i in enumerate(order):
        expect = due[i] if k < limit else max(due[i], finishes[k - limit])
        assert times["arrival_s"].iloc[i] == expect, f"seed {seed}: request {i} (k={k})"
    # never more than ``limit`` in flight: count arrivals minus finishes at each arrival
    arrive = times["arrival_s"].to_numpy()
    for t in arrive:
        inflight = int((arrive <= t).sum() - (times["finish_s"].to_numpy() <= t).sum())
        assert inflight <= limit, f"seed {seed}: {inflight} in flight at {t}"


@pytest.mark.parametrize("chunk", range(2))
def test_max_concurrency_is_the_open_replay_of_its_arrivals(chunk: int) -> None:
    checked = 0
    for _ in range(12):
        seed = random.randrange(1 << 30)
        req, limits = random_case(seed)
        req = req.sort_values("arrival_s", kind="stable").reset_index(drop=True)
        limit = random.Random(seed).choice([1, 2, 5, 20])
        out = _check_same_as_open_replay(with_max_concurrency(req, limit), limits, seed)
        if out is not None:
            _check_semaphore(req, out[1], limit, seed)
            checked += 1
    assert checked, "every case thrashed: the test checked nothing"


def test_one_slot_runs_requests_one_at_a_time() -> None:
    seed = random.randrange(1 << 30)
    req, _ = random_case(seed)
    limits = SchedulerLimits(vllm_version=random.choice(["0.33", "0.34"]))
    steps, times = _run(with_max_concurrency(req, 1), limits)
    assert (steps["num_reqs"] == 1).all(), f"seed {seed}"
    t = times.sort_values("arrival_s")
    assert (t["arrival_s"].to_numpy()[1:] >= t["finish_s"].to_numpy()[:-1]).all(), f"seed {seed}"


def test_enough_slots_or_no_limit_change_nothing() -> None:
    """A limit no smaller than the requests never holds one back: the run is the open
    loop's, bit for bit; and a table without a limit or delays has no closed loop."""
    seed = random.randrange(1 << 30)
    req, limits = random_case(seed)
    assert closed_loop_for(req) is None
    open_ = _run(req, limits)
    wide = _run(with_max_concurrency(req, len(req)), limits)
    if isinstance(open_, str):
        assert open_ == wide
        return
    pd.testing.assert_frame_equal(open_[0], wide[0], check_exact=True, obj=f"seed {seed}")
    pd.testing.assert_frame_equal(open_[1], wide[1], check_exact=True, obj=f"seed {seed}")


@pytest.mark.parametrize("limit", [None, 3])
def test_session_turns_wait_on_the_previous_answer(limit) -> None:
    seed = random.randrange(1 << 30)
    rng = random.Random(seed)
    req = prefix_requests(60, "multi-turn", rate_per_s=rng.choice([0.5, 5.0, 50.0]), seed=seed)
    limits = SchedulerLimits(
        vllm_version=rng.choice(["0.33", "0.34"]),
        async_scheduling=rng.choice([True, False]),
        max_num_seqs=rng.choice([4, 256]),
    )
    out = _check_same_as_open_replay(with_max_concurrency(req, limit), limits, seed)
    assert out is not None
    times = out[1]
    for k in np.flatnonzero(req["delay_s"].notna().to_numpy()):
        prev = np.flatnonzero(
            (req["session_id"] == req["session_id"][k]) & (req["turn"] == req["turn"][k] - 1)
        )[0]
        earliest = times["finish_s"][prev] + req["delay_s"][k]
        if limit is None:
            assert times["arrival_s"][k] == earliest, f"seed {seed}: row {k}"
        else:
            assert times["arrival_s"][k] >= earliest, f"seed {seed}: row {k}"
    if limit is not None:
        _check_semaphore_inflight(times, limit, seed)
    for k in np.flatnonzero(req["delay_s"].isna().to_numpy()):
        if limit is None:
            assert times["arrival_s"][k] == req["arrival_s"][k]  # first turns keep their time
    assert not math.isnan(times["finish_s"].max())


def _check_semaphore_inflight(times: pd.DataFrame, limit: int, seed: int) -> None:
    arrive, finish = times["arrival_s"].to_numpy(), times["finish_s"].to_numpy()
    for t in arrive:
        assert int((arrive <= t).sum() - (finish <= t).sum()) <= limit, f"seed {seed}"


def test_bad_concurrency_is_refused_and_orphan_turns_keep_their_time() -> None:
    req = pd.DataFrame({"arrival_s": [0.0, 1.0], "prompt_tokens": [5, 6], "output_tokens": [3, 4]})
    with pytest.raises(ValueError, match="max_concurrency"):
        with_max_concurrency(req, 0)
    # a turn whose previous turn is not in the table (cut off by a held-out split) keeps
    # its own arrival time
    orphan = req.assign(session_id=[0, 0], turn=[0, 2], delay_s=[np.nan, 1.0])
    limits = SchedulerLimits(vllm_version="0.34")
    got = _run(orphan, limits)[1]
    assert got["arrival_s"].tolist() == req["arrival_s"].tolist()


@pytest.mark.parametrize(
    ("column", "value", "match"),
    [("delay_s", -1.0, "delay_s=-1.0 is invalid"), ("delay_s", np.inf, "delay_s=inf is invalid"),
     ("turn", -1, "turn=-1.0 is invalid"), ("session_id", 0.5, "session_id=0.5 is invalid")],
)  # fmt: skip
def test_bad_session_cells_name_their_row(column, value, match) -> None:
    req = pd.DataFrame({"arrival_s": [0.0, 1.0], "prompt_tokens": [5, 6], "output_tokens": [3, 4],
                        "session_id": [0, 0], "turn": [0, 1], "delay_s": [np.nan, 1.0]})  # fmt: skip
    req[column] = req[column].astype(float)
    req.loc[1, column] = value
    with pytest.raises(ValueError, match=f"row 1: {match}"):
        _run(req, SchedulerLimits(vllm_version="0.34"))
