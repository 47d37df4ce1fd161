"""Published vllm bench serve runs: the shipped table's schema and self-consistency, its
checks, and the replay through vLLM's scheduler on a constant clock whose answers follow
by hand."""

import math
import re
from dataclasses import asdict

import numpy as np
import pandas as pd
import pytest

from cgdispatch.estimate.devices import DEVICE_PRESETS
from cgdispatch.models.published import PUBLISHED_MODELS
from cgdispatch.plan.published_runs import (
    BACKEND_ENDPOINTS,
    RESULT_COLUMNS,
    RUN_COLUMNS,
    check_serving_runs,
    published_serving_runs,
    serve_default_limits,
)
from cgdispatch.plan.published_serving import (
    SAME_SERVER_EARLIER,
    default_cudagraph_mode,
    initial_test_request,
    overloaded_published,
    overloaded_simulated,
    prefix_caching_on,
    published_serving_comparison,
    replay_after_warmup,
    run_requests,
    simulate_published_run,
)
from cgdispatch.workload.limits import SchedulerLimits

STEP_MS = 10.0


def _constant_clock(config, cost_model):
    return lambda num_tokens, num_reqs: STEP_MS if num_tokens else 0.0


def _no_cost_model(model, gpu, tp):
    return None


def _run(**fields) -> pd.Series:
    row = dict.fromkeys((*RUN_COLUMNS, *RESULT_COLUMNS, "note"), np.nan)
    row.update(
        run_id="t", url="https://example.org/run", model="Qwen/Qwen3-8B", gpu="H100-SXM",
        tensor_parallel_size=1, vllm_version="0.11.0", dataset="random", input_len=100,
        output_len=5, range_ratio=0.0, num_prompts=2, request_rate="inf", burstiness=1.0,
    )  # fmt: skip
    row.update(fields)
    return pd.Series(row)


def test_the_table_has_its_columns_and_at_least_24_runs_each_with_a_url():
    runs = published_serving_runs()
    assert list(runs.columns) == [*RUN_COLUMNS, *RESULT_COLUMNS, "note"]
    assert len(runs) >= 24
    assert runs["url"].str.startswith("https://").all()
    assert all(model in PUBLISHED_MODELS for model in runs["model"])
    assert runs["gpu"].isin(list(DEVICE_PRESETS)).all()


def test_each_runs_numbers_agree_with_each_other():
    runs = published_serving_runs()
    for _, r in runs.iterrows():
        assert not math.isnan(r["mean_ttft_ms"]) and not math.isnan(r["mean_tpot_ms"]), r["run_id"]
        if math.isnan(r["duration_s"]):  # a source that gives no totals: nothing to cross-check
            continue
        # printed to two decimals: throughput = tokens / duration within rounding
        assert r["output_throughput"] == pytest.approx(
            r["total_output_tokens"] / r["duration_s"], rel=2e-3, abs=0.02
        ), r["run_id"]
        assert r["total_token_throughput"] == pytest.approx(
            (r["total_input_tokens"] + r["total_output_tokens"]) / r["duration_s"], rel=2e-3
        ), r["run_id"]
        assert r["request_throughput"] == pytest.approx(
            r["completed"] / r["duration_s"], rel=1e-2, abs=0.006
        ), r["run_id"]
        assert r["completed"] == r["num_prompts"], r["run_id"]
        assert r["median_ttft_ms"] <= r["p99_ttft_ms"] and r["median_tpot_ms"] <= r["p99_tpot_ms"]
        if r["dataset"] == "random":  # what was sent is what was asked, less special tokens
            sent = r["total_input_tokens"] / r["completed"]
            assert r["input_len"] * 0.99 <= sent <= r["input_len"], r["run_id"]
            assert r["total_output_tokens"] / r["completed"] <= r["output_len"], r["run_id"]


