"""The ``tune`` verdict as text: at most 12 lines a person reads, and the flags to paste.

:func:`verdict_lines` draws a :class:`~cgdispatch.plan.tune_result.TuneResult`: what to run
(the plan, or "keep vLLM's default"), the held-out deltas against vLLM's default (mean step
time, p99 TPOT and throughput when the replay gave them, graphs, capture seconds, graph
memory, KV-cache tokens gained), the exact ``vllm serve`` command and where every figure
comes from. It decides nothing: the recommendation is the result's.
"""

from __future__ import annotations

import math

from ..plan.tune_result import OBJECTIVES, TuneResult

__all__ = [
    "verdict_lines",
    "verdict_text",
    "delta_rows",
    "traffic_note",
    "overload_line",
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
        if key == "p99_ttft_ms" and result.overload is not None:
            band = "queueing: not judged"
        elif key == objective_key:
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
    """The name ``vllm serve`` takes for registry model ``model``: the Hugging Face id its
    published shapes come from, else ``model`` itself."""
    from ..models.arch_spec import ARCHITECTURES

    spec = ARCHITECTURES.get(model)
    first = spec.source.split()[0] if spec is not None else ""
    return first if "/" in first else model


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
    if result.reason == "overloaded":
        head = (
            f"recommendation: keep vLLM's default ({default[graphs]} graphs): no {name} "
            f"verdict, it would measure the queue; it needs {_fleet(result)} or lower traffic"
        )
    elif result.recommendation == "planned":
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
    if result.replicas > 1:
        head += f" (per replica, of {result.replicas})"
    lines = [] if result.overload is None else [overload_line(result)]
    lines += [
        head,
        *([f"note: {'; '.join(result.notes)}"] if result.notes else []),
        f"{model} on {device}"
        + (
            f" x{cfg.tensor_parallel_size} (TP {cfg.tensor_parallel_size}, figures per GPU)"
            if cfg.tensor_parallel_size > 1
            else ""
        )
        + f", vLLM {cfg.vllm_version}, max_num_seqs {cfg.max_num_seqs}, "
        f"max_num_batched_tokens {cfg.max_num_batched_tokens}; objective: {result.objective}; "
        f"figures: {result.source}; traffic: {result.trace_label}" + traffic_note(result),
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
    serve = f"vllm serve {serve_model or serve_name(model)} {result.flags}"
    if len(lines) + 1 > MAX_VERDICT_LINES and result.pareto:  # the serve line stays
        lines = [line for line in lines if not line.startswith("Pareto set")]
    return [*lines[: MAX_VERDICT_LINES - 1], serve]


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


_UNITS = {"mean_step_ms": " ms", "p99_ttft_ms": " ms", "throughput_tok_s": " tok/s",
          "capture_s": " s", "kv_cache_tokens": " tokens"}  # fmt: skip


def verdict_text(result: TuneResult, *, model: str, device: str, serve_model: str = "") -> str:
    """:func:`verdict_lines` joined by newlines."""
    return "\n".join(verdict_lines(result, model=model, device=device, serve_model=serve_model))
