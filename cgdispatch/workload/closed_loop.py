"""Arrivals that wait on the replay's finishes: benchmark clients that keep at most N requests
in flight (``vllm bench serve --max-concurrency N``) and chat sessions whose next turn comes
a think time after the previous answer (mooncake_trace ``delay``, the multi-turn preset).

A request table asks for them with ``delay_s`` (and ``session_id``/``turn``) columns and
with :func:`with_max_concurrency` (a table attribute, kept by the table's copies and
slices). :class:`ClosedLoop` is the arrival source the engine loop
(:func:`~cgdispatch.workload.vllm_engine.run_engine`) reads instead of fixed times when a
table asks; without either, the replay keeps its fixed arrival times and is unchanged.

The client is vLLM's benchmark's (``vllm/benchmarks/serve.py``, 0.33 and 0.34): each
request is due at its own time (``arrival_s``: the request rate's schedule, ``inf`` rate
all at 0) and then waits on an ``asyncio.Semaphore(max_concurrency)`` whose waiters are
served first come, first served; a slot frees when a request's last token comes back. A
turn with a delay is due ``delay_s`` after its session's previous turn finished, then waits
for a slot likewise. A finish is known when its step's output is processed: sync, before the
next schedule call; async, after it (the next step was scheduled at that same clock), so a
request sent at that finish joins the call after. Its recorded arrival is the finish time.
"""

from __future__ import annotations

import heapq
import math
from collections import deque

import numpy as np
import pandas as pd

from ..core.validate import MAX_REQUESTS, check_int
from .serving_overhead import TOKENIZER_BATCH_WAIT_S, ServingOverhead, serving_overhead_of

__all__ = ["ClosedLoop", "with_max_concurrency", "max_concurrency_of", "closed_loop_for"]

MAX_CONCURRENCY = "max_concurrency"  # the request table attribute


def with_max_concurrency(requests: pd.DataFrame, max_concurrency: int | None) -> pd.DataFrame:
    """A copy of ``requests`` sent by a client that keeps at most ``max_concurrency``
    requests in flight (None: no limit, open loop)."""
    out = requests.copy()
    if max_concurrency is None:
        out.attrs.pop(MAX_CONCURRENCY, None)
    else:
        out.attrs[MAX_CONCURRENCY] = check_int("max_concurrency", max_concurrency, 1, MAX_REQUESTS)
    return out


def max_concurrency_of(requests: pd.DataFrame) -> int | None:
    """The client's concurrency limit a request table carries (None: open loop)."""
    return requests.attrs.get(MAX_CONCURRENCY)


