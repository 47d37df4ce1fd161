"""Dispatcher commands: ``demo`` (a tour of one config) and ``dispatch`` (one batch).

Both take ``--vllm-version``: any registered release (generation 2's ``CudaGraphManager``
by default, the newest; V1's ``CudagraphDispatcher``), and answer through
:mod:`cgdispatch.core.generation`, so each prints its own generation's descriptor fields.
"""

from __future__ import annotations

import argparse
import dataclasses
import random

from ..core.config import GraphConfig
from ..core.generation import (
    GENERATIONS,
    Generation,
    GraphKey,
    capture_keys,
    default_num_reqs,
    default_release,
    dispatch_step,
    generation_of,
    make_graph_dispatcher,
    release_arg,
)
from ..core.validate import MAX_STEPS, check_int


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


def add_generation_arguments(parser: argparse.ArgumentParser) -> None:
    """``--vllm-version`` and generation 2's size lists (commands that dispatch)."""
    parser.add_argument(
        "--vllm-version",
        type=release_arg,
        metavar="RELEASE",
        default=default_release(),
        help="vLLM release whose graph dispatch to model, any from 0.8 on (0.10.1.1, "
        "0.26.1, ...; each dispatches as its generation: "
        + ", ".join(g.describe() for g in reversed(GENERATIONS.values()))
        + "); default %(default)s, the newest",
    )
    parser.add_argument(
        "--prefill-sizes",
        default=None,
        help="0.34 only: prefill_cudagraph_capture_token_sizes, e.g. 8,16,64 (default: vLLM's)",
    )
    parser.add_argument(
        "--decode-sizes",
        default=None,
        help="0.34 only: decode_cudagraph_capture_request_sizes, e.g. 1,2,4 (default: vLLM's)",
    )


def config_from_args(args: argparse.Namespace) -> GraphConfig:
    # commands without --vllm-version (estimate-memory): None, the newest release
    gen2_sizes = {
        "prefill_cudagraph_capture_token_sizes": parse_sizes(getattr(args, "prefill_sizes", None)),
        "decode_cudagraph_capture_request_sizes": parse_sizes(getattr(args, "decode_sizes", None)),
    }
    return GraphConfig(
        cudagraph_mode=args.mode,
        cudagraph_capture_sizes=parse_sizes(args.sizes),
        max_num_seqs=args.max_num_seqs,
        max_num_batched_tokens=args.max_num_batched_tokens,
        num_speculative_tokens=args.num_speculative_tokens,
        max_loras=args.max_loras,
        vllm_version=getattr(args, "vllm_version", None),
        **{k: v for k, v in gen2_sizes.items() if v is not None},
    ).resolve()


def other_releases(generation: Generation, template: str, separator: str) -> str:
    """How to ask every other release: ``template`` filled with each one's ``release``,
    ``name`` and ``dispatcher`` (its class name), joined by ``separator``."""
    return separator.join(
        template.format(release=g.release, name=g.name, dispatcher=g.dispatcher_name)
        for g in GENERATIONS.values()
        if g is not generation
    )


def generation_line(config: GraphConfig) -> str:
    """Which generation answers, and how to ask the other."""
    generation = generation_of(config)
    newest = "; the newest, the default" if generation.release == default_release() else ""
    others = other_releases(generation, "--vllm-version {release} for {name}", "; ")
    return (
        f"vLLM {generation.release} ({generation.name}, {generation.dispatcher_name}{newest}): "
        f"{others}"
    )


def format_key(key: GraphKey) -> str:
    """A descriptor as ``Name(field=value, ...)``, the mode written by name."""
    fields = ", ".join(f"{f.name}={getattr(key, f.name)!s}" for f in dataclasses.fields(key))
    return f"{type(key).__name__}({fields})"


