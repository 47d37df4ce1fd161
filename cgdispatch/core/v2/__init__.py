"""vLLM 0.34: generation 2's ``CudaGraphManager``, keyed on ``BatchExecutionDescriptor``.

This package is generation 2's one home: its config rules (:mod:`.config`), its manager
(:mod:`.cudagraph_manager`) and, here, its :class:`~cgdispatch.core.release.Generation`
declared as one class (:class:`Gen2`), registered on import.
"""

from __future__ import annotations

from dataclasses import fields
from typing import Any

from ..generation import CaptureKey, StepDispatch, dispatch_step, register_generation
from ..ladder_shape import SPLIT_LADDERS
from ..modes import CUDAGraphMode
from ..release import ConfigRules, Generation, GraphRules, RunnerTraits, SchedulerRules
from .config import (
    GEN2_OWN_FIELDS,
    RELEASE,
    check_fields,
    compilation_sizes,
    derive_sizes,
    lora_cases,
    resolve,
)
from .cudagraph_manager import BatchExecutionDescriptor, CudaGraphManager
from .explain import explain

__all__ = ["GENERATION", "RELEASE", "Gen2"]


def make_dispatcher(config: Any, record_stats: bool) -> CudaGraphManager:
    """A manager for ``config`` (one passed in is returned itself); it counts nothing."""
    return config if isinstance(config, CudaGraphManager) else CudaGraphManager(config)


def dispatch(manager, num_tokens, num_reqs, uniform_decode, num_active_loras, cascade):  # noqa: ANN001, ANN201
    """``Generation.dispatch`` (arguments checked by ``dispatch_step``, which refuses
    cascade attention here): generation 2 is asked ``dispatch(num_reqs, num_tokens,
    uniform_token_count, num_active_loras)``, vLLM 0.34's runner passing the common
    per-request token count of a uniform decode batch (``get_uniform_decode_token_count``);
    a :class:`StepDispatch`."""
    q = manager.config.uniform_decode_query_len
    desc = manager.dispatch(num_reqs, num_tokens, q if uniform_decode else None, num_active_loras)
    reqs = desc.num_reqs if desc.cg_mode is not CUDAGraphMode.NONE else None
    return StepDispatch(desc.cg_mode, desc.num_tokens, reqs, desc)


def step_dispatch(manager: CudaGraphManager):  # noqa: ANN201
    """The runner's per-step question, through the facade's checks (a request count above
    the step's tokens is refused): one descriptor answers every count that pads to it, so
    the real count is part of the cache key."""

    def answer(num_tokens: int, num_reqs: int | None, uniform_decode: bool):  # noqa: ANN202
        step = dispatch_step(manager, num_tokens, num_reqs, uniform_decode)
        return (id(step.key), num_tokens), step.key, step.runtime_mode, step.key

    return answer


def capture_keys(manager: CudaGraphManager) -> list[CaptureKey]:
    """``capture_descs`` in capture order; each descriptor's ``cg_mode`` is its mode."""
    return [CaptureKey(d.cg_mode, d) for d in manager.capture_order()]


class Gen2:
    """vLLM 0.34's Generation: split prefill and decode ladders, ``CudaGraphManager``."""

    release, name, label = RELEASE, "generation 2", "gen 2"
    ladder = SPLIT_LADDERS  # prefill token and decode request sizes; planner: cgdispatch.plan
    # its own fields beyond the ladders': DBO, performance mode ... (config.GEN2_OWN_FIELDS)
    rules = ConfigRules(
        GEN2_OWN_FIELDS, check_fields, derive_sizes, resolve, lora_cases, compilation_sizes
    )
    graphs = GraphRules(
        dispatcher_class=CudaGraphManager,
        key_type=BatchExecutionDescriptor,
        # the descriptor's fields, its mode (cg_mode) as the first column
        key_columns=(
            "runtime_mode",
            *(f.name for f in fields(BatchExecutionDescriptor) if f.name != "cg_mode"),
        ),
        make_dispatcher=make_dispatcher,
        dispatch=dispatch,
        capture_keys=capture_keys,
        step_dispatch=step_dispatch,
        explain=explain,
    )
    scheduler = SchedulerRules(async_by_default=True, long_prefill_needs_chunked=True)
    # keys count requests; the runner has no cascade attention; vLLM profiles graph memory
    runner = RunnerTraits(
        keys_count_requests=True, cascade_attention=False, profiles_graph_memory=True
    )


GENERATION = register_generation(Generation.from_class(Gen2))
