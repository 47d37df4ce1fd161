"""Write the aiconfigurator fixtures of the test suite from the installed package's tables.

    pip install 'cgdispatch[aic]'        # aiconfigurator-core 0.12.0, Python >= 3.11
    python scripts/aic_reference.py      # or --data DIR: an unpacked systems/data folder

writes ``tests/data/aic_reference_steps.csv`` (measured step times of a grid of step shapes,
``cgdispatch.estimate.aic_reference.fixture_reference_steps``) and
``tests/data/aic_op_samples.csv`` (a random subset of the raw kernel rows,
``fixture_op_samples``), each headed by comment lines naming the source and the GPU and
framework version of every table. Tests and CI read them with no network and no package.
"""

from __future__ import annotations

import argparse
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path

from cgdispatch.estimate.aic_reference import (
    FIXTURE_DEVICES,
    fixture_op_samples,
    fixture_reference_steps,
    table_provenance,
)

ROOT = Path(__file__).resolve().parents[1]


def header(data_dir: str | None, what: str) -> str:
    """Comment lines: source, licence, and each device's table folders and versions."""
    try:
        package = f"aiconfigurator-core {version('aiconfigurator-core')}"
    except PackageNotFoundError:
        package = "aiconfigurator-core 0.12.0 (unpacked wheel)"
    lines = [
        f"# {what}",
        f"# source: {package}, NVIDIA, Apache-2.0 (https://pypi.org/project/aiconfigurator-core/):",
        "# kernel times measured on the GPU in vLLM, aiconfigurator_core/systems/data/<gpu>/<op>/<framework>/<version>",
        "# written by scripts/aic_reference.py; times in ms",
    ]
    for device in FIXTURE_DEVICES:
        tables = ", ".join(
            f"{op}={where}" for op, where in table_provenance(device, data_dir).items()
        )
        lines.append(f"# table {device}: {tables}")
    return "\n".join(lines) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--data", default=None, help="aiconfigurator's systems/data folder (default: installed)"
    )
    parser.add_argument(
        "--out", default=str(ROOT / "tests" / "data"), help="folder to write the CSVs into"
    )
    args = parser.parse_args()
    out = Path(args.out)
    steps = fixture_reference_steps(args.data)
    samples = fixture_op_samples(data_dir=args.data)
    for name, frame, what in (
        (
            "aic_reference_steps.csv",
            steps,
            "measured step times: sum of aiconfigurator's per-kernel times",
        ),
        (
            "aic_op_samples.csv",
            samples,
            "raw per-kernel rows, a random subset (seed 0) per op and GPU",
        ),
    ):
        path = out / name
        with path.open("w", encoding="utf-8") as f:
            f.write(header(args.data, what))
            frame.to_csv(f, index=False, float_format="%.6g")
        print(f"{path}: {len(frame)} rows, {path.stat().st_size / 1e3:.0f} kB")


if __name__ == "__main__":
    main()
