"""Published ``vllm bench serve`` runs replayed through vLLM's own scheduler: the simulated
TTFT, TPOT and throughput beside the published ones, the yardstick for the step-cost model.

Each run (:mod:`cgdispatch.plan.published_runs`) becomes its traffic
(:mod:`cgdispatch.workload.bench_traffic`: vLLM's random dataset and send times; a
ShareGPT-like stand-in for ShareGPT), its limits (the run's, else ``vllm serve``'s defaults
on its GPU), its KV capacity (the size its start-up log printed where the source gives it,
else :func:`~cgdispatch.estimate.startup.estimate_startup` at the run's
``gpu_memory_utilization``, default 0.9) and its step clock, ``step_time_for(config, cost_model)``:
the one seam a new pricing plugs into (default
:func:`~cgdispatch.workload.latency.serving_step_time`: the dispatched step price plus the
host-side serving overhead, front end included). Closed-loop runs
(``--max-concurrency``) run their client in the replay
(:mod:`cgdispatch.workload.closed_loop`): a request is sent when a slot frees, exactly, in
one pass. All simulated figures are ``model`` figures; nothing here measures.

Prefix caching (the row's ``prefix_caching``, else on: vLLM V1's default) sees the prompts
as vLLM's client sends them (:func:`~cgdispatch.workload.bench_traffic.prompt_hash_ids`)
and what was cached before the timed run (:func:`replay_after_warmup`): the client's test
request (the run's first prompt, sent once and waited for) and, where the source's logs
show them, the runs made earlier against the same server (:data:`SAME_SERVER_EARLIER`).
Those warm-up requests are replayed first and not counted.
"""

from __future__ import annotations

import itertools
import math
import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass, fields
from typing import Any

import numpy as np
import pandas as pd

from ..core import cache
from ..core.config import GraphConfig
from ..core.release_table import release_defaults
from ..core.v1 import RELEASE as V1_RELEASE
from ..estimate.device_model import device_cost_model
from ..estimate.startup import estimate_startup
from ..workload.bench_traffic import (
    bench_requests,
    prompt_hash_ids,
    random_dataset_offsets,
    random_lengths,
    send_times_s,
    sharegpt_like_lengths,
)
from ..workload.closed_loop import with_max_concurrency
from ..workload.latency import request_latencies, serving_step_time
from ..workload.limits import SchedulerLimits, scheduler_limits
from ..workload.replay import StepClock, default_step_time_ms, start_replay
from ..workload.serving_overhead import ServingOverhead
from ..workload.steps import HASH_IDS_COLUMN
from .costs import CostModel
from .published_runs import is_open_loop, offered_rate, published_serving_runs, serve_default_limits

__all__ = [
    "StepTimeFactory",
    "oldest_release",
    "default_cudagraph_mode",
    "run_config",
    "run_requests",
    "run_limits",
    "prefix_caching_on",
    "initial_test_request",
    "warmup_phases",
    "WarmReplay",
    "replay_after_warmup",
    "SAME_SERVER_EARLIER",
    "simulate_published_run",
    "published_serving_comparison",
    "overloaded_published",
    "overloaded_simulated",
    "serving_fit_split",
    "median_errors",
    "fit_serving_overhead",
    "SERVING_FIT_GPU",
    "COMPARED_METRICS",
]

StepTimeFactory = Callable[[GraphConfig, CostModel], Callable[[int, int], float]]
CostModelFactory = Callable[[str, str, int], CostModel]  # (model, gpu, tensor_parallel_size)

