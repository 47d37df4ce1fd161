"""The flags ``plan`` and ``tune`` share turn into the same settings in one place: ``tune``'s
parsed flags give the :class:`TuneSettings` a field-by-field reading of them gives, and the
budgets are the same keywords for both commands (random flag values, fresh each run)."""

from __future__ import annotations

import argparse
import dataclasses

import numpy as np
import pytest

from cgdispatch.__main__ import build_parser
from cgdispatch.cli.model_args import device_from_args
from cgdispatch.cli.plan import budget_flags, check_int_flags
from cgdispatch.cli.tune import settings_from_flags
from cgdispatch.core.generation import GENERATIONS
from cgdispatch.core.modes import CUDAGraphMode
from cgdispatch.plan.tune_result import OBJECTIVES
from cgdispatch.plan.tune_run import TuneSettings
from cgdispatch.workload.limits import SchedulerLimits
from cgdispatch.workload.replicas import BALANCES
from cgdispatch.workload.trace_source import SYNTHETIC_NAMES, resolve_trace


def _random_tune_flags(rng: np.random.Generator) -> list[str]:
    """A ``tune`` command line with every flag drawn (some left to their defaults)."""
    flags = {
        "--trace": str(rng.choice(SYNTHETIC_NAMES)),
        "--rate": f"{rng.uniform(0.5, 50):.3f}",
        "--num-requests": str(rng.integers(10, 5000)),
        "--seed": str(rng.integers(0, 1000)),
        "--vllm-version": str(rng.choice([g.release for g in GENERATIONS.values()])),
        "--mode": str(rng.choice(["FULL_AND_PIECEWISE", "PIECEWISE", "FULL_DECODE_ONLY"])),
        "--max-num-seqs": str(rng.integers(1, 1024)),
        "--max-num-batched-tokens": str(rng.integers(256, 32768)),
        "--max-graphs": str(rng.integers(1, 64)),
        "--holdout": f"{rng.uniform(0.1, 0.9):.3f}",
        "--memory-budget-mib": f"{rng.uniform(1, 4096):.2f}",
        "--capture-budget-s": f"{rng.uniform(0.1, 60):.2f}",
        "--context-len": str(rng.integers(1, 8192)),
        "--gpu-memory-utilization": f"{rng.uniform(0.3, 1.0):.3f}",
        "--objective": str(rng.choice(tuple(OBJECTIVES))),
        "--max-model-len": str(rng.integers(64, 65536)),
        "--max-concurrency": str(rng.integers(1, 512)),
        "--hash-block-size": str(rng.integers(1, 1024)),
        "--replicas": str(rng.integers(1, 8)),
        "--balance": str(rng.choice(BALANCES)),
        "--tensor-parallel-size": str(rng.choice([1, 2, 4])),
    }
    kept = [f for f in flags if f == "--trace" or rng.random() < 0.7]
    words = ["tune", "--model", "toy-tiny"]
    for flag in kept:
        words += [flag, flags[flag]]
    return words + (["--no-prefix-caching"] if rng.random() < 0.5 else [])


@pytest.mark.parametrize("draw", range(6))
def test_tune_settings_read_every_flag(draw):
    seed = int(np.random.SeedSequence().entropy % 2**32)
    rng = np.random.default_rng(seed)
    argv = _random_tune_flags(rng)
    args = build_parser().parse_args(argv)
    mode = CUDAGraphMode.parse(args.mode)
    trace = resolve_trace(args.trace, hash_block_size=args.hash_block_size, what="--trace")
    device = device_from_args(args)
    # the reading written out flag by flag, as a person maps the help to the fields
    mib = args.memory_budget_mib
    expected = TuneSettings(
        model=args.model,
        device=device,
        tensor_parallel_size=args.tensor_parallel_size,
        trace=trace,
        num_requests=args.num_requests,
        rate_per_s=args.rate,
        seed=args.seed,
        vllm_version=args.vllm_version,
        cudagraph_mode=mode,
        max_num_seqs=args.max_num_seqs,
        max_num_batched_tokens=args.max_num_batched_tokens,
        holdout=args.holdout,
        max_graphs=args.max_graphs,
        memory_budget_bytes=None if mib is None else mib * 2**20,
        capture_budget_s=args.capture_budget_s,
        context_len=args.context_len,
        gpu_memory_utilization=args.gpu_memory_utilization,
        objective=args.objective,
        calibration=args.calibration,
        max_model_len=args.max_model_len,
        max_concurrency=args.max_concurrency,
        hash_block_size=args.hash_block_size,
        replicas=args.replicas,
        enable_prefix_caching=args.prefix_caching,
        balance=args.balance,
    )
    got = settings_from_flags(args, mode, trace, device)
    assert got == expected, (seed, argv)


@pytest.mark.parametrize("command", ["plan", "tune"])
def test_budgets_in_bytes_and_seconds(command):
    rng = np.random.default_rng()
    mib, seconds = float(rng.uniform(0.01, 1e5)), float(rng.uniform(0.01, 1e3))
    required = ["--trace", "sharegpt"] + (["--max-graphs", "8"] if command == "plan" else [])
    parser = build_parser()
    given = parser.parse_args(
        [command, *required, "--memory-budget-mib", repr(mib), "--capture-budget-s", repr(seconds)]
    )
    assert budget_flags(given) == {
        "memory_budget_bytes": mib * 1048576,
        "capture_budget_s": seconds,
    }
    unset = parser.parse_args([command, *required])
    assert budget_flags(unset) == {"memory_budget_bytes": None, "capture_budget_s": None}


@pytest.mark.parametrize(
    "flag",
    ["max_num_seqs", "max_num_batched_tokens", "num_speculative_tokens", "max_model_len",
     "hash_block_size"],
)  # fmt: skip
def test_scheduler_flags_are_bounded_as_the_scheduler_limits(flag):
    """A scheduler flag ``plan`` and ``tune`` refuse is exactly a value SchedulerLimits
    refuses, on random values around both ends of its range."""
    rng = np.random.default_rng()
    probe = SchedulerLimits(max_num_batched_tokens=2**20)  # room for any draft count
    for _ in range(60):  # small values around the least, powers of two around the most
        value = int(rng.integers(-3, 4)) if rng.random() < 0.5 else int(2 ** rng.uniform(0, 40))
        args = argparse.Namespace(**{flag: value})
        try:
            dataclasses.replace(probe, **{flag: value})
            accepted = True
        except ValueError:
            accepted = False
        if accepted:
            check_int_flags(args)
        else:
            with pytest.raises(ValueError, match=f"--{flag.replace('_', '-')}={value} is invalid"):
                check_int_flags(args)
