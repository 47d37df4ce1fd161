"""Sweeps: time and size graphs over modes x capture-size ladders x batch shapes, resumably.

A :class:`~cgdispatch.sweep.spec.SweepSpec` names a registry model, dtype, device, modes, ladders and shapes.
:func:`run_sweep` runs one *unit* per (mode, ladder): build the model and a
:class:`~cgdispatch.capture.runner.GraphRunner`, capture every key (timed, pool bytes on CUDA),
then time each shape eagerly and through the graphs; one row per (mode, ladder, shape)
with the columns of :data:`SWEEP_COLUMNS`. Rows go to a :class:`ResultStore` as they
finish; a rerun skips rows already ``ok``. A unit or shape that fails (a mode the runner
refuses, out of memory, a shape that does not fit the model, a mixed batch for a
decode-only Hugging Face model) becomes a ``failed`` row with its error, and the sweep
goes on. Modes are plain strings, so piecewise modes run as
soon as the runner supports them. ``spec.vllm_version`` picks the generation of vLLM's graph
dispatch each unit's runner follows (:func:`unit_config`); it is part of each point's
identity.
"""

from __future__ import annotations

import concurrent.futures as cf
import time
from collections.abc import Iterator, Sequence
from typing import Any

import pandas as pd

from ..core.config import GraphConfig
from ..core.generation import dispatch_step, generation_for
from .rows import CAPTURE_COLUMNS, CaptureRecord, SweepRow
from .schema import normalise, point_ids
from .spec import SWEEP_PRESETS, SweepSpec
from .store import SWEEP_COLUMNS, ResultStore, load_results

# the unit fields a capture record repeats (the rest describe the key)
_CAPTURE_BASE = [c for c in CAPTURE_COLUMNS if c in ("sweep", "model", "dtype", "device",
                 "device_name", "mode", "vllm_version", "ladder", "capture_sizes",
                 "max_num_seqs", "source")]  # fmt: skip

# GraphConfig's default token budget; a gen-2 unit raises it to its largest size, so that
# vLLM's rule (sizes above max_num_batched_tokens are dropped) keeps the whole ladder
MIN_BATCHED_TOKENS = 8192

__all__ = [
    "SweepSpec",
    "SWEEP_PRESETS",
    "run_sweep",
    "run_unit",
    "SWEEP_COLUMNS",
    "ResultStore",
    "load_results",
]


def _base_row(spec: SweepSpec, mode: str, ladder: str) -> dict[str, Any]:
    """The fields every row of a (mode, ladder) unit shares."""
    import torch

    from ..measure.timing import device_label, source_label

    try:
        name, source = device_label(spec.device), source_label(spec.device)
    except Exception:  # noqa: BLE001 - a missing GPU is reported as the point's error
        name, source = spec.device, f"measured ({spec.device})"
    sizes = spec.ladder_sizes(ladder)
    return {
        "sweep": spec.name,
        "model": spec.model,
        "dtype": spec.dtype,
        "device": spec.device,
        "device_name": name,
        "torch_version": torch.__version__,
        "mode": mode,
        "vllm_version": spec.vllm_version,
        "ladder": ladder,
        "capture_sizes": ",".join(map(str, sizes)),
        "num_capture_sizes": len(sizes),
        "max_num_seqs": spec.max_num_seqs,
        "repeats": spec.repeats,
        "warmup": spec.warmup,
        "input_sets": spec.input_sets,
        "cpu_threads": spec.cpu_threads,
        "source": source,
    }


def _failed(base: dict[str, Any], n: int, uniform: bool, err: BaseException) -> SweepRow:
    return SweepRow(
        **base,
        num_tokens=n,
        uniform_decode=uniform,
        status="failed",
        error=f"{type(err).__name__}: {err}"[:500],
        timestamp=time.time(),
    )


