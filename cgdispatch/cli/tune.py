"""``python -m cgdispatch tune``: from a trace to a decision.

Plans capture sizes on the first part of the trace, judges them on the held-out rest
against vLLM's default ladder for the same settings, and prints a verdict of at most 14
lines with the ``vllm serve`` command to paste (``--json``: one object). The logic is
:func:`cgdispatch.plan.tune.tune`; this module parses and prints.
"""

from __future__ import annotations

import argparse
import sys
from dataclasses import fields
from typing import TYPE_CHECKING

from ..core.generation import default_release, release_arg
from ..core.modes import CUDAGraphMode
from .errors import command_parser
from .model_args import add_device_args, device_from_args
from .plan import budget_flags, check_planning_flags

if TYPE_CHECKING:
    from ..estimate.devices import DeviceSpec
    from ..plan.tune_run import TuneSettings
    from ..workload.trace_source import TraceSource

__all__ = ["add_parser", "run_tune", "settings_from_flags"]


def _check(args: argparse.Namespace) -> tuple[CUDAGraphMode, TraceSource]:
    """Every flag checked before any work; returns ``--mode`` and ``--trace`` resolved (the
    one parse of each)."""
    from ..workload.trace_source import resolve_trace

    check_planning_flags(args)
    if not 0 < args.gpu_memory_utilization <= 1:
        raise ValueError(
            f"--gpu-memory-utilization={args.gpu_memory_utilization} is invalid: give a "
            "fraction in (0, 1], as vLLM's flag"
        )
    if not args.rate > 0:
        raise ValueError(f"--rate={args.rate} is invalid: give requests per second > 0")
    mode = CUDAGraphMode.parse(args.mode)
    return mode, resolve_trace(args.trace, hash_block_size=args.hash_block_size, what="--trace")


def settings_from_flags(
    args: argparse.Namespace, mode: CUDAGraphMode, trace: TraceSource, device: str | DeviceSpec
) -> TuneSettings:
    """The :class:`~cgdispatch.plan.tune_run.TuneSettings` of ``tune``'s parsed flags, with
    ``--mode``, ``--trace`` and the device as :func:`_check` and
    :func:`~cgdispatch.cli.model_args.device_from_args` resolved them. A flag named as its
    field is taken as given; the rest are converted (``--rate``, ``--no-prefix-caching``,
    the budgets: :func:`~cgdispatch.cli.plan.budget_flags`)."""
    from ..plan.tune_run import TuneSettings

    given = vars(args)
    same_name = {f.name: given[f.name] for f in fields(TuneSettings) if f.name in given}
    converted = {
        "device": device,
        "trace": trace,
        "rate_per_s": args.rate,
        "cudagraph_mode": mode,
        "enable_prefix_caching": args.prefix_caching,
        **budget_flags(args),
    }
    return TuneSettings(**{**same_name, **converted})


def run_tune(args: argparse.Namespace) -> int:
    mode, trace = _check(args)
    from ..estimate.devices import device_label
    from ..plan.tune_run import tune_for
    from ..views.tune_verdict import verdict_text

    device = device_from_args(args)
    settings = settings_from_flags(args, mode, trace, device)
    result = tune_for(settings, progress=not args.json and sys.stderr.isatty())
    if args.json:
        print(result.to_json())
        return 0
    # the serve line names what vLLM loads: a config.json's _name_or_path, its checkpoint
    # folder, or a placeholder it says to replace (views.tune_verdict.serve_target)
    print(verdict_text(result, model=args.model, device=device_label(device)))
    return 0


