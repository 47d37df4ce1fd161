"""What :func:`~cgdispatch.plan.tune.tune` decided, and the figures behind it.

:class:`TuneResult` holds the recommendation (``"planned"`` or ``"vllm default"``), both
ladders' figures held out and in-sample, the deltas (planned minus vLLM's default, held
out) and the ``vllm serve`` flags to paste. :meth:`TuneResult.as_dict` is the CLI's
``--json`` form. It computes nothing: the verdict text is drawn by
:mod:`cgdispatch.views.tune_verdict`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import pandas as pd

from ..core.config import GraphConfig
from ..core.jsonout import strict_json
from .gen2_ladder import Gen2Ladder
from .ladder_compare import Ladder

__all__ = [
    "StartupCosts",
    "TuneResult",
    "ladder_figures",
    "ladder_sizes",
    "LATENCY_TOLERANCE",
    "RECOMMENDATIONS",
    "OBJECTIVES",
    "LATENCY_KEYS",
]

RECOMMENDATIONS = ("planned", "vllm default")
# tune's objectives: name -> (figure, lower is better). ``p99-ttft`` is the default when the
# held-out replay runs vLLM's scheduler over requests (what a server's users see first),
# ``step`` for a trace of steps
OBJECTIVES: dict[str, tuple[str, bool]] = {
    "step": ("mean_step_ms", True),
    "p99-ttft": ("p99_ttft_ms", True),
    "throughput": ("throughput_tok_s", False),
    "startup": ("capture_s", True),
    "kv": ("kv_cache_tokens", False),
}
LATENCY_KEYS = frozenset({"p99_ttft_ms", "p99_tpot_ms", "throughput_tok_s", "num_preemptions"})
# one replay's resolution of a latency figure (a share of it), part of a latency objective's
# band: below saturation throughput is the arrival rate, and a p99 moves by one step's time
LATENCY_TOLERANCE = 0.01


@dataclass(frozen=True)
class StartupCosts:
    """What capturing one ladder costs at engine start-up.

    ``graph_memory_bytes``: the graph pool; ``capture_s``: capture time; ``kv_cache_tokens``:
    KV-cache tokens left after weights, activations and graphs (None when the estimate has
    no device memory: then only differences in graph memory are turned into tokens).
    """

    graph_memory_bytes: float
    capture_s: float
    kv_cache_tokens: float | None = None


_FIGURES = (
    "num_graphs",
    "num_captured_graphs",
    "mean_step_ms",
    "eager_step_share",
    "padded_token_ratio",
    "graph_memory_bytes",
    "capture_s",
    "p99_ttft_ms",
    "p99_tpot_ms",
    "throughput_tok_s",
    "num_preemptions",
)


def ladder_sizes(ladder: Ladder) -> list[int] | dict[str, list[int]]:
    """A ladder as JSON: a token list (V1), or vLLM 0.34's two lists by field name."""
    if isinstance(ladder, Gen2Ladder):
        return ladder.as_dict()
    return [int(s) for s in ladder]


def ladder_figures(
    table: pd.DataFrame, name: str, startup: StartupCosts | None = None
) -> dict[str, Any]:
    """The figures of ladder ``name`` in a :func:`compare` table, as plain numbers; the
    start-up estimate, when given, replaces graph memory and capture time and adds
    ``kv_cache_tokens``."""
    row = table.loc[table["ladder"] == name]
    if len(row) != 1:
        raise ValueError(f"ladder {name!r} is not one row of the table: {list(table['ladder'])}")
    row = row.iloc[0]
    out: dict[str, Any] = {k: float(row[k]) for k in _FIGURES if k in row.index}
    out["num_graphs"] = int(row["num_graphs"])
    if "num_captured_graphs" in row.index:
        out["num_captured_graphs"] = int(row["num_captured_graphs"])
    if startup is not None:
        out["graph_memory_bytes"] = float(startup.graph_memory_bytes)
        out["capture_s"] = float(startup.capture_s)
        if startup.kv_cache_tokens is not None:
            out["kv_cache_tokens"] = float(startup.kv_cache_tokens)
    return out


