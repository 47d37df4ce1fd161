"""The optional measured backend (``device_cost_model(..., kernels="aic")``): the built-in
formulas and the measured kernels compared on the held-out shapes (H200 steps of the
reference fixture); refused with one clear line where aiconfigurator's data is missing."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from cgdispatch.core.modes import CUDAGraphMode
from cgdispatch.core.step_content import StepContent
from cgdispatch.estimate.device_model import device_cost_model
from cgdispatch.estimate.step_errors import REFERENCE_STEPS


def _have_data() -> bool:
    from cgdispatch.estimate.aic_data import aic_data_dir

    try:
        aic_data_dir()
    except ValueError:
        return False
    return True


needs_aic = pytest.mark.skipif(
    not _have_data(), reason="aiconfigurator-core not installed (pip install 'cgdispatch[aic]')"
)


def test_without_the_data_the_backend_is_refused_in_one_line(monkeypatch, tmp_path):
    monkeypatch.setenv("CGDISPATCH_AIC_DATA", str(tmp_path / "missing"))
    with pytest.raises(ValueError, match="aiconfigurator data folder .* does not exist"):
        device_cost_model("llama-3.1-8b", "H100", kernels="aic")
    with pytest.raises(ValueError, match="kernels='gpu' is unknown"):
        device_cost_model("llama-3.1-8b", "H100", kernels="gpu")


@needs_aic
def test_measured_and_fitted_kernels_agree_on_held_out_steps():
    steps = pd.read_csv(REFERENCE_STEPS, comment="#")
    held = steps[(steps.device == "H200") & (steps.tp == 1)]
    rng = np.random.default_rng()
    rows = held.iloc[rng.choice(len(held), 12, replace=False)]
    errors = []
    for row in rows.itertuples():
        fitted = device_cost_model(row.model, "H200")
        measured = device_cost_model(row.model, "H200", kernels="aic")
        assert "measured" in measured.source and "measured" not in fitted.source
        content = StepContent.of(
            [int(row.decode_context)] * int(row.num_decode),
            [(int(row.cached_tokens), int(row.prompt_tokens))] * int(row.num_prompts),
        )
        mode, padded = CUDAGraphMode.PIECEWISE, content.num_tokens
        a = fitted.pricer().step_ms(content, mode, padded)
        b = measured.pricer().step_ms(content, mode, padded)
        # the measured backend swaps the device work for the measured sum, nothing else
        overhead = a - fitted.pricer().device_ms(content)
        assert b - overhead == pytest.approx(row.measured_ms, rel=0.02), row
        errors.append(abs(a / b - 1))
    assert np.median(errors) < 0.10
