"""Readable views of dispatch decisions, with the reason for each, for either generation of
vLLM's graph dispatch (the config's ``vllm_version``: V1 or generation 2).

Everything here asks the dispatcher classes through :mod:`cgdispatch.core.generation` and
reformats their answers; nothing decides anything on its own, so these tables cannot
drift from the dispatcher. The tables of what is captured (``modes_table``,
``keys_table``, ``keys_summary``) live in :mod:`cgdispatch.views.keys` and are re-exported
here. Needs pandas for the tables (``explain_dispatch`` itself does not).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Iterable, Sequence
from typing import TYPE_CHECKING, Any

from ..core.config import GraphConfig
from ..core.generation import (
    GraphDispatcher,
    default_num_reqs,
    dispatch_step,
    generation_of,
    make_graph_dispatcher,
)
from ..core.modes import CUDAGraphMode
from ..core.stats import stats_table
from ..workload.synthetic import random_batches
from .keys import keys_summary, keys_table, modes_table

if TYPE_CHECKING:
    import pandas as pd

    from ..plan.costs import CostModel

__all__ = [
    "modes_table",
    "keys_table",
    "keys_summary",
    "explain_dispatch",
    "dispatch_table",
    "random_batches",
    "dispatch_stats",
]


def _predict_ms(cost_model: Any, mode: CUDAGraphMode, padded_size: int) -> float:
    """One step's time from a cost model (or what ``as_cost_model`` turns into one)."""
    import numpy as np  # with the cost models' numpy/pandas: only when a cost model is given

    from ..plan.costs import as_cost_model

    model = as_cost_model(cost_model)
    return float(np.asarray(model.step_time_ms(mode, np.array([padded_size]))).reshape(-1)[0])


def explain_dispatch(
    config: GraphConfig | GraphDispatcher,
    num_tokens: int,
    uniform: bool = False,
    loras: int = 0,
    cascade: bool = False,
    cost_model: CostModel | Callable[..., Any] | None = None,
    *,
    num_reqs: int | None = None,
) -> dict[str, Any]:
    """The dispatcher's decision for one batch, as a dict a person (or a widget) can show.

    Either generation: a config's ``vllm_version`` picks the class
    (:func:`~cgdispatch.core.generation.make_graph_dispatcher`), or pass a dispatcher.
    Keys: vllm_version, num_tokens, batch_reqs (the step's requests: ``num_reqs``, default
    :func:`~cgdispatch.core.generation.default_num_reqs`; V1 does not read it),
    uniform_decode, active_loras, cascade, runtime_mode (name), padded_size, num_reqs (the
    graph's; None = any count), padding_tokens, key (the descriptor's repr), reason, and
    predicted_ms (None without a cost model). Raises ``ValueError`` for a batch the
    scheduler could never form (more tokens than max_num_batched_tokens, more requests than
    max_num_seqs or tokens, more active LoRAs than max_loras) and for cascade attention on
    generation 2 (its runner has none). It does not count the call in a V1 dispatcher's
    stats unless a counting dispatcher is passed in. ``cost_model``: a
    :class:`~cgdispatch.plan.costs.CostModel` (the device model, a latency table, the affine
    model) or a callable ``f(mode, num_tokens)`` that works on arrays
    (:func:`~cgdispatch.plan.costs.as_cost_model`); it is asked at the padded size.
    """
    dispatcher = make_graph_dispatcher(config, record_stats=False)
    cfg = dispatcher.config
    for name, value in (("num_tokens", num_tokens), ("active LoRAs", loras)):
        if isinstance(value, bool) or not isinstance(value, int) or value < 0:
            raise ValueError(f"{name}={value!r} is invalid: it must be an integer >= 0")
    if num_tokens > cfg.max_num_batched_tokens:
        raise ValueError(
            f"num_tokens={num_tokens} is invalid: the scheduler never forms a step above "
            f"max_num_batched_tokens={cfg.max_num_batched_tokens}; lower it or raise that limit"
        )
    if loras > cfg.max_loras:
        fix = "set max_loras in the config" if not cfg.lora_enabled else "lower it"
        raise ValueError(
            f"active LoRAs {loras} is invalid: at most max_loras={cfg.max_loras} adapters "
            f"are active in a step; {fix}"
        )
    # a stated count is checked against the scheduler; the default is what dispatch_step
    # derives (a "uniform decode" wider than q * max_num_seqs keeps its cdiv, as V1 allows)
    if isinstance(num_reqs, int) and not isinstance(num_reqs, bool) and num_reqs > cfg.max_num_seqs:
        raise ValueError(
            f"num_reqs={num_reqs} is invalid: the scheduler never forms a step above "
            f"max_num_seqs={cfg.max_num_seqs} requests; lower it or raise that limit"
        )
    reqs = default_num_reqs(cfg, num_tokens, bool(uniform)) if num_reqs is None else num_reqs
    answer = dispatch_step(
        dispatcher, num_tokens, reqs, bool(uniform), loras, use_cascade_attn=bool(cascade)
    )
    reason = generation_of(dispatcher).graphs.explain(
        dispatcher, num_tokens, reqs, bool(uniform), loras, bool(cascade), answer
    )
    predicted_ms = (
        None
        if cost_model is None
        else _predict_ms(cost_model, answer.runtime_mode, answer.padded_tokens)
    )
    return {
        "vllm_version": generation_of(dispatcher).release,
        "num_tokens": num_tokens,
        "batch_reqs": reqs,
        "uniform_decode": bool(uniform),
        "active_loras": loras,
        "cascade": bool(cascade),
        "runtime_mode": answer.runtime_mode.name,
        "padded_size": answer.padded_tokens,
        "num_reqs": answer.key.num_reqs,
        "padding_tokens": answer.padded_tokens - num_tokens,
        "key": repr(answer.key),
        "reason": reason,
        "predicted_ms": predicted_ms,
    }


