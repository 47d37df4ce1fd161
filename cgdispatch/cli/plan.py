"""``python -m cgdispatch plan``: read or simulate steps, plan capture sizes (padding or
modelled step time under budgets), compare with the engines' ladders in-sample or on
held-out traffic, export the plan as engine flags.

``--vllm-version`` picks the generation (default: the newest, vLLM 0.34, said in the
output): 0.34 plans decode request sizes and prefill token sizes
(:func:`~cgdispatch.plan.planner_v2.plan_gen2_capture_sizes`), 0.33 one V1 token ladder."""

from __future__ import annotations

import argparse
import sys
from dataclasses import dataclass
from typing import Any

from ..core.config import GraphConfig
from ..core.generation import GENERATIONS, default_release, generation_for, release_arg
from ..core.jsonout import strict_json
from ..core.ladder_shape import TokenLadder
from ..core.modes import CUDAGraphMode
from ..views.numbers import number
from .dispatch import other_releases
from .errors import command_parser
from .model_args import DEVICES, add_device_args, check_model_flag, device_from_args

__all__ = [
    "DEVICES",
    "budget_flags",
    "check_int_flags",
    "check_planning_flags",
    "run_plan",
    "add_parser",
]
_MIB = 1 << 20


def check_int_flags(args: argparse.Namespace) -> None:
    """Every integer flag ``args`` has, in [least, bound] (``cgdispatch.core.validate``'s
    bounds): ValueError naming the flag, its value and the rule, before any work."""
    from ..core import validate as v
    from ..workload.limits import LIMIT_BOUNDS

    # the scheduler's limits are held to the replay's own bounds (SchedulerLimits')
    limit = {name: (least, most) for name, least, most in LIMIT_BOUNDS}
    bounds = {
        "max_graphs": (1, v.MAX_CAPTURE_SIZES),
        "max_size": (1, v.MAX_CAPTURE_SIZE),
        "max_num_seqs": limit["max_num_seqs"],
        "max_num_batched_tokens": limit["max_num_batched_tokens"],
        "context_len": (1, v.MAX_MODEL_LEN),
        "num_requests": (1, v.MAX_REQUESTS),
        "num_speculative_tokens": limit["num_speculative_tokens"],
        "max_loras": (0, v.MAX_LORAS),  # 0: no adapters (the scheduler's None)
        "tensor_parallel_size": (1, v.MAX_PARALLEL),
        "max_model_len": limit["max_model_len"],
        "max_concurrency": (1, v.MAX_REQUESTS),
        "hash_block_size": limit["hash_block_size"],
        "replicas": (1, v.MAX_PARALLEL),
    }
    for flag, (least, bound) in bounds.items():
        value = getattr(args, flag, None)
        if value is not None:
            v.check_int(f"--{flag.replace('_', '-')}", value, least, bound)


def check_planning_flags(args: argparse.Namespace) -> None:
    """The flags ``plan`` and ``tune`` share, checked before any work: the integer bounds
    (:func:`check_int_flags`), the budgets, the held-out share and the model (a toy-free
    registry name, a published id or a config.json). ValueError naming the flag and fix."""
    from ..models.registry import model_names

    check_int_flags(args)
    for flag in ("memory_budget_mib", "capture_budget_s"):
        value = getattr(args, flag)
        if value is not None and not value > 0:
            raise ValueError(f"--{flag.replace('_', '-')}={value} is invalid: it must be > 0")
    if args.holdout is not None and not 0 < args.holdout < 1:
        raise ValueError(f"--holdout={args.holdout} is invalid: give the held-out share, 0 < x < 1")
    usable = [n for n in model_names() if not n.startswith("hf-")]  # toy inputs only
    check_model_flag(args.model, usable, args.tensor_parallel_size)


def budget_flags(args: argparse.Namespace) -> dict[str, float | None]:
    """The planner's two budgets from ``--memory-budget-mib`` (in bytes) and
    ``--capture-budget-s``, as keywords of ``plan_ladder`` and ``TuneSettings``."""
    mib = args.memory_budget_mib
    return {
        "memory_budget_bytes": None if mib is None else mib * _MIB,
        "capture_budget_s": args.capture_budget_s,
    }


