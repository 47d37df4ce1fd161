"""``tune`` before any verdict: traffic one replica cannot hold is said so in the verdict's
first line with a replica count, nothing is judged on queueing, ``replicas`` tunes one
replica's share, and a plan made on prompts only keeps decode sizes. The referee replays
the held-out requests directly (vLLM's scheduler, steps priced by the default ladder's
dispatch) and counts the queue from arrivals and first tokens by plain loops."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest

from cgdispatch import GraphConfig
from cgdispatch.plan.costs import AffineCostModel
from cgdispatch.plan.gen2_ladder import Gen2Ladder, ladder_config
from cgdispatch.plan.ladder_compare import engine_ladders
from cgdispatch.plan.ladder_latency import ladder_latency
from cgdispatch.plan.planner import plan_ladder
from cgdispatch.plan.tune import tune
from cgdispatch.views.tune_verdict import MAX_VERDICT_LINES, verdict_lines
from cgdispatch.workload.latency import dispatched_step_time, simulate_latencies
from cgdispatch.workload.limits import scheduler_limits
from cgdispatch.workload.sources import split_holdout, workload_requests
from cgdispatch.workload.sustain import (
    EDGE_SHARE,
    QUEUE_GROWTH_MIN,
    QUEUE_GROWTH_SHARE,
    RATE_TOLERANCE,
)
from cgdispatch.workload.trace import make_trace, simulate_steps


class MemoryAffine(AffineCostModel):
    def capture_time_s(self, mode, n):  # noqa: ANN001, ANN201
        return 0.01 + 1e-4 * np.asarray(n, dtype=np.float64)


MODEL = MemoryAffine(per_token_ms=0.05)


def _config(version: str, seqs: int = 24, tokens: int = 512) -> GraphConfig:
    return GraphConfig(
        vllm_version=version, max_num_seqs=seqs, max_num_batched_tokens=tokens
    ).resolve()


def _held_out(requests: pd.DataFrame) -> pd.DataFrame:
    cut = np.sort(requests["arrival_s"].to_numpy())[math.ceil(0.5 * len(requests))]
    held = requests[requests["arrival_s"] >= cut].reset_index(drop=True)
    return held.assign(arrival_s=held["arrival_s"] - held["arrival_s"].min())


def _direct_check(config: GraphConfig, requests: pd.DataFrame) -> dict:
    """One replica running vLLM's default ladder over ``requests``: the queue each arrival
    sees counted by a loop, the rates summed, the rule applied."""
    cfg = ladder_config(config, engine_ladders(config)["vllm"])
    run = simulate_latencies(requests.reset_index(drop=True), scheduler_limits(cfg),
                             step_time_ms=dispatched_step_time(cfg, MODEL))  # fmt: skip
    a, f = run.requests["arrival_s"].to_numpy(), run.requests["first_token_s"].to_numpy()
    seen = np.array([np.sum((a <= t) & (f > t)) for t in a], dtype=float)
    t0, t1 = a.min(), a.max()
    if t1 == t0:
        return {"sustainable": True}
    edge = EDGE_SHARE * (t1 - t0)
    work = np.maximum(run.requests["prompt_tokens"] + run.requests["output_tokens"] - 1, 0).sum()
    t = run.steps["time_s"].to_numpy()
    served = run.steps["num_tokens"].to_numpy()[(t >= t0) & (t < t1)].sum()
    out = {"queue_start": seen[a <= t0 + edge].mean(), "queue_end": seen[a >= t1 - edge].mean(),
           "offered_tok_s": work / (t1 - t0), "served_tok_s": served / (t1 - t0)}  # fmt: skip
    grew = out["queue_end"] - out["queue_start"] > max(
        QUEUE_GROWTH_MIN, QUEUE_GROWTH_SHARE * len(a)
    )
    out["sustainable"] = not (
        grew and out["served_tok_s"] < (1 - RATE_TOLERANCE) * out["offered_tok_s"]
    )
    return out


def _round_robin_holds(config: GraphConfig, requests: pd.DataFrame, n: int) -> bool:
    rank = np.argsort(np.argsort(requests["arrival_s"].to_numpy(), kind="stable"), kind="stable")
    return all(_direct_check(config, requests[rank % n == r])["sustainable"] for r in range(n))


def _traffic(rng: np.random.Generator, rate: float, n: int, seed: int):
    requests = workload_requests("sharegpt", num_requests=n, rate_per_s=rate, seed=seed)
    steps = simulate_steps(requests, max_num_seqs=24, max_num_batched_tokens=512)
    return steps, requests


@pytest.mark.parametrize("version", ["0.33", "0.34"])
def test_overload_is_said_first_with_a_replica_count_checked_at_n_and_n_minus_1(version):
    rng = np.random.default_rng()
    seed = int(rng.integers(0, 10_000))
    steps, requests = _traffic(rng, float(rng.uniform(60, 150)), int(rng.integers(150, 260)), seed)
    config = _config(version)
    result = tune(steps, config=config, cost_model=MODEL, max_graphs=6, requests=requests)
    want = _direct_check(config, _held_out(requests))
    assert not want["sustainable"] and result.overload is not None
    for key in ("queue_start", "queue_end", "offered_tok_s", "served_tok_s"):
        assert getattr(result.overload, key) == pytest.approx(want[key]), key
    n = result.replicas_needed
    assert n is not None and n >= 2
    assert _round_robin_holds(config, _held_out(requests), n)
    assert n == 2 or not _round_robin_holds(config, _held_out(requests), n - 1)
    # nothing judged on queueing: the default objective is mean step time
    assert result.objective == "step"
    lines = verdict_lines(result, model="m", device="d")
    first = lines[0]
    assert first.startswith("overloaded: one replica cannot hold the held-out traffic")
    assert f"{want['queue_start']:,.0f} -> {want['queue_end']:,.0f}" in first
    assert (
        f"{want['offered_tok_s']:,.0f} tok/s offered vs {want['served_tok_s']:,.0f} served" in first
    )
    assert f"{n} replicas (--replicas {n}) would hold it" in first
    assert lines[1].startswith("recommendation:") and lines[-1].startswith("vllm serve")
    assert any(line.startswith("p99 TTFT") and "queueing: not judged" in line for line in lines)
    assert len(lines) <= MAX_VERDICT_LINES
    # asked for p99 TTFT: no verdict, vLLM's default kept
    asked = tune(steps, config=config, cost_model=MODEL, max_graphs=6, requests=requests,
                 objective="p99-ttft")  # fmt: skip
    assert asked.recommendation == "vllm default" and asked.reason == "overloaded"
    head = verdict_lines(asked, model="m", device="d")[1]
    assert (
        "no p99 TTFT verdict" in head
        and f"needs {n} replicas (--replicas {n}) or lower traffic" in head
    )
    assert asked.as_dict()["overload"]["sustainable"] is False


@pytest.mark.parametrize("version", ["0.33", "0.34"])
def test_traffic_one_replica_holds_gets_the_usual_verdict(version):
    rng = np.random.default_rng()
    seed = int(rng.integers(0, 10_000))
    steps, requests = _traffic(rng, float(rng.uniform(0.5, 2)), int(rng.integers(80, 140)), seed)
    config = _config(version)
    result = tune(steps, config=config, cost_model=MODEL, max_graphs=6, requests=requests)
    assert _direct_check(config, _held_out(requests))["sustainable"]
    assert result.overload is None and result.replicas_needed is None
    assert result.objective == "p99-ttft"
    assert verdict_lines(result, model="m", device="d")[0].startswith("recommendation:")


@pytest.mark.parametrize("replicas", [2, 3])
def test_replicas_tune_the_busiest_round_robin_share(replicas):
    rng = np.random.default_rng()
    seed = int(rng.integers(0, 10_000))
    steps, requests = _traffic(rng, float(rng.uniform(20, 60)), int(rng.integers(150, 240)), seed)
    config = _config("0.34")
    result = tune(steps, config=config, cost_model=MODEL, max_graphs=6, requests=requests,
                  replicas=replicas, trace_label="t")  # fmt: skip
    rank = np.argsort(np.argsort(requests["arrival_s"].to_numpy(), kind="stable"), kind="stable")
    work = [float((requests["prompt_tokens"] + requests["output_tokens"])[rank % replicas == r].sum())
            for r in range(replicas)]  # fmt: skip
    busiest = int(np.argmax(work))
    share = requests[rank % replicas == busiest].reset_index(drop=True)
    held = _held_out(share)
    for name, ladder in (("planned", result.planned), ("vllm default", result.default)):
        direct = ladder_latency(ladder_config(config, ladder), held, MODEL)
        assert result.held_out[name]["p99_tpot_ms"] == pytest.approx(direct["tpot_p99_ms"])
    assert result.replicas == replicas and result.balance == "round-robin"
    assert f"replica {busiest + 1} of {replicas} (round-robin, the busiest)" in result.trace_label
    assert f"{len(share):,} of {len(requests):,} requests" in result.trace_label
    lines = verdict_lines(result, model="m", device="d")
    head = lines[1] if result.overload is not None else lines[0]
    assert head.endswith(f"(per replica, of {replicas})")
    assert result.steps_held_out + result.steps_planned == len(
        simulate_steps(share, max_num_seqs=24, max_num_batched_tokens=512)
    )


def test_replicas_need_requests_and_a_known_balance():
    steps = make_trace(np.tile([1, 2, 30], 50), uniform_decode=False)
    with pytest.raises(ValueError, match="replicas=2 splits requests"):
        tune(steps, config=_config("0.34"), cost_model=MODEL, replicas=2)
    with pytest.raises(ValueError, match="balance='nearest'"):
        tune(steps, config=_config("0.34"), cost_model=MODEL, balance="nearest")


def _prompts_then_decodes(rng: np.random.Generator, seqs: int) -> pd.DataFrame:
    n = int(rng.integers(150, 300))
    prompts = make_trace(rng.integers(300, 513, n), uniform_decode=False)
    prompts["num_reqs"] = rng.integers(1, 3, n)
    decodes = make_trace(rng.integers(1, seqs + 1, n), uniform_decode=True)
    decodes["num_reqs"] = decodes["num_tokens"]
    return pd.concat([prompts, decodes], ignore_index=True)  # no time_s: split by row order


@pytest.mark.parametrize("version", ["0.33", "0.34"])
def test_a_plan_made_on_prompts_only_keeps_decode_sizes(version):
    """Planned on prompts only, judged on decodes: the planner's ladder has no decode size
    (checked here, so the guard is what keeps them), the result's keeps vLLM's default
    decode sizes, and the verdict says the windows differ in kind."""
    rng = np.random.default_rng()
    seqs = int(rng.integers(8, 48))
    config = _config(version, seqs=seqs)
    trace = _prompts_then_decodes(rng, seqs)
    train, _ = split_holdout(trace, 0.5)
    max_graphs = int(rng.integers(2, 8))
    bare = plan_ladder(train, max_graphs, config=config, objective="time", cost_model=MODEL)
    default = engine_ladders(config)["vllm"]
    if isinstance(bare, Gen2Ladder):
        assert not bare.decode_request_sizes
    else:
        assert min(bare) > seqs
    result = tune(trace, config=config, cost_model=MODEL, max_graphs=max_graphs)
    if isinstance(default, Gen2Ladder):
        assert result.planned.decode_request_sizes == default.decode_request_sizes
        assert result.planned.prefill_token_sizes == bare.prefill_token_sizes
    else:
        assert set(result.planned) == set(bare) | {s for s in default if s <= seqs}
    text = "\n".join(verdict_lines(result, model="m", device="d"))
    assert "planned on 0% decode steps, held out on 100%" in text
    assert "keeps vLLM's default ones" in text
    assert result.as_dict()["notes"] == list(result.notes)


@pytest.mark.parametrize("version", ["0.33", "0.34"])
def test_the_smaller_plans_of_the_pareto_set_keep_decode_sizes_too(version):
    """The 8-size plan the Pareto set weighs, made on prompts only, is priced held out with
    vLLM's default decode sizes added: its figures are those of that ladder, not the bare one."""
    from cgdispatch.plan.overload import with_default_decodes
    from cgdispatch.plan.whatif import evaluate

    rng = np.random.default_rng()
    seqs = int(rng.integers(8, 48))
    config = _config(version, seqs=seqs)
    trace = _prompts_then_decodes(rng, seqs)
    train, test = split_holdout(trace, 0.5)
    result = tune(trace, config=config, cost_model=MODEL, max_graphs=12, budgets=(8,))
    bare = plan_ladder(train, 8, config=config, objective="time", cost_model=MODEL)
    kept = with_default_decodes(bare, engine_ladders(config)["vllm"], config)
    want = evaluate(ladder_config(config, kept), test, MODEL).summary["mean_step_ms"]
    naked = evaluate(ladder_config(config, bare), test, MODEL).summary["mean_step_ms"]
    assert want < naked  # the decodes the bare plan leaves eager cost time
    if "planned (8 sizes)" in result.pareto:
        assert result.pareto["planned (8 sizes)"]["mean_step_ms"] == pytest.approx(want)
    # either way, what tune compared is the ladder with decode sizes: it is never beaten by
    # the bare one on mean step time, which would have put it in the set
    assert all(f["mean_step_ms"] != pytest.approx(naked) for f in result.pareto.values())