# vLLM's default CUDA-graph mode: FULL_AND_PIECEWISE from 0.11 on, PIECEWISE before (as the
# logged start-ups of cgdispatch/data/reference_vllm_startups_*.csv show: 0.9.2-0.10.1.1
# PIECEWISE, 0.11.0 on FULL_AND_PIECEWISE)
_FULL_AND_PIECEWISE_SINCE = (0, 11)
# open-loop overload: simulated, the last quarter of arrivals waits this many times longer
# (median TTFT) than the first quarter and at least the floor longer; published, the mean
# TTFT is above this share of the send window (num_prompts / rate) and above the floor
OVERLOAD_TTFT_GROWTH = 3.0
OVERLOAD_TTFT_FLOOR_MS = 1000.0
OVERLOAD_PUBLISHED_SHARE = 0.1
BLOCK_SIZE = 16  # vLLM's default KV block size (tokens)
# warm-up phases start this far apart on the replay's clock (widened when one lasts longer)
_PHASE_GAP_S = 100_000.0
CLIENT_SEED = 0  # vllm bench serve's --seed default (serve.py, 0.10.1.1 and 0.11.0)
# V1 engines turn prefix caching on for generative models unless told otherwise
# (EngineArgs: enable_prefix_caching None -> True, vllm/engine/arg_utils.py 0.10.1.1, 0.11.0)
_PREFIX_CACHING_WORDS = {"on": True, "true": True, "off": False, "false": False}

_D = "dennislee22-qwen2-7b-a100-test{}-random-1024-1024-n{}"
_S = "surajssd-llama-3.3-70b-a100-40gb-tp8-sharegpt-rate{}"
# The runs made before each run against the same vLLM server, oldest first, where the
# source shows them: dennislee22's README (commit b474d1e) pastes after each result the
# server log lines printed during it, with the API server's pid, date and time. Same pid,
# later time: same server, later run. Each run's first line's "Prefix cache hit rate" then
# follows from those runs, the client's test request and vLLM's RandomDataset drawing the
# same prompt i for one seed (random 1024/1024, default seed 0): test 4's first run on pid
# 113 (n10, 09-06 20:57) logs 8.9% = 1008 / (11 x 1024) (only its test prompt hit), then
# n1 22.7%, n20 40.6%, n30 53.0%; test 5's n50 (pid 136, 09-09 01:31) logs 1.9% =
# 1008 / (51 x 1024), n30 38.5%, n20 50.7%; n10 (pid 118, 02:24) 8.9%; n100 (pid 2739,
# 09-04 01:33) 1.0%, n200 33.3%. Test 4's n500 (pid 1671, 09-04 01:13) logs 43.3% at its
# start, so something ran before it that the README does not show: it gets no earlier
# runs, and n200 / n100 after it start from what n500 left (its 500 prompts cycle the
# 5,867-block cache). Test 5's n1 logs 56.1%, more than n50, n30, n20 explain (51.6%): an
# unshown run came between, which changes nothing for its one prompt (cached either way).
SAME_SERVER_EARLIER: dict[str, tuple[str, ...]] = {
    _D.format(4, 1): (_D.format(4, 10),),
    _D.format(4, 20): (_D.format(4, 10), _D.format(4, 1)),
    _D.format(4, 30): (_D.format(4, 10), _D.format(4, 1), _D.format(4, 20)),
    _D.format(4, 50): tuple(_D.format(4, n) for n in (10, 1, 20, 30)),
    _D.format(4, 75): tuple(_D.format(4, n) for n in (10, 1, 20, 30, 50)),
    _D.format(4, 200): (_D.format(4, 500),),
    _D.format(4, 100): (_D.format(4, 500), _D.format(4, 200)),
    _D.format(5, 30): (_D.format(5, 50),),
    _D.format(5, 20): (_D.format(5, 50), _D.format(5, 30)),
    _D.format(5, 1): (_D.format(5, 50), _D.format(5, 30), _D.format(5, 20)),
    _D.format(5, 75): (_D.format(5, 10),),
    _D.format(5, 200): (_D.format(5, 100),),
    _D.format(5, 500): (_D.format(5, 100), _D.format(5, 200)),
    # surajssd/llm-k8s (commit 58b61c5, 01_tp8_pp1/benchmark-script-run.sh): one script run
    # sends rates 1, 4, 16 and inf, in that order, to the one server it deployed (the same
    # base URL; client log times 04-14 14:11, 14:15, 14:16, 14:17), each the same 200
    # ShareGPT prompts (seed 0), with prefix caching on
    _S.format("4"): (_S.format("1"),),
    _S.format("16"): (_S.format("1"), _S.format("4")),
    _S.format("inf"): (_S.format("1"), _S.format("4"), _S.format("16")),
}


