"""What the capture layer reads of a graph key, for either generation of vLLM's dispatch.

V1 (vLLM 0.33) keys graphs by ``BatchDescriptor``; generation 2 (vLLM 0.34) by
``BatchExecutionDescriptor`` (docs/semantics_v2.md). Wrappers key their graphs by either
(both are frozen and hashable) and never ask which; the runner, the capture report and
the replay check need two facts more, answered here in one place.
"""

from __future__ import annotations

from ..core.batch import BatchDescriptor
from ..core.config import GraphConfig
from ..core.generation import GraphKey
from ..core.v2.cudagraph_manager import BatchExecutionDescriptor

__all__ = ["GraphKey", "GRAPH_KEY_TYPES", "uniform_query_len", "is_uniform_key"]

# the descriptor classes a forward context may carry (checked by set_forward_context)
GRAPH_KEY_TYPES = (BatchDescriptor, BatchExecutionDescriptor)


def uniform_query_len(key: GraphKey, config: GraphConfig) -> int | None:
    """q of a uniform-decode key (every request has exactly q tokens), None otherwise.

    Generation 2 stores q in the key (``uniform_token_count``); a V1 key only says
    ``uniform``, and q is the config's ``1 + num_speculative_tokens``.
    """
    return key.query_len(config.uniform_decode_query_len)


def is_uniform_key(key: GraphKey) -> bool:
    """Whether the key is a uniform-decode graph's (V1 ``uniform``; gen 2 a uniform count)."""
    return key.query_len(1) is not None