@pytest.mark.parametrize("version", ["0.33", "0.34"])
def test_decode_sizes_are_dropped_only_when_no_size_serves_a_decode(version):
    from cgdispatch.plan.overload import drops_decodes, with_default_decodes

    rng = np.random.default_rng()
    seqs = int(rng.integers(4, 64))
    config = _config(version, seqs=seqs, tokens=1024)
    default = engine_ladders(config)["vllm"]
    big = sorted({int(x) for x in rng.integers(seqs + 1, 1025, int(rng.integers(1, 6)))})
    small = sorted({int(x) for x in rng.integers(1, seqs + 1, int(rng.integers(1, 4)))})
    if isinstance(default, Gen2Ladder):
        assert drops_decodes(Gen2Ladder(tuple(big + small), ()), config)
        assert not drops_decodes(Gen2Ladder(tuple(big), tuple(small)), config)
        kept = with_default_decodes(Gen2Ladder(tuple(big), ()), default, config)
        assert kept.decode_request_sizes == default.decode_request_sizes
    else:
        assert drops_decodes(big, config) and not drops_decodes(big + small, config)
        kept = with_default_decodes(big, default, config)
        assert kept == sorted(set(big) | {s for s in default if s <= seqs})
    assert not drops_decodes(kept, config)


def test_overload_that_begins_after_the_cut_is_named():
    rng = np.random.default_rng()
    seed = int(rng.integers(0, 10_000))
    calm = workload_requests("sharegpt", num_requests=100, rate_per_s=1.0, seed=seed)
    rush = workload_requests("sharegpt", num_requests=120, rate_per_s=200.0, seed=seed + 1)
    rush = rush.assign(arrival_s=rush["arrival_s"] + calm["arrival_s"].max() + 0.5)
    requests = pd.concat([calm, rush], ignore_index=True)
    steps = simulate_steps(requests, max_num_seqs=24, max_num_batched_tokens=512)
    config = _config("0.34")
    result = tune(steps, config=config, cost_model=MODEL, max_graphs=6, requests=requests,
                  holdout=0.5)  # fmt: skip
    assert result.overload is not None
    cut = np.sort(requests["arrival_s"].to_numpy())[math.ceil(0.5 * len(requests))]
    before = requests[requests["arrival_s"] < cut]
    offered = float((before["prompt_tokens"] + before["output_tokens"] - 1).sum()) / (
        cut - before["arrival_s"].min()
    )
    assert offered <= (1 + RATE_TOLERANCE) * result.overload.served_tok_s
    assert f"overload begins after the cut: {offered:,.0f} tok/s offered" in " ".join(result.notes)


def test_the_windows_differ_in_kind_when_their_decode_shares_are_far_apart():
    from cgdispatch.plan.overload import MIX_GAP, window_notes

    rng = np.random.default_rng()
    for _ in range(20):
        parts = []
        for _ in range(2):
            n = int(rng.integers(5, 200))
            parts.append(
                make_trace(rng.integers(1, 64, n), uniform_decode=rng.random(n) < rng.random())
            )
        train, test = parts
        a, b = train["uniform_decode"].mean(), test["uniform_decode"].mean()
        notes = window_notes(train, test)
        if abs(a - b) >= MIX_GAP:
            assert notes == [
                f"the windows differ in kind: planned on {100 * a:.0f}% decode steps, "
                f"held out on {100 * b:.0f}%"
            ]
        else:
            assert notes == []
    unknown = train.copy()
    unknown.attrs["step_kinds_known"] = False  # a bare num_tokens column: kinds unknown
    assert window_notes(unknown, test) == []
