"""Planner quality (modelled step time, held out) and speed, printed as ratios in one run.

Workloads: ShareGPT-like and Alpaca-like synthetic requests (lognormal lengths with the
vLLM paper's means; synthetic, not the datasets) at 2, 5, 10, 20 req/s and all at once,
simulated with vLLM's defaults (max_num_seqs 256, max_num_batched_tokens 8192). Each plan
is made on one trace (seed 0) and scored on another (seed 1, held out) through the real
dispatcher. Step times, graph memory (weak-output pool, from the fake-tensor estimator)
and capture times are model (H200 SXM) for llama-3.1-8b: no GPU is involved.

Targets (issue 13): with at most half of vLLM's graph count, mean step time <= vLLM's
default ladder on every workload; with vLLM's count (and its graph memory as the budget),
lower mean step time and graph memory <= vLLM's; planning a 200k-step trace with the time
objective over sizes up to 8192 in < 5 s (measured (CPU)). Also printed: the capture-budget
heuristic's gap to its Lagrangian lower bound, and the padding objective (unchanged).
Generation 2 (vLLM 0.34, ``plan_gen2_capture_sizes``: decode request sizes and prefill
token sizes from one budget) gets the same held-out comparison against vLLM 0.34's default
ladder (no target set; printed for the record) and its planning time on the 200k steps.

Run: ``PYTHONPATH=. python benchmarks/bench_planner.py`` (about a minute on 2 cores).
"""

from __future__ import annotations

import time

import numpy as np
import pandas as pd
from targets import Targets  # beside this script
from tqdm.auto import tqdm

from cgdispatch.core.config import GraphConfig
from cgdispatch.estimate.device_model import device_cost_model
from cgdispatch.plan.dp import solve_with_capture_budget
from cgdispatch.plan.ladder_compare import compare, engine_ladders
from cgdispatch.plan.planner import _problem, _rules, as_histogram, plan_capture_sizes
from cgdispatch.plan.planner_v2 import plan_gen2_capture_sizes
from cgdispatch.workload.synthetic import synthetic_requests
from cgdispatch.workload.trace import make_trace, simulate_steps

RATES = [2.0, 5.0, 10.0, 20.0, float("inf")]
NUM_REQUESTS = 2000
SMOOTHING = 0.1  # the held-out plans: each size's steps spread over +-10% (planner doc)
MODEL, DEVICE = "llama-3.1-8b", "H200"


def workloads() -> list[tuple[str, float, pd.DataFrame, pd.DataFrame]]:
    cases = [(p, r) for p in ("sharegpt", "alpaca") for r in RATES]
    out = []
    for preset, rate in tqdm(cases, desc="simulate workloads"):
        train, test = (
            simulate_steps(
                synthetic_requests(NUM_REQUESTS, preset, rate_per_s=rate, seed=s), seed=s
            )
            for s in (0, 1)
        )
        out.append((preset, rate, train, test))
    return out


def quality(cases: list, config: GraphConfig) -> pd.DataFrame:
    model = device_cost_model(MODEL, DEVICE)
    vllm = engine_ladders(config)["vllm"]
    half, same = len(vllm) // 2, len(vllm)
    rows = []
    for preset, rate, train, test in tqdm(cases, desc="plan and score"):
        ref = compare(test, {"vllm": vllm}, config=config, cost_model=model).iloc[0]
        plan = dict(cost_model=model, config=config, objective="time")
        ladders = {
            "vllm": vllm,
            "half_exact": plan_capture_sizes(train, half, **plan),
            "half": plan_capture_sizes(train, half, smoothing=SMOOTHING, **plan),
            "same": plan_capture_sizes(
                train,
                same,
                smoothing=SMOOTHING,
                memory_budget_bytes=ref["graph_memory_bytes"],
                **plan,
            ),
            "padding_half": plan_capture_sizes(train, half, config=config, max_size=vllm[-1]),
        }
        t = compare(test, ladders, config=config, cost_model=model).set_index("ladder")
        ms, mem = t["mean_step_ms"], t["graph_memory_bytes"]
        rows.append(
            {
                "workload": preset,
                "req/s": rate,
                "test_steps": len(test),
                "vllm_ms": ms["vllm"],
                "half_graphs": int(t.loc["half", "num_graphs"]),
                "half/vllm": ms["half"] / ms["vllm"],
                "half_exact/vllm": ms["half_exact"] / ms["vllm"],
                "same/vllm": ms["same"] / ms["vllm"],
                "same_mem/vllm": mem["same"] / mem["vllm"],
                "padding_half/vllm": ms["padding_half"] / ms["vllm"],
                "vllm_mem_MiB": mem["vllm"] / 2**20,
            }
        )
    table = pd.DataFrame(rows)
    table["target_met"] = (
        (table["half/vllm"] <= 1.0) & (table["same/vllm"] < 1.0) & (table["same_mem/vllm"] <= 1.0)
    )
    return table


