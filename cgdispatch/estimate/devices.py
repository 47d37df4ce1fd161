"""Device presets: peak rates and memory of a GPU and the host costs of launching work on it.

Datasheet figures, one row per GPU with its source, in ``cgdispatch/data/device_specs.csv``
(docs/references.md lists them). The launch constants were set to match published step times
(docs/calibration.md, "Step time by mode"). A GPU not in the table is a JSON file of
:class:`DeviceSpec` fields (:func:`load_device_spec`, ``tune --device-spec``). One module
below the device model, the step-time formula and the start-up model, which all read it.
"""

from __future__ import annotations

import csv
import dataclasses
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import Any

from ..core.validate import (
    MAX_DEVICE_MEMORY,
    MAX_DEVICE_RATE,
    MAX_DEVICE_US,
    BadNumber,
    check_text,
    read_json_file,
)

__all__ = [
    "DeviceSpec",
    "DEVICE_PRESETS",
    "DEVICE_ALIASES",
    "check_device_name",
    "device_spec",
    "device_label",
    "load_device_spec",
    "MIN_EFFICIENCY",
]

_GIB = float(1 << 30)
# torch's total_memory over the marketed size, as an H100 80GB reports it (79.19 of 80 GiB,
# the reference logs); used where the table has no reported figure
_REPORTED_SHARE = 79.19 / 80


@dataclass(frozen=True)
class DeviceSpec:
    """Peak rates and memory of a device and the host costs of launching work on it.

    All overridable; it prices kernels and sizes the KV cache, it measures nothing."""

    name: str
    peak_flops: float  # dense bf16/fp16 tensor-core FLOP/s
    peak_fp32_flops: float  # dense fp32 FLOP/s (kernels with no 16-bit operand)
    bandwidth_bytes_per_s: float  # HBM bandwidth
    memory_bytes: float = 79.19 * _GIB  # device memory as torch reports it (total_memory)
    peak_fp8_flops: float = 0.0  # dense fp8 tensor-core FLOP/s (0: no fp8 tensor cores)
    flop_efficiency: float = 0.6  # assumed share of peak a GEMM reaches
    bw_efficiency: float = 0.75  # assumed share of peak bandwidth a kernel reaches
    # set to match published step times (docs/calibration.md, "Step time by mode"):
    kernel_launch_us: float = 16.1  # host cost per eager launch (Python, dispatcher, driver)
    kernel_gap_us: float = 3.8  # device idle before each eagerly launched kernel
    piece_overhead_us: float = 15.4  # device idle per graph launch (one per piece)
    step_overhead_us: float = 340.0  # host work per step in every mode (inputs, sampling)
    graph_launch_us: float = 10.0  # host cost per graph replay (assumption)
    kernel_min_us: float = 1.5  # floor of one kernel on the device (80 kernels in 70 us replay)
    # assumption: instantiating one captured graph; with one warm-up run this gives vLLM's
    # ~0.05 s per piecewise size for Llama-3.1-8B (docs/references.md)
    graph_instantiate_us: float = 1000.0
    # the GPU generation (Ampere, Ada, Hopper, Blackwell, CDNA3; "" unknown): the start-up
    # model's graph pool carries a factor per generation fitted on start-ups logged there
    architecture: str = ""
    # the GPU-to-GPU link one tensor-parallel all-reduce crosses: bytes/s per GPU in one
    # direction (NVLink, PCIe; device_specs.csv names the source); 0: unknown (PCIe Gen4)
    link_bytes_per_s: float = 0.0
    # streaming multiprocessors (device_specs.csv names the source); 0: unknown, the fitted
    # GPU's count (the split-KV decode waves of estimate.kernel_model run over them)
    sms: int = 0

    def __post_init__(self) -> None:
        check_text("device name", self.name, max_chars=200)
        if self.architecture:
            check_text("device architecture", self.architecture, max_chars=200)
        for field, (least, most, open_low) in _NUMBER_RANGES.items():
            _check_number(field, getattr(self, field), least, most, open_low)

    def replace(self, **changes: Any) -> DeviceSpec:
        return dataclasses.replace(self, **changes)


