"""Measurement commands: ``sweep``, ``report`` and ``estimate-memory``."""

from __future__ import annotations

import argparse
import contextlib
import shlex
import signal
import sys
from collections.abc import Iterator
from pathlib import Path

from ..core.generation import GENERATIONS, release_arg
from .dispatch import add_config_arguments, config_from_args

__all__ = ["add_parser"]


def run_sweep_command(args: argparse.Namespace) -> int:
    from ..core.validate import check_device, check_int
    from ..sweep.run import SWEEP_PRESETS, run_sweep
    from ..sweep.spec import MAX_REPEATS, load_spec
    from ..sweep.store import ResultStore
    from ..sweep.workers import stop_workers, worker_pool

    if args.spec is not None:
        spec = load_spec(args.spec)
    elif args.preset in SWEEP_PRESETS:
        spec = SWEEP_PRESETS[args.preset]
    else:
        raise ValueError(
            f"sweep preset {args.preset!r} is unknown: use one of {sorted(SWEEP_PRESETS)} or --spec FILE"
        )
    # every flag is checked here, before the store is opened or a model built
    if args.device is not None:
        spec = spec.replace(device=check_device("--device", args.device))
    if args.repeats is not None:
        spec = spec.replace(repeats=check_int("--repeats", args.repeats, 1, MAX_REPEATS))
    if args.modes is not None:
        modes = tuple(m.strip() for m in args.modes.split(",") if m.strip())
        if not modes:
            raise ValueError(
                f"--modes {args.modes!r} names no mode: give one or more, e.g. FULL,PIECEWISE"
            )
        spec = spec.replace(modes=modes)
    if args.vllm_version is not None:
        spec = spec.replace(vllm_version=args.vllm_version)
    check_int("--workers", args.workers, 1, 1024)
    store = ResultStore(args.out)
    previous = store.load()
    same = (previous["sweep"] == spec.name) & (previous["vllm_version"] == spec.vllm_version)
    if not args.resume and same.any():
        raise ValueError(
            f"{store.path} already holds rows of sweep {spec.name!r} (vLLM {spec.vllm_version}): "
            "pass --resume to finish it "
            "(finished points are skipped) or choose another --out directory"
        )
    other = "; ".join(
        f"{g.release} for {g.name}" for g in GENERATIONS.values() if g.release != spec.vllm_version
    )
    chosen = "--vllm-version" if args.vllm_version is not None else "the spec's"
    print(f"vLLM {spec.vllm_version} graph dispatch ({chosen}; --vllm-version {other})")
    # workers ignore Ctrl-C and die with this process, even when it is killed (SIGKILL)
    executor = worker_pool(args.workers) if args.workers > 1 else None
    try:
        rows = run_sweep(spec, store=store, executor=executor, progress=not args.no_progress)
    except KeyboardInterrupt:
        with _no_second_interrupt():  # a second Ctrl-C must not cut the clean-up short
            if executor is not None:
                stop_workers(executor)
                executor = None
            print(_interrupted_line(args, spec.name, store), file=sys.stderr)
        return 130
    finally:
        if executor is not None:
            stop_workers(executor)
    ok = int((rows["status"] == "ok").sum())
    failed = len(rows) - ok
    print(f"sweep {spec.name}: {ok} ok, {failed} failed -> {store.path}")
    if failed and (ok == 0 or args.strict):
        # a run that measured nothing (or, with --strict, missed a point) must not look done
        errors = rows.loc[rows["status"] != "ok", "error"].astype(str).value_counts()
        print(f"failed points ({failed}); errors by count:", file=sys.stderr)
        for error, count in errors.head(5).items():
            print(f"  {count} x {error}", file=sys.stderr)
        return 1
    return 0


@contextlib.contextmanager
def _no_second_interrupt() -> Iterator[None]:
    """SIGINT ignored inside (main thread only; elsewhere nothing changes)."""
    try:
        previous = signal.signal(signal.SIGINT, signal.SIG_IGN)
    except ValueError:  # not the main thread
        yield
        return
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous)


def _interrupted_line(args: argparse.Namespace, sweep: str, store) -> str:
    """The one line a Ctrl-C ends with: what was saved, and the command that goes on."""
    try:
        saved = f"{len(store.done_keys())} points"
    except ValueError:  # the store itself failed: say nothing wrong about it
        saved = "every point finished before"
    source = ["--spec", str(args.spec)] if args.spec is not None else ["--preset", args.preset]
    flags = [
        *source,
        "--out",
        str(args.out),
        *(["--device", args.device] if args.device is not None else []),
        *(["--repeats", str(args.repeats)] if args.repeats is not None else []),
        *(["--modes", args.modes] if args.modes is not None else []),
        *(["--vllm-version", args.vllm_version] if args.vllm_version is not None else []),
        *(["--workers", str(args.workers)] if args.workers != 1 else []),
        *(["--strict"] if getattr(args, "strict", False) else []),
        "--resume",
    ]
    command = shlex.join(["python", "-m", "cgdispatch", "sweep", *flags])
    return f"interrupted: {saved} of sweep {sweep} are saved in {args.out}; go on with: {command}"


