"""Frames that lie to the Python ``tune`` (issue 36, class 7): no columns, numbers as text,
infinity, NaN times, bad cells in the planning part; each is one ValueError naming the row
the caller counts (the frame's index label) and the column, before the trace is split."""

from __future__ import annotations

import functools

import numpy as np
import pandas as pd
import pytest

from cgdispatch import GraphConfig
from cgdispatch.plan.costs import AffineCostModel
from cgdispatch.plan.tune import tune
from cgdispatch.workload.sources import workload_requests, workload_trace


class MemoryAffine(AffineCostModel):
    def capture_time_s(self, mode, n):  # noqa: ANN001, ANN201
        return 0.01 + 1e-4 * np.asarray(n, dtype=np.float64)


CONFIG = GraphConfig(vllm_version="0.34", max_num_seqs=24, max_num_batched_tokens=512).resolve()


@functools.lru_cache(maxsize=1)
def _frames() -> tuple[pd.DataFrame, pd.DataFrame]:
    trace, _ = workload_trace("sharegpt", num_requests=120, rate_per_s=6.0, seed=4,
                              max_num_seqs=24, max_num_batched_tokens=512)  # fmt: skip
    return trace, workload_requests("sharegpt", num_requests=120, rate_per_s=6.0, seed=4)


def _tune(trace, requests=None):
    return tune(trace, config=CONFIG, cost_model=MemoryAffine(per_token_ms=0.02), max_graphs=6,
                requests=requests)  # fmt: skip


def _row(rng, frame, part):
    """A random row of the planning (first) or held-out (last) fifth of ``frame``."""
    n = len(frame)
    return int(rng.integers(1, n // 5)) if part == "planning" else int(rng.integers(n - n // 5, n))


def test_a_frame_with_no_columns_names_the_column_it_needs():
    with pytest.raises(ValueError, match="step trace has no 'num_tokens' column"):
        _tune(pd.DataFrame())
    trace, _ = _frames()
    with pytest.raises(ValueError, match="request table lacks columns"):
        _tune(trace, pd.DataFrame())


BAD_CELLS = [
    ("num_tokens", lambda v: str(v), "is not a finite number but text"),
    ("num_tokens", lambda v: np.inf, "inf is invalid"),
    ("num_tokens", lambda v: v + 0.5, "is invalid: it must be an integer from 1"),
    ("num_reqs", lambda v: -4, "-4 is invalid"),
    ("time_s", lambda v: np.nan, "nan is not a finite number"),
    ("uniform_decode", lambda v: "False", "is not a finite number but text"),
]


@pytest.mark.parametrize("part", ["planning", "held out"])
@pytest.mark.parametrize(("column", "bad", "said"), BAD_CELLS)
def test_a_bad_step_cell_anywhere_names_its_row_and_column(part, column, bad, said):
    rng = np.random.default_rng()
    trace, requests = _frames()
    row = _row(rng, trace, part)
    broken = trace.astype({column: object})
    broken.loc[row, column] = bad(trace.loc[row, column])
    with pytest.raises(ValueError, match=rf"step trace row {row}: {column}=.*{said}"):
        _tune(broken, requests if column == "time_s" else None)


REQUEST_CELLS = [
    ("prompt_tokens", lambda v: str(v), "is not a finite number but text"),
    ("prompt_tokens", lambda v: np.inf, "inf is invalid"),
    ("output_tokens", lambda v: 0, "0 is invalid"),
    ("arrival_s", lambda v: "x", "'x' is not a finite number"),
    ("arrival_s", lambda v: np.nan, "nan is not a finite number"),
]


@pytest.mark.parametrize("part", ["planning", "held out"])
@pytest.mark.parametrize(("column", "bad", "said"), REQUEST_CELLS)
def test_a_bad_request_cell_names_the_row_the_caller_counts(part, column, bad, said):
    """The row is the frame's own label, also with a shuffled index (not the held-out
    part's position, as before: 'row 30' for row 80)."""
    rng = np.random.default_rng()
    trace, requests = _frames()
    row = _row(rng, requests, part)
    broken = requests.astype({column: object})
    broken.loc[row, column] = bad(requests.loc[row, column])
    with pytest.raises(ValueError, match=rf"request table row {row}: {column}=.*{said}"):
        _tune(trace, broken)
    labels = rng.permutation(len(requests)) + 1000
    relabelled = broken.set_axis(labels)
    with pytest.raises(ValueError, match=rf"request table row {labels[row]}: {column}="):
        _tune(trace, relabelled)


def test_valid_frames_with_extra_columns_still_tune():
    trace, requests = _frames()
    result = _tune(trace.assign(note="x"), requests.assign(note="y"))
    assert result.steps_planned + result.steps_held_out == len(trace)