def dispatch_table(
    config: GraphConfig | GraphDispatcher,
    num_tokens: Sequence[int],
    uniform_decode: Sequence[bool] = (False, True),
    cascade: Sequence[bool] = (False,),
    loras: Sequence[int] = (0,),
    cost_model: CostModel | Callable[..., Any] | None = None,
) -> pd.DataFrame:
    """:func:`explain_dispatch` for every combination, one row each (without the key repr).

    Cascade attention is V1's alone: ``cascade=[True]`` on a generation-2 config is refused.
    """
    import pandas as pd

    dispatcher = make_graph_dispatcher(config, record_stats=False)
    rows = [
        explain_dispatch(dispatcher, n, u, lo, c, cost_model)
        for n in num_tokens
        for u in uniform_decode
        for c in cascade
        for lo in loras
    ]
    frame = pd.DataFrame(rows).drop(columns=["key"])
    if cost_model is None:
        frame = frame.drop(columns=["predicted_ms"])
    return frame.astype({"num_reqs": "Int64"})


def dispatch_stats(
    config: GraphConfig | GraphDispatcher,
    batches: Iterable[tuple[int, bool] | tuple[int, bool, int]],
) -> pd.DataFrame:
    """Dispatch every batch and count the answers, for either generation.

    A batch is ``(num_tokens, uniform_decode)`` or ``(num_tokens, uniform_decode,
    num_reqs)`` (default request count: :func:`~cgdispatch.core.generation.default_num_reqs`).
    Columns (those of ``CudagraphDispatcher.stats_frame``): runtime_mode, padded_size,
    calls, real_tokens, padded_tokens, padding_tokens; FULL, PIECEWISE, NONE rows, each by
    padded size. Eager steps are counted at their own size.
    """
    dispatcher = make_graph_dispatcher(config, record_stats=False)
    # each distinct batch is dispatched once: a trace repeats its shapes many times
    seen = Counter((b[0], bool(b[1]), b[2] if len(b) > 2 else None) for b in batches)
    rows = []
    for (n, uniform, reqs), calls in seen.items():
        answer = dispatch_step(dispatcher, n, reqs, uniform)
        padded = answer.padded_tokens
        rows.append((answer.runtime_mode.name, padded, calls, calls * n, calls * padded))
    return stats_table(rows)