def unit_config(spec: SweepSpec, mode: str, sizes: Sequence[int]) -> GraphConfig:
    """The config of one unit, in the spec's generation.

    The release's ladder shape maps the one list of sizes onto its ladders
    (``LadderShape.one_list_changes``): V1's ``cudagraph_capture_sizes``; generation 2's
    ``prefill_cudagraph_capture_token_sizes`` and, up to ``max_num_seqs``, also
    ``decode_cudagraph_capture_request_sizes`` (a sweep's decode batches have one token per
    request, so a size is a token count and a request count alike).
    """
    shape = generation_for(spec.vllm_version).ladder
    return GraphConfig(
        vllm_version=spec.vllm_version,
        cudagraph_mode=mode,
        max_num_seqs=spec.max_num_seqs,
        # the default step budget, raised to the largest size so that none is dropped
        max_num_batched_tokens=max(MIN_BATCHED_TOKENS, *sizes),
        **shape.one_list_changes(list(sizes), spec.max_num_seqs),
    )


def iter_unit(
    spec: SweepSpec, mode: str, ladder: str, shapes: Sequence[tuple[int, bool]]
) -> Iterator[SweepRow | CaptureRecord]:
    """Rows of one (mode, ladder) unit, one per shape, each yielded as soon as it is timed.

    On CPU the unit runs with ``spec.cpu_threads`` intra-op threads (restored afterwards);
    on CUDA the allocator cache is emptied afterwards so that units do not pile up memory.
    """
    import gc

    import torch

    threads = torch.get_num_threads()
    if spec.device == "cpu":
        torch.set_num_threads(spec.cpu_threads)
    try:
        yield from _unit_rows(spec, mode, ladder, shapes)
    finally:
        torch.set_num_threads(threads)
        if spec.device.startswith("cuda") and torch.cuda.is_available():
            gc.collect()
            torch.cuda.empty_cache()


def _unit_rows(
    spec: SweepSpec, mode: str, ladder: str, shapes: Sequence[tuple[int, bool]]
) -> Iterator[SweepRow | CaptureRecord]:
    import torch

    from ..capture.runner import GraphRunner
    from ..measure.timing import measure_capture_memory, time_call
    from ..models.registry import build_model

    base = _base_row(spec, mode, ladder)
    runner = None
    try:
        sizes = spec.ladder_sizes(ladder)
        model = build_model(
            spec.model, device=spec.device, dtype=spec.dtype, max_num_tokens=max(sizes)
        )
        model.fill_kv_cache_(seed=0)
        runner = GraphRunner(model, unit_config(spec, mode, sizes))
        eager = GraphRunner(
            model,
            GraphConfig(
                vllm_version=spec.vllm_version,
                cudagraph_mode="NONE",
                max_num_seqs=spec.max_num_seqs,
            ),
        )
        # decode-only models (the HF adapter) refuse mixed batches: warm up on a decode step
        mixed = model.supports_mixed_batches
        with torch.no_grad():  # one-time lazy initialisation, kept out of the capture time
            eager.execute_batch((runner.make_mixed_batch if mixed else runner.make_decode_batch)(1))
        (report, memory), capture_s = time_call(
            lambda: measure_capture_memory(lambda: runner.capture_all(progress=False), spec.device),
            spec.device,
        )
    except Exception as err:  # noqa: BLE001 - recorded, the sweep goes on
        if runner is not None:
            runner.release_graphs()
        for n, uniform in shapes:
            yield _failed(base, n, uniform, err)
        return
    yield from _capture_records(base, report)
    base.update(
        resolved_mode=str(runner.cudagraph_mode),
        num_graphs=int(report["num_graphs"].sum()),
        capture_s=capture_s,
        graph_capture_s=float(report["capture_s"].sum()),
        # graph captures only: warm-up steps also grow the reserved memory, outside the pool
        pool_bytes=None if memory is None else int(report["pool_bytes"].sum()),
        peak_allocated_bytes=None if memory is None else memory.peak_allocated_bytes,
        peak_reserved_bytes=None if memory is None else memory.peak_reserved_bytes,
    )
    for n, uniform in shapes:
        try:
            yield _timed_row(spec, runner, eager, base, n, uniform)
        except Exception as err:  # noqa: BLE001
            yield _failed(base, n, uniform, err)
    runner.release_graphs()  # graphs, pool and compiled pieces go with the unit


