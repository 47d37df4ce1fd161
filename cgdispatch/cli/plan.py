"""``python -m cgdispatch plan``: simulate or read steps, plan capture sizes, compare, export."""

from __future__ import annotations

import argparse
import math

from ..core.config import GraphConfig


def run_plan(args: argparse.Namespace) -> int:
    import pandas as pd

    from ..plan.ladder_compare import compare, compare_json, engine_ladders, export_plan
    from ..plan.planner import plan_capture_sizes
    from ..workload.files import load_trace
    from ..workload.trace import simulate_steps

    config = GraphConfig(
        cudagraph_mode=args.mode,
        max_num_seqs=args.max_num_seqs,
        max_num_batched_tokens=args.max_num_batched_tokens,
        num_speculative_tokens=args.num_speculative_tokens,
        max_loras=args.max_loras,
        tensor_parallel_size=args.tensor_parallel_size,
        sequence_parallel=args.sequence_parallel,
    ).resolve()
    kind, frame = load_trace(args.trace)
    if kind == "requests":
        trace = simulate_steps(
            frame,
            max_num_seqs=args.max_num_seqs,
            max_num_batched_tokens=args.max_num_batched_tokens,
            num_speculative_tokens=args.num_speculative_tokens,
            max_loras=args.max_loras or None,
            seed=args.seed,
            progress=not args.json,
        )
    else:
        trace = frame
    q = config.uniform_decode_query_len
    multiple = q if config.cudagraph_mode.decode_mode().name == "FULL" and q > 1 else 1
    if config.sequence_parallel:  # tokens split evenly across TP ranks
        multiple = math.lcm(multiple, config.tensor_parallel_size)
    sizes = plan_capture_sizes(
        trace,
        args.max_graphs,
        mode=config.cudagraph_mode,
        max_size=args.max_size,
        multiple_of=multiple,
    )
    ladders = {"planned": sizes, **engine_ladders(config)}
    table = compare(trace, ladders, config=config)
    if args.json:
        print(compare_json(table))
        return 0
    source = "simulated from requests" if kind == "requests" else "read from file"
    print(f"{len(trace)} steps ({source}), {int(trace['uniform_decode'].sum())} uniform decode")
    shown = table.assign(sizes=table["sizes"].map(_short))
    with pd.option_context("display.width", 200, "display.max_columns", 20):
        print(shown.to_string(index=False, float_format=lambda x: f"{x:.4f}"))
    print("\nengine settings for the planned sizes:")
    for engine, flags in export_plan(sizes, config).items():
        print(f"  {engine}: {flags.strip()}")
    return 0


def _short(sizes: list[int]) -> str:
    return (
        str(sizes) if len(sizes) <= 8 else f"[{', '.join(map(str, sizes[:4]))}, ..., {sizes[-1]}]"
    )


def add_parser(subparsers: argparse._SubParsersAction) -> None:
    plan = subparsers.add_parser(
        "plan", help="plan capture sizes for a trace and compare with the engines' ladders"
    )
    plan.add_argument(
        "--trace", required=True, help="CSV of requests or steps, or a vLLM --cudagraph-metrics log"
    )
    plan.add_argument("--max-graphs", type=int, required=True, help="most capture sizes to plan")
    plan.add_argument(
        "--max-size", type=int, default=None, help="largest size (default: largest step)"
    )
    plan.add_argument(
        "--seed", type=int, default=0, help="seed of the simulator (spec decode acceptance)"
    )
    plan.add_argument("--json", action="store_true", help="print one JSON object")
    plan.add_argument(
        "--mode", default="FULL_AND_PIECEWISE", help="cudagraph mode (default %(default)s)"
    )
    plan.add_argument("--max-num-seqs", type=int, default=256)
    plan.add_argument("--max-num-batched-tokens", type=int, default=8192)
    plan.add_argument("--num-speculative-tokens", type=int, default=0)
    plan.add_argument("--max-loras", type=int, default=0, help="LoRA adapters per step (0 = off)")
    plan.add_argument("--tensor-parallel-size", type=int, default=1)
    plan.add_argument(
        "--sequence-parallel", action="store_true", help="sizes must be multiples of the TP size"
    )
    plan.set_defaults(func=run_plan)
