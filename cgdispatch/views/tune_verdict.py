"""The ``tune`` verdict as text: at most 14 lines a person reads, and the flags to paste.

:func:`verdict_lines` draws a :class:`~cgdispatch.plan.tune_result.TuneResult`: what to run
(the plan, or "keep vLLM's default"), the held-out deltas against vLLM's default (mean step
time, p99 TPOT and throughput when the replay gave them, graphs, capture seconds, graph
memory, KV-cache tokens gained), the exact ``vllm serve`` command and where every figure
comes from. It decides nothing: the recommendation is the result's.
"""

from __future__ import annotations

import math
import re
import shlex
import textwrap
from pathlib import Path

from ..core.config import GraphConfig
from ..core.validate import check_text
from ..plan.tune_result import OBJECTIVES, TuneResult
from .numbers import band as _band
from .numbers import count, duration, duration_s, format_in, nbytes

__all__ = [
    "verdict_lines",
    "verdict_text",
    "wrap_line",
    "delta_rows",
    "engine_flags",
    "traffic_note",
    "overload_line",
    "serve_name",
    "serve_target",
    "MAX_VERDICT_LINES",
]

# the overload line, the recommendation, a note, the header, the column heads, seven
# figures, the Pareto set and the serve line: every line has its place, none is cut
MAX_VERDICT_LINES = 14
_P, _D = "planned", "vllm default"


def _pct(delta: float, base: float) -> str:
    finite = math.isfinite(delta) and math.isfinite(base)
    return f"{100 * delta / base:+.2f}%" if base and finite else "n/a"


