"""Why generation 2's ``CudaGraphManager`` answered a step as it did, in one line (the
explorer's and ``explain_dispatch``'s "why")."""

from __future__ import annotations

from ..explain_lines import piecewise_line, plain_eager_line
from ..modes import CUDAGraphMode

__all__ = ["explain"]


def explain(manager, num_tokens, num_reqs, uniform, loras, cascade, answer) -> str:  # noqa: ANN001
    """``Generation.explain``: one line saying why generation 2's manager answered
    ``answer`` (docs/semantics_v2.md rules 32-35: a uniform decode tries its decode graph,
    then the token-keyed graphs)."""
    config_mode, desc = manager.cudagraph_mode, answer.key
    padding = answer.padded_tokens - num_tokens
    decode_graphs = (
        config_mode.separate_routine() and config_mode.decode_mode() is CUDAGraphMode.FULL
    )
    if answer.runtime_mode is CUDAGraphMode.FULL:
        if desc.uniform_token_count is not None:
            kind = f"decode graph: {desc.num_reqs} requests of {desc.uniform_token_count} tokens"
        else:
            kind = "token-keyed graph"
        return f"FULL graph ({kind}), {padding} padding tokens"
    if answer.runtime_mode is CUDAGraphMode.PIECEWISE:
        why = ""
        if uniform and decode_graphs:
            why = f" (no compatible decode FULL graph for {num_reqs} requests)"
        return piecewise_line(why)
    plain = plain_eager_line(config_mode, num_tokens)
    if plain is not None:
        return plain
    widest = max((d.num_tokens for d in manager.capture_order()), default=0)
    if num_tokens > widest:
        return f"{num_tokens} tokens exceed the widest graph ({widest} tokens)"
    if config_mode is CUDAGraphMode.FULL_DECODE_ONLY and not uniform:
        return "FULL_DECODE_ONLY runs mixed batches eagerly"
    return f"no graph is compatible with {num_reqs} requests of {num_tokens} tokens"
