"""The KV budget of every logged start-up is computed as its own release computes it: the
graph-memory estimate comes off it from vLLM 0.20.0 (``VLLM_MEMORY_PROFILER_ESTIMATE_CUDAGRAPHS``
defaults to "1" in ``vllm/envs.py`` of 0.20.0 and 0.22.1, "0" in 0.19.0), read from the
row's whole release string, whatever generation dispatches it; checked against the logged
KV tokens of the reference runs."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from cgdispatch.estimate.devices import DEVICE_PRESETS
from cgdispatch.estimate.pool_factors import run_max_num_seqs
from cgdispatch.estimate.startup import estimate_startup
from cgdispatch.estimate.startup_data import reference_config, reference_startups, run_args

# vllm/envs.py's default of VLLM_MEMORY_PROFILER_ESTIMATE_CUDAGRAPHS, read per release
ENV_DEFAULT = {"0.18.0": "0", "0.19.0": "0", "0.20.0": "1", "0.22.1": "1"}


def _runs() -> pd.DataFrame:
    rows = reference_startups(split=None)
    return rows[rows["device"].isin(list(DEVICE_PRESETS))].reset_index(drop=True)


def _errors(row: pd.Series, release: str) -> tuple[float, object]:
    row = row.copy()
    row["max_num_seqs"], _ = run_max_num_seqs(row)
    est = estimate_startup(
        row["model"],
        row["device"],
        reference_config(row),
        **{**run_args(row), "vllm_version": release},
    )
    return est.kv_cache_tokens / float(row["kv_cache_tokens"]) - 1, est


def test_each_run_is_priced_under_its_whole_release() -> None:
    for _, row in _runs().iterrows():
        release = str(row["vllm_version"])
        _, est = _errors(row, release)
        parts = tuple(int(p) for p in release.split("."))
        assert est.graph_memory_subtracted is (parts >= (0, 20)), row["run"]
        # the config names the whole release: the same budget without the keyword
        row = row.copy()
        row["max_num_seqs"], _ = run_max_num_seqs(row)
        assert reference_config(row).release == release


@pytest.mark.parametrize(("release", "env"), sorted(ENV_DEFAULT.items()))
def test_the_budget_loses_the_graph_estimate_exactly_where_vllm_subtracts_it(release, env):
    rng = np.random.default_rng(len(release))
    runs = _runs()
    row = runs.iloc[int(rng.integers(len(runs)))]
    _, plain = _errors(row, "0.19.0")
    _, est = _errors(row, release)
    expected = est.graph_memory_bytes if env == "1" else 0.0
    assert plain.kv_cache_bytes - est.kv_cache_bytes == pytest.approx(expected)


def test_the_logged_kv_tokens_favour_each_releases_own_rule() -> None:
    """Runs of releases before 0.20 (never subtracted): their logged KV is nearer the
    budget without the estimate; runs from 0.20 stay within 5% with it."""
    before, after = [], []
    for _, row in _runs().iterrows():
        parts = tuple(int(p) for p in str(row["vllm_version"]).split("."))
        own, _ = _errors(row, str(row["vllm_version"]))
        if parts < (0, 20):
            other, _ = _errors(row, "0.20.0")
            before.append((abs(own), abs(other)))
        else:
            after.append(abs(own))
    own, other = np.median(before, axis=0)
    assert own < other
    assert after and max(after) <= 0.05