def _ms(value: float) -> str:
    """``value`` ms for a person, or "n/a" where it is undefined (p99 TPOT of one-token
    requests)."""
    return duration(value)


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
        if key == "p99_ttft_ms" and result.overload is not None:
            band = "queueing: not judged"
        elif key == objective_key:
            band = f"{_band(result.band, _UNITS.get(key, ''))} (judged)"
        rows.append((_NAMES.get(key, key), fmt(p[key]), fmt(d[key]), change, band))

    add("mean_step_ms", _ms, f"{delta['mean_step_pct']:+.2f}%")
    for key, fmt in (("p99_ttft_ms", _ms),
                     ("throughput_tok_s", lambda v: f"{count(v)} tok/s")):  # fmt: skip
        if key in delta:
            add(key, fmt, _pct(delta[key], d[key]))
    graphs = "num_captured_graphs" if "num_captured_graphs" in p else "num_graphs"
    rows.append(("graphs", str(p[graphs]), str(d[graphs]), f"{p[graphs] - d[graphs]:+d}", ""))
    if "capture_s" in delta:
        add("capture_s", duration_s, duration_s(delta["capture_s"], sign=True))
    if "graph_memory_bytes" in delta:
        add("graph_memory_bytes", nbytes, nbytes(delta["graph_memory_bytes"], sign=True))
    if "kv_cache_tokens" in delta:
        both = p.get("kv_cache_tokens") is not None and d.get("kv_cache_tokens") is not None
        if both:
            add("kv_cache_tokens", count, count(delta["kv_cache_tokens"], sign=True))
        else:
            rows.append(("KV-cache tokens", "", "", count(delta["kv_cache_tokens"], sign=True), ""))
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
    head = _head(result, planned, default, name, unit, lower)
    if result.replicas > 1:
        head += f" (per replica, of {result.replicas})"
    lines = [] if result.overload is None else [overload_line(result)]
    lines += [
        head,
        *([f"note: {'; '.join(result.notes)}"] if result.notes else []),
        f"{_one_line(model)} on {_one_line(device)}"
        + (
            f" x{cfg.tensor_parallel_size} (TP {cfg.tensor_parallel_size}, figures per GPU)"
            if cfg.tensor_parallel_size > 1
            else ""
        )
        + f", vLLM {_release_shown(cfg)}, max_num_seqs {cfg.max_num_seqs}, "
        f"max_num_batched_tokens {cfg.max_num_batched_tokens}; objective: {result.objective}; "
        f"figures: {result.source}; traffic: {_one_line(result.trace_label)}"
        + traffic_note(result),
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
    serve = f"vllm serve {target} {result.flags}" + (f"  # {note}" if note else "")
    return [*lines, serve]


def _head(
    result: TuneResult, planned: dict, default: dict, name: str, unit: str, lower: bool
) -> str:
    """The recommendation line: keep or use, and why (the gain against its band, a loss said
    as one, or overload)."""

    def shown(value: float, sign: bool = False) -> str:
        return format_in(value, unit, sign=sign)

    graphs = "num_captured_graphs" if "num_captured_graphs" in planned else "num_graphs"
    better = "lower" if lower else "higher"
    if result.reason == "overloaded":
        head = (
            f"recommendation: keep vLLM's default ({default[graphs]} graphs): no {name} "
            f"verdict, it would measure the queue; it needs {_fleet(result)} or lower traffic"
        )
    elif result.recommendation == "planned":
        head = (
            f"recommendation: use the planned sizes ({planned[graphs]} graphs): {name} "
            f"{shown(result.gain)} {better} than vLLM's default held out, outside the "
            f"{_band(result.band, unit)} band of model error and noise"
        )
    elif result.reason == "no measurable difference":
        # a loss is said as one, never as a negative gain (issue 40)
        change = (
            f"the plan's {name} gain of {shown(result.gain, True)} is"
            if result.gain >= 0
            else f"the plan's {name} is worse by {shown(-result.gain)},"
        )
        head = (
            f"recommendation: no measurable difference: keep vLLM's default "
            f"({default[graphs]} graphs): {change} inside the "
            f"{_band(result.band, unit)} band of model error and noise"
        )
    else:
        head = (
            f"recommendation: keep vLLM's default ({default[graphs]} graphs): the plan is "
            f"worse held out on {name} ({shown(-result.gain, True)}, band "
            f"{_band(result.band, unit)})"
        )
    return head


def _fleet(result: TuneResult) -> str:
    """ "N replicas (--replicas N)", or that no fleet the search tried holds the traffic."""
    n = result.replicas_needed
    if n is None:
        from ..plan.overload import MAX_REPLICAS

        return f"more than {MAX_REPLICAS} replicas with --balance {result.balance}"
    return f"{n} replicas (--replicas {n})"


def overload_line(result: TuneResult) -> str:
    """The verdict's first line when one replica cannot hold the held-out traffic: the
    waiting queue at the start and end of the window, offered and served tokens a second,
    and the replicas that would hold it."""
    o = result.overload
    who = (
        "one replica"
        if result.replicas == 1
        else f"one replica's share ({result.replicas} replicas, {result.balance})"
    )
    judged = (
        "no verdict on p99 TTFT"
        if result.reason == "overloaded"
        else "a p99 TTFT verdict needs them or lower traffic: judged on "
        f"{_NAMES.get(OBJECTIVES[result.objective][0], result.objective)}, not on queueing"
    )
    return (
        f"overloaded: {who} cannot hold the held-out traffic: waiting requests "
        f"{o.queue_start:,.0f} -> {o.queue_end:,.0f} from the start to the end of the "
        f"{o.window_s:,.0f} s window, {o.offered_tok_s:,.0f} tok/s offered vs "
        f"{o.served_tok_s:,.0f} served (model); {_fleet(result)} would hold it; {judged}"
    )


def traffic_note(result: TuneResult) -> str:
    """The header's traffic facts: the client's concurrency limit, the requests vLLM would
    reject for ``max_model_len``, the trace's ideal prefix hit rate; "" when none apply."""
    t = result.traffic
    parts = []
    if t.get("max_concurrency") is not None:
        parts.append(f"closed loop, at most {t['max_concurrency']} requests in flight")
    if t.get("rejected_requests"):
        n = t["rejected_requests"]
        parts.append(
            f"{n:,} request{'s' if n > 1 else ''} rejected as vLLM would (prompt >= "
            f"max_model_len {t['max_model_len']:,})"
        )
    if t.get("prefix_hit_rate") is not None:
        parts.append(f"prefix hit rate (trace): {100 * t['prefix_hit_rate']:.1f}%")
    return "".join(f"; {p}" for p in parts)


# the unit each objective's figure is kept in (numbers.format_in says it for a person)
_UNITS = {"mean_step_ms": "ms", "p99_ttft_ms": "ms", "p99_tpot_ms": "ms",
          "throughput_tok_s": "tok/s", "capture_s": "s", "kv_cache_tokens": "tokens",
          "graph_memory_bytes": "bytes"}  # fmt: skip


def verdict_text(
    result: TuneResult, *, model: str, device: str, serve_model: str = "", width: int | None = None
) -> str:
    """:func:`verdict_lines` joined by newlines. ``width``: wrap each line at word
    boundaries to at most that many characters where it can (a notebook's output breaks a
    long line anywhere, mid-word too): continuation lines are indented, and the ``vllm
    serve`` command is split before its flags with a shell ``\\`` so it still pastes."""
    lines = verdict_lines(result, model=model, device=device, serve_model=serve_model)
    if width is not None:
        lines = [part for line in lines for part in wrap_line(line, width)]
    return "\n".join(lines)


def wrap_line(line: str, width: int) -> list[str]:
    """``line`` in pieces of at most ``width`` characters, broken at spaces only (a word
    longer than ``width`` keeps its own piece); a ``vllm serve`` command one flag a piece,
    each but the last ending in a shell line continuation."""
    if width < 20:
        raise ValueError(f"width={width!r} is invalid: give at least 20 characters, or None")
    if len(line) <= width:
        return [line]
    if line.startswith("vllm serve "):
        flags = re.split(r" (?=--)", line)
        return [("    " if i else "") + f + (" \\" if i + 1 < len(flags) else "")
                for i, f in enumerate(flags)]  # fmt: skip
    return textwrap.wrap(
        line, width, subsequent_indent="  ", break_long_words=False, break_on_hyphens=False
    )


def engine_flags(result: TuneResult) -> dict[str, str]:
    """What each engine takes for the verdict of ``result``: ``vllm`` the flags the verdict
    prints (``result.flags``); ``sglang`` and ``trtllm`` the planned sizes when the plan is
    recommended, else a line saying to keep their defaults. One source for a notebook's
    flags and its verdict, so that they cannot differ."""
    from ..plan.ladder_compare import export_plan

    if result.recommendation == "planned":
        planned = export_plan(result.planned, result.config)
        return {"vllm": result.flags, "sglang": planned["sglang"], "trtllm": planned["trtllm"]}
    keep = "keep the engine's default capture sizes (the verdict keeps vLLM's default)"
    return {"vllm": result.flags, "sglang": keep, "trtllm": keep}


def _release_shown(cfg: GraphConfig) -> str:
    """The release as the user named it (``0.10.1.1``), with the generation whose dispatch
    it replays where the two differ (``0.10.1.1, dispatch of 0.33``)."""
    release = cfg.release
    return release if release == cfg.vllm_version else f"{release}, dispatch of {cfg.vllm_version}"