def _capture_records(base: dict[str, Any], report: pd.DataFrame) -> Iterator[CaptureRecord]:
    """Per-key capture cost, stored apart from the rows."""
    for rec in report.itertuples(index=False):
        yield CaptureRecord(
            **{c: base[c] for c in _CAPTURE_BASE},
            runtime_mode=str(rec.mode),
            num_tokens=int(rec.num_tokens),
            num_reqs=None if pd.isna(rec.num_reqs) else int(rec.num_reqs),
            uniform=bool(rec.uniform),
            num_graphs=int(rec.num_graphs),
            capture_s=float(rec.capture_s),
            step_s=None if pd.isna(rec.step_s) else float(rec.step_s),
            pool_bytes=None if pd.isna(rec.pool_bytes) else int(rec.pool_bytes),
        )


def _timed_row(
    spec: SweepSpec, runner: Any, eager: Any, base: dict[str, Any], n: int, uniform: bool
) -> SweepRow:
    """One shape timed eager and through the graphs, on ``spec.input_sets`` fresh batches."""
    import torch

    from ..measure.timing import time_step

    make = runner.make_decode_batch if uniform else runner.make_mixed_batch
    batches = [make(n, seed=s) for s in range(spec.input_sets)]
    answer = dispatch_step(runner.dispatcher, n, batches[0].num_reqs, uniform)
    kw = dict(warmup=spec.warmup, repeats=spec.repeats, device=spec.device)
    with torch.no_grad():
        t_eager = time_step(eager.execute_batch, batches, **kw)
        t_graph = time_step(runner.execute_batch, batches, **kw)
    return SweepRow(
        **base,
        num_tokens=n,
        uniform_decode=uniform,
        runtime_mode=str(answer.runtime_mode),
        padded_size=answer.padded_tokens,
        **_timing_fields("eager", t_eager),
        **_timing_fields("graph", t_graph),
        speedup_x=t_eager.median_ms / t_graph.median_ms,
        status="ok",
        timestamp=time.time(),
    )


def _timing_fields(prefix: str, timing: Any) -> dict[str, float]:
    """A ``time_step`` result as the row's ``<prefix>_ms``, ``_p10_ms``, ``_p90_ms`` and
    ``_host_ms`` fields (``prefix``: eager or graph)."""
    return {
        f"{prefix}_ms": timing.median_ms,
        f"{prefix}_p10_ms": timing.p10_ms,
        f"{prefix}_p90_ms": timing.p90_ms,
        f"{prefix}_host_ms": timing.host_median_ms,
    }


def run_unit(
    spec: SweepSpec, mode: str, ladder: str, shapes: Sequence[tuple[int, bool]]
) -> list[SweepRow | CaptureRecord]:
    """All rows of one unit (what an executor runs in a worker process)."""
    return list(iter_unit(spec, mode, ladder, shapes))


