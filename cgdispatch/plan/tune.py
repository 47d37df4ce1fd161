"""From a step trace to a decision: plan capture sizes on the first part of the trace, judge
them on the held-out rest against vLLM's default ladder for the same settings, and
recommend the plan only when it wins there.

This is the one home of plan-and-holdout: ``python -m cgdispatch tune``, notebook 04 and the
tune dashboard call :func:`tune`. It plans with the time objective, replays both ladders through
the real dispatcher of the config's generation (:func:`~cgdispatch.plan.ladder_compare.compare`)
and recommends the plan only when its gain on one objective is larger than the band that
model error and held-out noise could make alone (:mod:`~cgdispatch.plan.tune_bands`).

:func:`tune` runs in named stages: the plan of at most ``max_graphs`` sizes under the
budgets on the planning part (:func:`_plan`); with ``requests`` the cut at an arrival
(:func:`~cgdispatch.workload.sources.arrival_cut`), the held-out requests run through vLLM's
scheduler under ``limits`` for each ladder with its own KV cache (``kv_blocks``; default: the
``startup`` estimate's KV tokens) after an overload check (:func:`~cgdispatch.plan.tune_judge.held_out_load`), and with
``replicas`` >= 2 the busiest replica's share tuned (:func:`_busiest_replica`); both ladders
(and ``ladders``, in ``result.tables`` only) replayed held out (``replay``, default
:func:`compare`) and in sample; the verdict on ``objective`` (default p99 TTFT with requests,
else mean step time) against the band of the models' ``errors`` and held-out noise
(:func:`~cgdispatch.plan.tune_judge.verdict_on`); the Pareto set with plans of ``budgets`` sizes. ``kv_bytes_per_token``
turns freed graph memory into KV tokens when ``startup`` gives none.

Two seams for figures other issues supply:

* ``startup(config) -> StartupCosts``: graph memory, capture time and KV-cache tokens of a
  config that captures one ladder. Without it the cost model's graph-memory and
  capture-time figures (as :func:`compare` sums them) are used, and freed graph memory is
  turned into KV tokens with the model's KV bytes per token; a calibrated start-up
  estimate plugs in here.
* ``replay(trace, ladders, config=, cost_model=) -> DataFrame``: the held-out replay
  (default :func:`compare`); one that adds ``p99_ttft_ms``, ``p99_tpot_ms`` or
  ``throughput_tok_s`` columns (the scheduler's latencies) makes them part of the verdict
  and lets an objective judge them.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Protocol

import pandas as pd

from ..core.config import GraphConfig
from ..core.modes import CUDAGraphMode
from ..estimate.uncertainty import MODEL_ERRORS, ModelErrors, errors_for
from ..workload.limits import SchedulerLimits
from ..workload.replicas import check_balance
from ..workload.request_table import check_requests
from ..workload.sources import arrival_cut, split_holdout
from ..workload.trace import check_step_budget, check_trace
from .costs import CostModel, cost_source
from .gen2_ladder import ladder_config
from .ladder_compare import Ladder, compare, engine_ladders, export_plan, kinds_absent
from .overload import (
    busiest_share,
    decode_share,
    drops_decodes,
    offered_before,
    window_notes,
    with_default_decodes,
)
from .planner import plan_ladder
from .tune_bands import pareto_set
from .tune_judge import HeldOutLoad, held_out_load, kv_blocks_from, verdict_on
from .tune_result import (
    OBJECTIVES,
    StartupCosts,
    TuneResult,
    ladder_figures,
)

__all__ = ["tune", "StartupCosts", "StartupFn", "ReplayFn", "DEFAULT_GRAPHS", "OBJECTIVES"]

DEFAULT_GRAPHS = 32  # the planner's size budget when none is given (vLLM 0.34's default: ~86)


class StartupFn(Protocol):
    """The start-up seam: costs of a resolved config that captures one ladder."""

    def __call__(self, config: GraphConfig) -> StartupCosts: ...


ReplayFn = Callable[
    ..., pd.DataFrame
]  # compare's signature: (trace, ladders, config=, cost_model=)


def tune(
    trace: pd.DataFrame,
    *,
    config: GraphConfig,
    cost_model: CostModel,
    holdout: float = 0.5,
    max_graphs: int = DEFAULT_GRAPHS,
    memory_budget_bytes: float | None = None,
    capture_budget_s: float | None = None,
    kv_bytes_per_token: float | None = None,
    trace_label: str = "trace",
    startup: StartupFn | None = None,
    replay: ReplayFn | None = None,
    requests: pd.DataFrame | None = None,
    ladders: dict[str, Ladder] | None = None,
    objective: str | None = None,
    kv_blocks: Callable[[GraphConfig], int | None] | None = None,
    errors: ModelErrors | None = None,
    budgets: tuple[int, ...] = (8, 16),
    replicas: int = 1,
    balance: str = "round-robin",
    limits: SchedulerLimits | None = None,
) -> TuneResult:
    """Plan on the first ``1 - holdout`` of ``trace`` (by time), judge on the rest (the
    stages, and what each argument feeds, are in this module's docstring).

    ``config``: the resolved engine settings (its release picks the generation, its limits
    vLLM's default ladder); ``requests``: the request table behind ``trace`` (same clock).
    The recommendation is "planned" only when the plan's held-out gain on ``objective``
    (:data:`~cgdispatch.plan.tune_result.OBJECTIVES`) beats its band, else "vllm default".
    """
    trace, requests = _checked_inputs(
        trace, config, cost_model, max_graphs, objective, requests, replicas, balance
    )
    default_ladder = engine_ladders(config)["vllm"]
    fleet = requests  # every replica's requests; ``requests`` becomes the tuned replica's
    if replicas > 1:
        trace, requests, trace_label = _busiest_replica(
            fleet, replicas, balance, config, default_ladder, cost_model, kv_blocks, startup,
            trace_label, limits,
        )  # fmt: skip
    cut_s = None if requests is None else _arrival_cut(trace, requests, holdout)
    errors = _device_errors(errors, cost_model)
    check_step_budget(trace, config.max_num_batched_tokens)
    train, test = split_holdout(trace, holdout, cut_s=cut_s)
    planned, notes = _plan(train, test, max_graphs, config, cost_model, memory_budget_bytes,
                           capture_budget_s, default_ladder)  # fmt: skip
    two = {"planned": planned, "vllm default": default_ladder}
    configs = {name: ladder_config(config, ladder) for name, ladder in two.items()}
    costs = {name: None if startup is None else startup(cfg) for name, cfg in configs.items()}
    kv_blocks = kv_blocks or kv_blocks_from(startup, costs)
    load = HeldOutLoad(replay=replay)
    if replay is None and requests is not None:
        load = held_out_load(requests, fleet, cut_s, configs["vllm default"], cost_model,
                             kv_blocks, balance, replicas, limits)  # fmt: skip
    notes += _notes(train, test, requests, cut_s, load, replay is None)
    everything = {**two, **{k: v for k, v in (ladders or {}).items() if k not in two}}
    held = (load.replay or compare)(test, everything, config=config, cost_model=cost_model)
    in_sample = compare(train, everything, config=config, cost_model=cost_model)
    held_out = {name: ladder_figures(held, name, costs[name]) for name in two}
    deltas = _deltas(held_out["planned"], held_out["vllm default"], kv_bytes_per_token)
    verdict = verdict_on(
        objective, held_out, deltas, test, configs, cost_model, errors, load, kv_blocks, limits
    )
    pareto = _pareto(test, train, max_graphs, config, cost_model, held_out, startup, budgets,
                     keep_decodes=bool(decode_share(test)), default=default_ladder)  # fmt: skip
    return TuneResult(
        recommendation="planned" if verdict.wins else "vllm default", planned=planned,
        default=default_ladder, held_out=held_out,
        in_sample={name: ladder_figures(in_sample, name, costs[name]) for name in two},
        deltas=deltas, flags=_flags(planned if verdict.wins else None, config, kinds_absent(train)),
        config=config, source=_source(cost_model, costs.get("planned")),
        trace_label=trace_label, holdout=holdout, steps_planned=len(train),
        steps_held_out=len(test), tables={"held out": held, "in sample": in_sample},
        objective=verdict.objective, gain=verdict.gain, band=verdict.band,
        reason=verdict.reason, errors=errors, step_band=verdict.steps, pareto=pareto,
        overload=load.overload, replicas_needed=load.needed, replicas=replicas,
        balance=balance, notes=tuple(notes),
    )  # fmt: skip


def _checked_inputs(
    trace: pd.DataFrame,
    config: GraphConfig,
    cost_model: CostModel,
    max_graphs: int,
    objective: str | None,
    requests: pd.DataFrame | None,
    replicas: int,
    balance: str,
) -> tuple[pd.DataFrame, pd.DataFrame | None]:
    """``(trace, requests)`` checked before any work: ValueError for a bad argument."""
    if not isinstance(config, GraphConfig):
        raise ValueError(f"config={config!r} is invalid: pass a resolved cgdispatch.GraphConfig")
    if not callable(getattr(cost_model, "step_time_ms", None)):
        raise ValueError(
            "cost_model is missing: tune judges ladders by modelled step time; pass "
            "device_cost_model(model, device) or another CostModel"
        )
    if isinstance(max_graphs, bool) or not isinstance(max_graphs, int) or max_graphs < 1:
        raise ValueError(f"max_graphs={max_graphs!r} is invalid: give an integer >= 1")
    if objective is not None and objective not in OBJECTIVES:  # before any work
        raise ValueError(f"objective={objective!r} is unknown: use one of {list(OBJECTIVES)}")
    # every cell of both frames, before the split: an error names the row as the caller
    # counts it, and a bad cell in the planning part is refused as one in the held-out part
    trace = check_trace(trace)
    if requests is not None:
        checked = check_requests(requests)
        requests = requests.reset_index(drop=True).assign(
            **{c: checked[c].to_numpy() for c in checked.columns}
        )
    check_balance(balance, replicas)
    if replicas > 1 and requests is None:
        raise ValueError(
            f"replicas={replicas} splits requests across replicas, and this run has none (a "
            "trace of steps): give requests (a requests CSV or a preset), or replicas=1"
        )
    return trace, requests


def _busiest_replica(
    fleet: pd.DataFrame,
    replicas: int,
    balance: str,
    config: GraphConfig,
    default_ladder: Ladder,
    cost_model: CostModel,
    kv_blocks: Callable | None,
    startup: StartupFn | None,
    trace_label: str,
    limits: SchedulerLimits | None,
) -> tuple[pd.DataFrame, pd.DataFrame, str]:
    """``(steps, requests, label)`` of the replica tuned when ``fleet`` is split across
    ``replicas`` identical replicas by ``balance``
    (:data:`~cgdispatch.workload.replicas.BALANCES`: round-robin, least-outstanding,
    prefix): the busiest one's share (the most tokens), its steps simulated from its
    requests (the caller's trace is not used); every figure is then per replica."""
    default_cfg = ladder_config(config, default_ladder)
    blocks = kv_blocks or kv_blocks_from(
        startup, {"d": None if startup is None else startup(default_cfg)}
    )
    return busiest_share(
        fleet, replicas, balance, config, default_cfg, cost_model, blocks, trace_label, limits
    )


def _arrival_cut(trace: pd.DataFrame, requests: pd.DataFrame, holdout: float) -> float:
    """With the requests, the held-out part starts at an arrival: the last ``holdout`` of
    the requests (a burst the scheduler drains long after it arrived still has a held-out
    part)."""
    _need_time(trace)
    return arrival_cut(requests["arrival_s"].to_numpy(), holdout)


def _notes(
    train: pd.DataFrame,
    test: pd.DataFrame,
    requests: pd.DataFrame | None,
    cut_s: float | None,
    load: HeldOutLoad,
    own_replay: bool,
) -> list[str]:
    """What the two windows say about each other (:func:`~cgdispatch.plan.overload.window_notes`):
    with requests priced by tune's own replay, the held-out load and the planning part's
    offered tokens too; none when the caller's replay prices requests."""
    if requests is None:
        return window_notes(train, test)
    if not own_replay:
        return []
    offered = offered_before(requests, cut_s)
    return window_notes(train, test, held=load.overload, planning_offered_tok_s=offered)


def _device_errors(errors: ModelErrors | None, cost_model: CostModel) -> ModelErrors:
    """``errors``, else the cost model's device's: H100-fitted errors on Hopper, held-out
    ones elsewhere."""
    if errors is not None:
        return errors
    spec = getattr(cost_model, "spec", None)
    return MODEL_ERRORS if spec is None else errors_for(spec)


def _plan(
    train: pd.DataFrame,
    test: pd.DataFrame,
    max_graphs: int,
    config: GraphConfig,
    cost_model: CostModel,
    memory_budget_bytes: float | None,
    capture_budget_s: float | None,
    default_ladder: Ladder,
) -> tuple[Ladder, list[str]]:
    """``(planned ladder, notes)``: the time-optimal plan of at most ``max_graphs`` sizes on
    the planning part under the budgets. A plan that has no decode size while the held-out
    window has decode steps (planned on a window of prompts only, issue 40) gets vLLM's
    default decode sizes added (:func:`~cgdispatch.plan.overload.with_default_decodes`),
    and a note says so."""
    planned = plan_ladder(
        train,
        max_graphs,
        config=config,
        objective="time",
        cost_model=cost_model,
        memory_budget_bytes=memory_budget_bytes,
        capture_budget_s=capture_budget_s,
    )
    notes: list[str] = []
    held_d = decode_share(test)
    if held_d and drops_decodes(planned, config):
        planned = with_default_decodes(planned, default_ladder, config)
        notes.append(
            f"the plan has no decode size of its own (no decodes in the planning window) "
            f"and keeps vLLM's default ones: {100 * held_d:.0f}% of held-out steps are decodes"
        )
    return planned, notes


def _pareto(
    test: pd.DataFrame,
    train: pd.DataFrame,
    max_graphs: int,
    config: GraphConfig,
    cost_model: CostModel,
    held_out: dict[str, dict[str, Any]],
    startup: StartupFn | None,
    budgets: tuple[int, ...],
    *,
    keep_decodes: bool = False,
    default: Ladder | None = None,
) -> dict[str, dict[str, Any]]:
    """The ladders no other beats on mean step time, graph memory and capture time held
    out (and p99 TTFT where all have it): the plan, vLLM's default, and plans with fewer
    sizes (``budgets``), each priced as the two are. Name -> figures, in that order.
    ``keep_decodes``: a smaller plan with no decode size gets ``default``'s, as the plan."""
    figures = dict(held_out)
    smaller = sorted({b for b in budgets if 1 <= b < max_graphs}, reverse=True)
    ladders = {
        f"planned ({k} sizes)": plan_ladder(train, k, config=config, objective="time",
                                            cost_model=cost_model)
        for k in smaller
    }  # fmt: skip
    if keep_decodes and default is not None:
        ladders = {
            name: with_default_decodes(lad, default, config) if drops_decodes(lad, config) else lad
            for name, lad in ladders.items()
        }
    if ladders:
        table = compare(test, ladders, config=config, cost_model=cost_model)
        for name, ladder in ladders.items():
            cost = None if startup is None else startup(ladder_config(config, ladder))
            figures[name] = ladder_figures(table, name, cost)
    return {name: figures[name] for name in pareto_set(figures)}


def _need_time(trace: pd.DataFrame) -> None:
    if "time_s" not in trace.columns:
        raise ValueError(
            "requests need a trace with a time_s column (a simulated trace) to find the "
            "held-out part; give a step file without requests, or simulate the requests"
        )


def _source(cost_model: CostModel, startup: StartupCosts | None) -> str:
    """The step-time model's label, and the start-up estimate's when it has one."""
    label = cost_source(cost_model)
    extra = getattr(startup, "source", None)
    return f"{label}; start-up: {extra}" if isinstance(extra, str) and extra else label


def _deltas(
    planned: dict[str, float], default: dict[str, float], kv_bytes_per_token: float | None
) -> dict[str, float]:
    """planned - default for every figure both have; ``mean_step_pct`` relative;
    ``kv_cache_tokens``: tokens gained (from the start-up estimate, or freed graph memory)."""
    out = {k: planned[k] - default[k] for k in planned if k in default and k in _DELTA_KEYS}
    out["mean_step_pct"] = 100.0 * out["mean_step_ms"] / default["mean_step_ms"]
    if planned.get("kv_cache_tokens") is not None and default.get("kv_cache_tokens") is not None:
        out["kv_cache_tokens"] = planned["kv_cache_tokens"] - default["kv_cache_tokens"]
    elif kv_bytes_per_token:
        out["kv_cache_tokens"] = -out["graph_memory_bytes"] / kv_bytes_per_token
    return out


_DELTA_KEYS = (
    "mean_step_ms",
    "num_graphs",
    "num_captured_graphs",
    "capture_s",
    "graph_memory_bytes",
    "eager_step_share",
    "p99_ttft_ms",
    "p99_tpot_ms",
    "throughput_tok_s",
    "num_preemptions",
)


def _flags(planned: Ladder | None, config: GraphConfig, absent: set[str]) -> str:
    """``vllm serve`` flags: the plan's sizes (a kind of step the trace lacks keeps vLLM's
    default list), or (keeping the default) the settings alone, from which vLLM derives its
    own ladder. Either carries ``--tensor-parallel-size`` once when TP > 1 (the plan's
    through :func:`~cgdispatch.core.vllm_io.serve_args`)."""
    if planned is not None:
        return export_plan(planned, config, leave_default=absent)["vllm"]
    tp = config.tensor_parallel_size
    parallel = f"--tensor-parallel-size {tp} " if tp > 1 else ""
    mode = config.cudagraph_mode
    flags = f"--max-num-seqs {config.max_num_seqs} --max-num-batched-tokens {config.max_num_batched_tokens}"
    if mode is not CUDAGraphMode.FULL_AND_PIECEWISE:  # vLLM's default mode needs no flag
        flags = f'--compilation-config \'{{"cudagraph_mode":"{mode.name}"}}\' ' + flags
    return parallel + flags
