"""Where aiconfigurator's measured tables are, and reading one of them.

`aiconfigurator-core <https://pypi.org/project/aiconfigurator-core/>`_ 0.12.0 (NVIDIA,
Apache-2.0) ships per-kernel times measured on the GPU inside vLLM, as parquet tables under
``aiconfigurator_core/systems/data/<gpu>/<op>/<framework>/<version>/``. :func:`aic_data_dir`
finds that folder, :data:`AIC_DEVICE_FOLDERS` maps our device presets to its GPU folders and
:func:`aic_table` reads a table from the newest version folder that holds it. What the
columns mean: :mod:`cgdispatch.estimate.aic_tables`, which interpolates them.
"""

from __future__ import annotations

import importlib.util
import os
import re
from dataclasses import dataclass
from pathlib import Path

import pandas as pd

from ..core import cache

__all__ = [
    "AIC_DEVICE_FOLDERS",
    "ENV_VAR",
    "TableSource",
    "aic_data_dir",
    "aic_table",
    "gpu_folder",
    "load_table",
]

ENV_VAR = "CGDISPATCH_AIC_DATA"
# our device presets (cgdispatch/data/device_specs.csv names and aliases) -> aiconfigurator's
# GPU folders; only the SXM boards it measured with vLLM
AIC_DEVICE_FOLDERS = {
    "H100": "h100_sxm",
    "H100-SXM": "h100_sxm",
    "H200": "h200_sxm",
    "H200-SXM": "h200_sxm",
    "A100": "a100_sxm",
    "A100-80GB": "a100_sxm",
}
# op folder -> (framework folder, table file stem)
_TABLES = {
    "gemm": ("gemm", "vllm", "gemm_perf"),
    "context_attention": ("attention", "vllm", "context_attention_perf"),
    "generation_attention": ("attention", "vllm", "generation_attention_perf"),
    "custom_allreduce": ("comm", "vllm", "custom_allreduce_perf"),
    "nccl": ("comm", "nccl", "nccl_perf"),
    "moe": ("moe", "vllm", "moe_perf"),
}


def aic_data_dir(path: str | Path | None = None) -> Path:
    """aiconfigurator's ``systems/data`` folder: ``path`` if given, else the environment
    variable ``CGDISPATCH_AIC_DATA``, else the installed ``aiconfigurator_core`` package's."""
    if path is None:
        path = os.environ.get(ENV_VAR) or None
    if path is None:
        spec = importlib.util.find_spec("aiconfigurator_core")
        if spec is None or not spec.submodule_search_locations:
            raise ValueError(
                "aiconfigurator_core is not installed: pip install 'cgdispatch[aic]' "
                f"(Python >= 3.11), or set {ENV_VAR} to its systems/data folder"
            )
        path = Path(next(iter(spec.submodule_search_locations))) / "systems" / "data"
    path = Path(path)
    if not path.is_dir():
        raise ValueError(
            f"aiconfigurator data folder {path} does not exist: give its systems/data folder"
        )
    return path


def gpu_folder(device: str) -> str:
    """aiconfigurator's folder of ``device`` (a preset name), or a ValueError naming those it has."""
    if device not in AIC_DEVICE_FOLDERS:
        raise ValueError(
            f"device={device!r} has no aiconfigurator vLLM measurements here: use one of {sorted(AIC_DEVICE_FOLDERS)}"
        )
    return AIC_DEVICE_FOLDERS[device]


def _version_key(name: str) -> tuple[int, ...]:
    return tuple(int(x) for x in re.findall(r"\d+", name))


@dataclass(frozen=True)
class TableSource:
    """Where one measured table came from."""

    gpu: str  # aiconfigurator's folder, e.g. "h100_sxm"
    framework: str  # "vllm" or "nccl"
    version: str  # newest version folder holding the table, e.g. "0.24.0"
    path: Path


@cache.memo(maxsize=64)
def load_table(device: str, table: str, data_dir: Path) -> tuple[TableSource, pd.DataFrame]:
    """:func:`aic_table` with the data folder resolved (cached per device, table, folder)."""
    if table not in _TABLES:
        raise ValueError(f"table={table!r} is unknown: use one of {sorted(_TABLES)}")
    gpu = gpu_folder(device)
    op, framework, stem = _TABLES[table]
    root = data_dir / gpu / op / framework
    versions = sorted(
        (d.name for d in root.glob("*") if (d / f"{stem}.parquet").is_file()),
        key=_version_key,
        reverse=True,
    )
    if not versions:
        raise ValueError(
            f"aiconfigurator has no {framework} {stem} table for {gpu} under {data_dir}"
        )
    path = root / versions[0] / f"{stem}.parquet"
    return TableSource(gpu, framework, versions[0], path), pd.read_parquet(path)


def aic_table(
    device: str, table: str, data_dir: str | Path | None = None
) -> tuple[TableSource, pd.DataFrame]:
    """The raw measured rows of ``table`` (a key of the module's table list: gemm,
    context_attention, generation_attention, custom_allreduce, nccl, moe) for ``device``,
    from the newest version folder, and where they came from. The frame is shared: copy it
    before changing it."""
    return load_table(device, table, aic_data_dir(data_dir))
