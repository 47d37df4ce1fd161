"""Arrivals split across identical replicas, as a load balancer in front of them would.

``tune --replicas N`` tunes one replica's share of the traffic; this module says which
requests each replica gets (a replica index per request row). Three policies
(:data:`BALANCES`):

* ``round-robin`` (the default): the k-th arrival goes to replica ``k mod N``.
* ``least-outstanding``: each arrival goes to the replica with the fewest unfinished
  requests at its arrival time (ties: the first at or after the replica that got the last
  request, so an idle fleet is filled round-robin). That needs each request's finish time,
  which depends on the split itself, so :func:`split_requests` iterates: start from
  round-robin, replay every replica's share (``replay``), re-split with each request's
  time in the system from that replay (finish = arrival + that time), and stop when the
  split no longer changes or after ``max_rounds`` replays (the last split is kept).
* ``prefix``: a request goes to the replica that served the first request with the same
  first prefix block (``hash_ids[0]``, the mooncake_trace column: a list of ints per
  request); a request with a new first block, or none, goes round-robin over such
  requests. Without a ``hash_ids`` column it is round-robin.

Requests are taken in arrival order (ties: row order). It splits; it replays nothing itself.
"""

from __future__ import annotations

import heapq
from collections.abc import Callable

import numpy as np
import pandas as pd

__all__ = [
    "BALANCES",
    "ReplayTimes",
    "check_balance",
    "round_robin",
    "prefix_affinity",
    "least_outstanding",
    "split_requests",
    "replica_shares",
]

BALANCES = ("round-robin", "least-outstanding", "prefix")
HASH_IDS = "hash_ids"  # mooncake_trace's prefix blocks: one int per block of prompt tokens

# a replay of one share (a request table) -> its requests' ``finish_s`` and ``arrival_s``
# (ExactRun.request_times()'s columns, indexed like the share)
ReplayTimes = Callable[[pd.DataFrame], pd.DataFrame]


def check_balance(balance: str, replicas: int) -> None:
    """Raise ValueError for a balance that is not one of :data:`BALANCES` or a replica
    count that is not an integer >= 1."""
    if isinstance(replicas, bool) or not isinstance(replicas, (int, np.integer)) or replicas < 1:
        raise ValueError(f"replicas={replicas!r} is invalid: give an integer >= 1")
    if balance not in BALANCES:
        raise ValueError(f"balance={balance!r} is unknown: use one of {list(BALANCES)}")


def _order(arrival_s: np.ndarray) -> np.ndarray:
    return np.argsort(np.asarray(arrival_s, dtype=np.float64), kind="stable")


def round_robin(arrival_s: np.ndarray, replicas: int) -> np.ndarray:
    """Replica of each request: its rank in arrival order, mod ``replicas``."""
    order = _order(arrival_s)
    out = np.empty(len(order), dtype=np.int64)
    out[order] = np.arange(len(order)) % replicas
    return out


def prefix_affinity(requests: pd.DataFrame, replicas: int) -> np.ndarray:
    """Replica of each request by its first prefix block (``hash_ids[0]``); round-robin
    without a ``hash_ids`` column."""
    arrival = requests["arrival_s"].to_numpy(dtype=np.float64)
    if HASH_IDS not in requests.columns:
        return round_robin(arrival, replicas)
    hashes = requests[HASH_IDS].tolist()
    owner: dict[int, int] = {}
    out = np.empty(len(requests), dtype=np.int64)
    turn = 0
    for i in _order(arrival):
        blocks = hashes[i]
        first = None if blocks is None or len(blocks) == 0 else int(blocks[0])
        if first is not None and first in owner:
            out[i] = owner[first]
            continue
        out[i] = turn % replicas
        turn += 1
        if first is not None:
            owner[first] = int(out[i])
    return out


def least_outstanding(arrival_s: np.ndarray, finish_s: np.ndarray, replicas: int) -> np.ndarray:
    """Replica of each request: the one with the fewest requests unfinished (finish later
    than the arrival) when it arrives, given each request's ``finish_s`` on the replica it
    joins; ties go to the first replica at or after the one that got the last request."""
    arrival = np.asarray(arrival_s, dtype=np.float64)
    finish = np.asarray(finish_s, dtype=np.float64)
    open_: list[list[float]] = [[] for _ in range(replicas)]  # finish-time heaps
    out = np.empty(len(arrival), dtype=np.int64)
    nxt = 0
    for i in _order(arrival):
        t = arrival[i]
        counts = []
        for heap in open_:
            while heap and heap[0] <= t:
                heapq.heappop(heap)
            counts.append(len(heap))
        fewest = min(counts)
        r = next(r % replicas for r in range(nxt, nxt + replicas) if counts[r % replicas] == fewest)
        heapq.heappush(open_[r], finish[i])
        out[i] = r
        nxt = r + 1
    return out


def replica_shares(
    requests: pd.DataFrame, assignment: np.ndarray, replicas: int
) -> list[pd.DataFrame]:
    """Each replica's requests (rows kept in order, the caller's index kept)."""
    assignment = np.asarray(assignment)
    return [requests[assignment == r] for r in range(replicas)]


def split_requests(
    requests: pd.DataFrame,
    replicas: int,
    balance: str = "round-robin",
    *,
    replay: ReplayTimes | None = None,
    max_rounds: int = 4,
) -> np.ndarray:
    """The replica (0 to ``replicas - 1``) of each row of ``requests`` under ``balance``.

    ``least-outstanding`` needs ``replay`` (one share -> its ``request_times()``, indexed
    like the share) and replays every share up to ``max_rounds`` times (module docstring).
    """
    check_balance(balance, replicas)
    arrival = requests["arrival_s"].to_numpy(dtype=np.float64)
    if replicas == 1 or not len(requests):
        return np.zeros(len(requests), dtype=np.int64)
    if balance == "prefix":
        return prefix_affinity(requests, replicas)
    assignment = round_robin(arrival, replicas)
    if balance == "round-robin":
        return assignment
    if replay is None:
        raise ValueError(
            "balance='least-outstanding' needs replay (a share -> its request_times()): the "
            "fewest unfinished requests depend on when each finishes"
        )
    rows = pd.RangeIndex(len(requests))
    table = requests.set_axis(rows)
    for _ in range(max_rounds):
        in_system = np.empty(len(requests), dtype=np.float64)
        for share in replica_shares(table, assignment, replicas):
            if len(share):
                times = replay(share)
                in_system[share.index.to_numpy()] = times["finish_s"].to_numpy(np.float64) - times[
                    "arrival_s"
                ].to_numpy(np.float64)
        new = least_outstanding(arrival, arrival + in_system, replicas)
        if np.array_equal(new, assignment):
            break
        assignment = new
    return assignment
