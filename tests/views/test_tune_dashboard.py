"""The tune dashboard: its verdict is ``tune``'s for the controls' values, a control change
re-runs it, and a bad entry shows a message instead of a stale verdict."""

from __future__ import annotations

import html
import re

import pytest

from cgdispatch import GraphConfig, tune, tune_dashboard
from cgdispatch.estimate.kv_bytes import kv_bytes_per_token
from cgdispatch.views.model_cache import cached_cost_model
from cgdispatch.workload.sources import workload_requests, workload_trace


def shown(widget_html: str) -> dict[str, str]:
    head = widget_html.split(">", 1)[0]
    return {k: html.unescape(v) for k, v in re.findall(r'data-([a-z0-9-]+)="([^"]*)"', head)}


def direct(version: str, seqs: int, tokens: int, trace: str = "alpaca"):
    config = GraphConfig(vllm_version=version, max_num_seqs=seqs, max_num_batched_tokens=tokens)
    config = config.resolve()
    steps, label = workload_trace(
        trace, num_requests=200, rate_per_s=8.0, max_num_seqs=seqs, max_num_batched_tokens=tokens
    )
    return tune(
        steps,
        config=config,
        cost_model=cached_cost_model("qwen2.5-7b", "H100"),
        kv_bytes_per_token=kv_bytes_per_token("qwen2.5-7b"),
        trace_label=label,
        requests=workload_requests(trace, num_requests=200, rate_per_s=8.0),
    )


def test_the_verdict_is_tunes_and_follows_each_control() -> None:
    dash = tune_dashboard(
        model="qwen2.5-7b", device="H100", trace="alpaca", max_num_seqs=64,
        max_num_batched_tokens=2048, num_requests=200, draw=False,
    )  # fmt: skip
    for version, seqs in (("0.34", 64), ("0.34", 32), ("0.33", 32)):
        dash.version_box.value = version
        dash.seqs_box.value = seqs
        want = direct(version, seqs, 2048)
        got = shown(dash.verdict.value)
        assert got["recommendation"] == want.recommendation
        assert got["vllm-version"] == version and got["max-num-seqs"] == str(seqs)
        assert float(got["mean-step-pct"]) == pytest.approx(want.deltas["mean_step_pct"])
        assert got["flags"] == want.flags
        assert dash.result is not None and dash.result.planned == want.planned


def test_a_bad_entry_shows_a_message_and_clears_the_verdict() -> None:
    dash = tune_dashboard(
        num_requests=100, draw=False, max_num_seqs=32, max_num_batched_tokens=1024
    )
    assert "tune-verdict" in dash.verdict.value
    dash.trace_box.value = "no-such-trace.csv"
    assert dash.verdict.value == "" and dash.result is None
    assert "does not exist" in dash.message.value
    dash.trace_box.value = "sharegpt"
    assert "tune-verdict" in dash.verdict.value and dash.message.value == ""