def _check(args: argparse.Namespace) -> CUDAGraphMode:
    """Every flag checked before any work, each failure one ValueError naming the fix;
    returns ``--mode`` parsed."""
    from ..workload.trace_source import resolve_trace

    check_planning_flags(args)
    if args.holdout is not None and args.evaluate_on is not None:
        raise ValueError("--holdout and --evaluate-on exclude each other: give one")
    generation = generation_for(args.vllm_version)
    # sequence parallelism filters one token ladder's sizes (V1); other shapes plan no NONE
    one_list = isinstance(generation.ladder, TokenLadder)
    if not one_list and args.sequence_parallel:
        v1 = [g.release for g in GENERATIONS.values() if isinstance(g.ladder, TokenLadder)]
        raise ValueError(
            f"--sequence-parallel filters sizes in V1 only (vLLM {generation.release} applies "
            f"none): drop it, or pass --vllm-version {v1[-1]}"
        )
    mode = CUDAGraphMode.parse(args.mode)  # the one parse of --mode
    if not one_list and mode is CUDAGraphMode.NONE:
        raise ValueError("--mode NONE captures nothing: pick a graph mode")
    for flag in ("trace", "evaluate_on"):
        if getattr(args, flag) is not None:  # a misspelt name or a missing file: refused here
            resolve_trace(getattr(args, flag), what=f"--{flag.replace('_', '-')}")
    return mode


def run_plan(args: argparse.Namespace) -> int:
    mode = _check(args)
    from ..estimate.device_model import device_cost_model
    from ..models.registry import tensor_parallel_flag, tensor_parallel_size_for
    from ..plan.ladder_compare import compare, engine_ladders, export_plan, kinds_absent
    from ..plan.planner import plan_ladder
    from ..workload.limits import scheduler_limits

    config = GraphConfig(
        vllm_version=args.vllm_version,
        cudagraph_mode=mode,
        max_num_seqs=args.max_num_seqs,
        max_num_batched_tokens=args.max_num_batched_tokens,
        num_speculative_tokens=args.num_speculative_tokens,
        max_loras=args.max_loras,
        tensor_parallel_size=tensor_parallel_size_for(args.model, args.tensor_parallel_size),
        sequence_parallel=args.sequence_parallel,
    ).resolve()
    # the one value the planning trace and the latency replay obey
    limits = scheduler_limits(
        config, num_gpu_blocks=args.num_gpu_blocks, enable_prefix_caching=args.prefix_caching
    )
    traffic = _traffic(args, limits)
    plan_on, test = traffic.plan_on, traffic.test
    device = device_from_args(args)
    cost_model = device_cost_model(  # the disk cache tune reads too: ~4 s to build
        args.model,
        device,
        context_len=args.context_len,
        tensor_parallel_size=tensor_parallel_flag(args.model, args.tensor_parallel_size),
    )
    sizes = plan_ladder(  # the planner of config's generation
        plan_on,
        args.max_graphs,
        config=config,
        objective=args.objective,
        cost_model=cost_model,
        max_size=args.max_size,
        **budget_flags(args),
    )
    ladders = {"planned": sizes, **engine_ladders(config)}
    latency: dict = {}
    if args.latency:  # vLLM's own scheduler per ladder over the evaluated trace's requests
        if traffic.requests is None:
            raise ValueError(
                "--latency needs requests: give a preset or a requests CSV, not a steps file"
            )
        latency = {"requests": traffic.requests, "scheduler": limits}
    flags = export_plan(sizes, config, leave_default=kinds_absent(plan_on))
    table = compare(test, ladders, config=config, cost_model=cost_model, **latency)
    table["graph_memory_mib"] = table.pop("graph_memory_bytes") / _MIB
    table["evaluated_on"] = traffic.evaluated_on
    return _print_plan(
        args, table, flags, plan_on, test, traffic.label, traffic.evaluated_on, cost_model
    )


@dataclass(frozen=True)
class _Traffic:
    """The steps ``plan`` plans on and those it reports on, their labels, and the requests
    behind the evaluated steps (None for a file of steps)."""

    plan_on: Any
    test: Any
    label: str
    evaluated_on: str
    requests: Any