# below it the step times are years and every figure is noise: the slowest GPU's rates are
# 1,000x this (an L4's fp32: 30e12 FLOP/s, its bandwidth 300e9 B/s)
MIN_DEVICE_RATE = 1e9  # least FLOP/s or bytes/s of peak_flops, peak_fp32_flops, bandwidth
MIN_EFFICIENCY = 0.01  # least share of peak a kernel reaches (flop_ and bw_efficiency)
# field -> (least, most, whether ``least`` itself is refused); the fields not listed are the
# host costs in microseconds, from 0 to MAX_DEVICE_US
_NUMBER_RANGES: dict[str, tuple[float, float, bool]] = {
    "peak_flops": (MIN_DEVICE_RATE, MAX_DEVICE_RATE, False),
    "peak_fp32_flops": (MIN_DEVICE_RATE, MAX_DEVICE_RATE, False),
    "bandwidth_bytes_per_s": (MIN_DEVICE_RATE, MAX_DEVICE_RATE, False),
    "memory_bytes": (0.0, MAX_DEVICE_MEMORY, True),
    "peak_fp8_flops": (0.0, MAX_DEVICE_RATE, False),
    "link_bytes_per_s": (0.0, MAX_DEVICE_RATE, False),
    "sms": (0.0, 100_000.0, False),
    # a share of peak: at 0 a kernel never ends (tune's scheduler loop waited forever)
    "flop_efficiency": (MIN_EFFICIENCY, 1.0, False),
    "bw_efficiency": (MIN_EFFICIENCY, 1.0, False),
    **{f: (0.0, MAX_DEVICE_US, False) for f in (
        "kernel_launch_us", "kernel_gap_us", "piece_overhead_us", "step_overhead_us",
        "graph_launch_us", "kernel_min_us", "graph_instantiate_us")},
}  # fmt: skip


def _plain(bound: float) -> str:
    """A bound as a person writes it: ``1_000_000_000``, ``0.01``, not ``1e+09``."""
    return f"{int(bound):_}" if float(bound).is_integer() else f"{bound:g}"


def _check_number(field: str, value: Any, least: float, most: float, open_low: bool) -> None:
    """ValueError unless ``value`` is a finite real number in the field's range."""
    number = isinstance(value, (int, float)) and not isinstance(value, bool)
    if number and (value > least if open_low else value >= least) and value <= most:
        return  # (a NaN fails every comparison, infinity the upper bound)
    low = f"> {_plain(least)}" if open_low else f">= {_plain(least)}"
    top = _plain(most)
    shown = repr(value) if not isinstance(value, float) else f"{value:g}"
    raise ValueError(
        f"field {field!r}={shown} is invalid: give a finite number {low} and at most "
        f"{top} (cgdispatch.core.validate.BOUNDS)"
    )


def _load_table() -> tuple[dict[str, DeviceSpec], dict[str, str]]:
    with resources.files("cgdispatch.data").joinpath("device_specs.csv").open() as f:
        rows = list(csv.DictReader(f))
    presets, aliases = {}, {}
    for row in rows:
        reported = row["memory_gib_reported"]
        memory = float(reported) * _GIB if reported else float(row["memory_gb"]) * _GIB
        spec = DeviceSpec(
            row["label"],
            peak_flops=float(row["bf16_tflops"]) * 1e12,
            peak_fp32_flops=float(row["fp32_tflops"]) * 1e12,
            bandwidth_bytes_per_s=float(row["bandwidth_gb_s"]) * 1e9,
            memory_bytes=memory if reported else memory * _REPORTED_SHARE,
            peak_fp8_flops=float(row["fp8_tflops"]) * 1e12,
            architecture=row["architecture"],
            link_bytes_per_s=float(row["link_gb_s"]) * 1e9,
            sms=int(row["sms"] or 0),
        )
        presets[row["name"]] = spec
        for alias in filter(None, row["aliases"].split()):
            aliases[alias] = row["name"]
    # the short names of issue 18 (H100, H200, A100) first: they are the calibrated ones
    return {**{a: presets[n] for a, n in aliases.items()}, **presets}, aliases


