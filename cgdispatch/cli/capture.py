"""``python -m cgdispatch capture``: capture a registry model's graphs, optionally check
replays (:func:`cgdispatch.measure.replay_check.check_replay`).

``--vllm-version`` picks the generation the runner captures and dispatches with: 0.34
(generation 2, ``CudaGraphManager``; the default, the newest) or 0.33 (V1,
``CudagraphDispatcher``). Under 0.34 the graphs are ``--prefill-sizes`` (token counts) and
``--decode-sizes`` (request counts); ``--sizes`` is vLLM's deprecated shared list, which
0.34 still maps onto both (with vLLM's warning).
"""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING

from ..core.generation import GENERATIONS, generation_for
from ..core.ladder_shape import SplitLadders, TokenLadder
from ..core.validate import check_device
from ..measure.replay_check import check_replay
from .dispatch import add_generation_arguments, generation_line, parse_sizes

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
    size_fields = _size_fields(args)
    q = 1 + args.num_speculative_tokens
    widest = [  # the widest graph: the model's buffers must hold it
        *(size_fields.get("cudagraph_capture_sizes") or []),
        *(size_fields.get("prefill_cudagraph_capture_token_sizes") or []),
        *(n * q for n in size_fields.get("decode_cudagraph_capture_request_sizes") or []),
    ]
    model = build_model(
        args.model,
        device=device,
        dtype=args.dtype,
        seed=args.seed,
        max_num_tokens=max(widest) if widest else None,
        attention=args.attention,
    )
    model.fill_kv_cache_(args.seed)
    config = GraphConfig(
        cudagraph_mode=args.mode,
        max_num_seqs=args.max_num_seqs or model.num_slots,
        num_speculative_tokens=args.num_speculative_tokens,
        splitting_ops=[] if args.no_piecewise else None,
        vllm_version=getattr(args, "vllm_version", None),  # scripts may leave it out: V1
        **size_fields,
    )
    return GraphRunner(model, config, backend=args.backend)


_DEFAULT_SIZES = "1,2,4,8"


def _size_fields(args: argparse.Namespace) -> dict[str, list[int] | None]:
    """The GraphConfig size fields the options name, for the chosen generation.

    V1: ``sizes`` (None: vLLM's ladder; the command fills in 1,2,4,8). 0.34:
    ``prefill_sizes`` and ``decode_sizes`` (each 1,2,4,8 when no size option is given);
    ``sizes`` given is passed as the deprecated shared list, as a vLLM 0.34 user passing it
    would.
    """
    generation = generation_for(getattr(args, "vllm_version", None))
    shape = generation.ladder
    if isinstance(shape, TokenLadder):
        two = [g.release for g in GENERATIONS.values() if isinstance(g.ladder, SplitLadders)]
        for flag in ("prefill_sizes", "decode_sizes"):
            if getattr(args, flag, None) is not None:
                raise ValueError(
                    f"--{flag.replace('_', '-')} with --vllm-version {generation.release} is "
                    f"invalid: {generation.name} has one shared size list; use --sizes, or "
                    f"--vllm-version {two[-1]}"
                )
        return {"cudagraph_capture_sizes": parse_sizes(args.sizes)}
    # one option per ladder of the shape (--prefill-sizes, --decode-sizes)
    lists = {lad.field: parse_sizes(getattr(args, lad.flag, None)) for lad in shape.ladders}
    if args.sizes is not None:
        return {"cudagraph_capture_sizes": parse_sizes(args.sizes), **lists}
    return {field: sizes or parse_sizes(_DEFAULT_SIZES) for field, sizes in lists.items()}


def add_runner_arguments(
    parser: argparse.ArgumentParser, *, model: str = "toy-tiny", sizes: str | None = None
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
    parser.add_argument(
        "--sizes",
        default=sizes,
        help=f"capture sizes (0.33; under 0.34 the deprecated shared list); default "
        f"{sizes or _DEFAULT_SIZES}",
    )
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

    if isinstance(generation_for(args.vllm_version).ladder, TokenLadder) and args.sizes is None:
        args.sizes = _DEFAULT_SIZES  # a small V1 set; gen 2's defaults are in _size_fields

    runner = build_runner(args)
    report = runner.capture_all(progress=not args.no_progress)
    from ..measure.timing import source_label

    where = source_label(runner.device)
    print(generation_line(runner.config))
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
        sizes=parse_sizes(args.sizes) or parse_sizes(args.prefill_sizes) or [1, 2, 4, 8],
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
    add_generation_arguments(p)
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