def add_parser(subparsers: argparse._SubParsersAction) -> None:
    from ..plan.tune import DEFAULT_GRAPHS
    from ..workload.sources import PRODUCTION_TRACES
    from ..workload.sources import SYNTHETIC_NAMES as LENGTH_PRESETS

    tune = command_parser(
        subparsers,
        "tune",
        help="plan capture sizes for your traffic, judged held out against vLLM's default",
        description="Plan capture sizes on the first part of a trace, judge them on the "
        "held-out rest against vLLM's default ladder, print the verdict and the vllm serve "
        "flags. Figures are modelled (device model on fake tensors; no GPU needed).",
    )
    tune.add_argument(
        "--model",
        default="llama-3.1-8b",
        help="architecture, published Hugging Face id or path to a decoder's config.json "
        "(read offline; default %(default)s)",
    )
    add_device_args(tune)
    tune.add_argument(
        "--trace",
        default="sharegpt",
        help="requests CSV (TIMESTAMP, ContextTokens, GeneratedTokens or timestamp, "
        "prompt_tokens, output_tokens; optional hash_ids), a mooncake_trace .jsonl "
        "(timestamp ms, input_length, output_length, hash_ids, session_id/delay), steps "
        "CSV, vLLM --cudagraph-metrics log, a "
        f"synthetic preset ({', '.join(LENGTH_PRESETS)}; default %(default)s) or a shipped "
        f"production trace ({', '.join(PRODUCTION_TRACES)})",
    )
    tune.add_argument(
        "--rate", type=float, default=8.0, help="preset traces: requests per second (%(default)s)"
    )
    tune.add_argument(
        "--num-requests", type=int, default=1000, help="preset traces: requests (%(default)s)"
    )
    tune.add_argument(
        "--vllm-version",
        type=release_arg,
        metavar="RELEASE",
        default=default_release(),
        help="vLLM release whose dispatch and defaults to use, any from 0.8 on (0.10.1.1, "
        "0.21.0, ...; default %(default)s, the newest)",
    )
    tune.add_argument("--max-num-seqs", type=int, default=256)
    tune.add_argument(
        "--tensor-parallel-size",
        type=int,
        default=None,
        help="GPUs one replica spans, as vLLM's flag (default: the model's own, else 1); "
        "figures are one GPU's, its share of the model and its all-reduces",
    )
    tune.add_argument("--max-num-batched-tokens", type=int, default=8192)
    tune.add_argument("--mode", default="FULL_AND_PIECEWISE", help="cudagraph mode (%(default)s)")
    tune.add_argument(
        "--max-graphs",
        type=int,
        default=DEFAULT_GRAPHS,
        help="most sizes to plan (0.34: decode request + prefill token sizes; %(default)s)",
    )
    _add_judging_flags(tune)
    _add_traffic_flags(tune)
    tune.add_argument("--seed", type=int, default=0, help="seed of synthetic traffic")
    tune.add_argument("--json", action="store_true", help="print one JSON object")
    tune.set_defaults(func=run_tune)


def _add_traffic_flags(tune: argparse.ArgumentParser) -> None:
    """The flags that say how the traffic reaches vLLM: its length limit, the client's
    concurrency, the tokens per prefix id, and the replicas it is split across."""
    from ..workload.replicas import BALANCES

    tune.add_argument(
        "--max-model-len",
        type=int,
        default=None,
        help="vLLM's --max-model-len: requests whose prompt reaches it are rejected, as vLLM "
        "rejects them (counted in the header), outputs capped at it (default: what vLLM "
        "would pick: the model config's length, capped so one request fits the KV cache)",
    )
    tune.add_argument(
        "--max-concurrency",
        type=int,
        default=None,
        help="closed loop: at most N requests in flight, a new one sent the moment one "
        "finishes, as vllm bench serve --max-concurrency (default: open loop, arrival times)",
    )
    tune.add_argument(
        "--hash-block-size",
        type=int,
        default=512,
        help="prompt tokens per hash id of a mooncake_trace or a hash_ids column (%(default)s)",
    )
    tune.add_argument(
        "--no-prefix-caching",
        dest="prefix_caching",
        action="store_false",
        help="replay vLLM's scheduler with prefix caching off (vLLM's "
        "--no-enable-prefix-caching); on by default, as in vLLM",
    )
    tune.add_argument(
        "--replicas",
        type=int,
        default=1,
        help="identical vLLM replicas the arrivals are split across, as a load balancer "
        "would; the busiest replica's share is tuned and the verdict is per replica "
        "(default %(default)s)",
    )
    tune.add_argument(
        "--balance",
        choices=BALANCES,
        default="round-robin",
        help="how --replicas splits arrivals: round-robin (default), least-outstanding (the "
        "replica with the fewest unfinished requests), prefix (a request goes to the replica "
        "that served its first prefix block, hash_ids; round-robin without them)",
    )


def _add_judging_flags(tune: argparse.ArgumentParser) -> None:
    """The flags that say what the plan is held to: budgets, the held-out share, the cost
    model's inputs, the objective and a calibration profile."""
    from ..plan.tune_result import OBJECTIVES

    tune.add_argument("--memory-budget-mib", type=float, default=None, help="graph pool budget")
    tune.add_argument("--capture-budget-s", type=float, default=None, help="capture-time budget")
    tune.add_argument(
        "--holdout",
        type=float,
        default=0.5,
        help="held-out share of the trace (by time) the verdict is judged on (%(default)s)",
    )
    tune.add_argument("--context-len", type=int, default=512, help="KV positions per token")
    tune.add_argument(
        "--gpu-memory-utilization",
        type=float,
        default=0.9,
        help="vLLM's share of device memory, for the KV-cache estimate (default %(default)s)",
    )
    tune.add_argument(
        "--objective",
        choices=tuple(OBJECTIVES),
        default=None,
        help="the figure the plan must beat vLLM's default on, outside the band of model "
        "error and noise: p99-ttft (default with requests: what a server's users see "
        "first), step (mean step time; default for a trace of steps), throughput, "
        "startup (capture time), kv (KV-cache tokens)",
    )
    tune.add_argument(
        "--calibration",
        default=None,
        metavar="NAME_OR_PATH",
        help="a profile `calibrate` fitted on this setup's own vLLM logs: its graph-pool, "
        "capture-time, non-torch and step-time factors, and bands shrunk to its residuals",
    )
