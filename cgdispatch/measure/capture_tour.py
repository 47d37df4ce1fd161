"""Capture a registry model in several cudagraph modes, check replay against eager, time steps.

The loop behind notebooks 02 (the toy LM) and 05 (a Hugging Face model): one fresh model
(:func:`~cgdispatch.models.registry.build_model`) and
:class:`~cgdispatch.capture.runner.GraphRunner` per mode, ``capture_all`` (the capture report), then
:func:`~cgdispatch.measure.replay_check.check_replay` (replay vs eager on fresh random batches), and a
small step-time table, eager model call against the runner's step. Times are wall-clock
medians on whatever device the model is on, labelled ``measured (CPU)`` or ``measured
(<GPU name>)``; on CPU the graph backend re-runs the model, so expect no speed-up there.
Either generation of vLLM's graph dispatch (``vllm_version``): V1 captures ``sizes`` as
capture sizes, generation 2 as prefill token sizes and (up to ``max_num_seqs``) decode
request sizes. This is a tour, not a benchmark: sweeps and cost models belong to the
measure module.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

import pandas as pd

from ..core.config import GraphConfig
from ..core.generation import check_version, dispatch_step, generation_for
from ..core.modes import CUDAGraphMode

__all__ = [
    "ModeCaptures",
    "capture_each_mode",
    "tour_config",
    "step_time_table",
    "device_source",
]


@dataclass
class ModeCaptures:
    """Runners (config mode name -> runner) and their reports, one row block per mode.

    ``reports``: the capture reports with ``config_mode`` and ``source`` columns;
    ``checks``: ``check_replay`` rows with ``config_mode``; ``summary``: one row per mode;
    ``source``: where the times were measured (``measured (CPU)``, ``measured (<GPU>)``).
    """

    runners: dict[str, Any] = field(default_factory=dict)
    reports: pd.DataFrame | None = None
    checks: pd.DataFrame | None = None
    summary: pd.DataFrame | None = None
    source: str = ""


def device_source(runner: Any) -> str:
    """``measured (CPU)`` or ``measured (<GPU name>)`` for a runner's device."""
    from .timing import source_label

    return source_label(runner.device)


def capture_each_mode(
    modes: Iterable[CUDAGraphMode | str] | None = None,
    *,
    preset: str = "toy-tiny",
    sizes: Sequence[int] = (1, 2, 4, 8),
    max_num_seqs: int | None = None,
    device: str | None = None,
    dtype: str | None = None,
    seed: int = 0,
    progress: bool = True,
    vllm_version: str | None = None,
) -> ModeCaptures:
    """Capture the registry model ``preset`` in each mode (all five by default) and check
    every replay.

    ``preset`` is any name of :func:`~cgdispatch.models.registry.model_names` (``toy-tiny``,
    ``hf-llama-tiny``, ...). Each mode gets its own model built with the same ``seed`` and
    ``dtype`` (so all modes hold the same weights and KV cache) and its own runner over
    ``sizes``; ``max_num_seqs`` defaults to the model's KV slots. A mode NONE runner has no
    graphs and is checked at ``sizes`` through the runner's eager path. ``vllm_version``:
    any registered release (None: the newest, the default, as notebooks 02 and 05 show)
    (:func:`tour_config` says how ``sizes`` map). Raises ``ValueError`` for an
    unknown model, mode or version, or empty ``sizes``.
    """
    from tqdm.auto import tqdm

    from ..capture.runner import GraphRunner
    from ..models.registry import build_model, model_names
    from .replay_check import check_replay

    if preset not in model_names():
        raise ValueError(
            f"model {preset!r} is unknown: use a registry name, one of {model_names()}"
        )
    sizes = sorted({int(s) for s in sizes})
    if not sizes or sizes[0] < 1:
        raise ValueError(f"sizes={sizes!r} is invalid: give capture sizes >= 1, e.g. [1, 2, 4, 8]")
    vllm_version = check_version(vllm_version)  # before any model is built
    modes = list(CUDAGraphMode) if modes is None else [CUDAGraphMode.parse(m) for m in modes]
    out = ModeCaptures()
    reports, checks, summary = [], [], []
    for mode in tqdm(modes, desc="modes", unit="mode", disable=not progress):
        # the adapter sizes its work buffers by the largest padded step; the toy LM ignores it
        model = build_model(
            preset, device=device, dtype=dtype, seed=seed, max_num_tokens=max(sizes)
        )
        model.fill_kv_cache_(seed)
        config = tour_config(mode, sizes, max_num_seqs or model.num_slots, vllm_version)
        runner = GraphRunner(model, config)
        report = runner.capture_all(progress=False)
        check = check_replay(runner, seed=seed + 1, sizes=list(sizes))
        out.runners[mode.name] = runner
        out.source = device_source(runner)
        reports.append(report.assign(config_mode=mode.name, source=out.source))
        checks.append(check.assign(config_mode=mode.name))
        summary.append(
            {
                "config_mode": mode.name,
                "keys": len(report),
                "graphs": int(report["num_graphs"].sum()),
                "checks": len(check),
                "replayed": int(check["replayed"].sum()) if len(check) else 0,
                "max_abs_err": float(check["max_abs_err"].max()) if len(check) else float("nan"),
                "max_cache_err": float(check["cache_err"].max()) if len(check) else float("nan"),
                "all_ok": bool(len(check) and check["ok"].all()),
                "capture_s": float(report["capture_s"].sum()),
            }
        )
    # mode NONE's report is empty: concatenated, it would leave ``uniform`` as objects
    out.reports = pd.concat(reports, ignore_index=True).astype(
        {"num_reqs": "Int64", "uniform": bool}
    )
    out.checks = pd.concat(checks, ignore_index=True)
    out.summary = pd.DataFrame(summary)
    return out


