"""Dispatcher commands: ``demo`` (a tour of one config) and ``dispatch`` (one batch)."""

from __future__ import annotations

import argparse
import random

from ..core.config import GraphConfig
from ..core.dispatcher import ready_dispatcher


def parse_sizes(text: str | None) -> list[int] | None:
    """``"1,2,4,8"`` -> [1, 2, 4, 8]; ``None`` or ``""`` -> None (default ladder)."""
    if text is None or not text.strip():
        return None
    sizes = []
    for part in text.replace(" ", "").split(","):
        if not part:
            continue
        try:
            sizes.append(int(part))
        except ValueError:
            raise ValueError(
                f"capture size {part!r} is not an integer: give sizes as '1,2,4,8'"
            ) from None
    return sizes


def add_config_arguments(parser: argparse.ArgumentParser) -> None:
    """Options shared by every command that builds a GraphConfig."""
    parser.add_argument(
        "--mode", default="FULL_AND_PIECEWISE", help="cudagraph mode (default %(default)s)"
    )
    parser.add_argument(
        "--sizes", default=None, help="capture sizes, e.g. 1,2,4,8 (default: vLLM's ladder)"
    )
    parser.add_argument("--max-num-seqs", type=int, default=256)
    parser.add_argument("--max-num-batched-tokens", type=int, default=8192)
    parser.add_argument("--num-speculative-tokens", type=int, default=0)
    parser.add_argument("--max-loras", type=int, default=0)


def config_from_args(args: argparse.Namespace) -> GraphConfig:
    return GraphConfig(
        cudagraph_mode=args.mode,
        cudagraph_capture_sizes=parse_sizes(args.sizes),
        max_num_seqs=args.max_num_seqs,
        max_num_batched_tokens=args.max_num_batched_tokens,
        num_speculative_tokens=args.num_speculative_tokens,
        max_loras=args.max_loras,
    ).resolve()


def run_demo(args: argparse.Namespace) -> int:
    if args.steps < 0:
        raise ValueError(f"--steps {args.steps} is invalid: give a number of steps >= 0")
    config = config_from_args(args)
    dispatcher = ready_dispatcher(config)
    sizes = config.cudagraph_capture_sizes
    print(
        f"config: mode={config.cudagraph_mode}, {len(sizes)} capture sizes {sizes[:6]}...{sizes[-2:]}"
    )
    for mode, descs in dispatcher.get_capture_descs():
        print(f"  {mode}: {len(descs)} keys, capture order {[d.num_tokens for d in descs[:4]]}...")
    print("\nsample batches:")
    print(f"  {'tokens':>6} {'uniform':>7} -> {'mode':<9} {'padded':>6} {'num_reqs':>8}")
    q = config.uniform_decode_query_len
    for n, uniform in [(1, True), (3, True), (7, False), (100, True), (300, False), (513, False)]:
        mode, desc = dispatcher.dispatch(n * q if uniform else n, uniform_decode=uniform)
        print(f"  {n:>6} {uniform!s:>7} -> {mode!s:<9} {desc.num_tokens:>6} {desc.num_reqs!s:>8}")
    dispatcher.reset_stats()
    rng = random.Random(args.seed)
    for _ in range(args.steps):
        uniform = rng.random() < 0.8
        n = (
            rng.randint(1, config.max_num_seqs) * q
            if uniform
            else rng.randint(1, 2 * config.max_cudagraph_capture_size)
        )
        dispatcher.dispatch(n, uniform_decode=uniform)
    frame = dispatcher.stats_frame()
    by_mode = frame.groupby("runtime_mode")[["calls", "real_tokens", "padding_tokens"]].sum()
    print(f"\n{args.steps} random steps (80% uniform decode), by runtime mode:")
    print(by_mode.to_string())
    print(f"\nvLLM flags: {config.to_vllm_args()[:120]}...")
    return 0


def run_dispatch(args: argparse.Namespace) -> int:
    config = config_from_args(args)
    if not 0 <= args.active_loras <= config.max_loras:
        raise ValueError(
            f"--active-loras {args.active_loras} is invalid with --max-loras {config.max_loras}: "
            "a step has 0..max_loras active adapters; raise --max-loras or lower --active-loras"
        )
    dispatcher = ready_dispatcher(config)
    mode, desc = dispatcher.dispatch(
        args.num_tokens,
        uniform_decode=args.uniform,
        num_active_loras=args.active_loras,
        use_cascade_attn=args.cascade,
    )
    print(f"{mode} {desc}")
    return 0


def add_parser(subparsers: argparse._SubParsersAction) -> None:
    demo = subparsers.add_parser(
        "demo", help="tour one config: keys, sample dispatches, statistics"
    )
    add_config_arguments(demo)
    demo.add_argument("--steps", type=int, default=100_000, help="random steps to dispatch")
    demo.add_argument("--seed", type=int, default=0)
    demo.set_defaults(func=run_demo)
    one = subparsers.add_parser("dispatch", help="dispatch one batch and print (mode, key)")
    add_config_arguments(one)
    one.add_argument("num_tokens", type=int)
    one.add_argument("--uniform", action="store_true", help="uniform decode batch")
    one.add_argument("--active-loras", type=int, default=0)
    one.add_argument("--cascade", action="store_true", help="cascade attention (FULL excluded)")
    one.set_defaults(func=run_dispatch)