def _traffic(args: argparse.Namespace, limits: Any) -> _Traffic:
    """``--trace`` (and ``--evaluate-on``) read or drawn once each and simulated under
    ``limits``: in sample, split by ``--holdout``, or the other trace."""
    from ..workload.sources import read_workload, split_holdout, workload_trace
    from ..workload.trace import check_step_budget

    def load(flag: str) -> tuple[Any, str, Any]:
        value, name = getattr(args, flag), f"--{flag.replace('_', '-')}"
        progress = sys.stderr.isatty()  # on stderr, so --json output stays clean
        read = read_workload(value, seed=args.seed, progress=progress, what=name)
        trace, label = workload_trace(
            read.source, seed=args.seed, limits=limits, progress=progress,
            requests=read.requests, steps=None if read.requests is not None else read.table,
        )  # fmt: skip
        check_step_budget(trace, args.max_num_batched_tokens, f"{name} {value}")
        return trace, label, read.requests

    trace, label, requests = load("trace")
    plan_on, evaluated_on, test = trace, f"in-sample ({label})", trace
    if args.holdout is not None:
        plan_on, test = split_holdout(trace, args.holdout)
        evaluated_on = f"held out: last {args.holdout:g} of {label}"
    elif args.evaluate_on is not None:
        test, other, requests = load("evaluate_on")
        evaluated_on = f"other trace: {other}"
    # a kind of step the trace lacks (a disaggregated prefill or decode node): not planned
    plan_on.attrs["step_kinds_known"] = trace.attrs.get("step_kinds_known", True)
    return _Traffic(plan_on, test, label, evaluated_on, requests)


def _print_plan(
    args: argparse.Namespace,
    table: Any,
    flags: dict[str, str],
    plan_on: Any,
    test: Any,
    label: str,
    evaluated_on: str,
    cost_model: Any,
) -> int:
    """The ladders' table and the engine settings, as JSON or for a person; exit status 0."""
    import pandas as pd

    shape = generation_for(args.vllm_version).ladder
    if args.json:
        records = table.rename(columns={"ladder": "name"}).to_dict(orient="records")
        out = {
            "vllm_version": args.vllm_version,
            "objective": args.objective,
            "model": args.model,
            "ladders": records,
            "flags": flags,
        }
        print(strict_json(out))
        return 0
    print(_generation_line(args.vllm_version))
    print(f"{len(plan_on)} steps planned on ({label}); {len(test)} evaluated: {evaluated_on}")
    if len(shape.ladders) > 1:  # a column per ladder: prefill_tokens, decode_requests
        table = table.drop(columns="sizes").rename(
            columns={lad.flag: lad.box.replace(" ", "_") for lad in shape.ladders}
        )
    lists = [c for c in ("sizes", "prefill_tokens", "decode_requests") if c in table]
    shown = table.assign(**{c: table[c].map(_short) for c in lists})
    shown = shown.drop(columns=["evaluated_on", "vllm_version"])
    with pd.option_context("display.width", 250, "display.max_columns", 30):
        print(shown.to_string(index=False, float_format=number))  # never 2.949e+08
    print(f"\nstep times, graph memory and capture time: {cost_model.source}, {args.model}")
    print("engine settings for the planned sizes:")
    for engine, text in flags.items():
        if engine != "left_at_default":
            print(f"  {engine}: {text.strip()}")
    if "left_at_default" in flags:
        print(f"left at the engines' defaults: {flags['left_at_default']}")
    return 0


def _generation_line(version: str) -> str:
    """The generation the plan is for, and how to pick the other."""
    generation = generation_for(version)
    newest = " (the newest; default)" if generation.release == default_release() else ""
    others = other_releases(generation, "--vllm-version {release} for {name}'s {dispatcher}", ", ")
    what = generation.ladder.name  # "one token ladder"
    return f"vLLM {generation.release}{newest}: {generation.dispatcher_name}, {what} ({others})"