def quality_gen2(cases: list) -> pd.DataFrame:
    """vLLM 0.34: planned ladders against its default (prefill and decode lists)."""
    config = GraphConfig(vllm_version="0.34").resolve()
    model = device_cost_model(MODEL, DEVICE)
    vllm = engine_ladders(config)["vllm"]
    half, same = vllm.num_sizes // 2, vllm.num_sizes
    rows = []
    for preset, rate, train, test in tqdm(cases, desc="plan and score (vLLM 0.34)"):
        ref = compare(test, {"vllm": vllm}, config=config, cost_model=model).iloc[0]
        plan = dict(cost_model=model, config=config, objective="time", smoothing=SMOOTHING)
        ladders = {
            "vllm": vllm,
            "half": plan_gen2_capture_sizes(train, half, **plan),
            "same": plan_gen2_capture_sizes(
                train, same, memory_budget_bytes=ref["graph_memory_bytes"], **plan
            ),
        }
        t = compare(test, ladders, config=config, cost_model=model).set_index("ladder")
        ms, mem = t["mean_step_ms"], t["graph_memory_bytes"]
        rows.append(
            {
                "workload": preset,
                "req/s": rate,
                "vllm_ms": ms["vllm"],
                "half_graphs": int(t.loc["half", "num_graphs"]),
                "half/vllm": ms["half"] / ms["vllm"],
                "same/vllm": ms["same"] / ms["vllm"],
                "same_mem/vllm": mem["same"] / mem["vllm"],
            }
        )
    return pd.DataFrame(rows)


def capture_budget_gap(cases: list, config: GraphConfig) -> pd.DataFrame:
    """The Lagrangian capture-budget plan against its lower bound (half vLLM's capture time)."""
    model = device_cost_model(MODEL, DEVICE)
    vllm = engine_ladders(config)["vllm"]
    rows = []
    for preset, rate, train, _ in cases[::2]:
        cap = compare(train, {"vllm": vllm}, config=config, cost_model=model).iloc[0]["capture_s"]
        problem = _problem(train, "time", model, _rules(config, "FULL"), None, 1, None, True)
        sol = solve_with_capture_budget(problem, len(vllm), cap / 2)
        rows.append(
            {
                "workload": preset,
                "req/s": rate,
                "budget_s": cap / 2,
                "used_s": float(problem.capture_s[sol.indices].sum()),
                "graphs": len(sol.indices),
                "gap_to_bound_%": 100 * (sol.cost - sol.lower_bound) / sol.lower_bound,
            }
        )
    return pd.DataFrame(rows)


def speed(config: GraphConfig) -> float:
    """Seconds to plan 200k steps (V1, time objective); prints them and vLLM 0.34's."""
    model = device_cost_model(MODEL, DEVICE)
    rng = np.random.default_rng(0)
    steps = 200_000
    decode = rng.random(steps) < 0.7
    n = np.where(decode, rng.integers(1, 257, steps), rng.integers(1, 8193, steps))
    trace = make_trace(n, decode)
    gen2 = GraphConfig(vllm_version="0.34").resolve()
    start = time.perf_counter()
    ladder = plan_gen2_capture_sizes(trace, 51, objective="time", cost_model=model, config=gen2)
    gen2_s = time.perf_counter() - start
    print(
        f"\nvLLM 0.34: planning the same {steps} steps for <= 51 sizes (decode request + "
        f"prefill token), time objective, measured (CPU): {gen2_s:.2f} s -> "
        f"{len(ladder.decode_request_sizes)} decode + {len(ladder.prefill_token_sizes)} "
        f"prefill sizes; ratio to the V1 5 s target: {gen2_s / 5:.2f}"
    )
    start = time.perf_counter()
    sizes = plan_capture_sizes(trace, 51, objective="time", cost_model=model, config=config)
    plan_s = time.perf_counter() - start
    sizes_seen = len(as_histogram(trace))
    print(
        f"\nplanning {steps} steps ({sizes_seen} distinct sizes up to 8192) for <= 51 graphs, "
        f"time objective, measured (CPU): {plan_s:.2f} s -> {len(sizes)} sizes, largest "
        f"{sizes[-1]}; ratio to the 5 s target: {plan_s / 5:.2f} "
        f"({'met' if plan_s < 5 else 'NOT met'})"
    )
    return plan_s


def main() -> int:
    targets = Targets()
    config = GraphConfig(vllm_version="0.33").resolve()
    start = time.perf_counter()
    model = device_cost_model(MODEL, DEVICE)
    print(f"cost model {MODEL} on {model.source}: built in {time.perf_counter() - start:.1f} s")
    cases = workloads()
    table = quality(cases, config)
    fmt = {"float_format": lambda x: f"{x:.4f}", "index": False}
    with pd.option_context("display.width", 250, "display.max_columns", 30):
        print(
            f"\nmean step time on held-out traces, {model.source}, ratios to vLLM's default "
            f"ladder (51 sizes); half = 25 sizes, time objective, smoothing {SMOOTHING}; "
            "same = 51 sizes under vLLM's graph memory; half_exact = no smoothing:"
        )
        print(table.to_string(**fmt))
        print(f"\nall targets met: {bool(table['target_met'].all())}")
        for workload, rate in table.loc[~table["target_met"], ["workload", "req/s"]].values:
            targets.check(f"held-out step time on {workload} at {rate} req/s", False)
        print("\ncapture budget = half of vLLM's modelled capture time (Lagrangian heuristic):")
        print(capture_budget_gap(cases, config).to_string(**fmt))
        gen2 = quality_gen2(cases)
        print(
            "\nvLLM 0.34 (CudaGraphManager), held out, ratios to its default ladder "
            f"({engine_ladders(GraphConfig(vllm_version='0.34').resolve())['vllm'].num_sizes} "
            "sizes: prefill token + decode request); half and same as above:"
        )
        print(gen2.to_string(**fmt))
    targets.check("planning 200k steps < 5 s", speed(config) < 5)
    return targets.exit_code()


if __name__ == "__main__":
    raise SystemExit(main())
