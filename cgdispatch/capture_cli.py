"""``python -m cgdispatch capture``: capture a toy model's graphs, optionally check replays.

``check_replay`` is the check itself (also used by ``scripts/gpu_check.py``): for every
captured key it runs fresh random batches through the runner (replay) and through the
model directly (eager, unpadded) from the same KV-cache state, and compares logits and
the real requests' caches.
"""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING, Any

from .cli import parse_sizes

if TYPE_CHECKING:
    import pandas as pd
    import torch

    from .runner import GraphRunner

__all__ = ["check_replay", "build_runner", "add_parser"]

# (atol, rtol) of the check, rtol relative to the largest |eager logit| of the batch
_TOLERANCES = {"float32": (1e-5, 1e-4), "bfloat16": (1e-2, 2e-2), "float16": (1e-3, 5e-3)}


def _max_err(a: torch.Tensor, b: torch.Tensor) -> float:
    return float((a.float() - b.float()).abs().max()) if a.numel() else 0.0


def check_replay(
    runner: GraphRunner,
    *,
    seed: int = 0,
    atol: float | None = None,
    rtol: float | None = None,
    sizes: list[int] | None = None,
) -> pd.DataFrame:
    """Replay vs eager for every captured key, on fresh random decode and mixed batches.

    One row per (key, batch kind): max_abs_err of the logits, cache_err (largest change
    of a real slot's cache between the two runs), tol, ok, and whether the step replayed
    a graph. The model's caches are restored after each comparison. Keys must have been
    captured (``runner.capture_all()``) for ``replayed`` to be True. A runner in mode NONE
    has no keys: it is checked at ``sizes`` (eager through the runner's path).
    """
    import pandas as pd
    import torch

    model, dummy = runner.model, runner.model.dummy_slot
    d_atol, d_rtol = _TOLERANCES[model.config.dtype]
    atol, rtol = (d_atol if atol is None else atol), (d_rtol if rtol is None else rtol)
    for name, value in (("atol", atol), ("rtol", rtol)):
        if not value >= 0:  # also rejects NaN
            raise ValueError(f"{name}={value!r} is invalid: a tolerance must be >= 0")
    rows: list[dict[str, Any]] = []
    snapshot = [c.clone() for c in model.kv_caches()]

    def restore() -> None:
        for cache, saved in zip(model.kv_caches(), snapshot):
            cache.copy_(saved)

    from .batch import BatchDescriptor
    from .modes import CUDAGraphMode

    eager_only = runner.cudagraph_mode is CUDAGraphMode.NONE
    keys = (
        [(CUDAGraphMode.NONE, BatchDescriptor(s)) for s in sizes or []]
        if eager_only
        else list(dict.fromkeys(runner.captured_keys))  # one row per key, not per piece
    )
    for i, (mode, desc) in enumerate(keys):
        n = desc.num_tokens
        kinds = ["decode"] if desc.uniform else ["mixed", "decode"]
        if not getattr(model, "supports_mixed_batches", True):
            # decode-only models (the HF adapter): a non-uniform key is exercised by a decode
            # batch dispatched as non-uniform, so that this very key replays
            kinds = ["decode"] if desc.uniform else ["decode-nonuniform"]
        for kind in kinds:
            make = runner.make_mixed_batch if kind == "mixed" else runner.make_decode_batch
            try:
                batch = make(n, seed=seed * 7919 + i * 2 + (kind == "mixed"))
            except ValueError:  # e.g. more decode requests than KV slots
                continue
            dev = runner.device
            ids, pos, slots = (t.to(dev) for t in (batch.input_ids, batch.positions, batch.slots))
            restore()
            with torch.no_grad():
                ref = model(ids, pos, slots)
            ref_caches = [c[:, :dummy].clone() for c in model.kv_caches()]
            restore()
            replays = sum(w.num_replays for w in runner.wrappers)
            uniform = batch.uniform_decode and kind != "decode-nonuniform"
            out = runner.execute(ids, pos, slots, uniform_decode=uniform).clone()
            replayed = sum(w.num_replays for w in runner.wrappers) > replays
            cache_err = max(
                _max_err(c[:, :dummy], r) for c, r in zip(model.kv_caches(), ref_caches)
            )
            err = _max_err(out, ref)
            tol = atol + rtol * float(ref.float().abs().max())
            rows.append(
                {
                    "mode": str(mode),
                    "num_tokens": n,
                    "num_reqs": desc.num_reqs,
                    "uniform": desc.uniform,
                    "batch": kind,
                    "batch_reqs": batch.num_reqs,
                    "replayed": replayed,
                    "max_abs_err": err,
                    "cache_err": cache_err,
                    "tol": tol,
                    "ok": (replayed or eager_only) and err <= tol and cache_err <= tol,
                }
            )
    restore()
    return pd.DataFrame(rows)


def build_runner(args: argparse.Namespace) -> GraphRunner:
    """Model and runner from the command-line options (shared with scripts/gpu_check.py)."""
    import torch

    from .config import GraphConfig
    from .models.registry import build_model
    from .runner import GraphRunner

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
    from .measure import source_label

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
