"""PoolLedger and AllocationTracker against an independent replay of the same events."""

import random

import pytest
import torch

from cgdispatch.capture.pool import AllocationTracker, OutputLifetime, PoolLedger, round_up

L = OutputLifetime


def brute_force(events, block):
    """Pool high-water mark from an explicit set of live blocks, rebuilt at every event."""
    live, outputs_of, high = {}, {}, 0
    open_keys = None
    for event in events:
        kind = event[0]
        if kind == "begin":
            open_keys = set()
        elif kind == "alloc":
            _, key, nbytes = event
            live[key] = round_up(nbytes, block)
            open_keys.add(key)
        elif kind == "free":
            live.pop(event[1], None)
            if open_keys is not None:
                open_keys.discard(event[1])
        elif kind == "end":
            lifetime = event[1]
            still = {k for k in open_keys if k in live}
            if lifetime is L.WEAK:
                for k in still:
                    live.pop(k)
            elif lifetime is L.GRAPH:
                outputs_of.update({k: live[k] for k in still})
            open_keys = None
        pinned = sum(outputs_of.values())
        high = max(high, sum(v for k, v in live.items() if k not in outputs_of) + pinned)
        if kind == "free" and event[1] in outputs_of:
            live[event[1]] = outputs_of[event[1]]  # a graph's own output is never freed
    return high


@pytest.mark.parametrize("seed", range(6))
def test_ledger_matches_a_brute_force_replay_of_random_events(seed):
    rng = random.Random(seed)
    block = rng.choice([1, 512])
    events, next_key, alive = [], 0, []
    for _ in range(rng.randint(3, 8)):  # graphs
        events.append(("begin",))
        for _ in range(rng.randint(1, 12)):
            if alive and rng.random() < 0.4:
                events.append(("free", alive.pop(rng.randrange(len(alive)))))
            else:
                events.append(("alloc", next_key, rng.randint(1, 5000)))
                alive.append(next_key)
                next_key += 1
        events.append(("end", rng.choice(list(L))))
        for _ in range(rng.randint(0, 3)):  # callers drop some outputs between graphs
            if alive:
                events.append(("free", alive.pop(rng.randrange(len(alive)))))
    ledger = PoolLedger(block)
    for event in events:
        if event[0] == "begin":
            ledger.begin(len(ledger.graphs))
        elif event[0] == "alloc":
            ledger.allocate(event[1], event[2])
        elif event[0] == "free":
            ledger.free(event[1])
        else:
            ledger.end(event[1])
    assert ledger.pool_bytes == brute_force(events, block)
    assert sum(g.pool_increment_bytes for g in ledger.graphs) == ledger.pool_bytes
    ledger.release()
    assert (ledger.pool_bytes, ledger.held_bytes, ledger.graphs) == (0, 0, [])


def test_tracker_counts_real_allocations_and_frees_of_random_tensors():
    rng = torch.Generator().manual_seed(5)
    rows, cols = 1 + int(torch.randint(2, 40, (1,), generator=rng)), 24
    ledger = PoolLedger(1)
    tracker = AllocationTracker([ledger])
    a = torch.randn(rows, cols, generator=rng)
    with tracker:
        tracker.begin("g")
        b = a * 2  # [rows, cols] float32: allocated
        c = b.relu()  # allocated; b and c live together
        v = c[1:]  # a view: no new memory
        del b  # freed inside the capture
        d = c.sum(0)  # [cols]: allocated
        (graph,) = tracker.end(L.WEAK)
    size = rows * cols * 4
    assert graph.peak_bytes == 2 * size + 0  # b and c, before b went
    assert graph.output_bytes == size + cols * 4  # c (held by v) and d
    assert ledger.held_bytes == 0 and ledger.pool_bytes == 2 * size
    torch.testing.assert_close(v, (a * 2).relu()[1:])
    assert d.shape == (cols,)


def test_nested_capture_and_bad_block_size_are_clear_errors():
    ledger = PoolLedger()
    ledger.begin("outer")
    with pytest.raises(RuntimeError, match="one graph at a time"):
        ledger.begin("inner")
    with pytest.raises(ValueError, match="round_bytes=0 is invalid"):
        PoolLedger(0)
    with pytest.raises(RuntimeError, match="without begin"):
        PoolLedger().end(L.WEAK)