# preset name -> spec, aliases included (``H100`` is ``H100-SXM``)
DEVICE_PRESETS, DEVICE_ALIASES = _load_table()


def check_device_name(device: object) -> str:
    """``device`` if it names a preset of :data:`DEVICE_PRESETS`, else ValueError naming
    the value and the presets (a list or None too, not a TypeError)."""
    if not isinstance(device, str) or device not in DEVICE_PRESETS:
        raise ValueError(
            f"device={device!r} is unknown: give one preset name, one of "
            f"{sorted(DEVICE_PRESETS)}, or a DeviceSpec (tune --device-spec FILE.json)"
        )
    return device


def device_spec(device: str | DeviceSpec) -> DeviceSpec:
    """The spec of a preset name, or ``device`` itself when it is a :class:`DeviceSpec`."""
    if isinstance(device, DeviceSpec):
        return device
    return DEVICE_PRESETS[check_device_name(device)]


def device_label(device: str | DeviceSpec) -> str:
    """How estimates name the device: the preset name, or a spec's ``name``."""
    return device.name if isinstance(device, DeviceSpec) else check_device_name(device)


_REQUIRED = ("name", "peak_flops", "peak_fp32_flops", "bandwidth_bytes_per_s", "memory_bytes")


def load_device_spec(path: str | Path) -> DeviceSpec:
    """A :class:`DeviceSpec` from a JSON object of its fields (FLOP/s, bytes/s, bytes).

    ``name``, ``peak_flops``, ``peak_fp32_flops``, ``bandwidth_bytes_per_s`` and
    ``memory_bytes`` are required; the launch constants default to the presets'. A missing
    or unknown field, or a value that is not a positive number, is a ValueError naming it."""
    what = f"device spec {path} (--device-spec)"
    data = read_json_file(path, what)
    if not isinstance(data, dict):
        raise ValueError(f"{what}: give a JSON object of DeviceSpec fields")
    known = {f.name: f for f in dataclasses.fields(DeviceSpec)}
    for name in data:
        if name not in known:
            raise ValueError(
                f"{what}: field {name!r} is unknown: use the fields of DeviceSpec, {sorted(known)}"
            )
    for name, value in data.items():
        if name in ("name", "architecture"):
            if not isinstance(value, str) or (name == "name" and not value.strip()):
                raise ValueError(
                    f"{what}: field {name!r}={value!r} is invalid: give "
                    + ("the GPU's name" if name == "name" else "a GPU generation (Hopper, ...)")
                    + " as text"
                )
        elif isinstance(value, (bool, BadNumber)) or not isinstance(value, (int, float)):
            raise ValueError(
                f"{what}: field {name!r}={value!r} is invalid: give a finite number (JSON "
                "has no NaN or Infinity; integers of at most 40 digits)"
            )
    for name in _REQUIRED:
        if name not in data:
            raise ValueError(f"{what}: field {name!r} is missing: {list(_REQUIRED)} are required")
    text = ("name", "architecture")
    try:  # the bounds are DeviceSpec's own; the message gets the file and the flag
        return DeviceSpec(**{k: (v if k in text else _as_float(v)) for k, v in data.items()})
    except ValueError as err:
        raise ValueError(f"{what}: {err}") from None


def _as_float(value: int | float) -> float:
    """``value`` as a float; an integer too large for one stays an int (refused by bound)."""
    try:
        return float(value)
    except OverflowError:
        return value  # type: ignore[return-value]
