"""The bands ``tune`` prints are the models' errors on data they were not fitted to: the
committed MODEL_ERRORS equal a fresh computation from the shipped reference data."""

from __future__ import annotations

import numpy as np

from cgdispatch.estimate.uncertainty import MODEL_ERRORS, QUANTILE, model_errors


def test_committed_errors_equal_a_fresh_computation():
    fresh = model_errors()
    assert fresh == MODEL_ERRORS, f"set MODEL_ERRORS = {fresh!r}"


def test_the_band_is_the_quantile_of_the_cross_validated_errors():
    from cgdispatch.estimate.published_steps import published_step_comparison

    errors = published_step_comparison()["error"].abs().to_numpy()
    below = np.mean(errors <= MODEL_ERRORS.step_time + 1e-9)
    assert below >= QUANTILE - 1 / len(errors)
    assert 0 < MODEL_ERRORS.kv_tokens < MODEL_ERRORS.graph_memory < 1
    assert "not fitted" in MODEL_ERRORS.source
