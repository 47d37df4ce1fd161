"""The tokens per hash id belong to the trace: a table whose loader recorded them
(``attrs["hash_block_size"]``) is replayed at that size whatever the limits say, so ``tune``'s
judge (which builds its limits from the engine config) reads a ``--hash-block-size 64`` trace."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from cgdispatch import SchedulerLimits, replay_scheduler
from cgdispatch.workload.request_table import check_requests


def _table(rng: np.random.Generator, block: int) -> pd.DataFrame:
    n = 40
    prompt = rng.integers(block, 6 * block, n)
    shared = [int(x) for x in rng.integers(0, 3, 1)]
    ids = [shared * min(1, -(-p // block)) + [int(x) for x in rng.integers(10, 10_000, -(-p // block) - 1)]
           for p in prompt]  # fmt: skip
    frame = pd.DataFrame({
        "arrival_s": np.sort(rng.uniform(0, 4, n)), "prompt_tokens": prompt,
        "output_tokens": rng.integers(1, 40, n), "hash_ids": ids,
    })  # fmt: skip
    frame.attrs["hash_block_size"] = block
    return frame


def test_the_traces_block_size_wins_over_the_limits_and_survives_the_check() -> None:
    rng = np.random.default_rng()
    frame = _table(rng, 64)
    assert check_requests(frame).attrs["hash_block_size"] == 64
    limits = SchedulerLimits(num_gpu_blocks=400)  # hash_block_size 512 by default
    got = replay_scheduler(frame, limits)
    # the same table told its size through the limits: the same steps
    plain = frame.copy()
    plain.attrs = {}
    want = replay_scheduler(plain, SchedulerLimits(num_gpu_blocks=400, hash_block_size=64))
    pd.testing.assert_frame_equal(got, want)
    # and without either, 64-token ids are refused at 512 tokens an id, naming the fix
    with pytest.raises(ValueError, match="hash_block_size"):
        replay_scheduler(plain, limits)
