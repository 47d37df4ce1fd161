"""``python -m cgdispatch capture``: capture a registry model's graphs, optionally check
replays (:func:`cgdispatch.measure.replay_check.check_replay`)."""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING

from ..core.validate import check_device
from ..measure.replay_check import check_replay
from .dispatch import parse_sizes

if TYPE_CHECKING:
    from ..capture.runner import GraphRunner

__all__ = ["build_runner", "add_parser"]


def build_runner(args: argparse.Namespace) -> GraphRunner:
    """Model and runner from the command-line options (shared with scripts/gpu_check.py)."""
    import torch

    from ..capture.runner import GraphRunner
    from ..core.config import GraphConfig
    from ..models.registry import build_model

    if args.device is not None:
        check_device("--device", args.device)
    device = args.device or ("cuda" if torch.cuda.is_available() else "cpu")
    sizes = parse_sizes(args.sizes)
    model = build_model(
        args.model,
        device=device,
        dtype=args.dtype,
        seed=args.seed,
        max_num_tokens=max(sizes) if sizes else None,
        attention=args.attention,
    )
    model.fill_kv_cache_(args.seed)
    config = GraphConfig(
        cudagraph_mode=args.mode,
        cudagraph_capture_sizes=sizes,
        max_num_seqs=args.max_num_seqs or model.num_slots,
        num_speculative_tokens=args.num_speculative_tokens,
        splitting_ops=[] if args.no_piecewise else None,
    )
    return GraphRunner(model, config, backend=args.backend)


def add_runner_arguments(
    parser: argparse.ArgumentParser, *, model: str = "toy-tiny", sizes: str = "1,2,4,8"
) -> None:
    parser.add_argument(
        "--model",
        default=model,
        help="model: toy-tiny, toy-small, toy-1b, hf-llama-tiny, hf-gpt2-tiny (default %(default)s)",
    )
    parser.add_argument(
        "--mode",
        default="FULL",
        help="cudagraph mode: NONE, FULL, FULL_DECODE_ONLY (default %(default)s)",
    )
    parser.add_argument("--sizes", default=sizes, help="capture sizes (default %(default)s)")
    parser.add_argument(
        "--attention",
        default=None,
        choices=["general", "uniform"],
        help="toy models' attention op: general (ALWAYS, default) or uniform (UNIFORM_BATCH)",
    )
    parser.add_argument(
        "--no-piecewise",
        action="store_true",
        help="splitting_ops=[]: modes needing piecewise graphs are lowered",
    )
    parser.add_argument(
        "--max-num-seqs", type=int, default=None, help="default: the model's KV slots"
    )
    parser.add_argument("--num-speculative-tokens", type=int, default=0)
    parser.add_argument(
        "--dtype", default=None, help="float32, bfloat16, float16 (default: the preset's)"
    )
    parser.add_argument("--device", default=None, help="cpu or cuda (default: cuda when available)")
    parser.add_argument(
        "--backend", default=None, help="graph backend: cuda, cpu (default: by device)"
    )
    parser.add_argument("--seed", type=int, default=0)


def run_capture(args: argparse.Namespace) -> int:
    import pandas as pd

    runner = build_runner(args)
    report = runner.capture_all(progress=not args.no_progress)
    from ..measure.timing import source_label

    where = source_label(runner.device)
    print(f"{runner}\ncapture report, {where}:")
    with pd.option_context("display.width", 160, "display.max_columns", 20):
        print(report.to_string(index=False))
    if report.attrs.get("total_pool_bytes") is not None:
        print(f"total graph pool: {report.attrs['total_pool_bytes'] / 2**20:.1f} MiB")
    if not args.check:
        return 0
    checks = check_replay(
        runner,
        seed=args.seed + 1,
        atol=args.atol,
        rtol=args.rtol,
        sizes=parse_sizes(args.sizes) or [1, 2, 4, 8],
    )
    print("\nreplay vs eager, fresh random inputs (largest error per key):")
    with pd.option_context(
        "display.width", 160, "display.max_columns", 20, "display.float_format", "{:.3g}".format
    ):
        print(checks.to_string(index=False))
    bad = checks[~checks["ok"]] if len(checks) else checks
    if len(checks) == 0 or len(bad):
        print(
            f"\nMISMATCH: {len(bad)} of {len(checks)} checks failed"
            if len(checks)
            else "\nno key was checked"
        )
        return 1
    print(f"\nok: {len(checks)} checks within tolerance")
    return 0


def add_parser(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser(
        "capture", help="capture a toy model's graphs; --check compares replay with eager"
    )
    add_runner_arguments(p)
    p.add_argument(
        "--check",
        action="store_true",
        help="replay each key on fresh inputs and compare with eager",
    )
    p.add_argument("--atol", type=float, default=None, help="absolute tolerance (default by dtype)")
    p.add_argument(
        "--rtol", type=float, default=None, help="tolerance relative to the largest |logit|"
    )
    p.add_argument("--no-progress", action="store_true", help="hide the progress bar")
    p.set_defaults(func=run_capture)
