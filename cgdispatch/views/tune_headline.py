"""One verdict per setting (issue 37): the `tune` call notebook 04 heads with, and the
command line that runs the same call.

The README's example (``python -m cgdispatch tune --model llama-3.1-8b --device H200 --trace
sharegpt --rate 8 --max-num-seqs 256``), the tune dashboard as it opens
(``TuneSettings()``), ``make run``'s headline in the offline report and notebook 04's first
verdict all run :func:`~cgdispatch.plan.tune_run.tune_for` on the same
:class:`~cgdispatch.plan.tune_run.TuneSettings`, so they print the same recommendation and
flags. Notebook 04's later sections explore a what-if (smaller scheduler limits, fewer
requests and graphs, a small KV budget) whose verdict says so in its second line.
"""

from __future__ import annotations

import dataclasses
import shlex
from collections.abc import Mapping
from typing import Any

from ..plan.tune_run import TuneSettings
from ..workload.trace_source import trace_text

__all__ = ["headline_verdict", "notebook_tune_settings", "tune_command"]

# notebook 04 parameter -> the TuneSettings field its headline takes it as: the field of its
# name, but ``workload`` is the trace; the notebook's other parameters (limits, requests,
# graphs, kv_budget_gib) are its what-if's
NOTEBOOK_FIELDS = {
    name: "trace" if name == "workload" else name
    for name in ("model", "device", "vllm_version", "workload", "rate_per_s", "seed", "holdout")
}
# TuneSettings field -> `tune` flag where the flag is not the field's name with dashes
_FLAGS = {
    "rate_per_s": "--rate",
    "cudagraph_mode": "--mode",
    "memory_budget_bytes": "--memory-budget-mib",
    "enable_prefix_caching": "--no-prefix-caching",
}
# always written, as the README writes them, so its command is this one's for its settings
_ALWAYS = ("model", "device", "trace", "rate_per_s", "max_num_seqs")


def notebook_tune_settings(params: Mapping[str, Any]) -> TuneSettings:
    """The settings of notebook 04's headline verdict: its ``model``, ``device``,
    ``vllm_version``, ``workload`` (the trace), ``rate_per_s``, ``seed`` and ``holdout``
    parameters (``params``: the notebook's checked parameters), and `tune`'s own defaults
    for everything else: the README's command for the notebook's defaults."""
    missing = [name for name in NOTEBOOK_FIELDS if name not in params]
    if missing:
        raise ValueError(
            f"params lacks {missing}: pass notebook 04's parameters (check_notebook_parameters"
            '("04_what_if", globals()))'
        )
    fields = {field: params[name] for name, field in NOTEBOOK_FIELDS.items()}
    fields["rate_per_s"] = float(fields["rate_per_s"])
    fields["holdout"] = float(fields["holdout"])
    return TuneSettings(**fields)


def tune_command(settings: TuneSettings, *, device_spec: str = "") -> str:
    """``python -m cgdispatch tune`` with the flags that give ``settings``: the model,
    device, trace, rate and max_num_seqs (as the README writes them), then every other
    setting that differs from `tune`'s default (the model's own TP size and the planner's
    graph count are defaults). A device given as a spec is written as ``--device-spec
    DEVICE_SPEC`` (the file it was read from; ``FILE.json`` when not given)."""
    if not isinstance(settings, TuneSettings):
        raise ValueError(f"settings={settings!r} is invalid: pass a TuneSettings")
    from ..plan.tune import DEFAULT_GRAPHS

    # the model's own TP size and the planner's own graph count are tune's defaults: left out
    graphs = None if settings.max_graphs == DEFAULT_GRAPHS else settings.max_graphs
    settings = dataclasses.replace(
        settings, tensor_parallel_size=settings.tp_flag(), max_graphs=graphs
    )
    default = TuneSettings()
    words = ["python", "-m", "cgdispatch", "tune"]
    for field in dataclasses.fields(TuneSettings):
        name, value = field.name, getattr(settings, field.name)
        if name not in _ALWAYS and value == getattr(default, name):
            continue
        if value is None:  # a default that is None is left out above; None is tune's own
            continue
        flag = _FLAGS.get(name, "--" + name.replace("_", "-"))
        if name == "device" and not isinstance(value, str):
            words += ["--device-spec", device_spec or "FILE.json"]
        elif name == "enable_prefix_caching":
            words.append(flag)  # only written when off
        elif name == "memory_budget_bytes":
            words += [flag, _number(value / 2**20)]
        elif name == "trace":
            words += [flag, trace_text(value)]  # as it was given: a name or a path
        else:
            words += [flag, _number(value) if isinstance(value, float) else str(value)]
    return shlex.join(words)


def _number(value: float) -> str:
    """``value`` as a person writes it (``8``, ``0.25``), exact: ``repr`` where the short
    form would round it."""
    short = f"{value:g}"
    return short if float(short) == value else repr(value)


def headline_verdict(settings: TuneSettings, *, width: int | None = None) -> str:
    """The verdict ``python -m cgdispatch tune`` prints for ``settings`` (the same
    :func:`~cgdispatch.plan.tune_run.tune_for` call and text; ``width``: wrapped at word
    boundaries, as a notebook shows it)."""
    from ..estimate.devices import device_label
    from ..plan.tune_run import tune_for
    from .tune_verdict import verdict_text

    result = tune_for(settings)
    return verdict_text(
        result, model=settings.model, device=device_label(settings.device), width=width
    )
