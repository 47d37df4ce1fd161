"""The same batches dispatched by both generations of vLLM's graph dispatch, side by side.

One set of engine settings (mode, scheduler limits, speculative decoding, LoRA) is built
for every registered release (V1's ``CudagraphDispatcher``, generation 2's
``CudaGraphManager``) with :func:`~cgdispatch.core.generation.for_generation`, each resolved
as its model runner resolves it, and every answer comes from the class itself through
:mod:`cgdispatch.core.generation`. A table of chosen batches and a figure of padded tokens per
batch size; neither measures anything.
"""

from __future__ import annotations

import warnings
from collections.abc import Sequence
from typing import TYPE_CHECKING

from ..core.config import GraphConfig
from ..core.generation import (
    GENERATIONS,
    VLLM_VERSIONS,
    dispatch_step,
    for_generation,
    make_graph_dispatcher,
    padded_token_table,
)
from ..core.modes import AttentionCGSupport, CUDAGraphMode
from .sources import SourcedFigure, label_source

if TYPE_CHECKING:
    import pandas as pd
    from matplotlib.figure import Figure

__all__ = ["VLLM_VERSIONS", "generation_configs", "generations_table", "generations_figure"]

_COLORS = ("#1f77b4", "#d62728", "#2ca02c", "#9467bd")  # by release, oldest first
SOURCE = f"computed from the config (vLLM {' and '.join(VLLM_VERSIONS)} dispatch rules)"


_LINE_STYLE = {"graph": {"drawstyle": "steps-post"}, "eager": {"ls": "--"}}


def _style(version: str) -> dict[str, float | str]:
    """The oldest release drawn wide and faint underneath: where releases agree, all show."""
    at = list(GENERATIONS).index(version)
    oldest = at == 0
    return {
        "color": _COLORS[at % len(_COLORS)],
        "lw": 3.5 if oldest else 1.3,
        "graph_alpha": 0.55 if oldest else 1.0,
        "eager_alpha": 0.4 if oldest else 0.8,
    }


def generation_configs(
    config: GraphConfig, attention_support: AttentionCGSupport = AttentionCGSupport.ALWAYS
) -> dict[str, GraphConfig]:
    """``{release: config}`` for every release (V1 first), each resolved for the backend.

    Pass the config before ``resolve()``: V1's resolution rounds sizes for speculative
    decoding, and rounded sizes would reach generation 2 as (deprecated) legacy sizes.
    Legacy sizes given by the user reach it that way on purpose, as the same flags would;
    its deprecation warning is silenced here.
    """
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        return {v: for_generation(config, v).resolve(attention_support) for v in VLLM_VERSIONS}


def generations_table(
    config: GraphConfig,
    num_tokens: Sequence[int],
    uniform_decode: Sequence[bool] = (False, True),
    attention_support: AttentionCGSupport = AttentionCGSupport.ALWAYS,
) -> pd.DataFrame:
    """One row per batch: each generation's runtime mode, padded tokens and graph requests.

    Uniform decode batches have ``cdiv(num_tokens, q)`` requests and other batches one
    (:func:`~cgdispatch.core.generation.default_num_reqs`); ``same`` says whether both
    generations run the batch in the same mode at the same padded size.
    """
    import pandas as pd

    dispatchers = {
        v: make_graph_dispatcher(c, record_stats=False)
        for v, c in generation_configs(config, attention_support).items()
    }
    rows = []
    for uniform in uniform_decode:
        for n in num_tokens:
            row: dict[str, object] = {"num_tokens": n, "uniform_decode": bool(uniform)}
            answers = {v: dispatch_step(d, n, None, bool(uniform)) for v, d in dispatchers.items()}
            for v, a in answers.items():
                row[f"mode_{v}"] = a.runtime_mode.name
                row[f"padded_{v}"] = a.padded_tokens
                row[f"graph_reqs_{v}"] = a.padded_reqs
            row["same"] = len({(a.runtime_mode, a.padded_tokens) for a in answers.values()}) == 1
            rows.append(row)
    frame = pd.DataFrame(rows)
    return frame.astype({f"graph_reqs_{v}": "Int64" for v in VLLM_VERSIONS})


def generations_figure(
    config: GraphConfig,
    *,
    max_num_tokens: int | None = None,
    attention_support: AttentionCGSupport = AttentionCGSupport.ALWAYS,
    source: str = SOURCE,
) -> Figure:
    """Padded tokens per batch size under both generations: mixed batches (left) and
    uniform decode batches (right, sizes that are multiples of q).

    Solid steps: the batch replays a graph of that many tokens; dashed: it runs eagerly at
    its own size. ``max_num_tokens`` defaults to max_num_batched_tokens.
    """
    import numpy as np

    configs = generation_configs(config, attention_support)
    top = config.max_num_batched_tokens if max_num_tokens is None else max_num_tokens
    q = config.uniform_decode_query_len
    fig = SourcedFigure(figsize=(10, 4.4), layout="constrained")
    axes = fig.subplots(1, 2, sharey=True)
    for ax, uniform in zip(axes, (False, True)):
        n = np.arange(q if uniform else 1, top + 1, q if uniform else 1)
        ax.plot(n, n, ls=":", lw=0.8, color="0.6", label="no padding")
        for version, cfg in configs.items():
            table = padded_token_table(
                make_graph_dispatcher(cfg, record_stats=False), uniform, max_tokens=top
            )
            padded = np.array(table.padded_tokens)[n]
            graphed = np.array([table.runtime_modes[i] is not CUDAGraphMode.NONE for i in n])
            label = f"vLLM {version} ({cfg.cudagraph_mode})"
            style = _style(version)
            # the graphed sizes as a step line; the eager ones dashed, drawn only when any
            for kind, shown in (("graph", graphed), ("eager", ~graphed)):
                if kind == "graph" or shown.any():
                    ax.plot(
                        n,
                        np.where(shown, padded, np.nan),
                        color=style["color"],
                        lw=style["lw"],
                        alpha=style[f"{kind}_alpha"],
                        label=f"{label}: {kind}",
                        gid=f"{kind}-{version}",
                        **_LINE_STYLE[kind],
                    )
        ax.set_xscale("log", base=2)
        ax.set_yscale("log", base=2)
        ax.set_xlabel("num_tokens (unpadded batch)")
        kind = f"uniform decode (q={q})" if uniform else "mixed batches"
        ax.set_title(f"{kind}: padded size per generation")
        ax.legend(loc="upper left", fontsize=7)
    axes[0].set_ylabel("padded size (tokens)")
    return label_source(fig, source)
