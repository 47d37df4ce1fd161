"""Why V1's ``CudagraphDispatcher`` answered a step as it did, in one line (the
explorer's and ``explain_dispatch``'s "why"; docs/semantics_v1.md has the rules)."""

from __future__ import annotations

from ..explain_lines import piecewise_line, plain_eager_line
from ..modes import CUDAGraphMode

__all__ = ["explain"]


def explain(dispatcher, num_tokens, num_reqs, uniform, loras, cascade, answer) -> str:  # noqa: ANN001
    """``Generation.explain``: one line saying why the V1 dispatcher answered ``answer``
    (a ``StepDispatch``; V1 reads no request count)."""
    config_mode, mode, desc = dispatcher.cudagraph_mode, answer.runtime_mode, answer.key
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
        return piecewise_line(why)
    plain = plain_eager_line(config_mode, num_tokens)
    if plain is not None:
        return plain
    if num_tokens > dispatcher.max_capture_size:
        return f"{num_tokens} tokens exceed the largest capture size {dispatcher.max_capture_size}"
    cfg = dispatcher.config
    if cfg.lora_enabled and not cfg.cudagraph_specialize_lora and not loras:
        return (
            "without cudagraph_specialize_lora only LoRA graphs (max_loras + 1 adapters) are "
            "captured: batches without LoRA run eagerly"
        )
    if loras and cfg.lora_enabled and dispatcher._lora_case(True, loras) not in cfg.lora_cases():
        return f"no graphs were captured for {loras} active LoRAs"
    if cascade and config_mode.has_full_cudagraphs() and not config_mode.has_piecewise_cudagraphs():
        return f"cascade attention excludes FULL and {config_mode} has no PIECEWISE graphs"
    if config_mode is CUDAGraphMode.FULL_DECODE_ONLY and not uniform:
        return "FULL_DECODE_ONLY runs mixed batches eagerly"
    return f"no key matches the batch padded to {dispatcher.padded_size(num_tokens)} tokens"