def run_report_command(args: argparse.Namespace) -> int:
    from ..views.report import write_report

    path = write_report(
        args.results, args.out, estimate=not args.no_estimate, progress=not args.no_progress
    )
    print(f"report: {path} and its charts in {path.parent}")
    return 0


def run_estimate_command(args: argparse.Namespace) -> int:
    import pandas as pd

    from ..estimate.graph_memory import estimate_graph_memory
    from ..models.toy import build_toy_model

    model = build_toy_model(args.model, device="meta", dtype=args.dtype)
    config = config_from_args(args)
    config = config.resolve(model.attention_cg_support)
    est = estimate_graph_memory(
        model, config, keep_outputs=args.strong_outputs, progress=not args.no_progress
    )
    mib = 1 << 20
    if args.per_graph:  # one row per graph: a FULL key, or one piece of a PIECEWISE key
        table = est.graphs.assign(
            peak_MiB=est.graphs["peak_bytes"] / mib, output_MiB=est.graphs["output_bytes"] / mib
        )
        cols = [
            "runtime_mode",
            "num_tokens",
            "num_reqs",
            "uniform",
            "piece",
            "peak_MiB",
            "output_MiB",
        ]
    else:
        table = est.per_key.assign(kept_MiB=est.per_key["kept_bytes"] / mib)
        cols = ["runtime_mode", "num_tokens", "num_reqs", "uniform", "pieces", "kept_MiB"]
    table = table.assign(pool_increment_MiB=table["pool_increment_bytes"] / mib)
    with pd.option_context("display.max_rows", None, "display.width", 200):
        print(
            table[[*cols, "pool_increment_MiB"]].to_string(
                index=False, float_format=lambda v: f"{v:.2f}"
            )
        )
    print(f"\n{args.model} ({model.config.dtype}), mode {config.cudagraph_mode}: {est.summary()}")
    return 0


def add_parser(subparsers: argparse._SubParsersAction) -> None:
    sweep = subparsers.add_parser(
        "sweep", help="time and size graphs over modes x ladders x shapes (resumable)"
    )
    sweep.add_argument("--preset", default="smoke", help="sweep preset: smoke, gpu-small, gpu-full")
    sweep.add_argument(
        "--spec", type=Path, default=None, help="a spec file (YAML or JSON) instead of --preset"
    )
    sweep.add_argument(
        "--out",
        required=True,
        type=Path,
        help="store folder (store.sqlite, exported as results.csv) or a .csv/.parquet export name",
    )
    sweep.add_argument(
        "--resume", action="store_true", help="continue a sweep: skip points already ok"
    )
    sweep.add_argument("--workers", type=int, default=1, help="processes (units run in parallel)")
    sweep.add_argument("--device", default=None, help="override the preset's device (cpu, cuda)")
    sweep.add_argument("--repeats", type=int, default=None, help="override timed runs per point")
    sweep.add_argument(
        "--modes", default=None, help="override the preset's modes, e.g. FULL,PIECEWISE"
    )
    sweep.add_argument(
        "--vllm-version",
        type=release_arg,
        metavar="RELEASE",
        default=None,
        help="vLLM release whose graph dispatch the runner follows, any from 0.8 on (each "
        "dispatches as its generation: "
        + ", ".join(f"{g.release} ({g.name})" for g in GENERATIONS.values())
        + "); default: the spec's (the presets': the newest)",
    )
    sweep.add_argument(
        "--strict",
        action="store_true",
        help="exit 1 when any point failed (without it: only when every point failed)",
    )
    sweep.add_argument("--no-progress", action="store_true")
    sweep.set_defaults(func=run_sweep_command)
    report = subparsers.add_parser("report", help="charts (PNG) and a Markdown summary of a sweep")
    report.add_argument("results", type=Path, help="a sweep's --out directory or results file")
    report.add_argument(
        "--out", type=Path, default=None, help="report directory (default RESULTS/report)"
    )
    report.add_argument(
        "--no-estimate", action="store_true", help="skip the graph-memory estimates"
    )
    report.add_argument("--no-progress", action="store_true")
    report.set_defaults(func=run_report_command)
    est = subparsers.add_parser(
        "estimate-memory", help="graph memory per key and in total, without a GPU"
    )
    add_config_arguments(est)
    est.add_argument(
        "--model", default="toy-small", help="toy-model preset (toy-tiny, toy-small, toy-1b)"
    )
    est.add_argument("--dtype", default=None, help="override the preset's dtype")
    est.add_argument(
        "--weak-outputs",
        action="store_true",
        help="graph outputs go back to the pool (vLLM's weak references; the default)",
    )
    est.add_argument(
        "--strong-outputs",
        action="store_true",
        help="every graph keeps its outputs (GraphRunner(weak_outputs=False))",
    )
    est.add_argument(
        "--per-graph", action="store_true", help="one row per graph (piece) instead of per key"
    )
    est.add_argument("--no-progress", action="store_true")
    est.set_defaults(func=run_estimate_command)
