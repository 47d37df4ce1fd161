"""GPU check: replay correctness, replay vs eager step time, capture time and pool bytes.

On CUDA (default ``--model toy-small``, vLLM's ladder 1..512): for each mode in ``--modes``
(FULL, FULL_DECODE_ONLY, PIECEWISE, FULL_AND_PIECEWISE by default) it captures every key,
compares replay with eager on fresh random decode and mixed batches, and times a decode
and a mixed step per capture size through the graph runner and through an eager (NONE)
runner on the same model, with CUDA events. Then, per mode and output policy (weak as
vLLM, and strong), it captures again and measures graph memory two ways: as vLLM reports
it (the drop in free device memory, ``torch.cuda.mem_get_info``, around the whole
capture: ``device_MiB``) and from the allocator (reserved and allocated bytes, the graph
pools' own segments), beside the start-up model's prediction for the same model, sizes
and mode (``predicted_MiB``: ``device_cost_model(model).graph_memory_bytes`` through
``graph_memory_of``), the fake-tensor estimate and the CPU stand-in's ledger.

Output, in the folder of ``--out`` (default ``results/gpu/gpu_check.csv``; the folder is
made at start and each CSV is written as soon as its rows are ready): ``gpu_check.csv``
(step times: one row per mode, size and batch kind), ``gpu_check_captures.csv`` (per-key
capture report), ``gpu_check_pools.csv`` (graph memory per mode and outputs),
``gpu_check_checks.csv`` (each rule of :mod:`cgdispatch.measure.gpu_checks` and whether
it held). Runs on CPU too (timings then use perf_counter and are labelled
``measured (CPU)``; the pool columns are then the stand-in's ledger, and only the replay
rules apply):

    PYTHONPATH=. python3 scripts/gpu_check.py                       # on a GPU machine
    PYTHONPATH=. python3 scripts/gpu_check.py --device cpu --model toy-tiny --sizes 1,2,4,8

``--vllm-version`` picks the generation of vLLM's graph dispatch the runner follows: 0.33
(V1) or 0.34 (generation 2, the newest and the default, as everywhere in cgdispatch:
``--sizes`` are then the prefill token sizes and, up to max_num_seqs, the decode request
sizes; the graph-memory estimate then models generation 2's keys).

Exit status 1 when a rule fails (``gpu_check_checks.csv``): a replay differs from eager,
a mode ran no replay check, and on a GPU: a memory figure is NaN or negative, weak outputs
hold no less than strong ones, a replayed one-token decode is slower than eager, or the
measured graph memory is more than 2x off the prediction.
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
from cgdispatch.core.generation import NEWEST, check_version, dispatch_step, release_arg  # noqa: E402
from cgdispatch.core.ladders import ENGINE_LADDERS  # noqa: E402
from cgdispatch.estimate.device_model import device_cost_model  # noqa: E402
from cgdispatch.estimate.graph_memory import estimate_graph_memory  # noqa: E402
from cgdispatch.estimate.vllm_logs import gpu_preset  # noqa: E402
from cgdispatch.measure.gpu_checks import gpu_check_table  # noqa: E402
from cgdispatch.measure.replay_check import check_replay  # noqa: E402
from cgdispatch.measure.timing import measure_capture_memory  # noqa: E402
from cgdispatch.models.toy import PRESETS, build_toy_model  # noqa: E402
from cgdispatch.plan.latency_sweep import graph_memory_of  # noqa: E402

MIB = 2**20


def step_ms(runner: GraphRunner, batch, iters: int, repeats: int) -> float:
    """Median over ``repeats`` of the mean time of ``iters`` steps (CUDA events on a GPU)."""
    dev = runner.device
    tokens = batch.tokens.to(dev)
    for _ in range(3):  # warm-up, discarded
        runner.execute_packed(tokens, batch.uniform_decode, batch.num_reqs)
    samples = []
    for _ in range(repeats):
        if dev.type == "cuda":  # events on the model's device and stream (cuda:N too)
            torch.cuda.synchronize(dev)
            stream = torch.cuda.current_stream(dev)
            with torch.cuda.device(dev):
                start = torch.cuda.Event(enable_timing=True)
                end = torch.cuda.Event(enable_timing=True)
                start.record(stream)
                for _ in range(iters):
                    runner.execute_packed(tokens, batch.uniform_decode, batch.num_reqs)
                end.record(stream)
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
    """Graph memory per mode and output policy: measured two ways, ledger, estimate, model.

    ``sizes`` are the capture sizes of the timed runs (the eager runner, mode NONE, keeps
    none: vLLM 0.33 clears the sizes of a NONE config). No warm-up on the default stream
    first: each capture warms up on the process's capture stream, whose blocks and cuBLAS
    workspace the timed captures before have already made (vLLM's order too)."""
    rows = []
    meta = (
        build_toy_model(args.model, device="meta", dtype=args.dtype)
        if args.model in PRESETS
        else None
    )
    cost_model = prediction_model(args.model, where)
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
                predicted = (
                    graph_memory_of(runner.config, cost_model) if cost_model else float("nan")
                )
                rows.append(
                    {
                        "mode": str(runner.cudagraph_mode),
                        "outputs": "weak" if weak else "strong",
                        "device_MiB": _mib(memory, "device_bytes"),
                        "reserved_MiB": _mib(memory, "pool_bytes"),
                        "allocated_MiB": _mib(memory, "allocated_bytes"),
                        "graph_pool_MiB": _mib(memory, "private_pool_bytes"),
                        "peak_allocated_MiB": _mib(memory, "peak_allocated_bytes"),
                        "predicted_MiB": predicted / MIB,
                        "estimate_MiB": pool / MIB if pool is not None else float("nan"),
                        "stand_in_MiB": ledger.pool_bytes / MIB if ledger else float("nan"),
                        "source": where,
                        "prediction_source": cost_model.memory_source if cost_model else "",
                    }
                )
            if runner.device.type == "cuda":
                torch.cuda.empty_cache()
    return rows


def _mib(memory, field: str) -> float:
    """A CaptureMemory field in MiB; NaN off CUDA or where it was not measured."""
    value = None if memory is None else getattr(memory, field)
    return float("nan") if value is None else value / MIB


def prediction_model(model: str, where: str):
    """The device model whose ``graph_memory_bytes`` predicts graph memory for ``model``
    on the GPU ``where`` names (its preset; H100 when the name maps to none, which only
    labels the figure: a toy model's graph memory is its fake-tensor pool, the same on
    every device). None, with a line printed, when the model has no device model."""
    _, preset = gpu_preset(where)
    try:
        return device_cost_model(model, preset or "H100")
    except (ValueError, KeyError) as err:
        print(f"no graph-memory prediction for {model}: {err}", file=sys.stderr)
        return None


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
    p.add_argument("--device", default=None, help="cuda, cuda:N or cpu (default: cuda if any)")
    p.add_argument("--dtype", default=None, help="default: the preset's")
    p.add_argument("--iters", type=int, default=20, help="steps per timing sample")
    p.add_argument("--repeats", type=int, default=5)
    p.add_argument(
        "--out",
        type=Path,
        default=Path("results/gpu/gpu_check.csv"),
        help="CSV of step times; the other CSVs go beside it (folder made at start)",
    )
    p.add_argument("--seed", type=int, default=0)
    p.add_argument(
        "--vllm-version",
        type=release_arg,
        metavar="RELEASE",
        default=NEWEST.release,
        help="graph dispatch of a vLLM release from 0.8 on: up to 0.33 V1's, from 0.34 "
        "generation 2's (default %(default)s, the newest)",
    )
    args = p.parse_args(argv)
    args.vllm_version = check_version(args.vllm_version)  # its generation: 0.33 or 0.34
    out: Path = args.out
    out.parent.mkdir(parents=True, exist_ok=True)  # now, not after the GPU work

    def beside(suffix: str) -> Path:
        return out.with_name(f"{out.stem}_{suffix}.csv")

    device = args.device or ("cuda" if torch.cuda.is_available() else "cpu")
    on_gpu = torch.device(device).type == "cuda"
    where = f"measured ({torch.cuda.get_device_name(device)})" if on_gpu else "measured (CPU)"
    modes = [m.strip() for m in args.modes.split(",") if m.strip()]
    gen2 = gen2_sizes(args) if args.vllm_version == "0.34" else {}
    rows, captures, summary, resolved = [], [], [], []
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
        resolved.append(str(runner.cudagraph_mode))
        start = time.perf_counter()
        report = runner.capture_all()
        capture_wall_s = time.perf_counter() - start
        checks = check_replay(runner, seed=args.seed + 1)
        bad = int((~checks["ok"]).sum())
        if eager is None:  # one eager runner on the same model times every mode's baseline
            # (its input buffers cover every timed size: one packed copy, as the graph path)
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
        pd.DataFrame(rows).assign(source=where).to_csv(out, index=False)  # so far
        pd.concat(captures).to_csv(beside("captures"), index=False)
        pool = report["pool_bytes"].sum() if report["pool_bytes"].notna().any() else float("nan")
        drop = report["device_bytes"]
        drop = drop.sum() if drop.notna().any() else float("nan")
        summary.append(
            {
                "mode": str(runner.cudagraph_mode),
                "graphs": int(report["num_graphs"].sum()),
                "keys": len(report),
                "capture_s": report["capture_s"].sum(),
                "capture_wall_s": capture_wall_s,
                "pool_MiB": pool / MIB,  # reserved bytes the graph captures added
                "graphs_device_MiB": drop / MIB,  # free memory they took (no warm-ups)
                "replay_checks": len(checks),
                "failed": bad,
                "max_abs_err": checks["max_abs_err"].max() if len(checks) else float("nan"),
            }
        )
        runner.release_graphs()
        if on_gpu:
            torch.cuda.empty_cache()
    table = pd.DataFrame(rows).assign(source=where)
    pools = pd.DataFrame(pool_rows(eager.model, eager, capture_sizes, modes, args, where))
    pools.to_csv(beside("pools"), index=False)
    summary = pd.DataFrame(summary)
    verdict = gpu_check_table(summary, table, pools, modes=resolved, on_gpu=on_gpu)
    verdict.to_csv(beside("checks"), index=False)
    print_results(args.model, where, out, summary, table, pools, verdict)
    return 0 if verdict["ok"].all() else 1


def print_results(model, where, out, summary, table, pools, verdict) -> None:
    """The per-mode summary, the speed-up table, graph memory and the rules that failed."""
    print(f"\n{model}, {where}; CSV in {out.parent}: {out.name} and its _captures, _pools, _checks")
    with pd.option_context("display.width", 200, "display.float_format", "{:.4g}".format):
        print(summary.to_string(index=False))
        speed = table.pivot_table(index="num_tokens", columns=["mode", "batch"], values="speedup_x")
        print("\nspeed-up (eager ms / graph ms) by size:")
        print(speed.to_string())
        print(
            f"\ngraph memory per mode and outputs, {where}: device (free-memory drop around "
            "capture, as vLLM logs it), reserved/allocated/graph_pool (allocator), "
            "predicted (model), estimate (fake tensors), stand_in (CPU ledger)"
        )
        print(pools.drop(columns=["source", "prediction_source"]).to_string(index=False))
        failed = verdict[~verdict["ok"]]
        print(f"\nchecks: {len(verdict) - len(failed)} of {len(verdict)} hold")
        if len(failed):
            print(failed.to_string(index=False))


if __name__ == "__main__":
    raise SystemExit(main())
