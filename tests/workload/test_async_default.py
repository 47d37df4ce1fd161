"""vLLM 0.33 schedules asynchronously unless told not to (vllm/config/vllm.py of 0.33.0,
``VllmConfig.__post_init__``), except where its V1 runner cannot (ngram drafts); 0.34 with
drafts too. A replay with ``async_scheduling`` unset is the replay with it set that way."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from cgdispatch import SchedulerLimits, replay_scheduler, synthetic_requests


@pytest.mark.parametrize(
    "release,drafts,want",
    [("0.33", 0, True), ("0.33", 2, False), ("0.34", 0, True), ("0.34", 2, True)],
)
def test_the_default_loop_is_the_releases(release: str, drafts: int, want: bool) -> None:
    seed = int(np.random.default_rng().integers(0, 2**31))
    requests = synthetic_requests(150, "sharegpt", rate_per_s=20.0, seed=seed)
    base = dict(vllm_version=release, max_num_seqs=32, num_gpu_blocks=600,
                num_speculative_tokens=drafts)  # fmt: skip
    unset = SchedulerLimits(**base)
    assert unset.is_async is want
    got = replay_scheduler(requests, unset, seed=seed)
    same = replay_scheduler(requests, SchedulerLimits(**base, async_scheduling=want), seed=seed)
    other = replay_scheduler(
        requests, SchedulerLimits(**base, async_scheduling=not want), seed=seed
    )
    pd.testing.assert_frame_equal(got, same)
    assert not got.equals(other), seed  # the two loops form other steps on this traffic
