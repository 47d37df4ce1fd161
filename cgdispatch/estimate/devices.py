"""Device presets: peak rates of a GPU and the host costs of launching work on it.

Datasheet figures as quoted in docs/references.md (NVIDIA H100/H200/A100 datasheets). The
launch constants were set to match published step times (docs/calibration.md, "Step time by
mode"). One module below the device model, the step-time formula and the start-up model,
which all read it.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

__all__ = ["DeviceSpec", "DEVICE_PRESETS", "check_device_name"]


@dataclass(frozen=True)
class DeviceSpec:
    """Peak rates of a device and the host costs of launching work on it. All overridable."""

    name: str
    peak_flops: float  # dense bf16/fp16 tensor-core FLOP/s
    peak_fp32_flops: float  # dense fp32 FLOP/s (kernels with no 16-bit operand)
    bandwidth_bytes_per_s: float  # HBM bandwidth
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

    def replace(self, **changes: Any) -> DeviceSpec:
        return dataclasses.replace(self, **changes)


# fp32 (non-tensor) rates: H100/H200 SXM 67 TFLOP/s, A100 19.5 TFLOP/s.
DEVICE_PRESETS: dict[str, DeviceSpec] = {
    "H100": DeviceSpec("H100 SXM", 989e12, 67e12, 3.35e12),
    "H200": DeviceSpec("H200 SXM", 989e12, 67e12, 4.8e12),
    "A100": DeviceSpec("A100 SXM 80GB", 312e12, 19.5e12, 2.0e12),
}


def check_device_name(device: object) -> str:
    """``device`` if it names a preset of :data:`DEVICE_PRESETS`, else ValueError naming
    the value and the presets (a list or None too, not a TypeError)."""
    if not isinstance(device, str) or device not in DEVICE_PRESETS:
        raise ValueError(
            f"device={device!r} is unknown: give one preset name, one of {sorted(DEVICE_PRESETS)}"
        )
    return device
