"""The papermill parameters of each shipped notebook, checked before any work is done.

Each notebook's first code cell after its parameters calls
``globals().update(cg.check_notebook_parameters("04_what_if", globals()))``: every parameter
is checked against its rule at once, and one ``ValueError`` lists every bad one with the
fix, instead of a traceback from cell 8 after 20 s of work. The returned values are the
cleaned ones (``-p vllm_version 0.34`` arrives as a float and leaves as the release string;
a mode's name leaves as the :class:`~cgdispatch.core.modes.CUDAGraphMode`, parsed here once).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from ..core import validate as bounds
from ..core.generation import GENERATIONS, check_version
from ..core.modes import CUDAGraphMode

__all__ = ["check_notebook_parameters", "NOTEBOOK_PARAMETERS"]

Check = Callable[[str, Any], Any]


def _int(minimum: int, maximum: int) -> Check:
    return lambda name, value: bounds.check_int(name, value, minimum, maximum)


def _float(low: float, high: float, *, open_low: bool = False, open_high: bool = False) -> Check:
    def check(name: str, value: Any) -> float:
        ok = isinstance(value, (int, float)) and not isinstance(value, bool)
        above = ok and (low < value if open_low else low <= value)
        below = ok and (value < high if open_high else value <= high)
        if not above or not below:
            left, right = "(" if open_low else "[", ")" if open_high else "]"
            raise ValueError(
                f"{name}={value!r} is invalid: give a number in {left}{low}, {high}{right}"
            )
        return float(value)

    return check


def _choice(options: tuple[str, ...] | Callable[[], list[str]]) -> Check:
    def check(name: str, value: Any) -> str:
        known = list(options() if callable(options) else options)
        if value not in known:
            raise ValueError(f"{name}={value!r} is unknown: use one of {known}")
        return value

    return check


def _optional(inner: Check) -> Check:
    return lambda name, value: None if value is None else inner(name, value)


def _list(inner: Check, *, most: int = bounds.MAX_CAPTURE_SIZES) -> Check:
    def check(name: str, value: Any) -> list[Any]:
        if isinstance(value, (str, bytes, dict)) or not hasattr(value, "__len__") or not value:
            raise ValueError(f"{name}={value!r} is invalid: give a non-empty list, e.g. [1, 8]")
        if len(value) > most:
            raise ValueError(f"{name} has {len(value):_} entries: at most {most:_}")
        return [inner(f"{name} entry", item) for item in value]

    return check


def _version(name: str, value: Any) -> str:
    version = check_version(value)
    if version is None:
        known = ", ".join(f"{g.release!r} ({g.name})" for g in GENERATIONS.values())
        raise ValueError(f"{name}=None is invalid: use one of {known}")
    return version


def _mode(name: str, value: Any) -> CUDAGraphMode:
    """The mode parsed once, here at the notebook's edge (cells pass it on as the mode)."""
    return CUDAGraphMode.parse(value)


def _device(name: str, value: Any) -> str:
    return bounds.check_device(name, value)


def _text(name: str, value: Any) -> str:
    if not isinstance(value, str) or not value.strip():
        raise ValueError(f"{name}={value!r} is invalid: give a non-empty string")
    return value


def _workload(name: str, value: Any) -> str:
    """The traffic name or path as given, once :func:`~cgdispatch.workload.trace_source.resolve_trace`
    accepts it (a preset, a shipped production trace or a file that exists)."""
    from ..workload.trace_source import resolve_trace

    if not isinstance(value, str):
        raise ValueError(f"{name}={value!r} is invalid: give a preset's name or a file's path")
    resolve_trace(value, what=name)
    return value


def _toy_presets() -> list[str]:
    from ..models.toy import PRESETS

    return sorted(PRESETS)


def _model_names() -> list[str]:
    from ..models.registry import model_names

    return model_names()


def _device_presets() -> list[str]:
    from ..estimate.device_model import DEVICE_PRESETS

    return sorted(DEVICE_PRESETS)


def _sweep_presets() -> list[str]:
    from ..sweep.spec import SWEEP_PRESETS

    return sorted(SWEEP_PRESETS)


_SIZE = _int(1, bounds.MAX_CAPTURE_SIZE)
_TOKENS = _int(1, bounds.MAX_STEP_TOKENS)
_SEED = _int(0, 2**63 - 1)

