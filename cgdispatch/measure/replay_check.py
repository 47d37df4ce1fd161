"""Replay against eager: the check behind ``capture --check``, notebook 02 and the GPU script.

For every captured key it runs fresh random batches through the runner (replay) and
through the model directly (eager, unpadded) from the same KV-cache state, and compares
logits and the real requests' caches. Either generation's runner (V1 keys or vLLM 0.34's
``BatchExecutionDescriptor`` s) is checked the same way; each batch is dispatched with its
own request count.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import pandas as pd
    import torch

    from ..capture.runner import GraphRunner

__all__ = ["check_replay"]

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
    has no keys: it is checked at ``sizes`` (eager through the runner's path). Under
    generation 2 a batch with more requests than ``max_num_seqs`` is skipped: no scheduler
    forms it, and the manager sends it to no graph sized by request count.
    """
    import pandas as pd

    model = runner.model
    d_atol, d_rtol = _TOLERANCES[model.config.dtype]
    atol, rtol = (d_atol if atol is None else atol), (d_rtol if rtol is None else rtol)
    for name, value in (("atol", atol), ("rtol", rtol)):
        if not value >= 0:  # also rejects NaN
            raise ValueError(f"{name}={value!r} is invalid: a tolerance must be >= 0")
    rows: list[dict[str, Any]] = []
    snapshot = [c.clone() for c in model.kv_caches()]

    from ..capture.graph_key import is_uniform_key
    from ..core.batch import BatchDescriptor
    from ..core.generation import generation_of
    from ..core.modes import CUDAGraphMode

    # a generation whose graphs count requests checks each batch's against them
    max_reqs = (
        runner.config.max_num_seqs
        if generation_of(runner.config).runner.keys_count_requests
        else None
    )

    eager_only = runner.cudagraph_mode is CUDAGraphMode.NONE
    keys = (
        [(CUDAGraphMode.NONE, BatchDescriptor(s)) for s in sizes or []]
        if eager_only
        else list(dict.fromkeys(runner.captured_keys))  # one row per key, not per piece
    )
    for i, (mode, desc) in enumerate(keys):
        n = desc.num_tokens
        uniform_key = is_uniform_key(desc)
        for kind in _batch_kinds(uniform_key, model.supports_mixed_batches):
            row = _compare_one(
                runner,
                n,
                kind,
                seed * 7919 + i * 2 + (kind == "mixed"),
                max_reqs,
                snapshot,
                atol,
                rtol,
            )
            if row is not None:
                ok = (row["replayed"] or eager_only) and row["max_abs_err"] <= row["tol"]
                ok = ok and row["cache_err"] <= row["tol"]
                rows.append(
                    {
                        "mode": str(mode),
                        "num_tokens": n,
                        "num_reqs": desc.num_reqs,
                        "uniform": uniform_key,
                        "batch": kind,
                        **row,
                        "ok": ok,
                    }
                )
    _restore(runner, snapshot)
    return pd.DataFrame(rows)


def _batch_kinds(uniform_key: bool, mixed: bool) -> list[str]:
    """The batches that exercise a key: a decode graph a decode batch; a mixed key a mixed and
    a decode batch, or on decode-only models (the HF adapter) a decode batch dispatched as
    non-uniform, so that this very key replays."""
    if uniform_key:
        return ["decode"]
    return ["mixed", "decode"] if mixed else ["decode-nonuniform"]


def _restore(runner: GraphRunner, snapshot: list[torch.Tensor]) -> None:
    for cache, saved in zip(runner.model.kv_caches(), snapshot):
        cache.copy_(saved)


def _compare_one(
    runner: GraphRunner,
    n: int,
    kind: str,
    seed: int,
    max_reqs: int | None,
    snapshot: list[torch.Tensor],
    atol: float,
    rtol: float,
) -> dict[str, Any] | None:
    """One fresh batch of ``n`` tokens of ``kind`` through the model (eager) and the runner,
    from the same cache state: the comparison's figures, or None where no such batch is
    formed (more decode requests than KV slots, more requests than the graphs count)."""
    import torch

    model = runner.model
    dummy = model.dummy_slot
    make = runner.make_mixed_batch if kind == "mixed" else runner.make_decode_batch
    try:
        batch = make(n, seed=seed)
    except ValueError:  # e.g. more decode requests than KV slots
        return None
    if max_reqs is not None and batch.num_reqs > max_reqs:
        return None
    dev = runner.device
    ids, pos, slots = (t.to(dev) for t in (batch.input_ids, batch.positions, batch.slots))
    _restore(runner, snapshot)
    with torch.no_grad():
        ref = model(ids, pos, slots)
    ref_caches = [c[:, :dummy].clone() for c in model.kv_caches()]
    _restore(runner, snapshot)
    replays = sum(w.num_replays for w in runner.wrappers)
    uniform = batch.uniform_decode and kind != "decode-nonuniform"
    out = runner.execute(ids, pos, slots, uniform_decode=uniform, num_reqs=batch.num_reqs).clone()
    replayed = sum(w.num_replays for w in runner.wrappers) > replays
    cache_err = max(_max_err(c[:, :dummy], r) for c, r in zip(model.kv_caches(), ref_caches))
    return {
        "batch_reqs": batch.num_reqs,
        "replayed": replayed,
        "max_abs_err": _max_err(out, ref),
        "cache_err": cache_err,
        "tol": atol + rtol * float(ref.float().abs().max()),
    }
