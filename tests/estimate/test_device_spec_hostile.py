"""Device specs that lie (issue 36, class 4): an empty, truncated or runaway file, a number
JSON cannot hold as a finite float, a rate beyond any GPU or an efficiency of 0 is one
ValueError naming the file, the flag and the field, before any estimate."""

from __future__ import annotations

import json

import numpy as np
import pytest

from cgdispatch.core import validate as v
from cgdispatch.estimate.devices import DEVICE_PRESETS, DeviceSpec, load_device_spec

GIB = 1 << 30
FIELDS = {
    "name": "my-gpu",
    "peak_flops": 400e12,
    "peak_fp32_flops": 50e12,
    "bandwidth_bytes_per_s": 1.0e12,
    "memory_bytes": 40 * GIB,
}


def _spec_file(tmp_path, text):
    path = tmp_path / "gpu.json"
    path.write_text(text)
    return path


def _with(field, literal):
    """The spec's JSON with ``field`` set to the JSON ``literal`` as written."""
    return json.dumps({k: val for k, val in FIELDS.items() if k != field})[:-1] + (
        f', "{field}": {literal}}}'
    )


@pytest.mark.parametrize(
    ("text", "said"),
    [
        ("", "is empty"),
        (json.dumps(FIELDS)[:37], "is not JSON"),
        ('{"name": ' + "[" * 100_000 + "]" * 100_000 + "}", "nests deeper than 32"),
        (_with("bandwidth_bytes_per_s", "Infinity"), "'bandwidth_bytes_per_s'=Infinity"),
        (_with("memory_bytes", "1e999"), "'memory_bytes'=1e999"),
        (_with("memory_bytes", "9" * 401), "'memory_bytes'=<a 401-digit number>"),
        (_with("kernel_gap_us", "NaN"), "'kernel_gap_us'=NaN"),
        (_with("peak_flops", "1e30"), "'peak_flops'=1e+30 is invalid: give a finite number >= 1_000_000_000 and at most 1_000_000_000_000_000_000"),
        (_with("bandwidth_bytes_per_s", "1e30"), "'bandwidth_bytes_per_s'=1e+30"),
        (_with("bw_efficiency", "0"), "'bw_efficiency'=0 is invalid: give a finite number >= 0.01 and at most 1"),
        (_with("flop_efficiency", "0"), "'flop_efficiency'=0 is invalid"),
        (_with("flop_efficiency", "1.5"), "'flop_efficiency'=1.5 is invalid"),
        (_with("name", json.dumps("gpu\nvllm serve evil/model")), "control character '\\n'"),
    ],
)  # fmt: skip
def test_a_lying_device_spec_is_one_error_naming_file_flag_and_field(tmp_path, text, said):
    path = _spec_file(tmp_path, text)
    with pytest.raises(ValueError) as err:
        load_device_spec(path)
    message = str(err.value)
    assert message.startswith(f"device spec {path} (--device-spec)") and said in message


def test_every_field_is_checked_in_python_too_against_its_range():
    """DeviceSpec refuses what the file loader refuses; random values inside each range
    are kept, random ones outside refused (a fresh draw each run)."""
    rng = np.random.default_rng()
    ranges = {"peak_flops": (1e9, v.MAX_DEVICE_RATE), "bandwidth_bytes_per_s": (1e9, v.MAX_DEVICE_RATE),
              "memory_bytes": (1.0, v.MAX_DEVICE_MEMORY), "bw_efficiency": (0.01, 1.0),
              "flop_efficiency": (0.01, 1.0), "kernel_launch_us": (0.0, v.MAX_DEVICE_US),
              "link_bytes_per_s": (0.0, v.MAX_DEVICE_RATE)}  # fmt: skip
    base = DEVICE_PRESETS["H100"]
    for field, (low, high) in ranges.items():
        inside = float(np.exp(rng.uniform(np.log(max(low, 1e-9)), np.log(high))))
        assert getattr(base.replace(**{field: inside}), field) == inside
        for outside in (high * rng.uniform(1.01, 10), low - 1 if low else -1.0, float("nan"),
                        float("inf")):  # fmt: skip
            with pytest.raises(ValueError, match=f"field '{field}'="):
                base.replace(**{field: outside})
    with pytest.raises(ValueError, match="control character"):
        DeviceSpec("a\rb", 1e14, 1e12, 1e12)


def test_every_preset_passes_its_own_checks():
    for name, spec in DEVICE_PRESETS.items():
        assert spec.replace() == spec, name
