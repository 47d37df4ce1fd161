"""What the capture layer reads of a graph key, for either generation of vLLM's dispatch.

Each release keys graphs by its own descriptor (``Generation.graphs.key_type``: V1's
``BatchDescriptor``, generation 2's ``BatchExecutionDescriptor``). Wrappers key their
graphs by any of them (all are frozen and hashable) and never ask which; the runner, the
capture report and the replay check need two facts more, which every key answers.
"""

from __future__ import annotations

from ..core.config import GraphConfig
from ..core.generation import GENERATIONS, GraphKey

__all__ = ["GraphKey", "graph_key_types", "uniform_query_len", "is_uniform_key"]


def graph_key_types() -> tuple[type, ...]:
    """The descriptor classes a forward context may carry: every registered release's
    ``Generation.graphs.key_type`` (checked by set_forward_context)."""
    return tuple(dict.fromkeys(g.graphs.key_type for g in GENERATIONS.values()))


def uniform_query_len(key: GraphKey, config: GraphConfig) -> int | None:
    """q of a uniform-decode key (every request has exactly q tokens), None otherwise.

    Generation 2 stores q in the key (``uniform_token_count``); a V1 key only says
    ``uniform``, and q is the config's ``1 + num_speculative_tokens``.
    """
    return key.query_len(config.uniform_decode_query_len)


def is_uniform_key(key: GraphKey) -> bool:
    """Whether the key is a uniform-decode graph's (V1 ``uniform``; gen 2 a uniform count)."""
    return key.query_len(1) is not None