def run_demo(args: argparse.Namespace) -> int:
    check_int("--steps", args.steps, 0, MAX_STEPS)
    from ..views.explain import dispatch_stats  # pandas: only when the demo runs

    config = config_from_args(args)
    dispatcher = make_graph_dispatcher(config, record_stats=False)
    print(generation_line(config))
    print(f"config: mode={config.cudagraph_mode}, {_sizes_line(config)}")
    keys = capture_keys(dispatcher)
    for mode in dict.fromkeys(k.runtime_mode for k in keys):
        widths = [k.num_tokens for k in keys if k.runtime_mode is mode]
        print(f"  {mode}: {len(widths)} graphs, capture order {widths[:4]}...")
    print("\nsample batches:")
    print(
        f"  {'tokens':>6} {'reqs':>4} {'uniform':>7} -> {'mode':<9} {'padded':>6} {'num_reqs':>8}"
    )
    q = config.uniform_decode_query_len
    for n, uniform in [(1, True), (3, True), (7, False), (100, True), (300, False), (513, False)]:
        tokens = min(n * q if uniform else n, config.max_num_batched_tokens)
        reqs = default_num_reqs(config, tokens, uniform)
        answer = dispatch_step(dispatcher, tokens, reqs, uniform)
        print(
            f"  {tokens:>6} {reqs:>4} {uniform!s:>7} -> {answer.runtime_mode!s:<9} "
            f"{answer.padded_tokens:>6} {answer.padded_reqs!s:>8}"
        )
    rng = random.Random(args.seed)
    batches = []
    for _ in range(args.steps):
        uniform = rng.random() < 0.8
        n = (
            rng.randint(1, config.max_num_seqs) * q
            if uniform
            # mode NONE captures nothing (max size 0): its mixed steps still need a range
            else rng.randint(1, 2 * max(config.max_cudagraph_capture_size, 1))
        )
        batches.append((min(n, config.max_num_batched_tokens), uniform))
    frame = dispatch_stats(dispatcher, batches)
    by_mode = frame.groupby("runtime_mode")[["calls", "real_tokens", "padding_tokens"]].sum()
    print(f"\n{args.steps} random steps (80% uniform decode), by runtime mode:")
    print(by_mode.to_string())
    print(f"\nvLLM flags: {config.to_vllm_args()[:120]}...")
    return 0


def _sizes_line(config: GraphConfig) -> str:
    """``"12 capture sizes [1, 2, ...]"``, one part per ladder of the release's shape."""
    shape = generation_of(config).ladder
    return ", ".join(
        f"{len(sizes)} {ladder.name} {_ends(sizes)}"
        for ladder, sizes in zip(shape.ladders, shape.sizes(config))
    )


def _ends(sizes: list[int]) -> str:
    return str(sizes) if len(sizes) <= 8 else f"{sizes[:6]}...{sizes[-2:]}"


def run_dispatch(args: argparse.Namespace) -> int:
    config = config_from_args(args)
    if not 0 <= args.active_loras <= config.max_loras:
        raise ValueError(
            f"--active-loras {args.active_loras} is invalid with --max-loras {config.max_loras}: "
            "a step has 0..max_loras active adapters; raise --max-loras or lower --active-loras"
        )
    dispatcher = make_graph_dispatcher(config, record_stats=False)
    answer = dispatch_step(
        dispatcher,
        args.num_tokens,
        args.num_reqs,
        args.uniform,
        args.active_loras,
        use_cascade_attn=args.cascade,
    )
    print(f"{answer.runtime_mode} {format_key(answer.key)}")
    print(generation_line(config))
    return 0


def _config_command(
    subparsers: argparse._SubParsersAction, command: str, summary: str
) -> argparse.ArgumentParser:
    """A command that builds a GraphConfig of any release: its config and release flags."""
    parser = subparsers.add_parser(command, help=summary)
    add_config_arguments(parser)
    add_generation_arguments(parser)
    return parser


def add_parser(subparsers: argparse._SubParsersAction) -> None:
    demo = _config_command(
        subparsers, "demo", "tour one config: keys, sample dispatches, statistics"
    )
    demo.add_argument("--steps", type=int, default=100_000, help="random steps to dispatch")
    demo.add_argument("--seed", type=int, default=0)
    demo.set_defaults(func=run_demo)
    one = _config_command(subparsers, "dispatch", "dispatch one batch and print (mode, key)")
    one.add_argument("num_tokens", type=int)
    one.add_argument(
        "--num-reqs",
        type=int,
        default=None,
        help="requests in the step (generation 2 reads it); default as vLLM's scheduler "
        "forms the step: cdiv(num_tokens, q) for --uniform, else 1",
    )
    one.add_argument("--uniform", action="store_true", help="uniform decode batch")
    one.add_argument("--active-loras", type=int, default=0)
    one.add_argument(
        "--cascade", action="store_true", help="cascade attention (FULL excluded; 0.33 only)"
    )
    one.set_defaults(func=run_dispatch)
