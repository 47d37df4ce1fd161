"""Compare capture-size ladders on a trace, and export a plan as each engine's settings.

``compare`` replays one trace under every ladder through the what-if engine (so through
the real dispatcher of the config's generation); ``engine_ladders`` gives the engines'
defaults for a config (facts in docs/references.md, implemented in
:mod:`cgdispatch.core.ladders`; vLLM 0.34's from its own resolution); ``export_plan``
writes the flags. A ladder is a list of token sizes, or for vLLM 0.34 a
:class:`~cgdispatch.plan.gen2_ladder.Gen2Ladder` (prefill token sizes and decode request
sizes). Nothing here measures: times and memory come from the cost model given.
"""

from __future__ import annotations

import json
from collections.abc import Iterable

import pandas as pd
import yaml

from ..core.config import GraphConfig
from ..core.jsonout import strict_json
from ..core.ladder_shape import SplitLadders
from ..core.ladders import (
    every_size_ladder,
    powers_of_two_ladder,
    sglang_ladder,
    trtllm_ladder,
)
from ..workload.scheduler import SchedulerLimits
from .costs import CostModel
from .gen2_ladder import Gen2Ladder, as_ladder, ladder_config, resolved_ladder
from .ladder_latency import KvBlocksFn, ladder_latency
from .whatif import evaluate

__all__ = ["engine_ladders", "compare", "export_plan", "COMPARE_COLUMNS", "Ladder"]

# a V1 token ladder, or vLLM 0.34's two lists (a plain list also runs on 0.34: legacy field)
Ladder = list[int] | Gen2Ladder

COMPARE_COLUMNS = [
    "ladder",
    "sizes",
    "num_graphs",
    "num_captured_graphs",
    "step_share_FULL",
    "step_share_PIECEWISE",
    "eager_step_share",
    "padding_tokens",
    "padded_token_ratio",
]
_COST_COLUMNS = ["mean_step_ms", "total_time_s", "graph_memory_bytes", "capture_s", "source"]
# generation 2 only: the two lists each row captured
_GEN2_COLUMNS = ["prefill_sizes", "decode_sizes"]


def engine_ladders(config: GraphConfig | None = None) -> dict[str, Ladder]:
    """The engines' default ladders for ``config``'s scheduler limits, on a common max.

    One token list (V1): vLLM's ladder is the one it derives from
    max_num_seqs, max_num_batched_tokens and the speculative tokens. vLLM 0.34: a
    :class:`Gen2Ladder` of its defaults (prefill token sizes and decode request sizes, as
    its config resolution gives them for this device and mode). SGLang's, TensorRT-LLM's,
    powers of two and every size are token lists cut at the same largest size (vLLM's
    largest token size), so that the rows differ in ladder shape, not coverage.
    """
    config = GraphConfig() if config is None else config
    # the release's own default ladders (LadderShape.default_sizes), as a plan value
    vllm = as_ladder(config, config.generation.ladder.default_sizes(config))
    if isinstance(vllm, Gen2Ladder):
        top = max(vllm.prefill_token_sizes, default=config.max_num_seqs)
    else:
        top = vllm[-1]
    return {
        "vllm": vllm,
        "sglang": sglang_ladder(top),
        "trtllm": trtllm_ladder(top),
        "pow2": powers_of_two_ladder(top),
        "every": every_size_ladder(top),
    }


