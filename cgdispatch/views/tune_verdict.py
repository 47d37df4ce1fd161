"""The ``tune`` verdict as text: at most 12 lines a person reads, and the flags to paste.

:func:`verdict_lines` draws a :class:`~cgdispatch.plan.tune_result.TuneResult`: what to run
(the plan, or "keep vLLM's default"), the held-out deltas against vLLM's default (mean step
time, p99 TPOT and throughput when the replay gave them, graphs, capture seconds, graph
memory, KV-cache tokens gained), the exact ``vllm serve`` command and where every figure
comes from. It decides nothing: the recommendation is the result's.
"""

from __future__ import annotations

import math
import shlex
from pathlib import Path

from ..core.validate import check_text
from ..plan.tune_result import OBJECTIVES, TuneResult

__all__ = [
    "verdict_lines",
    "verdict_text",
    "delta_rows",
    "serve_name",
    "serve_target",
    "MAX_VERDICT_LINES",
]

MAX_VERDICT_LINES = 12
_MIB = 1 << 20
_P, _D = "planned", "vllm default"


def _pct(delta: float, base: float) -> str:
    finite = math.isfinite(delta) and math.isfinite(base)
    return f"{100 * delta / base:+.2f}%" if base and finite else "n/a"


def _ms(value: float, digits: int = 2) -> str:
    """``value`` in ms, or "n/a" where it is undefined (p99 TPOT of one-token requests)."""
    return f"{value:.{digits}f} ms" if math.isfinite(value) else "n/a"


_NAMES = {"mean_step_ms": "mean step time", "p99_ttft_ms": "p99 TTFT",
          "p99_tpot_ms": "p99 TPOT", "throughput_tok_s": "throughput",
          "capture_s": "capture time", "kv_cache_tokens": "KV-cache tokens",
          "graph_memory_bytes": "graph memory"}  # fmt: skip


def _rel(u: float | None) -> str:
    return "" if u is None else f"\u00b1{100 * u:.0f}%"


def delta_rows(result: TuneResult) -> list[tuple[str, str, str, str, str]]:
    """(figure, planned, vLLM default, change, band) per held-out figure, with units. The
    band is the figures' relative uncertainty (the models' errors on data not fitted), and
    on the objective's row the band of the change that ``tune`` judged the plan by."""
    p, d, delta = result.held_out[_P], result.held_out[_D], result.deltas
    u = result.uncertainty()
    objective_key = OBJECTIVES[result.objective][0]
    rows = []

    def add(key: str, fmt, change: str) -> None:
        band = _rel(u.get(key))
        if key == objective_key:
            band = f"\u00b1{result.band:,.3g}{_UNITS.get(key, '')} (judged)"
        rows.append((_NAMES.get(key, key), fmt(p[key]), fmt(d[key]), change, band))

    add("mean_step_ms", lambda v: _ms(v, 3), f"{delta['mean_step_pct']:+.2f}%")
    for key, fmt in (("p99_ttft_ms", lambda v: _ms(v, 1)),
                     ("throughput_tok_s", lambda v: f"{v:,.0f} tok/s")):  # fmt: skip
        if key in delta:
            add(key, fmt, _pct(delta[key], d[key]))
    graphs = "num_captured_graphs" if "num_captured_graphs" in p else "num_graphs"
    rows.append(("graphs", str(p[graphs]), str(d[graphs]), f"{p[graphs] - d[graphs]:+d}", ""))
    if "capture_s" in delta:
        add("capture_s", lambda v: f"{v:.2f} s", f"{delta['capture_s']:+.2f} s")
    if "graph_memory_bytes" in delta:
        add("graph_memory_bytes", lambda v: f"{v / _MIB:.1f} MiB",
            f"{delta['graph_memory_bytes'] / _MIB:+.1f} MiB")  # fmt: skip
    if "kv_cache_tokens" in delta:
        both = p.get("kv_cache_tokens") is not None and d.get("kv_cache_tokens") is not None
        if both:
            add("kv_cache_tokens", lambda v: f"{v:,.0f}", f"{delta['kv_cache_tokens']:+,.0f}")
        else:
            rows.append(("KV-cache tokens", "", "", f"{delta['kv_cache_tokens']:+,.0f}", ""))
    return rows


def serve_name(model: str) -> str:
    """The name ``vllm serve`` takes for ``model`` (:func:`serve_target`'s, shell-quoted)."""
    return serve_target(model)[0]


_WEIGHTS = ("*.safetensors", "*.bin", "*.pt", "*.gguf")