def oldest_release() -> str:
    """V1's release (vLLM 0.33), named: its scheduler is the nearest to the published runs'
    releases (0.11, V1 engines too), run with synchronous scheduling as 0.11 ran by
    default."""
    return V1_RELEASE


def _cost_model(model: str, gpu: str, tensor_parallel_size: int) -> CostModel:
    return device_cost_model(model, gpu, tensor_parallel_size=tensor_parallel_size)


def default_cudagraph_mode(vllm_version: str) -> str:
    """The CUDA-graph mode a release runs when the run does not set one."""
    release = tuple(int(part) for part in re.findall(r"\d+", str(vllm_version))[:2])
    return "FULL_AND_PIECEWISE" if release >= _FULL_AND_PIECEWISE_SINCE else "PIECEWISE"


def run_config(row: pd.Series, scheduler_release: str | None = None) -> GraphConfig:
    """The graph config a run's engine dispatched with: its limits (else ``vllm serve``'s
    defaults on its GPU), its release's default CUDA-graph mode, its TP size, ``scheduler_release``'s rules
    (default :func:`oldest_release`)."""
    seqs, tokens = serve_default_limits(row["gpu"])
    return GraphConfig(
        vllm_version=scheduler_release or oldest_release(),
        cudagraph_mode=default_cudagraph_mode(row["vllm_version"]),
        max_num_seqs=seqs if pd.isna(row["max_num_seqs"]) else int(row["max_num_seqs"]),
        max_num_batched_tokens=(
            tokens if pd.isna(row["max_num_batched_tokens"]) else int(row["max_num_batched_tokens"])
        ),
        tensor_parallel_size=int(row["tensor_parallel_size"]),
    ).resolve()


def prefix_caching_on(row: pd.Series) -> bool:
    """Whether a run's server cached prefixes: its ``prefix_caching`` column (``on`` /
    ``off``), else vLLM V1's default for a generative model, on."""
    value = row.get("prefix_caching", math.nan)
    if value is None or (isinstance(value, float) and math.isnan(value)) or value == "":
        return True
    word = str(value).strip().lower()
    if word not in _PREFIX_CACHING_WORDS:
        raise ValueError(
            f"run {row.get('run_id')}: prefix_caching={value!r} is invalid: write on or off "
            "(empty: the release's default, on)"
        )
    return _PREFIX_CACHING_WORDS[word]


def run_limits(
    row: pd.Series,
    config: GraphConfig,
    num_gpu_blocks: int | None,
    enable_prefix_caching: bool | None = None,
) -> SchedulerLimits:
    """The scheduler limits of a run: ``config``'s, its ``max_model_len``, KV blocks, prefix
    caching (None: :func:`prefix_caching_on`)."""
    if enable_prefix_caching is None:
        enable_prefix_caching = prefix_caching_on(row)
    return scheduler_limits(
        config,
        max_model_len=None if pd.isna(row["max_model_len"]) else int(row["max_model_len"]),
        num_gpu_blocks=num_gpu_blocks,
        async_scheduling=False,
        enable_prefix_caching=enable_prefix_caching,
    )


def _mean_of(row: pd.Series, total: str) -> float | None:
    if pd.isna(row[total]) or pd.isna(row["completed"]):
        return None
    return float(row[total]) / float(row["completed"])


