"""GPU check: replay correctness, replay vs eager step time, capture time and pool bytes.

On CUDA (default ``--model toy-small``, vLLM's ladder 1..512): for each mode in ``--modes``
it captures every key and compares replay with eager on fresh random decode and mixed
batches; then, for the first mode, it times decode steps per capture size through the
graph runner and through an eager (NONE) runner on the same model, with CUDA events.
It writes one CSV row per size and prints a short table last. Runs on CPU too (timings
then use perf_counter and are labelled ``measured (CPU)``):

    PYTHONPATH=. python scripts/gpu_check.py                       # on a GPU machine
    PYTHONPATH=. python scripts/gpu_check.py --device cpu --model toy-tiny --sizes 1,2,4,8

Exit status 1 when a replay differs from eager beyond tolerance.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path
from types import SimpleNamespace

import pandas as pd
import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from cgdispatch.capture_cli import build_runner, check_replay  # noqa: E402
from cgdispatch.config import GraphConfig  # noqa: E402
from cgdispatch.runner import GraphRunner  # noqa: E402


def step_ms(runner: GraphRunner, batch, iters: int, repeats: int) -> float:
    """Median over ``repeats`` of the mean time of ``iters`` steps (CUDA events on a GPU)."""
    dev = runner.device
    tokens = batch.tokens.to(dev)
    for _ in range(3):  # warm-up, discarded
        runner.execute_packed(tokens, batch.uniform_decode)
    samples = []
    for _ in range(repeats):
        if dev.type == "cuda":
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            torch.cuda.synchronize(dev)
            start.record()
            for _ in range(iters):
                runner.execute_packed(tokens, batch.uniform_decode)
            end.record()
            torch.cuda.synchronize(dev)
            samples.append(start.elapsed_time(end) / iters)
        else:
            t0 = time.perf_counter()
            for _ in range(iters):
                runner.execute_packed(tokens, batch.uniform_decode)
            samples.append((time.perf_counter() - t0) * 1e3 / iters)
    return statistics.median(samples)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--model", default="toy-small")
    p.add_argument(
        "--modes", default="FULL,FULL_DECODE_ONLY", help="modes to check; the first is timed"
    )
    p.add_argument("--sizes", default=None, help="capture sizes (default: vLLM's ladder up to 512)")
    p.add_argument("--device", default=None, help="cuda or cpu (default: cuda when available)")
    p.add_argument("--dtype", default=None, help="default: the preset's")
    p.add_argument("--iters", type=int, default=20, help="steps per timing sample")
    p.add_argument("--repeats", type=int, default=5)
    p.add_argument("--out", default="gpu_check.csv", help="CSV path")
    p.add_argument("--seed", type=int, default=0)
    args = p.parse_args(argv)
    device = args.device or ("cuda" if torch.cuda.is_available() else "cpu")
    where = (
        f"measured ({torch.cuda.get_device_name(device)})"
        if device.startswith("cuda")
        else "measured (CPU)"
    )
    modes = [m.strip() for m in args.modes.split(",") if m.strip()]
    failures, timed = 0, None
    for i, mode in enumerate(modes):
        ns = SimpleNamespace(
            model=args.model,
            mode=mode,
            sizes=args.sizes,
            attention="general",
            no_piecewise=False,
            max_num_seqs=None,
            num_speculative_tokens=0,
            dtype=args.dtype,
            device=device,
            backend=None,
            seed=args.seed,
        )
        runner = build_runner(ns)
        report = runner.capture_all()
        checks = check_replay(runner, seed=args.seed + 1)
        bad = int((~checks["ok"]).sum())
        failures += bad
        worst = checks.groupby("num_tokens")["max_abs_err"].max()
        print(
            f"{mode}: {len(report)} graphs in {report['step_s'].sum():.2f} s, "
            f"{len(checks)} replay checks, {bad} failed, largest error {checks['max_abs_err'].max():.3g}"
        )
        if i == 0:
            timed = (runner, report, worst)
    runner, report, worst = timed
    eager = GraphRunner(
        runner.model,
        GraphConfig(
            cudagraph_mode="NONE",
            cudagraph_capture_sizes=runner.config.cudagraph_capture_sizes,
            max_num_seqs=runner.config.max_num_seqs,
        ),
    )
    rows = []
    for _, key in report.sort_values("num_tokens").iterrows():
        n = int(key["num_tokens"])
        try:
            batch = runner.make_decode_batch(n, seed=args.seed + n)
        except ValueError:
            batch = runner.make_mixed_batch(n, seed=args.seed + n)
        replay_ms = step_ms(runner, batch, args.iters, args.repeats)
        eager_ms = step_ms(eager, batch, args.iters, args.repeats)
        rows.append(
            {
                "num_tokens": n,
                "uniform": bool(key["uniform"]),
                "capture_s": key["capture_s"],
                "pool_bytes": key["pool_bytes"],
                "eager_ms": eager_ms,
                "replay_ms": replay_ms,
                "speedup_x": eager_ms / replay_ms,
                "max_abs_err": float(worst.get(n, float("nan"))),
                "source": where,
            }
        )
    table = pd.DataFrame(rows)
    table.to_csv(args.out, index=False)
    total = report["pool_bytes"].sum() if report["pool_bytes"].notna().any() else float("nan")
    print(f"\n{args.model}, mode {modes[0]}, {where}; CSV: {args.out}")
    if total == total:
        print(f"graph pool: {total / 2**20:.1f} MiB for {len(report)} graphs")
    shown = table.assign(pool_MiB=table["pool_bytes"] / 2**20).drop(
        columns=["pool_bytes", "source"]
    )
    with pd.option_context("display.width", 160, "display.float_format", "{:.4g}".format):
        print(shown.to_string(index=False))
    return 1 if failures else 0


if __name__ == "__main__":
    raise SystemExit(main())
