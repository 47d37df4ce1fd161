"""Readable views of the dispatcher: the modes truth table, the keys per mode, and dispatch
decisions with the reason for each.

Everything here asks ``CUDAGraphMode`` and ``CudagraphDispatcher`` and reformats their
answers; nothing decides anything on its own, so these tables cannot drift from the
dispatcher. Needs pandas for the tables (``explain_dispatch`` itself does not).
"""

from __future__ import annotations

import random
from collections.abc import Callable, Iterable, Sequence
from typing import TYPE_CHECKING, Any

from ..core.batch import BatchDescriptor
from ..core.config import GraphConfig
from ..core.dispatcher import CudagraphDispatcher, ready_dispatcher
from ..core.modes import CUDAGraphMode

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


def modes_table() -> pd.DataFrame:
    """The truth table of every ``CUDAGraphMode``: its routines and what it needs and has."""
    import pandas as pd

    rows = [
        {
            "mode": m.name,
            "value": str(m.value),
            "decode_mode": m.decode_mode().name,
            "mixed_mode": m.mixed_mode().name,
            "separate_routine": m.separate_routine(),
            "requires_piecewise": m.requires_piecewise_compilation(),
            "has_full": m.has_full_cudagraphs(),
            "valid_runtime_mode": m.valid_runtime_modes(),
        }
        for m in CUDAGraphMode
    ]
    return pd.DataFrame(rows)


def keys_table(config: GraphConfig | CudagraphDispatcher) -> pd.DataFrame:
    """Every registered key, in capture order (PIECEWISE then FULL, each largest first)."""
    import pandas as pd

    dispatcher = ready_dispatcher(config, record_stats=False)
    rows = [
        {
            "runtime_mode": mode.name,
            "num_tokens": d.num_tokens,
            "num_reqs": d.num_reqs,
            "uniform": d.uniform,
            "has_lora": d.has_lora,
            "num_active_loras": d.num_active_loras,
        }
        for mode, descs in dispatcher.get_capture_descs()
        for d in descs
    ]
    columns = ["runtime_mode", "num_tokens", "num_reqs", "uniform", "has_lora", "num_active_loras"]
    frame = pd.DataFrame(rows, columns=columns)
    return frame.astype({"num_reqs": "Int64"})  # None (any request count) shows as <NA>


def keys_summary(config: GraphConfig, modes: Iterable[CUDAGraphMode] | None = None) -> pd.DataFrame:
    """How many graphs each mode registers for ``config``'s sizes, LoRA cases and limits.

    One row per mode (all five by default): FULL keys (mixed and uniform-decode), PIECEWISE
    keys, total graphs and the largest captured size. A mode the config cannot run (e.g.
    PIECEWISE with ``splitting_ops=[]``) gets zero keys and the reason in ``note``.
    """
    import pandas as pd

    rows = []
    for mode in CUDAGraphMode if modes is None else modes:
        mode = CUDAGraphMode.parse(mode)
        row: dict[str, Any] = {
            "mode": mode.name,
            "full_mixed": 0,
            "full_uniform": 0,
            "piecewise": 0,
        }
        try:
            dispatcher = ready_dispatcher(config.replace(cudagraph_mode=mode), record_stats=False)
        except ValueError as err:
            row.update(graphs=0, largest_size=0, note=str(err))
            rows.append(row)
            continue
        full = dispatcher.cudagraph_keys[CUDAGraphMode.FULL]
        row["full_uniform"] = sum(d.uniform for d in full)
        row["full_mixed"] = len(full) - row["full_uniform"]
        row["piecewise"] = len(dispatcher.cudagraph_keys[CUDAGraphMode.PIECEWISE])
        every = full | dispatcher.cudagraph_keys[CUDAGraphMode.PIECEWISE]
        row.update(
            graphs=len(every),
            largest_size=max((d.num_tokens for d in every), default=0),
            note="",
        )
        rows.append(row)
    return pd.DataFrame(rows)


def _reason(
    dispatcher: CudagraphDispatcher,
    num_tokens: int,
    uniform: bool,
    loras: int,
    cascade: bool,
    mode: CUDAGraphMode,
    desc: BatchDescriptor,
) -> str:
    """One line saying why the dispatcher answered (mode, desc)."""
    config_mode = dispatcher.cudagraph_mode
    if mode is CUDAGraphMode.FULL:
        kind = "uniform-decode" if desc.uniform else "mixed-batch"
        return f"FULL graph ({kind} key), {desc.num_tokens - num_tokens} padding tokens"
    if mode is CUDAGraphMode.PIECEWISE:
        why = (
            " (cascade attention excludes FULL)"
            if cascade and config_mode.has_full_cudagraphs()
            else ""
        )
        if (
            not why
            and uniform
            and config_mode.separate_routine()
            and config_mode.has_full_cudagraphs()
        ):
            why = f" (no uniform-decode FULL graph for {desc.num_tokens} tokens)"
        return f"PIECEWISE graph, attention runs eagerly between pieces{why}"
    if config_mode is CUDAGraphMode.NONE:
        return "cudagraph_mode is NONE: every step runs eagerly"
    if num_tokens == 0:
        return "empty batch: nothing to run"
    if num_tokens > dispatcher.max_capture_size:
        return f"{num_tokens} tokens exceed the largest capture size {dispatcher.max_capture_size}"
    if loras and dispatcher.config.lora_enabled and dispatcher._lora_case(True, loras) is None:
        return f"no graphs were captured for {loras} active LoRAs"
    if cascade and config_mode.has_full_cudagraphs() and not config_mode.has_piecewise_cudagraphs():
        return f"cascade attention excludes FULL and {config_mode} has no PIECEWISE graphs"
    if config_mode is CUDAGraphMode.FULL_DECODE_ONLY and not uniform:
        return "FULL_DECODE_ONLY runs mixed batches eagerly"
    return f"no key matches the batch padded to {dispatcher.padded_size(num_tokens)} tokens"


