"""Whether one replica holds its traffic: the waiting queue and the token rates of a replay.

A replay of vLLM's scheduler over a request table (:class:`~cgdispatch.workload.exact_run.ExactRun`:
its step rows and its ``request_times()``) says when each request arrived and when it got
its first token. Traffic that one replica cannot hold shows as a waiting queue that grows
through the window while the replica serves fewer tokens a second than arrive; a p99 TTFT
measured then is the length of that queue, not a property of the capture sizes.

The rule (:attr:`Sustainability.sustainable`), on the window from the first arrival to the
last:

* the waiting queue ``W(t)``: requests that arrived by ``t`` and have no first token yet;
  ``queue_start`` and ``queue_end`` are its mean as seen by the arrivals of the window's
  first and last tenth (each arrival counts itself);
* the offered rate: the tokens the window's requests need computed (prompt plus output
  less one: the last output token is never fed back) over the window; the served rate:
  the tokens the steps starting inside the window computed, over the window.

The traffic is *unsustainable* when both hold: the queue grew by more than
:data:`QUEUE_GROWTH_SHARE` of the window's requests (and at least
:data:`QUEUE_GROWTH_MIN`), and the served rate is below the offered rate by more than
:data:`RATE_TOLERANCE`. Either alone is not enough: requests still running when the window
ends make the served rate a little short of the offered one under any load, and a queue
also grows under a burst that the window ends in (which this rule does call overload). A
window with all arrivals at one instant has no rate: it is taken as sustainable.

It measures; it decides nothing about ladders (``plan.tune`` does).
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np
import pandas as pd

__all__ = [
    "Sustainability",
    "sustainability",
    "waiting_seen_by_arrivals",
    "QUEUE_GROWTH_SHARE",
    "QUEUE_GROWTH_MIN",
    "RATE_TOLERANCE",
    "EDGE_SHARE",
]

QUEUE_GROWTH_SHARE = 0.05  # queue growth, as a share of the window's requests, that is growth
QUEUE_GROWTH_MIN = 4.0  # and at least this many requests (a short window's noise)
RATE_TOLERANCE = 0.05  # served below offered by more than this share
EDGE_SHARE = 0.1  # the first and last tenth of the window, where the queue is read


@dataclass(frozen=True)
class Sustainability:
    """The queue and the token rates of one replay over its arrival window (``model``
    figures: the replay's clock)."""

    num_requests: int  # requests arriving in the window
    window_s: float  # first arrival to last
    queue_start: float  # mean waiting requests seen by the first tenth's arrivals
    queue_end: float  # the same for the last tenth's
    offered_tok_s: float  # tokens the window's requests need computed, per second
    served_tok_s: float  # tokens the window's steps computed, per second

    @property
    def queue_growth(self) -> float:
        return self.queue_end - self.queue_start

    @property
    def sustainable(self) -> bool:
        """False when the queue grew (> :data:`QUEUE_GROWTH_SHARE` of the requests, at least
        :data:`QUEUE_GROWTH_MIN`) and fewer tokens were served than offered (by more than
        :data:`RATE_TOLERANCE`)."""
        if not self.window_s > 0:
            return True
        grew = self.queue_growth > max(QUEUE_GROWTH_MIN, QUEUE_GROWTH_SHARE * self.num_requests)
        short = self.served_tok_s < (1.0 - RATE_TOLERANCE) * self.offered_tok_s
        return not (grew and short)

    @property
    def load(self) -> float:
        """Offered over served tokens per second (> 1: more arrives than is served)."""
        return self.offered_tok_s / self.served_tok_s if self.served_tok_s > 0 else math.inf

    def as_dict(self) -> dict[str, Any]:
        return {**asdict(self), "sustainable": self.sustainable}


def waiting_seen_by_arrivals(arrival_s: np.ndarray, first_token_s: np.ndarray) -> np.ndarray:
    """For each request, in the given order: the requests waiting when it arrives (arrived
    at or before, no first token yet), itself included. ``W(t) = #(arrival <= t) -
    #(first token <= t)``, since a first token never comes before its arrival."""
    a = np.asarray(arrival_s, dtype=np.float64)
    f = np.asarray(first_token_s, dtype=np.float64)
    arrived = np.searchsorted(np.sort(a), a, side="right")
    started = np.searchsorted(np.sort(f), a, side="right")
    return (arrived - started).astype(np.float64)


def sustainability(times: pd.DataFrame, steps: pd.DataFrame) -> Sustainability:
    """:class:`Sustainability` of one replay: ``times`` with ``ExactRun.request_times()``'s
    columns (``arrival_s``, ``first_token_s``, ``prompt_tokens``, ``output_tokens``),
    ``steps`` with its step rows' ``time_s`` and ``num_tokens`` (the same clock)."""
    for name, frame, cols in (
        ("times", times, ("arrival_s", "first_token_s", "prompt_tokens", "output_tokens")),
        ("steps", steps, ("time_s", "num_tokens")),
    ):
        missing = [c for c in cols if c not in frame.columns]
        if missing:
            raise ValueError(
                f"{name} lacks columns {missing}: give a replay's request_times() and its "
                "step rows (ExactRun, simulate_latencies)"
            )
    if not len(times):
        raise ValueError("times is empty: sustainability needs at least one request")
    a = times["arrival_s"].to_numpy(dtype=np.float64)
    t0, t1 = float(a.min()), float(a.max())
    window = t1 - t0
    waiting = waiting_seen_by_arrivals(a, times["first_token_s"].to_numpy(dtype=np.float64))
    edge = EDGE_SHARE * window
    first, last = a <= t0 + edge, a >= t1 - edge
    work = (times["prompt_tokens"].to_numpy(np.int64) + times["output_tokens"].to_numpy(np.int64)
            - 1).clip(min=0)  # fmt: skip
    t = steps["time_s"].to_numpy(dtype=np.float64)
    inside = (t >= t0) & (t < t1)
    served = float(steps["num_tokens"].to_numpy(np.int64)[inside].sum())
    rate = (lambda tokens: tokens / window) if window > 0 else (lambda tokens: math.nan)
    return Sustainability(
        num_requests=len(a),
        window_s=window,
        queue_start=float(waiting[first].mean()),
        queue_end=float(waiting[last].mean()),
        offered_tok_s=rate(float(work.sum())),
        served_tok_s=rate(served),
    )