def tour_config(
    mode: CUDAGraphMode | str,
    sizes: Sequence[int],
    max_num_seqs: int,
    vllm_version: str | None = None,
) -> GraphConfig:
    """The config of one mode of the tour, in either generation.

    One token list (V1): ``sizes`` are the capture sizes (None: the newest release). A release that
    splits ladders (generation 2): ``sizes`` are the prefill token sizes and those ``<= max_num_seqs`` the decode request
    sizes (a decode graph for more requests than the scheduler forms would never run;
    with none left, vLLM's default decode grid).
    """
    shape = generation_for(vllm_version).ladder  # maps the one list onto its ladders
    return GraphConfig(
        vllm_version=check_version(vllm_version),
        cudagraph_mode=mode,
        max_num_seqs=max_num_seqs,
        **shape.one_list_changes(list(sizes), max_num_seqs),
    )


def _median_ms(fn: Any, repeats: int) -> float:
    fn()  # warm-up (first call of a size may compile or capture nothing: keys are locked)
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return 1e3 * statistics.median(times)


def _time_case(runner: Any, batch: Any, repeats: int) -> tuple[float, float]:
    """(eager model call, runner step) median milliseconds for one batch."""
    import torch

    tokens = batch.tokens.to(runner.device)
    ids, pos, slots = tokens.unbind(0)

    def eager() -> Any:
        with torch.no_grad():
            out = runner.model(ids, pos, slots)
        runner.backend.synchronize()
        return out

    def step() -> Any:
        out = runner.execute_packed(tokens, batch.uniform_decode, batch.num_reqs)
        runner.backend.synchronize()
        return out

    return _median_ms(eager, repeats), _median_ms(step, repeats)


def step_time_table(
    runners: dict[str, Any],
    sizes: Sequence[int],
    *,
    repeats: int = 20,
    seed: int = 0,
    progress: bool = True,
) -> pd.DataFrame:
    """Median step time per (mode, num_tokens, batch kind): eager model call vs runner step.

    ``eager_ms`` calls the model directly on the unpadded batch; ``graph_ms`` runs the same
    batch through the runner (dispatch, copy-in, padding, replay or eager fallback);
    ``runtime_mode`` says which path the runner took; ``speedup_x = eager_ms / graph_ms``.
    Uniform-decode and mixed batches are timed separately (``uniform_decode``). Every row
    carries ``source`` (``measured (CPU)`` here). Both calls write the batch's KV slots.
    """
    from tqdm.auto import tqdm

    if isinstance(repeats, bool) or not isinstance(repeats, int) or repeats < 1:
        raise ValueError(f"repeats={repeats!r} is invalid: it must be an integer >= 1")
    rows = []
    todo = [(name, n, u) for name in runners for n in sizes for u in (True, False)]
    for name, n, uniform in tqdm(todo, desc="time", unit="case", disable=not progress):
        runner = runners[name]
        make = runner.make_decode_batch if uniform else runner.make_mixed_batch
        try:
            batch = make(n, seed=seed)
        except ValueError:  # e.g. more decode requests than KV slots
            continue
        # either generation's answer for this batch (generation 2 reads its request count)
        answer = dispatch_step(runner.dispatcher, n, batch.num_reqs, batch.uniform_decode)
        eager_ms, graph_ms = _time_case(runner, batch, repeats)
        rows.append(
            {
                "mode": name,
                "num_tokens": n,
                "uniform_decode": batch.uniform_decode,
                "runtime_mode": answer.runtime_mode.name,
                "padded_size": answer.padded_tokens,
                "eager_ms": eager_ms,
                "graph_ms": graph_ms,
                "speedup_x": eager_ms / graph_ms,
                "source": device_source(runner),
            }
        )
    return pd.DataFrame(rows)