# notebook stem -> parameter -> rule; the parameters cell of each notebook names these
NOTEBOOK_PARAMETERS: dict[str, dict[str, Check]] = {
    "01_dispatch_tour": {
        "vllm_version": _version,
        "mode": _mode,
        "max_num_seqs": _int(1, bounds.MAX_NUM_SEQS),
        "max_num_batched_tokens": _TOKENS,
        "num_speculative_tokens": _int(0, bounds.MAX_SPECULATIVE_TOKENS),
        "capture_sizes": _optional(_list(_SIZE)),
        "start_tokens": _TOKENS,
    },
    "02_capture_and_replay": {
        "vllm_version": _version,
        "device": _device,
        "preset": _choice(_toy_presets),
        "capture_sizes": _list(_int(1, 4096)),
        "timing_sizes": _list(_int(1, 4096)),
        "repeats": _int(1, bounds.MAX_REPEATS),
        "seed": _SEED,
        "cpu_threads": _int(1, bounds.MAX_PARALLEL),
    },
    "03_mode_sweep": {
        "vllm_version": _version,
        "device": _optional(_device),
        "preset": _optional(_choice(_sweep_presets)),
        "modes": _optional(_list(_mode, most=5)),
        "num_tokens": _optional(_list(_TOKENS)),
        "repeats": _optional(_int(1, bounds.MAX_REPEATS)),
        "store_dir": _text,
        "chart_ladder": _optional(_text),
        "model_device": _choice(_device_presets),
        "reference_gpu": _optional(_text),
    },
    "04_what_if": {
        "vllm_version": _version,
        "workload": _workload,
        "num_requests": _int(1, bounds.MAX_REQUESTS),
        "rate_per_s": _float(0.0, float("inf"), open_low=True),
        "seed": _SEED,
        "max_num_seqs": _int(1, bounds.MAX_NUM_SEQS),
        "max_num_batched_tokens": _TOKENS,
        "num_speculative_tokens": _int(0, bounds.MAX_SPECULATIVE_TOKENS),
        "max_graphs": _int(1, 4096),
        "mode": _mode,
        "capture_sizes": _optional(_list(_SIZE)),
        "start_tokens": _TOKENS,
        "model": _choice(_model_names),
        "device": _choice(_device_presets),
        "holdout": _float(0.0, 1.0, open_low=True, open_high=True),  # as split_holdout
        "kv_budget_gib": _float(0.0, 1e4, open_low=True),
        "latency_rates": _list(_float(0.0, 1e6, open_low=True), most=64),
    },
    "05_bring_your_own_model": {
        "vllm_version": _version,
        "model_name": _choice(_model_names),
        "device": _optional(_device),
        "dtype": _optional(_choice(("float32", "bfloat16", "float16"))),
        "capture_sizes": _list(_int(1, 4096)),
        "modes": _list(_mode, most=5),
        "sweep_modes": _list(_mode, most=5),
        "num_tokens": _list(_int(1, 4096)),
        "repeats": _int(1, bounds.MAX_REPEATS),
        "store_dir": _text,
        "seed": _SEED,
    },
}


def check_notebook_parameters(notebook: str, namespace: Mapping[str, Any]) -> dict[str, Any]:
    """The parameters of shipped notebook ``notebook`` (its file stem) from ``namespace``
    (the notebook's ``globals()``), each checked and cleaned.

    Raises one ``ValueError`` listing every bad parameter with its rule, so a papermill run
    with a slip stops in its first cell. A parameter missing from ``namespace`` is an error
    too (the notebook's parameters cell was edited away from its rules).
    """
    if notebook not in NOTEBOOK_PARAMETERS:
        raise ValueError(
            f"notebook={notebook!r} is unknown: use one of {sorted(NOTEBOOK_PARAMETERS)}"
        )
    out: dict[str, Any] = {}
    problems: list[str] = []
    for name, check in NOTEBOOK_PARAMETERS[notebook].items():
        if name not in namespace:
            problems.append(f"parameter {name!r} is missing from the parameters cell")
            continue
        try:
            out[name] = check(name, namespace[name])
        except ValueError as err:
            problems.append(str(err))
    if problems:
        lines = "\n".join(f"  - {p}" for p in problems)
        raise ValueError(
            f"notebook {notebook}: {len(problems)} bad parameter(s), nothing was run:\n{lines}\n"
            "fix them in the parameters cell or in papermill's -p NAME VALUE"
        )
    return out