@dataclass(frozen=True)
class TuneResult:
    """The outcome of one ``tune``: what to run, and why.

    ``held_out`` and ``in_sample`` map ``"planned"`` and ``"vllm default"`` to their figures
    (:func:`ladder_figures`); ``deltas`` are planned minus default held out
    (``mean_step_pct`` relative, ``kv_cache_tokens`` gained); ``flags`` are the ``vllm serve``
    flags of the recommendation. ``source`` labels the modelled figures, ``trace_label`` the
    traffic.
    """

    recommendation: str  # "planned" or "vllm default"
    planned: Ladder
    default: Ladder
    held_out: dict[str, dict[str, Any]]
    in_sample: dict[str, dict[str, Any]]
    deltas: dict[str, float]
    flags: str
    config: GraphConfig
    source: str
    trace_label: str
    holdout: float
    steps_planned: int
    steps_held_out: int
    # the objective the plan is judged on (OBJECTIVES), its gain (> 0: the plan is better,
    # in the figure's unit) and the band the models' errors and held-out noise could make
    # alone; the plan is recommended only when gain > band
    objective: str = "step"
    gain: float = 0.0
    band: float = 0.0
    reason: str = ""
    errors: Any = None  # the ModelErrors behind the bands
    step_band: Any = None  # StepBand of the mean step difference
    # the ladders no other beats held out (tune_bands.pareto_set): name -> figures
    pareto: dict[str, dict[str, Any]] = field(default_factory=dict)
    # compare's rows for every ladder replayed ("held out", "in sample"): the plan, vLLM's
    # default and any ladders tune was asked to replay beside them (not in --json)
    tables: dict[str, pd.DataFrame] = field(default_factory=dict, compare=False, repr=False)
    # what the traffic was as vLLM would see it (set by plan.tune_run): max_model_len, the
    # requests rejected for reaching it, the trace's ideal prefix hit rate (None without
    # hash_ids), the client's max_concurrency (None: open loop)
    traffic: dict[str, Any] = field(default_factory=dict)
    # the held-out traffic one replica cannot hold (workload.sustain.Sustainability of the
    # default ladder's replay; None when it holds it or no requests were replayed) and the
    # smallest replica count that holds it (None: none up to overload.MAX_REPLICAS)
    overload: Any = None
    replicas_needed: int | None = None
    replicas: int = 1  # the arrivals split across this many replicas; figures are one's
    balance: str = "round-robin"  # how they were split (workload.replicas.BALANCES)
    # what differs in kind between the two windows, and a plan's decode sizes kept
    notes: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        if self.recommendation not in RECOMMENDATIONS:
            raise ValueError(
                f"recommendation={self.recommendation!r} is invalid: one of {RECOMMENDATIONS}"
            )

    @property
    def recommended(self) -> Ladder:
        """The ladder to run: the plan, or vLLM's default."""
        return self.planned if self.recommendation == "planned" else self.default

    def as_dict(self) -> dict[str, Any]:
        """The ``--json`` form: recommendation, held_out, in_sample, deltas, flags, sizes and
        the labels (vllm_version, source, trace, holdout)."""
        return {
            "recommendation": self.recommendation,
            "vllm_version": self.config.vllm_version,
            "held_out": self.held_out,
            "in_sample": self.in_sample,
            "deltas": self.deltas,
            "flags": self.flags,
            "sizes": {
                "planned": ladder_sizes(self.planned),
                "vllm default": ladder_sizes(self.default),
            },
            "source": self.source,
            "trace": self.trace_label,
            "holdout": self.holdout,
            "steps_planned": self.steps_planned,
            "steps_held_out": self.steps_held_out,
            "objective": self.objective,
            "gain": self.gain,
            "band": self.band,
            "reason": self.reason,
            "uncertainty": self.uncertainty(),
            "pareto": self.pareto,
            "traffic": self.traffic,
            "overload": None if self.overload is None else self.overload.as_dict(),
            "replicas_needed": self.replicas_needed,
            "replicas": self.replicas,
            "balance": self.balance,
            "notes": list(self.notes),
        }

    def pareto_table(self) -> pd.DataFrame:
        """The Pareto set as a table: one row per ladder, the figures it was judged on."""
        keys = ("num_captured_graphs", "mean_step_ms", "p99_ttft_ms", "graph_memory_bytes",
                "capture_s", "kv_cache_tokens")  # fmt: skip
        rows = {name: {k: f.get(k) for k in keys if k in f} for name, f in self.pareto.items()}
        return pd.DataFrame.from_dict(rows, orient="index").rename_axis("ladder")

    def uncertainty(self) -> dict[str, float]:
        """Relative band (fraction) of each modelled figure: the models' errors on data
        they were not fitted to (:mod:`~cgdispatch.estimate.uncertainty`)."""
        e = self.errors
        if e is None:
            return {}
        # absolute times carry the kernel model's error on measured steps
        u = e.step_kernels or e.step_time
        step = {k: u for k in ("mean_step_ms", "p99_ttft_ms", "p99_tpot_ms",
                               "throughput_tok_s")}  # fmt: skip
        return {**step, "graph_memory_bytes": e.graph_memory, "capture_s": e.capture,
                "kv_cache_tokens": e.kv_tokens}  # fmt: skip

    def to_json(self) -> str:
        return strict_json(self.as_dict())
