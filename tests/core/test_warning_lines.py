"""Warnings name the caller's line (issue 17): not a line inside cgdispatch."""

from __future__ import annotations

import inspect
import warnings

import pytest

import cgdispatch as cg


def _line() -> int:
    return inspect.currentframe().f_back.f_lineno


@pytest.mark.parametrize(
    "make",
    [
        lambda: cg.GraphConfig(vllm_version="0.34", cudagraph_capture_sizes=[1, 2, 4]),
        lambda: cg.GraphConfig(
            cudagraph_capture_sizes=[1, 2, 9999], max_num_batched_tokens=64, max_num_seqs=8
        ),
        lambda: cg.GraphConfig(max_num_seqs=8, max_num_batched_tokens=64).replace(
            cudagraph_capture_sizes=[1, 9999]
        ),
    ],
)
def test_a_config_warning_points_at_the_line_that_made_the_config(make) -> None:  # noqa: ANN001
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        make()
    assert caught, "the config should warn"
    for warning in caught:
        assert warning.filename == __file__, (warning.filename, str(warning.message))


def test_the_warning_line_is_the_callers_own() -> None:
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        line = _line() + 1
        cg.GraphConfig(vllm_version="0.34", cudagraph_capture_sizes=[1, 2, 4])
    assert [(w.filename, w.lineno) for w in caught] == [(__file__, line)]