def run_requests(row: pd.Series, seed: int = 0, *, client_seed: int = CLIENT_SEED) -> pd.DataFrame:
    """The request table a run's client sends (closed-loop runs: all at 0, to be solved),
    with each prompt's identity (``hash_ids``, one id per :data:`BLOCK_SIZE` tokens).

    Random dataset: vLLM's draw, with the fixed lengths replaced by the published means
    (total tokens / completed) where the source gives them, since runs without
    ``--ignore-eos`` stop early and chat templates add tokens; its prompts are vLLM's for
    ``--seed client_seed`` (:func:`~cgdispatch.workload.bench_traffic.random_dataset_offsets`,
    the run's release's generator), so runs with one seed share prompt ``i``. ShareGPT: the
    stand-in, at the published means where given, every prompt distinct. The chat
    template's few leading tokens fill no block and are left out."""
    rng = np.random.default_rng(seed)
    n = int(row["num_prompts"])
    mean_in, mean_out = _mean_of(row, "total_input_tokens"), _mean_of(row, "total_output_tokens")
    if row["dataset"] == "random":
        ratio = 0.0 if pd.isna(row["range_ratio"]) else float(row["range_ratio"])
        input_len = round(mean_in) if mean_in else int(row["input_len"])
        output_len = round(mean_out) if mean_out else int(row["output_len"])
        prompts, outputs = random_lengths(n, input_len, max(output_len, 1), ratio, rng)
        asked_in = int(row["input_len"]) if not pd.isna(row["input_len"]) else input_len
        asked_out = int(row["output_len"]) if not pd.isna(row["output_len"]) else output_len
        offsets = random_dataset_offsets(
            n, asked_in, asked_out, ratio, seed=client_seed, vllm_version=str(row["vllm_version"])
        )
    else:
        prompts, outputs = sharegpt_like_lengths(n, rng, mean_input=mean_in, mean_output=mean_out)
        offsets = np.zeros(n, dtype=np.int64)  # prompt i starts at token i: all distinct
    if is_open_loop(row):
        burst = 1.0 if pd.isna(row["burstiness"]) else float(row["burstiness"])
        send = send_times_s(n, offered_rate(row), burst, rng)
    else:
        send = np.zeros(n)
    ids = prompt_hash_ids(prompts, offsets, BLOCK_SIZE)
    return bench_requests(prompts, outputs, send, hash_ids=ids, hash_block_size=BLOCK_SIZE)


def initial_test_request(requests: pd.DataFrame) -> pd.DataFrame:
    """The request ``vllm bench serve`` sends once before its timed run and waits for:
    ``input_requests[0]`` (its prompt and output length), at 0 ("Starting initial single
    prompt test run...", ``benchmark`` in ``vllm/benchmarks/serve.py``, 0.10.1.1 and
    0.11.0)."""
    first = requests.iloc[[0]].copy()
    first["arrival_s"] = 0.0
    first.attrs = dict(requests.attrs)
    return first.reset_index(drop=True)


@cache.memo(1)
def _shipped_runs_by_id() -> pd.DataFrame:
    return published_serving_runs().set_index("run_id", drop=False)


def warmup_phases(
    row: pd.Series, seed: int = 0, *, client_seed: int = CLIENT_SEED
) -> list[pd.DataFrame]:
    """What a run's server served before its timed window, one request table per phase in
    order, each phase over before the next begins: for each earlier run on the same server
    (:data:`SAME_SERVER_EARLIER`, looked up in the shipped table) its test request, then its
    requests; then the run's own test request. Empty with prefix caching off (nothing
    carries over)."""
    if not prefix_caching_on(row):
        return []
    phases: list[pd.DataFrame] = []
    shipped = _shipped_runs_by_id()
    for run_id in SAME_SERVER_EARLIER.get(str(row["run_id"]), ()):
        earlier = run_requests(shipped.loc[run_id], seed, client_seed=client_seed)
        phases += [initial_test_request(earlier), earlier]
    phases.append(initial_test_request(run_requests(row, seed, client_seed=client_seed)))
    return phases


