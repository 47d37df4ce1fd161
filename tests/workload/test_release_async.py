"""Async scheduling by default follows the whole release a config or limits name, not only
its dispatch generation: vLLM 0.8-0.13 schedule synchronously unless asked
(``vllm/config/scheduler.py`` ``async_scheduling: bool = False`` in 0.13.0), 0.14 on
asynchronously (``async_scheduling=None`` turned on by ``vllm/config/vllm.py`` in
0.14.0), though releases 0.8-0.33 all replay with V1's scheduler (generation "0.33")."""

from __future__ import annotations

import random

import numpy as np
import pandas as pd
import pytest

from cgdispatch.core.config import GraphConfig
from cgdispatch.core.generation import for_generation
from cgdispatch.core.release_table import release_rules
from cgdispatch.workload.latency import simulate_latencies
from cgdispatch.workload.limits import SchedulerLimits, scheduler_limits

# (release, whether it schedules asynchronously when unset), read in each band's vLLM source
BANDS = [
    ("0.8.0", False),
    ("0.9.2", False),
    ("0.10.1.1", False),
    ("0.11.0", False),
    ("0.12.0", False),
    ("0.13.0", False),
    ("0.14.0", True),
    ("0.19.0", True),
    ("0.26.1", True),
    ("0.33", True),
    ("0.34.0", True),
]


@pytest.mark.parametrize(("release", "is_async"), BANDS, ids=[b[0] for b in BANDS])
def test_the_whole_release_reaches_the_scheduler_default(release: str, is_async: bool) -> None:
    config = GraphConfig(vllm_version=release)
    assert config.release == release
    assert config.vllm_version == ("0.34" if release.startswith("0.34") else "0.33")
    for limits in (
        scheduler_limits(config),
        scheduler_limits(config.replace(max_num_seqs=8)),
        scheduler_limits(config.resolve()),
        SchedulerLimits(vllm_version=release),
        SchedulerLimits(release=release),
    ):
        assert limits.release == release and limits.vllm_version == config.vllm_version
        assert limits.is_async is is_async
    # the user's choice wins over the default, either way
    assert scheduler_limits(config, async_scheduling=not is_async).is_async is (not is_async)
    rule = release_rules(release)["async_scheduling"]
    assert "vllm/config/scheduler.py" in rule.source and rule.value is is_async


@pytest.mark.parametrize("seed", range(4))
def test_random_patch_releases_fall_in_their_band(seed: int) -> None:
    rng = random.Random(seed)
    minor = rng.randint(8, 33)
    release = f"0.{minor}.{rng.randint(0, 3)}"
    assert SchedulerLimits(vllm_version=release).is_async is (minor >= 14)
    assert scheduler_limits(GraphConfig(vllm_version=release)).is_async is (minor >= 14)


def test_naming_another_release_in_the_settings_takes_its_default() -> None:
    config = GraphConfig(vllm_version="0.11.0")
    assert scheduler_limits(config).is_async is False
    assert scheduler_limits(config, vllm_version="0.33").is_async is True
    assert scheduler_limits(config, release="0.13.0").is_async is False
    assert for_generation(config, "0.19.0").release == "0.19.0"
    assert for_generation(config, "0.34").release == "0.34"


def test_a_release_of_another_generation_is_refused() -> None:
    with pytest.raises(ValueError, match=r"release='0\.11\.0' is not of vllm_version='0\.34'"):
        SchedulerLimits(vllm_version="0.34", release="0.11.0")


@pytest.mark.parametrize("seed", range(2))
def test_an_older_release_replays_as_the_synchronous_scheduler(seed: int) -> None:
    """The same traffic under 0.11.0's defaults is the V1 replay with async scheduling
    off, and under 0.19.0's the one with it on (both V1's scheduler)."""
    rng = np.random.default_rng(seed)
    n = 40
    req = pd.DataFrame(
        {
            "arrival_s": np.sort(rng.uniform(0, 0.5, n)),
            "prompt_tokens": rng.integers(1, 900, n),
            "output_tokens": rng.integers(1, 40, n),
        }
    )

    def step(num_tokens: int, num_reqs: int) -> float:
        return 4.0 + 0.01 * num_tokens if num_tokens else 0.0

    def run(limits: SchedulerLimits) -> pd.DataFrame:
        return simulate_latencies(req, limits, step_time_ms=step).requests

    common = {"max_num_seqs": 16, "max_num_batched_tokens": 512}
    old = run(scheduler_limits(GraphConfig(vllm_version="0.11.0", **common)))
    new = run(scheduler_limits(GraphConfig(vllm_version="0.19.0", **common)))
    sync = run(SchedulerLimits(vllm_version="0.33", async_scheduling=False, **common))
    asyn = run(SchedulerLimits(vllm_version="0.33", async_scheduling=True, **common))
    pd.testing.assert_frame_equal(old, sync)
    pd.testing.assert_frame_equal(new, asyn)
    assert not old["finish_s"].equals(new["finish_s"])  # the two loops differ on this traffic
