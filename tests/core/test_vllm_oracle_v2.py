"""Replay the vLLM 0.34.0 oracle fixture (real vLLM code run on CPU) through generation 2.

The fixture is written by the oracle tool (tests/data/vllm_oracle/README.md describes it);
every case must agree. Skipped, with the reason, while the fixture is absent.
"""

from __future__ import annotations

import json
import warnings
from pathlib import Path
from typing import Any

import pytest

from cgdispatch import AttentionCGSupport, CudaGraphManager, CUDAGraphMode, GraphConfig

FIXTURE = Path(__file__).resolve().parents[1] / "data" / "vllm_oracle" / "vllm-0.34.0.json"

pytestmark = pytest.mark.skipif(
    not FIXTURE.exists(),
    reason=f"{FIXTURE.relative_to(FIXTURE.parents[3])} is absent: the vLLM 0.34.0 oracle "
    "fixture has not been generated yet",
)

DESC_FIELDS = (
    "cg_mode",
    "num_tokens",
    "num_reqs",
    "uniform_token_count",
    "max_query_len",
    "num_active_loras",
    "num_ubatches",
)


def _cases() -> list[dict[str, Any]]:
    if not FIXTURE.exists():
        return []
    data = json.loads(FIXTURE.read_text())
    return data["cases"] if isinstance(data, dict) else data


def _desc(d: Any) -> tuple:
    if isinstance(d, dict):
        values = [d.get(f) for f in DESC_FIELDS]
        values[0] = CUDAGraphMode.parse(values[0]).name
        values[-1] = 1 if values[-1] is None else values[-1]
        values[-2] = 0 if values[-2] is None else values[-2]
        return tuple(values)
    return (d.cg_mode.name, *(getattr(d, f) for f in DESC_FIELDS[1:]))


def _build(case: dict[str, Any]):
    kwargs = dict(case["config"])
    kwargs.setdefault("vllm_version", "0.34")
    if kwargs.get("device_capability") is not None:
        kwargs["device_capability"] = tuple(kwargs["device_capability"])
    support = AttentionCGSupport[case.get("attention_support", "ALWAYS")]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        config = GraphConfig(**kwargs)
        resolved = config.resolve(
            support,
            piecewise_capture_available=case.get("piecewise_capture_available", True),
        )
    lens = case.get("decode_query_lens")
    if lens is not None:
        lens = {int(k): v for k, v in lens.items()}
    return config, resolved, CudaGraphManager(resolved, decode_query_lens=lens)


@pytest.mark.parametrize("case", _cases(), ids=lambda c: str(c.get("id", c.get("name"))))
def test_oracle_case(case):
    expected = case["expected"]
    if expected.get("error"):
        with pytest.raises(ValueError):
            _build(case)
        return
    config, resolved, mgr = _build(case)
    for field, value in expected.get("config", {}).items():
        got = getattr(config, field)
        got = got.name if isinstance(got, CUDAGraphMode) else got
        assert got == value, field
    if "cudagraph_mode" in expected:
        assert resolved.cudagraph_mode.name == expected["cudagraph_mode"]
    if "capture_descs" in expected:
        got = {m.name: [_desc(d) for d in ds] for m, ds in mgr.capture_descs.items()}
        want = {m: [_desc(d) for d in ds] for m, ds in expected["capture_descs"].items()}
        assert got == want
    for call in expected.get("dispatch", []):
        args = call["args"]
        got = mgr.dispatch(**args) if isinstance(args, dict) else mgr.dispatch(*args)
        assert _desc(got) == _desc(call["desc"]), args