@dataclass(frozen=True)
class WarmReplay:
    """A replay whose timed window followed warm-up phases (:func:`replay_after_warmup`)."""

    requests: pd.DataFrame  # the window's requests (request_latencies' columns), s from its start
    steps: pd.DataFrame  # the window's steps (replay_scheduler's columns), time_s from its start
    start_s: float  # when the window began on the replay's clock
    warmup_requests: int  # requests replayed before it, not counted
    prefix_hit_rate: float  # over the whole replay, warm-up included, as vLLM's log counts it


def replay_after_warmup(
    measured: pd.DataFrame,
    limits: SchedulerLimits,
    *,
    warmup: Sequence[pd.DataFrame] = (),
    step_time_ms: StepClock = default_step_time_ms,
    seed: int = 0,
    max_concurrency: int | None = None,
) -> WarmReplay:
    """The replay of vLLM's scheduler over ``warmup``'s phases, one after another, then the
    timed window ``measured``: one replay, so the prefix cache and KV blocks carry over as
    on the real server, while only ``measured`` is reported (its arrival times counted from
    the window's start). Each phase starts after the previous one's last request finished
    (after a gap of idle time, which changes nothing in vLLM's scheduler or cache), checked
    on the replay itself. Every table takes the same prompt-identity column (or none);
    ``max_concurrency``: the client's limit, for every phase."""
    phases = [*warmup, measured]
    if not all(isinstance(p, pd.DataFrame) and len(p) for p in phases):
        raise ValueError(
            "replay_after_warmup takes non-empty request tables (warmup: a sequence of them)"
        )
    idents = {tuple(c for c in p.columns if c == HASH_IDS_COLUMN) for p in phases}
    blocks = {p.attrs.get("hash_block_size") for p in phases if HASH_IDS_COLUMN in p.columns}
    if len(idents) > 1 or len(blocks) > 1:
        raise ValueError(
            f"the warm-up and measured tables differ in prompt identity (columns {idents}, "
            f"hash_block_size {blocks}): give every table the same {HASH_IDS_COLUMN!r} form"
        )

    def replay(table: pd.DataFrame):
        if blocks:
            table.attrs["hash_block_size"] = next(iter(blocks))
        table = with_max_concurrency(table, max_concurrency)
        return start_replay(table, limits, step_time_ms=step_time_ms, seed=seed)

    # phases a long idle gap apart (the replay jumps over idle time), checked on the replay
    gap = _PHASE_GAP_S
    for _ in range(8):
        starts = gap * np.arange(len(phases), dtype=np.float64)
        parts = [p.assign(arrival_s=p["arrival_s"].to_numpy() + t) for p, t in zip(phases, starts)]
        phase = np.repeat(np.arange(len(phases)), [len(p) for p in phases])
        run = replay(pd.concat(parts, ignore_index=True))
        times = run.request_times()
        finish = times["finish_s"].to_numpy()
        if all(finish[phase == k].max() < starts[k + 1] for k in range(len(phases) - 1)):
            break
        gap *= 16.0  # a phase ran into the next: wider gaps, replay again
    else:  # pragma: no cover - eight widenings: phases over ten trillion seconds apart
        raise ValueError("the warm-up phases kept overlapping: replay them apart")
    start = float(starts[-1])
    lat = times[phase == len(phases) - 1].copy()
    for col in ("arrival_s", "first_token_s", "finish_s"):
        lat[col] = lat[col] - start
    lat = request_latencies(lat.reset_index(drop=True))
    steps = run.frame()
    steps = steps[steps["time_s"] >= start].reset_index(drop=True)
    steps["time_s"] = steps["time_s"] - start
    return WarmReplay(lat, steps, start, int((phase < len(phases) - 1).sum()), run.prefix_hit_rate)


