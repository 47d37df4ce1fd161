"""cgdispatch's V1 semantics equal vLLM 0.33.0's, case by case.

Every case of ``tests/data/vllm_oracle/vllm-0.33.0.json`` (vLLM's own answers, recorded by
``scripts/vllm_oracle.py``; schema in that folder's README) is replayed through
``GraphConfig(...)``, ``.resolve(AttentionCGSupport.X)`` and ``CudagraphDispatcher``. vLLM
is not needed here.
"""

from __future__ import annotations

import json
import warnings
from functools import cache
from pathlib import Path
from typing import Any

import pytest

from cgdispatch.core.batch import BatchDescriptor
from cgdispatch.core.config import GraphConfig
from cgdispatch.core.modes import AttentionCGSupport, CUDAGraphMode
from cgdispatch.core.v1.dispatcher import CudagraphDispatcher

FIXTURE = Path(__file__).resolve().parents[1] / "data" / "vllm_oracle" / "vllm-0.33.0.json"
STAGES = ("create_engine_config", "resolve", "dispatcher")


@cache
def _fixture() -> dict[str, Any]:
    return json.loads(FIXTURE.read_text())


def _case_ids() -> list[int]:
    return [case["id"] for case in _fixture()["cases"]]


def graph_config_kwargs(inputs: dict[str, Any]) -> dict[str, Any]:
    """GraphConfig keyword arguments for a fixture case's vLLM inputs."""
    ea, cc = inputs["engine_args"], inputs["compilation_config"]
    kwargs: dict[str, Any] = {
        "max_num_seqs": ea["max_num_seqs"],
        "max_num_batched_tokens": ea["max_num_batched_tokens"],
        "num_speculative_tokens": ea.get("num_speculative_tokens", 0),
        "device_capability": tuple(inputs["device_capability"]),
        "vllm_version": "0.33",  # the fixture is vLLM 0.33's (V1); the default is the newest
    }
    if ea.get("enable_lora"):
        kwargs["max_loras"] = ea["max_loras"]
        kwargs["specialize_active_lora"] = ea.get("specialize_active_lora", False)
    for key in (
        "cudagraph_mode",
        "cudagraph_capture_sizes",
        "max_cudagraph_capture_size",
        "compile_sizes",
        "cudagraph_specialize_lora",
    ):
        if key in cc:
            kwargs[key] = cc[key]
    if "splitting_ops" in cc:
        # [] stays []; vLLM's ["vllm::unified_attention_with_output"] names one attention
        # op but not all of them: cgdispatch's analogue is one of its own attention ops
        kwargs["splitting_ops"] = ["cgdispatch::attention"] if cc["splitting_ops"] else []
    return kwargs


def _desc(values: list[Any]) -> BatchDescriptor:
    return BatchDescriptor(*values)


def _row(d: BatchDescriptor) -> list[Any]:
    return [d.num_tokens, d.num_reqs, d.uniform, d.has_lora, d.num_active_loras]


def _sort_key(row: list[Any]) -> tuple:
    return tuple(-1 if v is None else int(v) for v in row)


def replay(case: dict[str, Any]) -> dict[str, Any]:
    """cgdispatch's answers for one case, in the fixture's shape."""
    out: dict[str, Any] = {}
    inputs = case["inputs"]
    stage = "create_engine_config"
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            cfg = GraphConfig(**graph_config_kwargs(inputs))
        out["config"] = cfg
        stage = "resolve"
        resolved = cfg.resolve(AttentionCGSupport[inputs["attention_cg_support"]])
        out["resolved"] = resolved
        stage = "dispatcher"
        dispatcher = CudagraphDispatcher(resolved, record_stats=False)
        dispatcher.initialize_cudagraph_keys()
        out["dispatcher"] = dispatcher
    except ValueError as err:
        out["refusal"] = {"stage": stage, "message": str(err)}
    return out


@pytest.mark.parametrize("case_id", _case_ids())
def test_case_matches_vllm(case_id: int) -> None:
    case = _fixture()["cases"][case_id]
    ours = replay(case)
    theirs_refusal = case.get("refusal")
    ours_refusal = ours.get("refusal")
    where = f"case {case_id} inputs={json.dumps(case['inputs'])}"
    if theirs_refusal is not None:
        assert ours_refusal is not None, (
            f"vLLM refused ({theirs_refusal}), cgdispatch did not: {where}"
        )
        assert ours_refusal["stage"] == theirs_refusal["stage"], (
            f"refused at {ours_refusal['stage']} ({ours_refusal['message']}), vLLM at "
            f"{theirs_refusal['stage']} ({theirs_refusal['message']}): {where}"
        )
        return
    assert ours_refusal is None, f"cgdispatch refused ({ours_refusal}), vLLM did not: {where}"
    cfg: GraphConfig = ours["config"]
    want = case["config"]
    assert str(cfg.cudagraph_mode) == want["cudagraph_mode"], where
    assert cfg.cudagraph_capture_sizes == want["cudagraph_capture_sizes"], where
    assert cfg.max_cudagraph_capture_size == want["max_cudagraph_capture_size"], where
    assert sorted(cfg.compile_sizes) == want["compile_sizes"], where
    resolved: GraphConfig = ours["resolved"]
    want = case["resolved"]
    assert str(resolved.cudagraph_mode) == want["cudagraph_mode"], where
    assert resolved.cudagraph_capture_sizes == want["cudagraph_capture_sizes"], where
    assert resolved.max_cudagraph_capture_size == want["max_cudagraph_capture_size"], where

    dispatcher: CudagraphDispatcher = ours["dispatcher"]
    ours_capture = [(str(m), [_row(d) for d in ds]) for m, ds in dispatcher.get_capture_descs()]
    theirs_capture = [(m, ds) for m, ds in case["capture_descs"]]
    assert [m for m, _ in ours_capture] == [m for m, _ in theirs_capture], where
    for (mode, ours_ds), (_, theirs_ds) in zip(ours_capture, theirs_capture):
        # order: (num_tokens, num_active_loras) descending, exactly as vLLM's sort;
        # ties are in vLLM's set-iteration order, so compare them as sets
        assert [(d[0], d[4]) for d in ours_ds] == [(d[0], d[4]) for d in theirs_ds], (
            f"{mode} capture order: {where}"
        )
        assert sorted(ours_ds, key=_sort_key) == sorted(theirs_ds, key=_sort_key), (
            f"{mode} keys: {where}"
        )

    for call in case["dispatch"]:
        args = dict(call["args"])
        for key in ("valid_modes", "invalid_modes"):
            if key in args:
                args[key] = {CUDAGraphMode[m] for m in args[key]}
        assert "error" not in call, f"vLLM raised on {call}: {where}"
        mode, desc = dispatcher.dispatch(**args)
        assert (str(mode), _row(desc)) == (call["mode"], call["batch_descriptor"]), (
            f"dispatch({call['args']}): {where}"
        )


def test_fixture_is_vllm_033() -> None:
    doc = _fixture()
    assert doc["vllm_version"] == "0.33.0" and doc["generation"] == 1
    assert doc["num_cases"] == len(doc["cases"]) >= 500
    dispatch_calls = sum(len(c.get("dispatch", ())) for c in doc["cases"])
    assert dispatch_calls >= 5000
