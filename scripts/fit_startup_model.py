"""Refit the start-up model's constants on the reference runs and print them as Python.

    PYTHONPATH=. python scripts/fit_startup_model.py

Paste the printed ``CALIBRATION = ...`` into ``cgdispatch/estimate/startup_pricing.py``;
``tests/estimate/test_startup.py`` checks the committed constants equal a refit.
"""

from __future__ import annotations

import dataclasses

from cgdispatch.estimate.startup_fit import fit_startup_model


def main() -> None:
    fitted = fit_startup_model()
    print("CALIBRATION = StartupCoefficients(")
    for field in dataclasses.fields(fitted):
        value = getattr(fitted, field.name)
        print(f"    {field.name}={value!r},")
    print(")")


if __name__ == "__main__":
    main()