def run_sweep(
    spec: SweepSpec | str,
    store: ResultStore | str | None = None,
    executor: cf.Executor | None = None,
    progress: bool = True,
) -> pd.DataFrame:
    """Run every point of ``spec`` not yet ``ok`` in ``store``; return the spec's rows (one
    per point, whatever else the store holds).

    ``store``: a :class:`ResultStore`, a path (``.csv``, ``.parquet`` or a directory), or
    None to keep rows in memory only. Without ``executor`` units run here, one after the
    other, and each row is stored as soon as it is timed. With any
    ``concurrent.futures.Executor`` units run in parallel and their rows are stored as each
    unit completes: ``ProcessPoolExecutor`` for several CPU processes, or a dask cluster's
    ``Client.get_executor()`` to spread units over GPUs or machines (each worker needs
    cgdispatch installed; give each GPU worker its own ``CUDA_VISIBLE_DEVICES``).
    """
    spec = _runnable_spec(spec, executor)
    if not isinstance(store, ResultStore):
        store = ResultStore(store)
    store.save_spec(spec.to_dict())
    todo, wanted = _points_to_run(spec, store.done_keys())
    total = len(wanted)
    from tqdm.auto import tqdm

    with tqdm(
        total=total,
        initial=total - sum(len(t[2]) for t in todo),
        desc=f"sweep {spec.name}",
        unit="point",
        disable=not progress,
    ) as bar:
        if executor is None:
            for mode, ladder, shapes in todo:
                _run_unit_here(spec, store, bar, mode, ladder, shapes)
        else:
            _run_units_on(executor, spec, store, bar, todo)
    frame = store.load()
    if frame.empty:
        return frame
    mine = pd.Series(point_ids(frame)).isin(set(wanted)).to_numpy()
    return frame[mine].reset_index(drop=True)


def _runnable_spec(spec: SweepSpec | str, executor: cf.Executor | None) -> SweepSpec:
    """A preset's spec by name; refused when it runs here on a GPU this machine lacks."""
    if isinstance(spec, str):
        if spec not in SWEEP_PRESETS:
            raise ValueError(
                f"sweep preset {spec!r} is unknown: use one of {sorted(SWEEP_PRESETS)}"
            )
        spec = SWEEP_PRESETS[spec]
    if executor is None and spec.device.startswith("cuda"):
        import torch

        if not torch.cuda.is_available():
            raise ValueError(
                f"sweep {spec.name!r} runs on {spec.device} but this machine has no CUDA GPU: "
                "run it on a GPU machine, pass an executor whose workers have GPUs, or use "
                "device='cpu' (--device cpu)"
            )
    return spec


def _points_to_run(
    spec: SweepSpec, done: set[str]
) -> tuple[list[tuple[str, str, list[tuple[int, bool]]]], list[str]]:
    """The units with points not yet done (each with those shapes) and every point's id."""
    todo, wanted = [], []
    for mode, ladder in spec.units():
        base = _base_row(spec, mode, ladder)
        points = normalise(
            pd.DataFrame([{**base, "num_tokens": n, "uniform_decode": u} for n, u in spec.shapes])
        )
        ids = point_ids(points)
        wanted += ids
        shapes = [shape for shape, key in zip(spec.shapes, ids) if key not in done]
        if shapes:
            todo.append((mode, ladder, shapes))
    return todo, wanted


def _run_unit_here(
    spec: SweepSpec, store: ResultStore, bar: Any, mode: str, ladder: str, shapes: list
) -> None:
    """One unit in this process, each row stored as soon as it is timed."""
    captures: list[CaptureRecord] = []
    for row in iter_unit(spec, mode, ladder, shapes):
        if isinstance(row, CaptureRecord):
            captures.append(row)
            continue
        if captures:
            store.append_captures(captures)
            captures = []
        store.append([row])
        bar.update(1)


def _run_units_on(
    executor: cf.Executor, spec: SweepSpec, store: ResultStore, bar: Any, todo: list
) -> None:
    """Units on an executor, each unit's rows stored as it completes; a worker that dies
    leaves its points recorded as failed."""
    futures = {executor.submit(run_unit, spec, *unit): unit for unit in todo}
    for future in cf.as_completed(futures):
        mode, ladder, shapes = futures[future]
        try:
            results = future.result()
        except Exception as err:  # noqa: BLE001 - a worker died: record, go on
            base = _base_row(spec, mode, ladder)
            results = [_failed(base, n, u, err) for n, u in shapes]
        store.append_captures([r for r in results if isinstance(r, CaptureRecord)])
        rows = [r for r in results if isinstance(r, SweepRow)]
        store.append(rows)
        bar.update(len(rows))
