"""Replay the vLLM 0.34.0 oracle fixture (vLLM's own code run on CPU) through generation 2.

Schema: tests/data/vllm_oracle/README.md. Each case's engine args and --compilation-config
go through ``GraphConfig.from_vllm(..., vllm_version="0.34")``; its resolved fields, the
mode after ``resolve(attention_cg_support)``, the manager's capture descriptors and every
dispatch answer must equal vLLM's, and vLLM's refusals must be ValueErrors here. Skipped,
with the reason, while the fixture is absent.
"""

from __future__ import annotations

import json
import warnings
from pathlib import Path
from typing import Any

import pytest

from cgdispatch import AttentionCGSupport, CudaGraphManager, GraphConfig
from cgdispatch.core.v2.config import splitting_ops_contain_attention

FIXTURE = Path(__file__).resolve().parents[1] / "data" / "vllm_oracle" / "vllm-0.34.0.json"

pytestmark = pytest.mark.skipif(
    not FIXTURE.exists(),
    reason="tests/data/vllm_oracle/vllm-0.34.0.json is absent: the vLLM 0.34.0 oracle "
    "fixture has not been generated yet",
)


def _fixture() -> dict[str, Any]:
    return json.loads(FIXTURE.read_text()) if FIXTURE.exists() else {"cases": []}


DATA = _fixture()
CASES = DATA["cases"]


def _config(inputs: dict[str, Any]) -> GraphConfig:
    engine = dict(inputs["engine_args"])
    fields: dict[str, Any] = {
        "vllm_version": "0.34",
        "max_num_seqs": engine["max_num_seqs"],
        "max_num_batched_tokens": engine["max_num_batched_tokens"],
        "num_speculative_tokens": engine.get("num_speculative_tokens", 0),
        "device_capability": tuple(inputs["device_capability"]),
    }
    if fields["num_speculative_tokens"]:
        fields["speculative_method"] = "ngram"
    if engine.get("enable_lora"):
        fields["max_loras"] = engine.get("max_loras", 1)
        fields["specialize_active_lora"] = engine.get("specialize_active_lora", False)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return GraphConfig.from_vllm(dict(inputs["compilation_config"]), **fields)


def _desc(d: Any) -> list:
    return [
        d.cg_mode.name,
        d.num_tokens,
        d.num_reqs,
        d.uniform_token_count,
        d.max_query_len,
        d.num_active_loras,
        d.num_ubatches,
    ]


def replay(case: dict[str, Any]) -> list[str]:
    """Differences between cgdispatch and vLLM for one case (empty = agreement)."""
    diffs: list[str] = []
    refusal = case.get("refusal")
    inputs = case["inputs"]
    support = AttentionCGSupport[inputs["attention_cg_support"]]
    try:
        config = _config(inputs)
    except ValueError as err:
        if refusal and refusal["stage"] == "create_engine_config":
            return []
        return [f"refused at config ({err}); vLLM: {refusal}"]
    if refusal and refusal["stage"] == "create_engine_config":
        return [f"vLLM refused at create_engine_config ({refusal['message'][:200]}), we did not"]
    want = case["config"]
    got = {
        "cudagraph_mode": config.cudagraph_mode.name,
        "cudagraph_capture_sizes": config.cudagraph_capture_sizes,
        "max_cudagraph_capture_size": config.max_cudagraph_capture_size,
        "compile_sizes": list(config.compile_sizes),
        "splitting_ops_contain_attention": splitting_ops_contain_attention(config),
        "splitting_ops_empty": config.splitting_ops == [],
        "prefill_cudagraph_capture_token_sizes": config.prefill_cudagraph_capture_token_sizes,
        "decode_cudagraph_capture_request_sizes": config.decode_cudagraph_capture_request_sizes,
        "max_prefill_cudagraph_capture_tokens": config.max_prefill_cudagraph_capture_tokens,
        "max_decode_cudagraph_capture_requests": config.max_decode_cudagraph_capture_requests,
        "max_decode_cudagraph_capture_tokens": config.max_decode_cudagraph_capture_tokens,
    }
    for key, value in got.items():
        if key in want and want[key] != value:
            diffs.append(f"config.{key}: vLLM {want[key]} ours {value}")
    try:
        resolved = config.resolve(support)
    except ValueError as err:
        if refusal and refusal["stage"] == "resolve":
            return diffs
        return [*diffs, f"refused at resolve ({err}); vLLM: {refusal}"]
    if refusal and refusal["stage"] == "resolve":
        return [*diffs, f"vLLM refused at resolve ({refusal['message'][:200]}), we did not"]
    want = case.get("resolved", {})
    got = {
        "cudagraph_mode": resolved.cudagraph_mode.name,
        "cudagraph_capture_sizes": resolved.cudagraph_capture_sizes,
        "max_cudagraph_capture_size": resolved.max_cudagraph_capture_size,
        "prefill_cudagraph_capture_token_sizes": resolved.prefill_cudagraph_capture_token_sizes,
        "decode_cudagraph_capture_request_sizes": resolved.decode_cudagraph_capture_request_sizes,
    }
    for key, value in got.items():
        if key in want and want[key] != value:
            diffs.append(f"resolved.{key}: vLLM {want[key]} ours {value}")
    manager_in = case.get("manager", {})
    lens = manager_in.get("decode_query_lens")
    lens = {int(k): v for k, v in lens.items()} if lens else None
    try:
        mgr = CudaGraphManager(resolved, decode_query_lens=lens)
    except ValueError as err:
        if refusal and refusal["stage"] == "manager":
            return diffs
        return [*diffs, f"refused at manager ({err}); vLLM: {refusal}"]
    if refusal:
        return [*diffs, f"vLLM refused at {refusal['stage']}, we did not"]
    if (
        "lora_capture_cases" in manager_in
        and mgr.lora_capture_cases != manager_in["lora_capture_cases"]
    ):
        diffs.append(
            f"lora cases: vLLM {manager_in['lora_capture_cases']} ours {mgr.lora_capture_cases}"
        )
    if "capture_descs" in case:
        got_descs = [[m.name, [_desc(d) for d in ds]] for m, ds in mgr.capture_descs.items()]
        if got_descs != case["capture_descs"]:
            diffs.append("capture_descs differ")
    for call in case.get("dispatch", []):
        try:
            answer = _desc(mgr.dispatch(**call["args"]))
        except (ValueError, TypeError) as err:
            if "error" not in call:
                diffs.append(f"dispatch {call['args']} raised {err}")
            continue
        if "error" in call:
            diffs.append(f"dispatch {call['args']}: vLLM raised {call['error']}, we answered")
        elif answer != call["descriptor"]:
            diffs.append(f"dispatch {call['args']}: vLLM {call['descriptor']} ours {answer}")
    return diffs


def test_fixture_is_generation_2():
    assert DATA["vllm_version"] == "0.34.0" and DATA["generation"] == 2
    assert len(CASES) == DATA["num_cases"] > 0


@pytest.mark.parametrize("case", CASES, ids=[str(c["id"]) for c in CASES])
def test_oracle_case(case):
    diffs = replay(case)
    assert not diffs, "\n".join(diffs[:10])