def test_each_runs_backend_is_the_one_its_note_quotes():
    """The backend column against the command each note quotes from its source
    (``--backend X`` or ``--endpoint-type X``), and each known backend is accepted."""
    runs = published_serving_runs()
    for _, r in runs.iterrows():
        quoted = re.findall(r"--(?:backend|endpoint-type) ([\w-]+)", str(r["note"]))
        assert quoted and set(quoted) == {r["backend"]}, r["run_id"]
        assert r["backend"] in BACKEND_ENDPOINTS
    for backend in BACKEND_ENDPOINTS:
        assert check_serving_runs(pd.DataFrame([_run(backend=backend)]))["backend"][0] == backend


@pytest.mark.parametrize(
    ("field", "value", "message"),
    [
        ("url", "example.org", "not an https URL"),
        ("model", "acme/unknown-7b", "has no published config"),
        ("gpu", "TPU", "not a device preset"),
        ("dataset", "sonnet", "cannot be drawn"),
        ("request_rate", 0, "request_rate=0"),
        ("range_ratio", 1.5, "range_ratio=1.5"),
        ("num_prompts", -3, "num_prompts=-3"),
        ("gpu_memory_utilization", 1.5, "gpu_memory_utilization=1.5"),
        ("backend", "openai-completions", "backend='openai-completions'"),
    ],
)
def test_bad_runs_are_refused_naming_the_field(field, value, message):
    table = pd.DataFrame([_run(**{field: value})])
    with pytest.raises(ValueError, match=message):
        check_serving_runs(table)


def test_the_default_graph_mode_follows_the_release():
    assert default_cudagraph_mode("0.11.0") == "FULL_AND_PIECEWISE"
    assert default_cudagraph_mode("0.23.1") == "FULL_AND_PIECEWISE"
    assert default_cudagraph_mode("0.9.2") == "PIECEWISE"
    assert default_cudagraph_mode("0.10.1.1") == "PIECEWISE"


def test_serve_defaults_follow_vllms_large_gpu_rule():
    assert serve_default_limits("H100-SXM") == (1024, 8192)
    assert serve_default_limits("H200") == (1024, 8192)
    assert serve_default_limits("A100-80GB") == (256, 2048)  # an A100, however large
    assert serve_default_limits("L40S") == (256, 2048)


def test_two_requests_on_a_constant_clock_give_the_hand_computed_ttft():
    # prefix caching off: nothing carries over from the client's test request.
    # A 150-token budget: step 1 runs A's 100 prompt tokens and 50 of B's, step 2 A's first
    # decode and B's last 50; each request then decodes one token per step
    row = _run(max_num_batched_tokens=150, max_num_seqs=8, prefix_caching="off")
    sim = simulate_published_run(row, step_time_for=_constant_clock, cost_model_for=_no_cost_model)
    ttft_a, ttft_b = 1 * STEP_MS, 2 * STEP_MS  # A's first token after step 1, B's after 2
    finish_a, finish_b = 5 * STEP_MS, 6 * STEP_MS  # then 4 more tokens, one per step
    assert sim["sim_mean_ttft_ms"] == pytest.approx((ttft_a + ttft_b) / 2)
    tpot_a, tpot_b = (finish_a - ttft_a) / 4, (finish_b - ttft_b) / 4
    assert sim["sim_mean_tpot_ms"] == pytest.approx((tpot_a + tpot_b) / 2)
    assert sim["sim_output_throughput"] == pytest.approx(10 / (finish_b / 1e3))
    assert sim["overloaded_sim"] is None  # inf rate: no overload to call


