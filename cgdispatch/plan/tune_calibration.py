"""``tune --calibration``: a :class:`~cgdispatch.estimate.setup_profile.CalibrationProfile`
applied to one tune run's seams.

:func:`load_calibration` finds the profile (a name in the cache folder's ``profiles/``, or
a path) and refuses one of another model, GPU or TP size; :func:`calibrated_startup`
relabels each start-up estimate (already priced with the profile's coefficients by
:func:`~cgdispatch.estimate.startup.startup_for`); :func:`calibrated_costs` scales the
cost model's step times by the profile's step scale and gives the bands it shrinks to.
Every figure it touches says "calibrated on your logs (N runs)".
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from ..estimate.setup_profile import CalibrationProfile
    from ..estimate.startup import StartupEstimate
    from ..estimate.uncertainty import ModelErrors

__all__ = ["load_calibration", "calibrated_startup", "calibrated_costs"]


def load_calibration(
    name_or_path: str, model: str, device: Any, tensor_parallel_size: int
) -> CalibrationProfile:
    """The profile ``name_or_path``, checked to be of this model, GPU and TP size."""
    from ..core.cache import profiles_dir
    from ..estimate.setup_profile import load_profile, published_id

    profile = load_profile(name_or_path, profiles_dir())
    try:
        model_id = published_id(model)
    except ValueError:
        raise ValueError(
            f"--calibration needs a model with a published config; {model!r} has none: "
            "use a Hugging Face id of cgdispatch/data/model_architectures.csv"
        ) from None
    profile.check_setup(model_id, device, tensor_parallel_size)
    return profile


def calibrated_startup(
    startup: Callable[[Any], StartupEstimate], profile: CalibrationProfile
) -> Callable[[Any], StartupEstimate]:
    """``startup`` (priced with ``profile.coefficients()``) with each estimate labelled as
    calibrated on the profile's logs."""

    def labelled(config: Any) -> StartupEstimate:
        estimate = startup(config)
        source = f"model ({estimate.device}, {profile.label}, profile {profile.name})"
        return dataclasses.replace(estimate, source=source)

    return labelled


def calibrated_costs(
    profile: CalibrationProfile, cost_model: Any, errors: ModelErrors
) -> tuple[Any, ModelErrors]:
    """The cost model with every step ``profile.step_scale`` times as long (as it is
    without a step scale), and ``errors`` with the bands shrunk to the profile's."""
    from ..plan.costs import cost_source
    from ..plan.tune_bands import ScaledCostModel

    if profile.step_scale is not None:
        label = f"{cost_source(cost_model)}; step times x{profile.step_scale:.3f}, {profile.label}"
        cost_model = ScaledCostModel(cost_model, profile.step_scale, label=label)
    return cost_model, profile.errors(errors)
