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
import json
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import Any

__all__ = [
    "DeviceSpec",
    "DEVICE_PRESETS",
    "DEVICE_ALIASES",
    "check_device_name",
    "device_spec",
    "device_label",
    "load_device_spec",
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

    def replace(self, **changes: Any) -> DeviceSpec:
        return dataclasses.replace(self, **changes)


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
    with open(path, encoding="utf-8") as f:
        data = json.load(f)
    if not isinstance(data, dict):
        raise ValueError(f"device spec {path}: give a JSON object of DeviceSpec fields")
    known = {f.name: f for f in dataclasses.fields(DeviceSpec)}
    for name in data:
        if name not in known:
            raise ValueError(
                f"device spec {path}: field {name!r} is unknown: use the fields of "
                f"DeviceSpec, {sorted(known)}"
            )
    for name, value in data.items():
        if name == "name":
            if not isinstance(value, str) or not value.strip():
                raise ValueError(f"device spec {path}: field 'name' must be a non-empty string")
        elif name == "architecture":
            if not isinstance(value, str):
                raise ValueError(
                    f"device spec {path}: field 'architecture'={value!r} is invalid: give a "
                    "GPU generation as text (Ampere, Ada, Hopper, Blackwell, CDNA3)"
                )
        elif isinstance(value, bool) or not isinstance(value, (int, float)) or not value >= 0:
            raise ValueError(
                f"device spec {path}: field {name!r}={value!r} is invalid: give a number >= 0"
            )
        elif value == 0 and name in _REQUIRED:
            raise ValueError(f"device spec {path}: field {name!r} must be > 0")
    for name in _REQUIRED:
        if name not in data:
            raise ValueError(
                f"device spec {path}: field {name!r} is missing: {list(_REQUIRED)} are required"
            )
    text = ("name", "architecture")
    return DeviceSpec(**{k: (v if k in text else float(v)) for k, v in data.items()})