def test_with_prefix_caching_the_test_request_leaves_the_first_prompt_cached():
    # the client's test request (A's prompt) ran first: A finds its 6 full blocks (96 of its
    # 100 tokens) cached and computes 4, so step 1 holds A's 4 and B's 100 (104 <= 150):
    # both first tokens after step 1, both finished after 5 steps
    row = _run(max_num_batched_tokens=150, max_num_seqs=8)  # prefix caching: V1's default
    sim = simulate_published_run(row, step_time_for=_constant_clock, cost_model_for=_no_cost_model)
    assert sim["sim_warmup_requests"] == 1
    assert sim["sim_mean_ttft_ms"] == pytest.approx(STEP_MS)
    assert sim["sim_mean_tpot_ms"] == pytest.approx(STEP_MS)
    assert sim["sim_output_throughput"] == pytest.approx(10 / (5 * STEP_MS / 1e3))
    # hits over what the admissions asked for: the test request 100 tokens (none cached),
    # A 96 of 100, B none of 100
    assert sim["sim_prefix_hit_rate"] == pytest.approx(96 / 300)
    off = simulate_published_run(
        _run(max_num_batched_tokens=150, max_num_seqs=8, prefix_caching="off"),
        step_time_for=_constant_clock,
        cost_model_for=_no_cost_model,
    )
    assert off["sim_warmup_requests"] == 0 and math.isnan(off["sim_prefix_hit_rate"])
    with pytest.raises(ValueError, match="prefix_caching='maybe' is invalid"):
        prefix_caching_on(_run(prefix_caching="maybe"))