def overloaded_simulated(latencies: pd.DataFrame) -> bool:
    """Whether the waiting queue grew through a simulated open-loop run: the last quarter
    of arrivals' median TTFT is :data:`OVERLOAD_TTFT_GROWTH` times the first quarter's and
    :data:`OVERLOAD_TTFT_FLOOR_MS` above it."""
    ttft_ms = latencies.sort_values("arrival_s", kind="stable")["ttft_s"].to_numpy() * 1e3
    quarter = max(len(ttft_ms) // 4, 1)
    first, last = np.median(ttft_ms[:quarter]), np.median(ttft_ms[-quarter:])
    return bool(last > OVERLOAD_TTFT_GROWTH * first and last > first + OVERLOAD_TTFT_FLOOR_MS)


def overloaded_published(row: pd.Series) -> bool | None:
    """Heuristic from a published open-loop run's summary (None for ``inf`` rate and
    closed loop, where the client, not the server, sets the queue): a stable server's mean
    TTFT does not grow with the run's length, a falling-behind one's grows with it, so the
    run counts as overloaded when its mean TTFT exceeds :data:`OVERLOAD_PUBLISHED_SHARE` of
    the send window ``num_prompts / rate`` and :data:`OVERLOAD_TTFT_FLOOR_MS`."""
    rate = offered_rate(row)
    if not is_open_loop(row) or math.isinf(rate) or pd.isna(row["mean_ttft_ms"]):
        return None
    window_ms = float(row["num_prompts"]) / rate * 1e3
    ttft = float(row["mean_ttft_ms"])
    return bool(ttft > OVERLOAD_PUBLISHED_SHARE * window_ms and ttft > OVERLOAD_TTFT_FLOOR_MS)


def _kv_cache_tokens(row: pd.Series, config: GraphConfig) -> tuple[int, str]:
    """(KV tokens, where they come from): the source's logged size, else the estimate."""
    if not pd.isna(row["kv_cache_tokens"]):
        return int(row["kv_cache_tokens"]), "logged"
    gmu = row["gpu_memory_utilization"]
    # the KV budget as the run's own release computes it (the graph estimate comes off it
    # only from 0.20), whatever release's scheduler replays the run
    release = str(row["vllm_version"])
    if release_defaults(release).generation != config.vllm_version:
        config = run_config(row, release)
    estimate = estimate_startup(
        row["model"],
        row["gpu"],
        config,
        vllm_version=release,
        tensor_parallel_size=int(row["tensor_parallel_size"]),
        gpu_memory_utilization=0.9 if pd.isna(gmu) else float(gmu),
        block_size=BLOCK_SIZE,
    )
    return int(estimate.kv_cache_blocks) * BLOCK_SIZE, "modelled"


def simulate_published_run(
    row: pd.Series,
    *,
    step_time_for: StepTimeFactory = serving_step_time,
    cost_model_for: CostModelFactory = _cost_model,
    seed: int = 0,
    scheduler_release: str | None = None,
) -> dict[str, Any]:
    """One run simulated: ``sim_*`` figures (TTFT mean / median / p99 and TPOT mean /
    median in ms, output and request throughput per second from the benchmark's start to
    the last finish, duration), ``overloaded_sim`` (None for closed loop and ``inf``), KV
    blocks, preemptions, the warm-up requests replayed before the timed window
    (:func:`warmup_phases`) and the prefix-cache hit rate over the whole replay (NaN with
    prefix caching off). ValueError when the run
    cannot be simulated (a model that does not fit, a request longer than the KV cache)."""
    config = run_config(row, scheduler_release)
    tp = int(row["tensor_parallel_size"])
    kv_tokens, kv_source = _kv_cache_tokens(row, config)
    requests = run_requests(row, seed)
    longest = int((requests["prompt_tokens"] + requests["output_tokens"]).max())
    if kv_source == "modelled" and longest > kv_tokens:
        # vLLM starts only when one request of max_model_len fits its KV cache
        # (vllm/v1/core/kv_cache_utils.py check_enough_kv_cache_memory, 0.11.0 to 0.33.0):
        # the published server served requests of `longest` tokens, so it held them; the
        # start-up model (unstated flags read as vLLM's defaults) is short by the difference
        modelled = kv_tokens
        kv_tokens = (-(-longest // BLOCK_SIZE) + 1) * BLOCK_SIZE  # its blocks and the null one
        kv_source = f"modelled {modelled:,} tokens, raised to the {longest:,} the run served"
    if longest > kv_tokens:
        raise ValueError(
            f"run {row['run_id']}: a request of {longest} tokens exceeds the {kv_source} KV cache "
            f"of {kv_tokens} tokens ({row['model']} on {row['gpu']})"
        )
    caching = prefix_caching_on(row)
    limits = run_limits(row, config, kv_tokens // BLOCK_SIZE, caching)
    step = step_time_for(config, cost_model_for(row["model"], row["gpu"], tp))
    concurrency = None if is_open_loop(row) else int(row["max_concurrency"])
    warm = replay_after_warmup(
        requests,
        limits,
        warmup=warmup_phases(row, seed) if caching else (),
        step_time_ms=step,
        seed=seed,
        max_concurrency=concurrency,
    )
    lat = warm.requests
    end_s = float(lat["finish_s"].max())
    ttft_ms, tpot_ms = lat["ttft_s"].to_numpy() * 1e3, lat["tpot_s"].dropna().to_numpy() * 1e3
    open_finite = concurrency is None and not math.isinf(offered_rate(row))
    return {
        "sim_mean_ttft_ms": float(ttft_ms.mean()),
        "sim_median_ttft_ms": float(np.median(ttft_ms)),
        "sim_p99_ttft_ms": float(np.percentile(ttft_ms, 99)),
        "sim_mean_tpot_ms": float(tpot_ms.mean()) if len(tpot_ms) else math.nan,
        "sim_median_tpot_ms": float(np.median(tpot_ms)) if len(tpot_ms) else math.nan,
        "sim_output_throughput": float(lat["output_tokens"].sum()) / end_s,
        "sim_total_token_throughput": float(lat["prompt_tokens"].sum() + lat["output_tokens"].sum())
        / end_s,
        "sim_request_throughput": len(lat) / end_s,
        "sim_duration_s": end_s,
        "overloaded_sim": overloaded_simulated(lat) if open_finite else None,
        "sim_num_gpu_blocks": kv_tokens // BLOCK_SIZE,
        "sim_kv_source": kv_source,
        "sim_preemptions": int(lat["num_preemptions"].sum()),
        "sim_warmup_requests": warm.warmup_requests,
        "sim_prefix_hit_rate": warm.prefix_hit_rate,
    }


_COMPARED = {  # published column -> simulated column
    "mean_ttft_ms": "sim_mean_ttft_ms",
    "median_ttft_ms": "sim_median_ttft_ms",
    "p99_ttft_ms": "sim_p99_ttft_ms",
    "mean_tpot_ms": "sim_mean_tpot_ms",
    "output_throughput": "sim_output_throughput",
    "total_token_throughput": "sim_total_token_throughput",
}


def published_serving_comparison(
    runs: pd.DataFrame | None = None,
    *,
    step_time_for: StepTimeFactory = serving_step_time,
    cost_model_for: CostModelFactory = _cost_model,
    seed: int = 0,
    progress: Callable[[Iterable], Iterable] | None = None,
) -> pd.DataFrame:
    """One row per run: the run's identity, published and simulated figures side by side,
    ``ratio_<metric>`` = simulated / published, both overload flags, and ``error`` (the
    reason a run could not be simulated, else empty). ``runs``: default the shipped table;
    ``progress``: a wrapper such as ``tqdm.tqdm`` around the loop over runs."""
    runs = published_serving_runs() if runs is None else runs
    rows = []
    items = list(runs.iterrows())
    for _, row in progress(items) if progress else items:
        out: dict[str, Any] = {
            "run_id": row["run_id"], "model": row["model"], "gpu": row["gpu"],
            "request_rate": row["request_rate"], "max_concurrency": row["max_concurrency"],
            "num_prompts": int(row["num_prompts"]),
            "overloaded_published": overloaded_published(row), "error": "",
        }  # fmt: skip
        out.update({c: row[c] for c in _COMPARED})
        try:
            out.update(
                simulate_published_run(
                    row, step_time_for=step_time_for, cost_model_for=cost_model_for, seed=seed
                )
            )
        except ValueError as err:
            out["error"] = str(err)
        for pub, sim in _COMPARED.items():
            value = out.get(sim, math.nan)
            out[f"ratio_{pub}"] = float(value) / float(out[pub]) if out[pub] else math.nan
        rows.append(out)
    return pd.DataFrame(rows)


# The runs the serving overhead (VLLM_SERVING_OVERHEAD) is fitted on: those on this GPU
# (GPUStack's H100 pages: Qwen3-14B/32B at an inf rate, Qwen3-8B at max-concurrency 1-8, the
# quantization page's BF16 row; vLLM 0.9.2 and 0.11.0). Held out: every run on another GPU
# (GPUStack's A100 and RTX 4090 runs, dennislee22's A100 runs with vLLM 0.10.1.1 and the
# completions client): a slower GPU, where the host's share of a step is smaller.
SERVING_FIT_GPU = "H100-SXM"
# the figures judged end to end, published column -> printed label
COMPARED_METRICS = {
    "mean_ttft_ms": "TTFT ms",
    "mean_tpot_ms": "TPOT ms",
    "output_throughput": "out tok/s",
    "total_token_throughput": "all tok/s",
}


def serving_fit_split(runs: pd.DataFrame) -> np.ndarray:
    """True for the runs the serving overhead is fitted on (those on :data:`SERVING_FIT_GPU`),
    False for the held-out ones."""
    return np.asarray(runs["gpu"].astype(str) == SERVING_FIT_GPU, bool)


def median_errors(comparison: pd.DataFrame) -> dict[str, float]:
    """Per compared figure, the median of |simulated / published - 1| over the simulated runs
    of a :func:`published_serving_comparison` table (NaN where none gives it)."""
    done = comparison[comparison["error"] == ""]
    out = {}
    for pub in COMPARED_METRICS:
        err = np.abs(done[f"ratio_{pub}"].to_numpy(dtype=float) - 1.0)
        err = err[~np.isnan(err)]
        out[pub] = float(np.median(err)) if len(err) else math.nan
    return out


def fit_serving_overhead(
    runs: pd.DataFrame,
    grid: Mapping[str, Iterable[float]],
    *,
    cost_model_for: CostModelFactory = _cost_model,
    seed: int = 0,
) -> tuple[ServingOverhead, pd.DataFrame]:
    """The point of ``grid`` (a :class:`ServingOverhead` field name -> the values to try;
    fields not named stay 0) that minimizes the mean over :data:`COMPARED_METRICS` of the
    median error on ``runs`` (pass the fit split only), and every point with its errors."""
    names = list(grid)
    bad = [n for n in names if n not in {f.name for f in fields(ServingOverhead)}]
    if bad or not names:
        raise ValueError(
            f"grid fields {bad or names!r} are invalid: name ServingOverhead fields "
            f"({', '.join(f.name for f in fields(ServingOverhead))}) with the values to try"
        )
    points = list(itertools.product(*(list(grid[n]) for n in names)))
    if not points:
        raise ValueError("fit_serving_overhead needs at least one value per grid field: give some")
    rows = []
    for point in points:
        over = ServingOverhead(**dict(zip(names, (float(v) for v in point))))

        def clock(config: GraphConfig, cost: CostModel, over: ServingOverhead = over):
            return serving_step_time(config, cost, overhead=over)

        table = published_serving_comparison(
            runs, step_time_for=clock, cost_model_for=cost_model_for, seed=seed
        )
        errs = median_errors(table)
        rows.append({**asdict(over), **errs, "objective": float(np.nanmean(list(errs.values())))})
    frame = pd.DataFrame(rows)
    best = frame.loc[frame["objective"].idxmin()]
    return ServingOverhead(**{n: float(best[n]) for n in names}), frame
