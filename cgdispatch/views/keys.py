"""Tables of what a config captures: the modes' truth table, the graphs of one mode in
capture order, and the graph counts of every mode, for either generation of vLLM's
dispatch (V1 ``BatchDescriptor`` keys, generation 2 ``BatchExecutionDescriptor`` s).

Every row comes from :func:`cgdispatch.core.generation.capture_keys` (the dispatcher classes'
own lists), so these tables cannot drift from what is captured.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

from ..core.config import GraphConfig
from ..core.generation import GENERATIONS, GraphDispatcher, GraphKey, capture_keys, generation_of
from ..core.modes import CUDAGraphMode

if TYPE_CHECKING:
    import pandas as pd

__all__ = ["modes_table", "keys_table", "keys_summary", "KEY_COLUMNS"]

# the columns of keys_table per release: the descriptor's own fields (Generation.graphs.key_columns)
KEY_COLUMNS: dict[str, list[str]] = {r: list(g.graphs.key_columns) for r, g in GENERATIONS.items()}
_OPTIONAL_INTS = ("num_reqs", "uniform_token_count", "max_query_len")  # None shows as <NA>


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
            "valid_runtime_mode": m.is_valid_runtime_mode(),
        }
        for m in CUDAGraphMode
    ]
    return pd.DataFrame(rows)


def keys_table(config: GraphConfig | GraphDispatcher) -> pd.DataFrame:
    """Every graph captured, in capture order (PIECEWISE then FULL, each widest first).

    Columns are the generation's descriptor fields (:data:`KEY_COLUMNS`): V1
    ``BatchDescriptor`` (``uniform``, ``has_lora``), generation 2
    ``BatchExecutionDescriptor`` (``uniform_token_count``, ``max_query_len``,
    ``num_ubatches``). ``num_reqs`` <NA>: the graph takes any request count.
    """
    import pandas as pd

    columns = list(generation_of(config).graphs.key_columns)
    rows = [
        {"runtime_mode": k.runtime_mode.name, **{c: getattr(k.key, c) for c in columns[1:]}}
        for k in capture_keys(config)
    ]
    frame = pd.DataFrame(rows, columns=columns)
    return frame.astype({c: "Int64" for c in _OPTIONAL_INTS if c in columns})


def is_decode_key(key: GraphKey) -> bool:
    """A graph for uniform decode batches: V1 ``uniform``; generation 2 a uniform token
    count (decode graphs and microbatch twins) or a query-length bound (varlen decode)."""
    return key.decode_graph


def keys_summary(config: GraphConfig, modes: Iterable[CUDAGraphMode] | None = None) -> pd.DataFrame:
    """How many graphs each mode captures for ``config``'s sizes, LoRA cases and limits.

    One row per mode (all five by default): FULL graphs for mixed batches, FULL graphs for
    uniform decode batches, PIECEWISE graphs, the total and the widest graph (tokens). A
    mode the config cannot run (e.g. PIECEWISE with ``splitting_ops=[]``) gets zero graphs
    and the reason in ``note``. Either generation: the config's ``vllm_version`` decides.
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
            keys = capture_keys(config.replace(cudagraph_mode=mode))
        except ValueError as err:
            row.update(graphs=0, largest_size=0, note=str(err))
            rows.append(row)
            continue
        full = [k.key for k in keys if k.runtime_mode is CUDAGraphMode.FULL]
        row["full_uniform"] = sum(is_decode_key(d) for d in full)
        row["full_mixed"] = len(full) - row["full_uniform"]
        row["piecewise"] = len(keys) - len(full)
        row.update(
            graphs=len(keys), largest_size=max((k.num_tokens for k in keys), default=0), note=""
        )
        rows.append(row)
    return pd.DataFrame(rows)
