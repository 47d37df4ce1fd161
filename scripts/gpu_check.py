"""GPU check: replay correctness, replay vs eager step time, capture time and pool bytes.

On CUDA (default ``--model toy-small``, vLLM's ladder 1..512): for each mode in ``--modes``
(FULL, FULL_DECODE_ONLY, PIECEWISE, FULL_AND_PIECEWISE by default) it captures every key,
compares replay with eager on fresh random decode and mixed batches, and times a decode
and a mixed step per capture size through the graph runner and through an eager (NONE)
runner on the same model, with CUDA events. It writes step times (one row per mode, size
and batch kind) and the per-key capture report (capture_s, pool bytes) as CSV and prints
a per-mode summary (graphs, capture time, pool MiB, errors) and the speed-up table. Then,
per mode and output policy (weak as vLLM, and strong), it captures again on a warmed-up
allocator and prints the graph pool measured around capture (``torch.cuda.memory_stats``
reserved and allocated bytes, and the graph pools' own segments from the memory snapshot)
beside the estimate (``model``) and the CPU stand-in's ledger; CSV ``<out>_pools.csv``.
Runs on CPU too (timings then use perf_counter and are labelled ``measured (CPU)``; the
pool columns are then the stand-in's ledger):

    PYTHONPATH=. python scripts/gpu_check.py                       # on a GPU machine
    PYTHONPATH=. python scripts/gpu_check.py --device cpu --model toy-tiny --sizes 1,2,4,8

``--vllm-version`` picks the generation of vLLM's graph dispatch the runner follows: 0.33
(V1) or 0.34 (generation 2, the newest and the default, as everywhere in cgdispatch: ``--sizes`` are then the prefill token sizes and, up to max_num_seqs, the
decode request sizes; the graph-memory estimate then models generation 2's keys).

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

from cgdispatch.capture.runner import GraphRunner  # noqa: E402
from cgdispatch.cli.capture import build_runner  # noqa: E402
from cgdispatch.core.config import GraphConfig  # noqa: E402
from cgdispatch.core.generation import GENERATIONS, NEWEST, dispatch_step  # noqa: E402
from cgdispatch.core.ladders import ENGINE_LADDERS  # noqa: E402
from cgdispatch.estimate.graph_memory import estimate_graph_memory  # noqa: E402
from cgdispatch.measure.replay_check import check_replay  # noqa: E402
from cgdispatch.measure.timing import measure_capture_memory  # noqa: E402
from cgdispatch.models.toy import PRESETS, build_toy_model  # noqa: E402

MIB = 2**20


def step_ms(runner: GraphRunner, batch, iters: int, repeats: int) -> float:
    """Median over ``repeats`` of the mean time of ``iters`` steps (CUDA events on a GPU)."""
    dev = runner.device
    tokens = batch.tokens.to(dev)
    for _ in range(3):  # warm-up, discarded
        runner.execute_packed(tokens, batch.uniform_decode, batch.num_reqs)
    samples = []
    for _ in range(repeats):
        if dev.type == "cuda":
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            torch.cuda.synchronize(dev)
            start.record()
            for _ in range(iters):
                runner.execute_packed(tokens, batch.uniform_decode, batch.num_reqs)
            end.record()
            torch.cuda.synchronize(dev)
            samples.append(start.elapsed_time(end) / iters)
        else:
            t0 = time.perf_counter()
            for _ in range(iters):
                runner.execute_packed(tokens, batch.uniform_decode, batch.num_reqs)
            samples.append((time.perf_counter() - t0) * 1e3 / iters)
    return statistics.median(samples)


def time_mode(
    runner: GraphRunner, eager: GraphRunner, args: argparse.Namespace, eager_cache: dict
) -> list[dict]:
    """Replay vs eager step time per capture size, for a decode and a mixed batch."""
    rows = []
    sizes = runner.config.cudagraph_capture_sizes
    for n in sizes:
        for kind in ("decode", "mixed"):
            make = runner.make_decode_batch if kind == "decode" else runner.make_mixed_batch
            try:
                batch = make(n, seed=args.seed + n)
            except ValueError:  # more requests than the model has KV slots
                continue
            answer = dispatch_step(runner.dispatcher, n, batch.num_reqs, batch.uniform_decode)
            if (n, kind) not in eager_cache:
                eager_cache[(n, kind)] = step_ms(eager, batch, args.iters, args.repeats)
            eager_ms = eager_cache[(n, kind)]
            graph_ms = step_ms(runner, batch, args.iters, args.repeats)
            rows.append(
                {
                    "mode": str(runner.cudagraph_mode),
                    "batch": kind,
                    "num_tokens": n,
                    "runtime_mode": str(answer.runtime_mode),
                    "padded_size": answer.padded_tokens,
                    "eager_ms": eager_ms,
                    "graph_ms": graph_ms,
                    "speedup_x": eager_ms / graph_ms,
                }
            )
    return rows


def pool_rows(
    model, eager: GraphRunner, sizes: list[int], modes: list[str], args, where: str
) -> list[dict]:
    """Graph-pool bytes per mode and output policy: measured, stand-in ledger, estimate.

    ``sizes`` are the capture sizes of the timed runs (the eager runner, mode NONE, keeps
    none: vLLM 0.33 clears the sizes of a NONE config)."""
    rows = []
    for n in sizes:  # warm the allocator's default pool, so capture's warm-ups stay in it
        try:
            eager.execute_batch(eager.make_decode_batch(n, seed=n))
        except ValueError:  # more requests than the model has KV slots
            continue
    meta = (
        build_toy_model(args.model, device="meta", dtype=args.dtype)
        if args.model in PRESETS
        else None
    )
    est = None
    for mode in modes:
        for weak in (True, False):
            config = mode_config(mode, sizes, eager.config.max_num_seqs, args.vllm_version)
            with GraphRunner(model, config, weak_outputs=weak) as runner:
                _, memory = measure_capture_memory(
                    lambda: runner.capture_all(progress=False), runner.device
                )
                ledger = getattr(runner.backend, "ledger", None)
                if meta is not None and weak:  # one estimate gives both policies
                    est = estimate_graph_memory(meta, runner.config)
                pool = est.pool_bytes(keep_outputs=not weak) if est is not None else None
                rows.append(
                    {
                        "mode": str(runner.cudagraph_mode),
                        "outputs": "weak" if weak else "strong",
                        "reserved_MiB": memory.pool_bytes / MIB if memory else float("nan"),
                        "allocated_MiB": memory.allocated_bytes / MIB if memory else float("nan"),
                        "graph_pool_MiB": (memory.private_pool_bytes or 0) / MIB
                        if memory and memory.private_pool_bytes is not None
                        else float("nan"),
                        "stand_in_MiB": ledger.pool_bytes / MIB if ledger else float("nan"),
                        "estimate_MiB": pool / MIB if pool is not None else float("nan"),
                        "source": where,
                    }
                )
            if runner.device.type == "cuda":
                torch.cuda.empty_cache()
    return rows


def mode_config(mode: str, sizes: list[int], max_num_seqs: int, vllm_version: str) -> GraphConfig:
    """The config of one mode in the chosen generation (sizes as in the module docstring)."""
    if vllm_version == "0.34":
        return GraphConfig(
            vllm_version="0.34",
            cudagraph_mode=mode,
            max_num_seqs=max_num_seqs,
            prefill_cudagraph_capture_token_sizes=sizes,
            decode_cudagraph_capture_request_sizes=[s for s in sizes if s <= max_num_seqs] or None,
        )
    return GraphConfig(
        cudagraph_mode=mode, cudagraph_capture_sizes=sizes, max_num_seqs=max_num_seqs
    )


def gen2_sizes(args: argparse.Namespace) -> dict[str, str]:
    """Generation 2's size options for ``build_runner``: ``--sizes`` (default vLLM V1's
    ladder to 512, the sizes this script times under 0.33) as prefill token sizes, and
    those within the toy preset's KV slots (its max_num_seqs) as decode request sizes."""
    sizes = [int(x) for x in args.sizes.split(",")] if args.sizes else ENGINE_LADDERS["vllm"](512)
    preset = PRESETS.get(args.model)
    decode = [s for s in sizes if preset is None or s <= preset.num_slots]
    return {
        "prefill_sizes": ",".join(map(str, sizes)),
        "decode_sizes": ",".join(map(str, decode or sizes[:1])),
    }


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--model", default="toy-small")
    p.add_argument(
        "--modes",
        default="FULL,FULL_DECODE_ONLY,PIECEWISE,FULL_AND_PIECEWISE",
        help="modes to check and time",
    )
    p.add_argument("--sizes", default=None, help="capture sizes (default: vLLM's ladder up to 512)")
    p.add_argument("--device", default=None, help="cuda or cpu (default: cuda when available)")
    p.add_argument("--dtype", default=None, help="default: the preset's")
    p.add_argument("--iters", type=int, default=20, help="steps per timing sample")
    p.add_argument("--repeats", type=int, default=5)
    p.add_argument(
        "--out", default="gpu_check.csv", help="CSV of step times (one row per mode, size, batch)"
    )
    p.add_argument("--seed", type=int, default=0)
    p.add_argument(
        "--vllm-version",
        choices=list(GENERATIONS),
        default=NEWEST.release,
        help="graph dispatch of vLLM 0.33 (V1) or 0.34 (generation 2; default %(default)s, "
        "the newest)",
    )
    args = p.parse_args(argv)
    device = args.device or ("cuda" if torch.cuda.is_available() else "cpu")
    where = (
        f"measured ({torch.cuda.get_device_name(device)})"
        if device.startswith("cuda")
        else "measured (CPU)"
    )
    modes = [m.strip() for m in args.modes.split(",") if m.strip()]
    gen2 = gen2_sizes(args) if args.vllm_version == "0.34" else {}
    failures, rows, captures, summary = 0, [], [], []
    eager, eager_cache, capture_sizes = None, {}, []
    for mode in modes:
        ns = SimpleNamespace(
            model=args.model,
            mode=mode,
            sizes=None if gen2 else args.sizes,  # gen 2: the two lists below
            attention="general",
            no_piecewise=False,
            max_num_seqs=None,
            num_speculative_tokens=0,
            dtype=args.dtype,
            device=device,
            backend=None,
            seed=args.seed,
            vllm_version=args.vllm_version,
            **gen2,
        )
        runner = build_runner(ns)
        start = time.perf_counter()
        report = runner.capture_all()
        capture_wall_s = time.perf_counter() - start
        checks = check_replay(runner, seed=args.seed + 1)
        bad = int((~checks["ok"]).sum())
        failures += bad
        if eager is None:  # one eager runner on the same model times every mode's baseline
            eager = GraphRunner(
                runner.model,
                GraphConfig(
                    cudagraph_mode="NONE",
                    cudagraph_capture_sizes=runner.config.cudagraph_capture_sizes,
                    max_num_seqs=runner.config.max_num_seqs,
                ),
            )
        capture_sizes = (
            [int(x) for x in gen2["prefill_sizes"].split(",")]
            if gen2
            else runner.config.cudagraph_capture_sizes or capture_sizes
        )
        rows += time_mode(runner, eager, args, eager_cache)
        captures.append(report.assign(config_mode=str(runner.cudagraph_mode), source=where))
        pool = report["pool_bytes"].sum() if report["pool_bytes"].notna().any() else float("nan")
        summary.append(
            {
                "mode": str(runner.cudagraph_mode),
                "graphs": int(report["num_graphs"].sum()),
                "keys": len(report),
                "capture_s": report["capture_s"].sum(),
                "capture_wall_s": capture_wall_s,
                "pool_MiB": pool / 2**20,
                "replay_checks": len(checks),
                "failed": bad,
                "max_abs_err": checks["max_abs_err"].max(),
            }
        )
        runner.release_graphs()
        if device.startswith("cuda"):
            torch.cuda.empty_cache()
    pools = pd.DataFrame(pool_rows(eager.model, eager, capture_sizes, modes, args, where))
    table = pd.DataFrame(rows).assign(source=where)
    table.to_csv(args.out, index=False)
    captures_path = Path(args.out).with_name(Path(args.out).stem + "_captures.csv")
    pd.concat(captures).to_csv(captures_path, index=False)
    pools_path = Path(args.out).with_name(Path(args.out).stem + "_pools.csv")
    pools.to_csv(pools_path, index=False)
    print(f"\n{args.model}, {where}; CSV: {args.out}, {captures_path}, {pools_path}")
    with pd.option_context("display.width", 160, "display.float_format", "{:.4g}".format):
        print(pd.DataFrame(summary).to_string(index=False))
        speed = table.pivot_table(index="num_tokens", columns=["mode", "batch"], values="speedup_x")
        print("\nspeed-up (eager ms / graph ms) by size:")
        print(speed.to_string())
        print(
            f"\ngraph pool per mode and outputs: reserved/allocated/graph_pool {where} "
            "(memory_stats and memory_snapshot around capture), stand_in (CPU ledger), "
            "estimate (model)"
        )
        print(pools.drop(columns="source").to_string(index=False))
    return 1 if failures else 0


if __name__ == "__main__":
    raise SystemExit(main())
