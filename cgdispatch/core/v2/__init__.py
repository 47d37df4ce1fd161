"""vLLM 0.34: generation 2's ``CudaGraphManager``, keyed on ``BatchExecutionDescriptor``.

This package is generation 2's one home: its config rules (:mod:`.config`), its manager
(:mod:`.cudagraph_manager`) and the :class:`~cgdispatch.core.generation.Generation` that
tells the rest of cgdispatch about them, registered on import.
"""

from __future__ import annotations

from dataclasses import fields
from typing import Any

from ..generation import (
    CaptureKey,
    Generation,
    SchedulerRules,
    StepDispatch,
    dispatch_step,
    register_generation,
)
from ..modes import CUDAGraphMode
from .config import (
    GEN2_COMPILATION_KEYS,
    GEN2_FIELDS,
    RELEASE,
    check_fields,
    compilation_sizes,
    derive_sizes,
    lora_cases,
    resolve,
)
from .cudagraph_manager import BatchExecutionDescriptor, CudaGraphManager

__all__ = ["GENERATION", "RELEASE"]


def _dispatch(
    manager: CudaGraphManager,
    num_tokens: int,
    num_reqs: int,
    uniform_decode: bool,
    num_active_loras: int,
    use_cascade_attn: bool,
) -> StepDispatch:
    """Generation 2 is asked ``dispatch(num_reqs, num_tokens, uniform_token_count,
    num_active_loras)``: vLLM 0.34's runner passes the common per-request token count of a
    uniform decode batch (``get_uniform_decode_token_count``)."""
    q = manager.config.uniform_decode_query_len
    desc = manager.dispatch(num_reqs, num_tokens, q if uniform_decode else None, num_active_loras)
    reqs = desc.num_reqs if desc.cg_mode is not CUDAGraphMode.NONE else None
    return StepDispatch(desc.cg_mode, desc.num_tokens, reqs, desc)


def _capture_keys(manager: CudaGraphManager) -> list[CaptureKey]:
    """``capture_descs`` in capture order; each descriptor's ``cg_mode`` is its mode."""
    return [CaptureKey(d.cg_mode, d) for d in manager.capture_order()]


def _step_dispatch(manager: CudaGraphManager):  # noqa: ANN202
    """The runner's per-step question, through the facade's checks (a request count above
    the step's tokens is refused): one descriptor answers every count that pads to it, so
    the real count is part of the cache key."""

    def answer(num_tokens: int, num_reqs: int | None, uniform_decode: bool):  # noqa: ANN202
        step = dispatch_step(manager, num_tokens, num_reqs, uniform_decode)
        return (id(step.key), num_tokens), step.key, step.runtime_mode, step.key

    return answer


def _make_dispatcher(config: Any, record_stats: bool) -> CudaGraphManager:
    return config if isinstance(config, CudaGraphManager) else CudaGraphManager(config)


GENERATION = register_generation(
    Generation(
        release=RELEASE,
        name="generation 2",
        label="gen 2",
        dispatcher_class=CudaGraphManager,
        own_fields=GEN2_FIELDS,
        compilation_keys=GEN2_COMPILATION_KEYS,
        check_fields=check_fields,
        derive_sizes=derive_sizes,
        resolve=resolve,
        lora_cases=lora_cases,
        make_dispatcher=_make_dispatcher,
        dispatch=_dispatch,
        capture_keys=_capture_keys,
        step_dispatch=_step_dispatch,
        # the descriptor's fields, its mode (cg_mode) as the first column
        key_columns=(
            "runtime_mode",
            *(f.name for f in fields(BatchExecutionDescriptor) if f.name != "cg_mode"),
        ),
        compilation_sizes=compilation_sizes,
        scheduler=SchedulerRules(async_by_default=True, long_prefill_needs_chunked=True),
        planner="cgdispatch.plan.planner_v2:plan_two_ladders",
        splits_ladders=True,
        keys_count_requests=True,
        cascade_attention=False,
        profiles_graph_memory=True,
        legacy_sizes_deprecated=True,
    )
)