def _predict_ms(cost_model: Any, mode: CUDAGraphMode, padded_size: int) -> float:
    """One step's time from a cost model (or what ``as_cost_model`` turns into one)."""
    import numpy as np  # with the cost models' numpy/pandas: only when a cost model is given

    from ..plan.costs import as_cost_model

    model = as_cost_model(cost_model)
    return float(np.asarray(model.step_time_ms(mode, np.array([padded_size]))).reshape(-1)[0])


def explain_dispatch(
    config: GraphConfig | CudagraphDispatcher,
    num_tokens: int,
    uniform: bool = False,
    loras: int = 0,
    cascade: bool = False,
    cost_model: CostModel | Callable[..., Any] | None = None,
) -> dict[str, Any]:
    """The dispatcher's decision for one batch, as a dict a person (or a widget) can show.

    Keys: num_tokens, uniform_decode, active_loras, cascade, runtime_mode (name),
    padded_size, num_reqs (None = any count), padding_tokens, key (the BatchDescriptor's
    repr), reason, and predicted_ms (None without a cost model). Raises ``ValueError`` for
    a batch the scheduler could never form (more tokens than max_num_batched_tokens, more
    active LoRAs than max_loras). It does not count the call in the dispatcher's stats
    unless a counting dispatcher is passed in. ``cost_model``: a
    :class:`~cgdispatch.plan.costs.CostModel` (the device model, a latency table, the affine
    model) or a callable ``f(mode, num_tokens)`` that works on arrays
    (:func:`~cgdispatch.plan.costs.as_cost_model`); it is asked at the padded size.
    """
    dispatcher = ready_dispatcher(config, record_stats=False)
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
    mode, desc = dispatcher.dispatch(
        num_tokens,
        uniform_decode=bool(uniform),
        has_lora=loras > 0,
        num_active_loras=loras,
        use_cascade_attn=bool(cascade),
    )
    predicted_ms = None if cost_model is None else _predict_ms(cost_model, mode, desc.num_tokens)
    return {
        "num_tokens": num_tokens,
        "uniform_decode": bool(uniform),
        "active_loras": loras,
        "cascade": bool(cascade),
        "runtime_mode": mode.name,
        "padded_size": desc.num_tokens,
        "num_reqs": desc.num_reqs,
        "padding_tokens": desc.num_tokens - num_tokens,
        "key": repr(desc),
        "reason": _reason(dispatcher, num_tokens, bool(uniform), loras, bool(cascade), mode, desc),
        "predicted_ms": predicted_ms,
    }


def dispatch_table(
    config: GraphConfig | CudagraphDispatcher,
    num_tokens: Sequence[int],
    uniform_decode: Sequence[bool] = (False, True),
    cascade: Sequence[bool] = (False,),
    loras: Sequence[int] = (0,),
    cost_model: CostModel | Callable[..., Any] | None = None,
) -> pd.DataFrame:
    """:func:`explain_dispatch` for every combination, one row each (without the key repr)."""
    import pandas as pd

    dispatcher = ready_dispatcher(config, record_stats=False)
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


def random_batches(
    config: GraphConfig, steps: int, *, decode_fraction: float = 0.8, seed: int = 0
) -> list[tuple[int, bool]]:
    """Synthetic (num_tokens, uniform_decode) steps: uniform random, not a real workload.

    A ``decode_fraction`` of steps are uniform decodes of 1..max_num_seqs requests (q tokens
    each); the others are mixed batches of 1..max_num_batched_tokens tokens. Use the
    workload module's traces for anything you want to draw conclusions from.
    """
    if not 0.0 <= decode_fraction <= 1.0:
        raise ValueError(f"decode_fraction={decode_fraction} is invalid: it must be in [0, 1]")
    rng = random.Random(seed)
    q, max_reqs, max_tokens = (
        config.uniform_decode_query_len,
        config.max_num_seqs,
        config.max_num_batched_tokens,
    )
    out = []
    for _ in range(steps):
        if rng.random() < decode_fraction:
            out.append((min(rng.randint(1, max_reqs) * q, max_tokens), True))
        else:
            out.append((rng.randint(1, max_tokens), False))
    return out


def dispatch_stats(config: GraphConfig, batches: Iterable[tuple[int, bool]]) -> pd.DataFrame:
    """Dispatch every (num_tokens, uniform_decode) batch and return ``stats_frame()``."""
    dispatcher = ready_dispatcher(config, record_stats=True)
    for n, uniform in batches:
        dispatcher.dispatch(n, uniform_decode=uniform)
    return dispatcher.stats_frame()
