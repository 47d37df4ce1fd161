"""The ``tune`` verdict as text: at most 12 lines a person reads, and the flags to paste.

:func:`verdict_lines` draws a :class:`~cgdispatch.plan.tune_result.TuneResult`: what to run
(the plan, or "keep vLLM's default"), the held-out deltas against vLLM's default (mean step
time, p99 TPOT and throughput when the replay gave them, graphs, capture seconds, graph
memory, KV-cache tokens gained), the exact ``vllm serve`` command and where every figure
comes from. It decides nothing: the recommendation is the result's.
"""

from __future__ import annotations

import math

from ..plan.tune_result import TuneResult, losing_figures

__all__ = ["verdict_lines", "verdict_text", "delta_rows", "MAX_VERDICT_LINES"]

MAX_VERDICT_LINES = 12
_MIB = 1 << 20
_P, _D = "planned", "vllm default"


def _pct(delta: float, base: float) -> str:
    finite = math.isfinite(delta) and math.isfinite(base)
    return f"{100 * delta / base:+.2f}%" if base and finite else "n/a"


def _ms(value: float) -> str:
    """``value`` in ms, or "n/a" where it is undefined (p99 TPOT of one-token requests)."""
    return f"{value:.2f} ms" if math.isfinite(value) else "n/a"


def delta_rows(result: TuneResult) -> list[tuple[str, str, str, str]]:
    """(figure, planned, vLLM default, change) per held-out figure, formatted with units."""
    p, d, delta = result.held_out[_P], result.held_out[_D], result.deltas
    rows = [
        (
            "mean step time",
            f"{p['mean_step_ms']:.3f} ms",
            f"{d['mean_step_ms']:.3f} ms",
            f"{delta['mean_step_pct']:+.2f}%",
        )
    ]
    if "p99_tpot_ms" in delta:
        rows.append(
            (
                "p99 TPOT",
                _ms(p["p99_tpot_ms"]),
                _ms(d["p99_tpot_ms"]),
                _pct(delta["p99_tpot_ms"], d["p99_tpot_ms"]),
            )
        )
    if "throughput_tok_s" in delta:
        rows.append(
            (
                "throughput",
                f"{p['throughput_tok_s']:,.0f} tok/s",
                f"{d['throughput_tok_s']:,.0f} tok/s",
                _pct(delta["throughput_tok_s"], d["throughput_tok_s"]),
            )
        )
    rows.append(
        (
            "eager steps",
            f"{100 * p['eager_step_share']:.1f}%",
            f"{100 * d['eager_step_share']:.1f}%",
            f"{100 * delta['eager_step_share']:+.1f} pt",
        )
    )
    rows.append(
        ("graphs", str(p["num_graphs"]), str(d["num_graphs"]), f"{delta['num_graphs']:+.0f}")
    )
    if "capture_s" in delta:
        rows.append(
            (
                "capture time",
                f"{p['capture_s']:.2f} s",
                f"{d['capture_s']:.2f} s",
                f"{delta['capture_s']:+.2f} s",
            )
        )
    if "graph_memory_bytes" in delta:
        rows.append(
            (
                "graph memory",
                f"{p['graph_memory_bytes'] / _MIB:.1f} MiB",
                f"{d['graph_memory_bytes'] / _MIB:.1f} MiB",
                f"{delta['graph_memory_bytes'] / _MIB:+.1f} MiB",
            )
        )
    if "kv_cache_tokens" in delta:
        both = p.get("kv_cache_tokens") is not None and d.get("kv_cache_tokens") is not None
        rows.append(
            (
                "KV-cache tokens",
                f"{p['kv_cache_tokens']:,.0f}" if both else "",
                f"{d['kv_cache_tokens']:,.0f}" if both else "",
                f"{delta['kv_cache_tokens']:+,.0f}",
            )
        )
    return rows


def serve_name(model: str) -> str:
    """The name ``vllm serve`` takes for registry model ``model``: the Hugging Face id its
    published shapes come from, else ``model`` itself."""
    from ..models.architectures import ARCHITECTURES

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
    cfg, delta = result.config, result.deltas
    planned, default = result.held_out[_P], result.held_out[_D]
    if result.recommendation == "planned":
        head = (
            f"recommendation: use the planned {planned['num_graphs']} sizes: "
            f"{-delta['mean_step_pct']:.2f}% faster mean step than vLLM's default held out"
        )
    elif "mean_step_ms" in losing_figures(delta, default):
        head = (
            f"recommendation: keep vLLM's default ({default['num_graphs']} sizes): the plan is "
            f"not faster held out ({delta['mean_step_pct']:+.2f}% mean step)"
        )
    else:
        lost = losing_figures(delta, default)
        names = {"p99_tpot_ms": "p99 TPOT", "throughput_tok_s": "throughput"}
        worse = ", ".join(f"{names.get(k, k)} {100 * delta[k] / default[k]:+.1f}%" for k in lost)
        head = (
            f"recommendation: keep vLLM's default ({default['num_graphs']} sizes): the plan's "
            f"steps are {-delta['mean_step_pct']:.2f}% faster but it loses held out on {worse}"
        )
    lines = [
        head,
        f"{model} on {device}, vLLM {cfg.vllm_version}, max_num_seqs {cfg.max_num_seqs}, "
        f"max_num_batched_tokens {cfg.max_num_batched_tokens}; figures: {result.source}; "
        f"traffic: {result.trace_label}",
        f"{'held out':<16}{'planned':>16}{'vLLM default':>16}{'change':>12}   (last "
        f"{result.holdout:g} of the trace: {result.steps_held_out} steps; planned on the "
        f"first {result.steps_planned})",
    ]
    lines += [f"{a:<16}{b:>16}{c:>16}{e:>12}" for a, b, c, e in delta_rows(result)]
    lines.append(f"vllm serve {serve_model or serve_name(model)} {result.flags}")
    return lines[:MAX_VERDICT_LINES]


def verdict_text(result: TuneResult, *, model: str, device: str, serve_model: str = "") -> str:
    """:func:`verdict_lines` joined by newlines."""
    return "\n".join(verdict_lines(result, model=model, device=device, serve_model=serve_model))