def compare(
    trace: pd.DataFrame,
    ladders: dict[str, Ladder] | None = None,
    *,
    config: GraphConfig | None = None,
    cost_model: CostModel | None = None,
    requests: pd.DataFrame | None = None,
    scheduler: SchedulerLimits | None = None,
    kv_blocks: KvBlocksFn | None = None,
) -> pd.DataFrame:
    """One row per ladder: graphs, share of steps per runtime mode, padding waste, and with
    a cost model expected step time and graph memory (columns :data:`COMPARE_COLUMNS`, plus
    ``mean_step_ms``, ``total_time_s``, ``graph_memory_bytes``, ``capture_s``, ``source``).

    ``num_graphs`` counts capture sizes (what ``max_graphs`` limits), ``num_captured_graphs``
    the graphs the mode captures (e.g. a PIECEWISE and a FULL decode graph per size).
    ``padded_token_ratio`` is padding tokens / real tokens over graph-replayed steps.
    Each ladder replaces ``config``'s sizes and is resolved (V1: multiples of q with spec
    decode; see :func:`~cgdispatch.plan.gen2_ladder.ladder_config`). ``sizes`` lists the
    token sizes the config records; for vLLM 0.34 ``prefill_sizes`` and ``decode_sizes``
    (request counts) give its two lists. ``vllm_version`` names the generation.

    With ``requests`` (a request table), each ladder also gets the latency columns
    :data:`~cgdispatch.workload.latency.LATENCY_COLUMNS` (p50/p99 TTFT and TPOT, throughput,
    preemptions) from vLLM's own scheduler run with steps priced by the ladder's dispatch
    (:func:`~cgdispatch.plan.ladder_latency.ladder_latency`; ``scheduler`` overrides the
    config's limits, ``kv_blocks(config)`` gives each ladder's KV capacity).
    """
    config = GraphConfig() if config is None else config
    ladders = engine_ladders(config) if ladders is None else ladders
    if not isinstance(ladders, dict) or not ladders:
        raise ValueError("ladders must be a non-empty dict {name: [capture sizes]}")
    rows = []
    for name, sizes in ladders.items():
        empty = sizes.num_sizes == 0 if isinstance(sizes, Gen2Ladder) else not len(sizes)
        if empty:
            raise ValueError(f"ladder {name!r} has no sizes: give at least one capture size")
        cfg = ladder_config(config, sizes)
        summary = evaluate(cfg, trace, cost_model).summary
        row = {"ladder": name, "sizes": list(cfg.cudagraph_capture_sizes)}
        row.update({c: summary[c] for c in COMPARE_COLUMNS[2:]})
        row.update({c: summary[c] for c in _COST_COLUMNS if c in summary})
        shape = cfg.generation.ladder
        if len(shape.ladders) > 1:  # each list of the shape: prefill_sizes, decode_sizes
            row.update((lad.flag, sizes) for lad, sizes in zip(shape.ladders, shape.sizes(cfg)))
        row["vllm_version"] = summary["vllm_version"]
        if requests is not None:
            row.update(
                ladder_latency(cfg, requests, cost_model, limits=scheduler, kv_blocks=kv_blocks)
            )
        rows.append(row)
    return pd.DataFrame(rows)


def kinds_absent(trace: pd.DataFrame) -> set[str]:
    """``"decode"`` and/or ``"prefill"``: the kinds of step ``trace`` has none of (the
    ``leave_default`` of :func:`export_plan`). A trace whose step kinds are unknown (a bare
    num_tokens column: a mixed step may be a decode) lacks neither."""
    if not trace.attrs.get("step_kinds_known", True):
        return set()
    kinds = set(trace["uniform_decode"].map({True: "decode", False: "prefill"}))
    return {"decode", "prefill"} - kinds