def _independent_hits(phases: list[pd.DataFrame], block_size: int) -> tuple[int, int]:
    """(prompt tokens served from cache, prompt tokens asked for) counted from the prompts
    themselves, for phases that fit the cache whole: a prompt hits the full blocks it shares
    with one sent in an earlier phase, all but its last token."""
    seen: list[tuple[int, ...]] = []
    hits = asked = 0
    for phase in phases:
        tokens = [tuple(t) for t in phase["tokens"]]
        for t in tokens:
            shared = max((_common_blocks(t, s, block_size) for s in seen), default=0)
            hits += min(shared, (len(t) - 1) // block_size) * block_size
            asked += len(t)
        seen += tokens
    return hits, asked


def _common_blocks(a: tuple[int, ...], b: tuple[int, ...], block_size: int) -> int:
    n = 0
    while (n + 1) * block_size <= min(len(a), len(b)) and (
        a[n * block_size : (n + 1) * block_size] == b[n * block_size : (n + 1) * block_size]
    ):
        n += 1
    return n


def _phase(rng: np.random.Generator, prompts: list[np.ndarray], at_s: float = 0.0) -> pd.DataFrame:
    """A request table of explicit prompts (one id per token, block size 1 for hash_ids)."""
    n = len(prompts)
    table = pd.DataFrame(
        {
            "arrival_s": np.full(n, at_s),
            "prompt_tokens": [len(p) for p in prompts],
            "output_tokens": rng.integers(1, 6, n),
            "hash_ids": [[int(x) for x in p] for p in prompts],
        }
    )
    table.attrs["hash_block_size"] = 1
    return table.assign(tokens=[list(p) for p in prompts])


@pytest.mark.parametrize("block_size", [4, 16])
def test_warm_up_phases_leave_their_prompts_cached_for_the_timed_window(block_size):
    rng = np.random.default_rng(int(np.random.SeedSequence().entropy % 2**32))
    pool = [rng.integers(0, 50_000, rng.integers(2, 120)) for _ in range(6)]
    warm = [
        _phase(rng, [pool[i] for i in rng.choice(6, 3, replace=False)]),
        _phase(rng, [pool[0][: rng.integers(1, len(pool[0]) + 1)]]),
    ]
    # distinct prompts within a phase (hits inside one phase depend on its chunking)
    pick = rng.choice(6, 4, replace=False)
    measured = _phase(rng, [pool[i] for i in pick] + [rng.integers(0, 9, 40)])
    limits = SchedulerLimits(
        max_num_batched_tokens=64, block_size=block_size, num_gpu_blocks=10_000,
        hash_block_size=1, async_scheduling=False,
    )  # fmt: skip
    clock = lambda num_tokens, num_reqs: STEP_MS if num_tokens else 0.0  # noqa: E731
    tables = [t.drop(columns="tokens") for t in (*warm, measured)]
    got = replay_after_warmup(tables[-1], limits, warmup=tables[:-1], step_time_ms=clock)
    hits, asked = _independent_hits([*warm, measured], block_size)
    warm_hits, _ = _independent_hits(warm, block_size)
    assert got.warmup_requests == sum(len(t) for t in warm)
    assert int(got.steps["num_cached_tokens"].sum()) == hits - warm_hits
    assert got.prefix_hit_rate == pytest.approx(hits / asked)
    # the window's times count from its start: the first step begins at 0
    assert got.requests["arrival_s"].eq(0.0).all() and got.steps["time_s"].min() >= 0.0
    # prefix caching off: the window replays as if alone, warm-up or not
    off = SchedulerLimits(**{**asdict(limits), "enable_prefix_caching": False})
    alone = replay_after_warmup(tables[-1], off, step_time_ms=clock).requests
    after = replay_after_warmup(tables[-1], off, warmup=tables[:-1], step_time_ms=clock).requests
    for col in ("ttft_s", "finish_s"):
        np.testing.assert_allclose(after[col], alone[col], rtol=0, atol=1e-6)


def test_a_warm_up_phase_longer_than_the_default_gap_still_ends_before_the_window():
    rng = np.random.default_rng(int(np.random.SeedSequence().entropy % 2**32))
    prompt = [rng.integers(0, 50_000, int(rng.integers(20, 60)))]
    measured = _phase(rng, prompt).drop(columns="tokens").assign(output_tokens=2)
    slow_ms = 1e8 * float(rng.uniform(1, 2))  # a day or more per step: past the phase gap
    clock = lambda num_tokens, num_reqs: slow_ms if num_tokens else 0.0  # noqa: E731
    limits = SchedulerLimits(block_size=16, num_gpu_blocks=1000, hash_block_size=1)
    got = replay_after_warmup(
        measured, limits, warmup=[initial_test_request(measured)], step_time_ms=clock
    )
    assert got.start_s >= 2 * slow_ms / 1e3  # the test request's two steps came first
    # then the prompt hits all but its last partial block: one step to its first token
    assert got.requests["ttft_s"].iloc[0] == pytest.approx(slow_ms / 1e3)


def test_warm_up_tables_must_share_the_measured_tables_prompt_identity():
    rng = np.random.default_rng(int(np.random.SeedSequence().entropy % 2**32))
    measured = _phase(rng, [rng.integers(0, 99, 20)]).drop(columns="tokens")
    bare = measured.drop(columns="hash_ids")
    with pytest.raises(ValueError, match="differ in prompt identity"):
        replay_after_warmup(measured, SchedulerLimits(), warmup=[bare])
    with pytest.raises(ValueError, match="non-empty request tables"):
        replay_after_warmup(measured, SchedulerLimits(), warmup=[measured.iloc[:0]])


def test_a_first_identical_prompt_after_the_test_request_computes_only_its_last_partial_block():
    rng = np.random.default_rng(int(np.random.SeedSequence().entropy % 2**32))
    length, budget = int(rng.integers(40, 400)), int(rng.integers(8, 32))
    prompt = [rng.integers(0, 50_000, length)]
    measured = _phase(rng, prompt).drop(columns="tokens")
    limits = SchedulerLimits(
        max_num_batched_tokens=budget, block_size=16, num_gpu_blocks=10_000,
        hash_block_size=1, async_scheduling=False,
    )  # fmt: skip
    clock = lambda num_tokens, num_reqs: STEP_MS if num_tokens else 0.0  # noqa: E731
    got = replay_after_warmup(
        measured, limits, warmup=[initial_test_request(measured)], step_time_ms=clock
    )
    cached = (length - 1) // 16 * 16  # every full block, but the last token is recomputed
    assert int(got.steps["num_cached_tokens"].sum()) == cached
    steps_to_first = -(-(length - cached) // budget)
    assert got.requests["ttft_s"].iloc[0] * 1e3 == pytest.approx(steps_to_first * STEP_MS)


def test_the_logged_hit_rate_of_a_same_server_run_follows_from_its_earlier_runs():
    # dennislee22 test 5, n200 after n100 on one server: the replayed hit rate (the test
    # requests and both runs) against the count of prompts whose index came before
    runs = published_serving_runs().set_index("run_id", drop=False)
    run_id = "dennislee22-qwen2-7b-a100-test5-random-1024-1024-n200"
    assert SAME_SERVER_EARLIER[run_id] == ("dennislee22-qwen2-7b-a100-test5-random-1024-1024-n100",)
    row = runs.loc[run_id]
    sim = simulate_published_run(row, step_time_for=_constant_clock, cost_model_for=_no_cost_model)
    assert sim["sim_preemptions"] == 0  # the count below assumes nothing was evicted
    phases = [run_requests(runs.loc[r]) for r in (*SAME_SERVER_EARLIER[run_id], run_id)]
    sent = []  # (index in its run, prompt length) in the order the server saw them
    for table in phases:
        sent += [(0, int(table["prompt_tokens"].iloc[0]))]  # the client's test request
        sent += list(enumerate(table["prompt_tokens"].astype(int)))
    seen: set[int] = set()
    hits = 0
    for index, length in sent:  # same seed: prompt i is the same token run in every run
        if index in seen:
            hits += (length - 1) // 16 * 16
        seen.add(index)
    asked = sum(length for _, length in sent)
    assert sim["sim_warmup_requests"] == len(sent) - len(phases[-1])
    assert sim["sim_prefix_hit_rate"] == pytest.approx(hits / asked)
    assert abs(sim["sim_prefix_hit_rate"] - 0.333) < 0.001  # the log's "33.3%"


def test_a_logged_kv_size_is_used_and_a_request_longer_than_it_is_refused():
    sim = simulate_published_run(
        _run(kv_cache_tokens=4096), step_time_for=_constant_clock, cost_model_for=_no_cost_model
    )
    assert sim["sim_kv_source"] == "logged" and sim["sim_num_gpu_blocks"] == 4096 // 16
    with pytest.raises(ValueError, match="exceeds the logged KV cache of 96 tokens"):
        simulate_published_run(
            _run(kv_cache_tokens=96), step_time_for=_constant_clock, cost_model_for=_no_cost_model
        )
    # less memory for vLLM, fewer modelled KV blocks
    small, large = (
        simulate_published_run(
            _run(gpu_memory_utilization=g),
            step_time_for=_constant_clock,
            cost_model_for=_no_cost_model,
        )["sim_num_gpu_blocks"]
        for g in (0.5, 0.9)
    )
    assert 0 < small < large


def test_a_closed_loop_of_one_sends_the_second_request_when_the_first_ends():
    row = _run(max_concurrency=1)
    sim = simulate_published_run(row, step_time_for=_constant_clock, cost_model_for=_no_cost_model)
    # A: prefill step then 4 decodes = 50 ms; B sent at 50 ms, the same again
    assert sim["sim_mean_ttft_ms"] == pytest.approx(STEP_MS)
    assert sim["sim_duration_s"] == pytest.approx(10 * STEP_MS / 1e3)


def test_a_rate_far_past_capacity_is_simulated_as_overloaded_and_a_light_one_is_not():
    # one sequence at a time, 50 steps of 10 ms each: capacity 2 requests/s
    heavy = _run(num_prompts=200, output_len=50, request_rate=50.0, max_num_seqs=1)
    light = _run(num_prompts=40, output_len=50, request_rate=0.5, max_num_seqs=1)
    for row, expected in ((heavy, True), (light, False)):
        sim = simulate_published_run(
            row, step_time_for=_constant_clock, cost_model_for=_no_cost_model
        )
        assert sim["overloaded_sim"] is expected


def test_overload_heuristics_on_fresh_tables():
    rng = np.random.default_rng(int(np.random.SeedSequence().entropy % 2**32))
    arrival = np.sort(rng.uniform(0, 100, 400))
    flat = pd.DataFrame({"arrival_s": arrival, "ttft_s": rng.uniform(0.05, 0.15, 400)})
    growing = flat.assign(ttft_s=0.1 + 0.5 * arrival)  # the queue grows with time
    assert not overloaded_simulated(flat) and overloaded_simulated(growing)
    run = _run(num_prompts=1000, request_rate=10.0, mean_ttft_ms=200.0)
    assert overloaded_published(run) is False
    assert overloaded_published(run.copy().replace({200.0: 40_000.0})) is True
    assert overloaded_published(_run(mean_ttft_ms=5.0)) is None  # inf rate


def test_the_comparison_puts_both_sides_and_their_ratio_in_one_row():
    runs = check_serving_runs(pd.DataFrame([_run(mean_ttft_ms=20.0, output_throughput=100.0)]))
    table = published_serving_comparison(
        runs, step_time_for=_constant_clock, cost_model_for=_no_cost_model
    )
    row = table.iloc[0]
    assert row["error"] == ""
    assert row["ratio_mean_ttft_ms"] == pytest.approx(row["sim_mean_ttft_ms"] / 20.0)
    assert row["ratio_output_throughput"] == pytest.approx(row["sim_output_throughput"] / 100.0)
    assert math.isnan(row["ratio_mean_tpot_ms"])  # not published: no ratio


@pytest.mark.parametrize("release", ["0.11.0", "0.19.0", "0.20.0", "0.26.1"])
def test_a_modelled_kv_cache_is_computed_as_the_runs_release_computes_it(release):
    """The graph-memory estimate comes off the modelled KV budget only for releases that
    take it (0.20 on): the blocks are the start-up model's under the run's own release
    (whose sampler warm-up, before 0.17, also holds more activation memory)."""
    from cgdispatch.core.release_table import release_defaults
    from cgdispatch.estimate.startup import estimate_startup
    from cgdispatch.plan.published_serving import run_config

    row = _run(vllm_version=release, gpu_memory_utilization=0.9)
    sim = simulate_published_run(row, step_time_for=_constant_clock, cost_model_for=_no_cost_model)
    config = run_config(row)
    est = estimate_startup("Qwen/Qwen3-8B", "H100-SXM", config, vllm_version=release)
    plain = estimate_startup("Qwen/Qwen3-8B", "H100-SXM", config, vllm_version="0.19.0")
    assert sim["sim_kv_source"] == "modelled" and sim["sim_num_gpu_blocks"] == est.kv_cache_blocks
    subtracted = release_defaults(release).subtracts_graph_estimate
    assert est.graph_memory_subtracted is subtracted
    gap = plain.kv_cache_bytes - est.kv_cache_bytes
    warm_up = est.activation_bytes - plain.activation_bytes  # 0 from 0.17 (the same path)
    assert (warm_up > 0) is (tuple(int(p) for p in release.split(".")) < (0, 17))
    assert gap == pytest.approx((est.graph_memory_bytes if subtracted else 0.0) + warm_up)


def test_a_request_the_published_server_served_fits_the_modelled_cache():
    """vLLM starts only when one request of max_model_len fits; a run that served a request
    longer than the modelled cache held it: the cache is raised to it, and says so."""
    rng = np.random.default_rng(3)
    small = simulate_published_run(
        _run(gpu_memory_utilization=0.9),
        step_time_for=_constant_clock,
        cost_model_for=_no_cost_model,
    )
    modelled = small["sim_num_gpu_blocks"] * 16
    longest = modelled + int(rng.integers(1, 5000))
    row = _run(gpu_memory_utilization=0.9, input_len=longest - 5, output_len=5, num_prompts=1)
    sim = simulate_published_run(row, step_time_for=_constant_clock, cost_model_for=_no_cost_model)
    assert sim["sim_num_gpu_blocks"] == math.ceil(longest / 16) + 1  # and vLLM's null block
    assert sim["sim_kv_source"] == (
        f"modelled {modelled:,} tokens, raised to the {longest:,} the run served"
    )
    with pytest.raises(ValueError, match="exceeds the logged KV cache"):  # a logged one is not
        simulate_published_run(
            _run(kv_cache_tokens=modelled, input_len=longest - 5, output_len=5, num_prompts=1),
            step_time_for=_constant_clock,
            cost_model_for=_no_cost_model,
        )