def serve_target(model: str) -> tuple[str, str]:
    """(the model as ``vllm serve`` takes it, shell-quoted; a note when it is a stand-in).

    A registry model: the Hugging Face id its published shapes come from. A config.json:
    its ``_name_or_path``; else, for a file named ``config.json``, its folder (a checkpoint's
    folder is what vLLM loads; the note says so when no weights lie beside it); else (a
    ``variants/x.json``) the folder's name as a placeholder, and the note says to replace
    it. Anything else: ``model`` itself."""
    from ..models.arch_spec import ARCHITECTURES
    from ..models.config_json import config_model_name, is_config_source
    from ..models.published import PUBLISHED_MODELS

    check_text("model", model)  # a path with a newline would print a line of its own
    spec = ARCHITECTURES.get(model)
    first = spec.source.split()[0] if spec is not None else ""
    if "/" in first:
        return shlex.quote(first), ""
    if spec is None and model not in PUBLISHED_MODELS and is_config_source(model):
        given = config_model_name(model)  # checked: one line of text
        if given:
            return shlex.quote(given), ""
        file = Path(model) / "config.json" if Path(model).is_dir() else Path(model)
        folder = file.resolve().parent
        check_text("the config's folder", str(folder))  # resolved: printed as one line
        if file.name == "config.json":
            if any(next(folder.glob(g), None) for g in _WEIGHTS):
                return shlex.quote(str(folder)), ""
            return shlex.quote(str(folder)), (
                "no weights beside its config.json yet: vLLM loads this folder once they are "
                "there; else put the checkpoint's folder or Hugging Face id there"
            )
        return shlex.quote(folder.name or "MODEL"), (
            f"{folder.name or 'MODEL'!r} stands for the model: {file.name} has no "
            "_name_or_path; put the checkpoint's folder or Hugging Face id there"
        )
    return shlex.quote(model), ""


def _one_line(text: str) -> str:
    """``text`` with its control characters escaped (``\\n``): user text never starts a line."""
    return "".join(c if c.isprintable() else c.encode("unicode_escape").decode() for c in text)


def verdict_lines(
    result: TuneResult, *, model: str, device: str, serve_model: str = ""
) -> list[str]:
    """The verdict, at most :data:`MAX_VERDICT_LINES` lines.

    ``model`` and ``device`` name what the figures model; ``serve_model`` is the name
    ``vllm serve`` takes (a Hugging Face id; default ``model``).
    """
    cfg = result.config
    planned, default = result.held_out[_P], result.held_out[_D]
    key, lower = OBJECTIVES[result.objective]
    name = _NAMES.get(key, key)
    unit = _UNITS.get(key, "")
    graphs = "num_captured_graphs" if "num_captured_graphs" in planned else "num_graphs"
    better = "lower" if lower else "higher"
    if result.recommendation == "planned":
        head = (
            f"recommendation: use the planned sizes ({planned[graphs]} graphs): {name} "
            f"{result.gain:,.3g}{unit} {better} than vLLM's default held out, outside the "
            f"\u00b1{result.band:,.3g}{unit} band of model error and noise"
        )
    elif result.reason == "no measurable difference":
        # a loss is said as one, never as a negative gain (issue 40)
        change = (
            f"the plan's {name} gain of {result.gain:+,.3g}{unit} is"
            if result.gain >= 0
            else f"the plan's {name} is worse by {-result.gain:,.3g}{unit},"
        )
        head = (
            f"recommendation: no measurable difference: keep vLLM's default "
            f"({default[graphs]} graphs): {change} inside the "
            f"\u00b1{result.band:,.3g}{unit} band of model error and noise"
        )
    else:
        head = (
            f"recommendation: keep vLLM's default ({default[graphs]} graphs): the plan is "
            f"worse held out on {name} ({-result.gain:+,.3g}{unit}, band "
            f"\u00b1{result.band:,.3g}{unit})"
        )
    lines = [
        head,
        f"{_one_line(model)} on {_one_line(device)}"
        + (
            f" x{cfg.tensor_parallel_size} (TP {cfg.tensor_parallel_size}, figures per GPU)"
            if cfg.tensor_parallel_size > 1
            else ""
        )
        + f", vLLM {cfg.vllm_version}, max_num_seqs {cfg.max_num_seqs}, "
        f"max_num_batched_tokens {cfg.max_num_batched_tokens}; objective: {result.objective}; "
        f"figures: {result.source}; traffic: {_one_line(result.trace_label)}",
        f"{'held out':<16}{'planned':>14}{'vLLM default':>14}{'change':>12}  90% band   (last "
        f"{result.holdout:g} of the trace: {result.steps_held_out} steps; planned on the "
        f"first {result.steps_planned})",
    ]
    lines += [f"{a:<16}{b:>14}{c:>14}{e:>12}  {f}".rstrip() for a, b, c, e, f in delta_rows(result)]
    if result.pareto:
        lines.append(
            "Pareto set (mean step, graph memory, capture time"
            + (", p99 TTFT" if all("p99_ttft_ms" in f for f in result.pareto.values()) else "")
            + "): "
            + ", ".join(result.pareto)
        )
    from ..models.registry import check_model_tensor_parallel

    # the serve line is printed only for a model vLLM can load at this TP size
    check_model_tensor_parallel(model, cfg.tensor_parallel_size)
    if serve_model:
        target, note = shlex.quote(check_text("serve_model", serve_model)), ""
    else:
        target, note = serve_target(model)
    lines.append(f"vllm serve {target} {result.flags}" + (f"  # {note}" if note else ""))
    return lines[:MAX_VERDICT_LINES]


_UNITS = {"mean_step_ms": " ms", "p99_ttft_ms": " ms", "throughput_tok_s": " tok/s",
          "capture_s": " s", "kv_cache_tokens": " tokens"}  # fmt: skip


def verdict_text(result: TuneResult, *, model: str, device: str, serve_model: str = "") -> str:
    """:func:`verdict_lines` joined by newlines."""
    return "\n".join(verdict_lines(result, model=model, device=device, serve_model=serve_model))