def export_plan(
    sizes: Ladder, config: GraphConfig | None = None, *, leave_default: Iterable[str] = ()
) -> dict[str, str]:
    """The settings each engine takes for these capture sizes.

    ``vllm``: ``vllm serve`` flags (``--compilation-config`` JSON and scheduler limits);
    ``vllm_compilation_config``: the JSON alone; ``sglang``: ``--cuda-graph-bs ...
    --cuda-graph-max-bs N``; ``trtllm``: the ``cuda_graph_config`` YAML block. SGLang and
    TensorRT-LLM graph decode batches by request count, so their sizes are the token sizes
    divisible by q = 1 + speculative tokens, divided by q (plan on decode steps for them).

    With a config of a release with two ladders (vLLM 0.34) the vLLM flags carry
    ``prefill_cudagraph_capture_token_sizes`` and ``decode_cudagraph_capture_request_sizes``
    (not the deprecated ``cudagraph_capture_sizes``; a token list is split as vLLM 0.34
    splits it), and SGLang / TensorRT-LLM take the decode request sizes (when none are
    planned, the prefill sizes divisible by q, divided by q, up to ``max_num_seqs``).

    ``leave_default``: ``"decode"`` and/or ``"prefill"``, the kinds of step a trace did not
    have (the prefill node of a disaggregated deployment sees no decodes). Their lists are
    left out of the flags, so each engine keeps its default for them, and the entry
    ``left_at_default`` says which and why; SGLang and TensorRT-LLM, which graph decodes
    only, are then left out too.
    """
    config = GraphConfig() if config is None else config
    leave = set(leave_default)
    if leave - {"decode", "prefill"}:
        raise ValueError(
            f"leave_default={sorted(leave)!r} is invalid: give 'decode' and/or 'prefill'"
        )
    cfg = ladder_config(config, sizes)
    q = config.uniform_decode_query_len
    split = isinstance(cfg.generation.ladder, SplitLadders)  # the flags of two ladders
    cfg, batch, dropped = _request_sizes(cfg, q, leave, split)
    compilation = cfg.to_vllm()
    serve = cfg.to_vllm_args()
    if dropped:
        kept = {k: v for k, v in json.loads(compilation).items() if k not in dropped}
        trimmed = json.dumps(kept, separators=(",", ":"))
        serve = serve.replace(compilation, trimmed)
        compilation = trimmed
    out = {"vllm": serve, "vllm_compilation_config": compilation}
    if "decode" not in leave and batch:
        trt = {
            "cuda_graph_config": {
                "enable_padding": True,
                "batch_sizes": batch,
                "max_batch_size": batch[-1],
            }
        }
        out["sglang"] = (
            f"--cuda-graph-bs {' '.join(map(str, batch))} --cuda-graph-max-bs {batch[-1]}"
        )
        out["trtllm"] = yaml.safe_dump(trt, default_flow_style=None, sort_keys=False)
    notes = _left_at_default(leave, split, bool(batch), q)
    if notes:
        out["left_at_default"] = "; ".join(notes)
    return out


def _request_sizes(
    cfg: GraphConfig, q: int, leave: set[str], split: bool
) -> tuple[GraphConfig, list[int], list[str]]:
    """The config written with its ladder's own fields, the decode batch sizes (requests)
    other engines take, and the vLLM keys left at their defaults."""
    dropped: list[str] = []
    if not split:
        return cfg, sorted({s // q for s in cfg.cudagraph_capture_sizes if s % q == 0}), dropped
    cfg = ladder_config(cfg, resolved_ladder(cfg))  # written as the two new fields
    prefill = cfg.prefill_cudagraph_capture_token_sizes or []
    # no decode graphs planned (a trace without decodes): the prefill sizes, as V1's
    batch = list(cfg.decode_cudagraph_capture_request_sizes or []) or sorted(
        {s // q for s in prefill if s % q == 0 and s // q <= cfg.max_num_seqs}
    )
    if "decode" in leave:
        dropped += [
            "decode_cudagraph_capture_request_sizes",
            "max_decode_cudagraph_capture_requests",
        ]
    if "prefill" in leave:
        dropped += ["prefill_cudagraph_capture_token_sizes", "max_prefill_cudagraph_capture_tokens"]
    return cfg, batch, dropped


def _left_at_default(leave: set[str], split: bool, has_batch: bool, q: int) -> list[str]:
    """Why each engine's list is left at its default, one note each."""
    notes = []
    if "decode" in leave:
        what = "vLLM's decode request sizes, " if split else ""
        notes.append(
            f"{what}SGLang's and TensorRT-LLM's batch sizes (the trace has no decode steps "
            "to plan them on)"
        )
    elif not has_batch:  # a prefill-only plan: no size is a decode batch of q tokens a request
        notes.append(
            f"SGLang's and TensorRT-LLM's batch sizes (they graph decodes by request count, "
            f"and no planned size is a decode batch of q={q} tokens a request)"
        )
    if "prefill" in leave and split:
        notes.append("vLLM's prefill token sizes (the trace has no prefill or mixed steps)")
    return notes


def compare_json(table: pd.DataFrame) -> str:
    """The CLI's ``--json`` form: ``{"ladders": [{name, sizes, num_graphs, padded_token_ratio,
    eager_step_share, ...}, ...]}``."""
    records = table.rename(columns={"ladder": "name"}).to_dict(orient="records")
    return strict_json({"ladders": records})