def _short(sizes: list[int]) -> str:
    return (
        str(sizes) if len(sizes) <= 8 else f"[{', '.join(map(str, sizes[:4]))}, ..., {sizes[-1]}]"
    )


def add_parser(subparsers: argparse._SubParsersAction) -> None:
    from ..workload.sources import PRODUCTION_TRACES
    from ..workload.sources import SYNTHETIC_NAMES as LENGTH_PRESETS

    plan = command_parser(
        subparsers,
        "plan",
        help="plan capture sizes for a trace and compare with the engines' ladders",
    )
    plan.add_argument(
        "--trace",
        required=True,
        help="requests or steps CSV, mooncake_trace .jsonl, --cudagraph-metrics log, "
        f"preset ({', '.join(LENGTH_PRESETS)}) or production trace "
        f"({', '.join(PRODUCTION_TRACES)})",
    )
    plan.add_argument("--max-graphs", type=int, required=True, help="most capture sizes to plan")
    plan.add_argument(
        "--max-size",
        type=int,
        default=None,
        help="largest (prefill) token size (default: padding: largest step; time: chosen by "
        "the planner)",
    )
    plan.add_argument("--objective", choices=("padding", "time"), default="padding")
    plan.add_argument(
        "--model", default="llama-3.1-8b", help="architecture for step times and graph memory"
    )
    add_device_args(plan)
    plan.add_argument(
        "--context-len", type=int, default=512, help="KV positions each token attends to"
    )
    plan.add_argument("--memory-budget-mib", type=float, default=None, help="graph pool budget")
    plan.add_argument("--capture-budget-s", type=float, default=None, help="capture-time budget")
    plan.add_argument(
        "--holdout",
        type=float,
        default=None,
        help="plan on the first part, report on this last share of the trace (by time)",
    )
    plan.add_argument("--evaluate-on", default=None, help="report on this other trace")
    plan.add_argument(
        "--seed", type=int, default=0, help="seed of the simulator (spec decode acceptance)"
    )
    plan.add_argument("--json", action="store_true", help="print one JSON object")
    plan.add_argument(
        "--latency",
        action="store_true",
        help="also run vLLM's own scheduler per ladder: p50/p99 TTFT and TPOT, throughput, "
        "preemptions (model figures; needs requests, not a steps file)",
    )
    plan.add_argument(
        "--num-gpu-blocks", type=int, default=None,
        help="KV-cache blocks of the replay of vLLM's scheduler, for the planning trace and "
        "--latency (vLLM's num_gpu_blocks; default unlimited)",
    )  # fmt: skip
    plan.add_argument(
        "--vllm-version",
        type=release_arg,
        metavar="RELEASE",
        default=default_release(),
        help="vLLM release whose graph dispatch to plan for, any from 0.8 on (each "
        "dispatches as its generation: "
        + ", ".join(g.describe() for g in GENERATIONS.values())
        + "); default %(default)s, the newest",
    )
    plan.add_argument(
        "--mode", default="FULL_AND_PIECEWISE", help="cudagraph mode (default %(default)s)"
    )
    _add_engine_flags(plan)
    plan.set_defaults(func=run_plan)


def _add_engine_flags(plan: argparse.ArgumentParser) -> None:
    """vLLM's scheduler limits the planning trace is simulated under."""
    plan.add_argument("--max-num-seqs", type=int, default=256)
    plan.add_argument("--max-num-batched-tokens", type=int, default=8192)
    plan.add_argument("--num-speculative-tokens", type=int, default=0)
    plan.add_argument("--max-loras", type=int, default=0, help="LoRA adapters per step (0 = off)")
    plan.add_argument(
        "--tensor-parallel-size",
        type=int,
        default=None,
        help="GPUs one replica spans, as vLLM's flag (default: the model's own, else 1); "
        "step times and graph memory are one GPU's, its share of the model",
    )
    plan.add_argument(
        "--no-prefix-caching",
        dest="prefix_caching",
        action="store_false",
        help="replay vLLM's scheduler with prefix caching off; on by default, as in vLLM",
    )
    plan.add_argument(
        "--sequence-parallel", action="store_true", help="sizes must be multiples of the TP size"
    )