class ClosedLoop:
    """Arrival times decided as the replay runs: :meth:`next_s` (the earliest a request could
    arrive given what finished so far), :meth:`pop_due` (the requests arrived by a time, in
    arrival order) and :meth:`finished` (a request's last token at a time). It decides
    nothing about scheduling; it is the client side."""

    def __init__(
        self,
        due_s: list[float],  # per request: when it is due (ignored for a follower)
        after: list[int],  # per request: the request whose finish makes it due (-1: none)
        delay_s: list[float],  # per follower: the wait after that finish
        max_concurrency: int | None,
        overhead: ServingOverhead | None = None,
    ) -> None:
        n = len(due_s)
        over = serving_overhead_of(overhead)
        self.arrived_s = [math.nan] * n  # when the client sent each request
        # the server's front end (serving_overhead): a sent request leaves its first part
        # this long after that part is free, then the tokenizer's (a batch of one: it
        # waits out the batching window) likewise, one request at a time
        self._front_s = over.front_end_ms / 1e3
        self._front_free_s = -math.inf
        self._token_s = over.tokenize_ms / 1e3
        self._token_free_s = -math.inf
        self._latency_s = over.request_latency_ms / 1e3  # then in flight, not serialized
        self._followers: dict[int, list[int]] = {}
        self._ready: list[tuple[float, int]] = []  # (due time, request), a heap
        for i in range(n):
            if after[i] < 0:
                self._ready.append((due_s[i], i))
            else:
                self._followers.setdefault(after[i], []).append(i)
        heapq.heapify(self._ready)
        self._delay_s = delay_s
        self._left = n  # requests not yet arrived
        # free slots, by the time each freed (a client slot is taken by the first waiter)
        self._slots: deque[float] | None = (
            None if max_concurrency is None else deque([-math.inf] * max_concurrency)
        )

    @property
    def left(self) -> int:
        """Requests that have not arrived yet."""
        return self._left

    def _sent_s(self) -> float:
        """When the next request is sent (inf: none until something finishes)."""
        if not self._ready or (self._slots is not None and not self._slots):
            return math.inf
        due = self._ready[0][0]
        return due if self._slots is None else max(due, self._slots[0])

    def next_s(self) -> float:
        """The earliest time a request can reach the scheduler now (inf: none until
        something finishes): when it is sent, plus the front end's time."""
        sent = self._sent_s()
        if sent == math.inf:
            return sent
        return self._token_done_s(self._front_done_s(sent)) + self._latency_s

    def _front_done_s(self, sent_s: float) -> float:
        """When the front end's first part is done with a request sent at ``sent_s``."""
        if self._front_s == 0.0:
            return sent_s
        return max(sent_s, self._front_free_s) + self._front_s

    def _token_done_s(self, ready_s: float) -> float:
        """When the tokenizer is done with a request ready for it at ``ready_s``."""
        if self._token_s == 0.0:
            return ready_s
        return max(ready_s, self._token_free_s) + TOKENIZER_BATCH_WAIT_S + self._token_s

    def pop_due(self, now_s: float) -> list[int]:
        """The requests that have reached the scheduler by ``now_s``, in arrival order (each
        one's send time recorded in :attr:`arrived_s`)."""
        out = []
        while (t := self.next_s()) <= now_s and t < math.inf:
            sent = self._sent_s()
            _, i = heapq.heappop(self._ready)
            if self._slots is not None:
                self._slots.popleft()
            self._front_free_s = self._front_done_s(sent)
            self._token_free_s = self._token_done_s(self._front_free_s)
            self.arrived_s[i] = sent
            out.append(i)
        self._left -= len(out)
        return out

    def finished(self, i: int, when_s: float) -> None:
        """Request ``i`` sent its last token at ``when_s``: its slot frees, its session's
        next turn becomes due after its delay."""
        if self._slots is not None:
            self._slots.append(when_s)
        for j in self._followers.pop(i, ()):
            heapq.heappush(self._ready, (when_s + self._delay_s[j], j))


def closed_loop_for(
    requests: pd.DataFrame, overhead: ServingOverhead | None = None
) -> ClosedLoop | None:
    """The :class:`ClosedLoop` of a checked request table in the replay's row order (sorted
    by arrival), or None when its arrivals are all fixed (no delayed turns, no limit). A
    turn whose previous turn is not in the table arrives at its ``arrival_s``.
    ``overhead``: the serving front end (None: none), its two parts taken one request at a
    time here, at most ``max_concurrency`` in them (the open loop's first part is shared by
    the requests in it and its tokenizer batches them: less than ``(max_concurrency - 1) *
    (front_end_ms + tokenize_ms)`` plus the batching window apart), then each request's time in flight
    (:class:`~cgdispatch.workload.serving_overhead.ServingOverhead`)."""
    limit = max_concurrency_of(requests)
    has_turns = "delay_s" in requests.columns and requests["delay_s"].notna().any()
    if limit is None and not has_turns:
        return None
    n = len(requests)
    after = np.full(n, -1, dtype=np.int64)
    delay = np.zeros(n)
    if has_turns:
        session = requests["session_id"].to_numpy(np.int64)
        turn = requests["turn"].to_numpy(np.int64)
        wait = requests["delay_s"].to_numpy(np.float64)
        row_of = {(s, t): k for k, (s, t) in enumerate(zip(session, turn)) if s >= 0}
        for k in np.flatnonzero(~np.isnan(wait)):
            prev = row_of.get((int(session[k]), int(turn[k]) - 1))
            if prev is not None:  # else its previous turn is not in this table (a held-out
                after[k], delay[k] = prev, wait[k]  # part, a rejected turn): its arrival_s
    due = requests["arrival_s"].to_numpy(np.float64)
    return ClosedLoop(due.tolist(), after.tolist(), delay.tolist(), limit, overhead)
