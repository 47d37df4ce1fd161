"""Arrivals split across replicas: round-robin, least-outstanding and prefix affinity, each
against a plain re-implementation by its definition on fresh random traffic."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from cgdispatch.workload.replicas import (
    least_outstanding,
    prefix_affinity,
    replica_shares,
    round_robin,
    split_requests,
)


def _arrivals(rng: np.random.Generator, n: int) -> np.ndarray:
    a = rng.uniform(0, 10, n)
    a[rng.integers(0, n, n // 5)] = a[0]  # ties: row order breaks them
    return a


def test_round_robin_deals_arrivals_in_order() -> None:
    rng = np.random.default_rng()
    n, k = int(rng.integers(1, 300)), int(rng.integers(1, 9))
    a = _arrivals(rng, n)
    got = round_robin(a, k)
    ranked = sorted(range(n), key=lambda i: (a[i], i))
    for rank, i in enumerate(ranked):
        assert got[i] == rank % k


def test_least_outstanding_picks_the_fewest_unfinished_at_each_arrival() -> None:
    rng = np.random.default_rng()
    n, k = int(rng.integers(2, 300)), int(rng.integers(2, 9))
    a = _arrivals(rng, n)
    finish = a + rng.exponential(rng.uniform(0.05, 3), n)
    got = least_outstanding(a, finish, k)
    placed: list[tuple[int, float]] = []  # (replica, finish) of the requests placed so far
    last = -1
    for i in sorted(range(n), key=lambda i: (a[i], i)):
        open_ = [sum(1 for r, f in placed if r == rep and f > a[i]) for rep in range(k)]
        best = min(open_)
        want = next(r % k for r in range(last + 1, last + 1 + k) if open_[r % k] == best)
        assert got[i] == want
        placed.append((want, finish[i]))
        last = want


def _prefix_frame(rng: np.random.Generator, n: int) -> pd.DataFrame:
    prefixes = rng.integers(0, max(2, n // 6), n)  # shared first blocks
    hashes = [
        [] if rng.random() < 0.1 else [int(p), *rng.integers(1000, 2000, rng.integers(0, 4))]
        for p in prefixes
    ]
    return pd.DataFrame({"arrival_s": _arrivals(rng, n), "prompt_tokens": 512,
                         "output_tokens": 8, "hash_ids": hashes})  # fmt: skip


def test_prefix_sends_a_shared_first_block_to_the_replica_that_served_it() -> None:
    rng = np.random.default_rng()
    n, k = int(rng.integers(2, 300)), int(rng.integers(2, 9))
    frame = _prefix_frame(rng, n)
    got = prefix_affinity(frame, k)
    a = frame["arrival_s"].to_numpy()
    owner: dict[int, int] = {}
    fresh = 0  # requests with a first block not seen before (or none): dealt in turn
    for i in sorted(range(n), key=lambda i: (a[i], i)):
        blocks = frame["hash_ids"][i]
        if blocks and blocks[0] in owner:
            assert got[i] == owner[blocks[0]]
            continue
        assert got[i] == fresh % k
        fresh += 1
        if blocks:
            owner[blocks[0]] = int(got[i])
    # without the column it is round-robin
    plain = frame.drop(columns="hash_ids")
    np.testing.assert_array_equal(prefix_affinity(plain, k), round_robin(a, k))
    np.testing.assert_array_equal(split_requests(plain, k, "prefix"), round_robin(a, k))


def test_least_outstanding_iterates_on_the_replays_finish_times() -> None:
    """A replay whose time in the system is each request's own (the share does not change
    it) converges in one re-split: least-outstanding on arrival + that time."""
    rng = np.random.default_rng()
    n, k = int(rng.integers(2, 200)), int(rng.integers(2, 6))
    frame = pd.DataFrame({"arrival_s": np.sort(_arrivals(rng, n)),
                          "prompt_tokens": rng.integers(1, 900, n), "output_tokens": 3})  # fmt: skip
    in_system = frame["prompt_tokens"].to_numpy() / 400.0
    calls = []

    def replay(share: pd.DataFrame) -> pd.DataFrame:
        calls.append(len(share))
        t = share["arrival_s"].to_numpy() + 100.0  # a replay may shift its clock
        return pd.DataFrame({"arrival_s": t, "finish_s": t + in_system[share.index]},
                            index=share.index)  # fmt: skip

    got = split_requests(frame, k, "least-outstanding", replay=replay)
    a = frame["arrival_s"].to_numpy()
    np.testing.assert_array_equal(got, least_outstanding(a, a + in_system, k))
    assert sum(calls) % n == 0 and sum(calls) >= n  # every request replayed each round
    shares = replica_shares(frame, got, k)
    assert sorted(np.concatenate([s.index for s in shares])) == list(range(n))


@pytest.mark.parametrize(
    ("args", "match"),
    [((0, "round-robin"), "replicas=0"), ((2, "random"), "balance='random'"),
     ((True, "prefix"), "replicas=True")],
)  # fmt: skip
def test_bad_splits_name_the_fix(args, match) -> None:
    frame = pd.DataFrame({"arrival_s": [0.0, 1.0], "prompt_tokens": 5, "output_tokens": 5})
    with pytest.raises(ValueError, match=match):
        split_requests(frame, *args)
    with pytest.raises(ValueError, match="needs replay"):
        split_requests(frame, 2, "least-outstanding")
