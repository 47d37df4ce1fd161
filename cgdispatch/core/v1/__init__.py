"""vLLM 0.33: V1's ``CudagraphDispatcher``, keyed on ``BatchDescriptor``.

This package is V1's one home: its config rules (:mod:`.config`), its dispatcher
(:mod:`.dispatcher`) and the :class:`~cgdispatch.core.generation.Generation` that tells
the rest of cgdispatch about them, registered on import.
"""

from __future__ import annotations

from dataclasses import fields
from typing import Any

from ..batch import BatchDescriptor
from ..generation import CaptureKey, Generation, SchedulerRules, StepDispatch, register_generation
from ..modes import CUDAGraphMode
from .config import RELEASE, compilation_sizes, derive_sizes, lora_cases, resolve
from .dispatcher import CudagraphDispatcher, ready_dispatcher

__all__ = ["GENERATION", "RELEASE"]


def _dispatch(
    dispatcher: CudagraphDispatcher,
    num_tokens: int,
    num_reqs: int,
    uniform_decode: bool,
    num_active_loras: int,
    use_cascade_attn: bool,
) -> StepDispatch:
    """V1 is asked without a request count: ``dispatch(num_tokens, uniform_decode,
    has_lora, num_active_loras, use_cascade_attn)``."""
    mode, desc = dispatcher.dispatch(
        num_tokens,
        uniform_decode=uniform_decode,
        has_lora=num_active_loras > 0,
        num_active_loras=num_active_loras,
        use_cascade_attn=use_cascade_attn,
    )
    reqs = desc.num_reqs if mode is not CUDAGraphMode.NONE else None
    return StepDispatch(mode, desc.num_tokens, reqs, desc)


def _capture_keys(dispatcher: CudagraphDispatcher) -> list[CaptureKey]:
    """``get_capture_descs``: PIECEWISE then FULL, each widest first."""
    return [CaptureKey(mode, d) for mode, descs in dispatcher.get_capture_descs() for d in descs]


def _step_dispatch(dispatcher: CudagraphDispatcher):  # noqa: ANN202
    """The runner's hot path: the dispatcher's own answer, one shared object per count."""
    dispatch = dispatcher.dispatch

    def answer(num_tokens: int, num_reqs: int | None, uniform_decode: bool):  # noqa: ANN202
        result = dispatch(num_tokens, uniform_decode)
        return id(result), result, result[0], result[1]

    return answer


def _make_dispatcher(config: Any, record_stats: bool) -> CudagraphDispatcher:
    return ready_dispatcher(config, record_stats=record_stats)


GENERATION = register_generation(
    Generation(
        release=RELEASE,
        name="V1",
        label="V1",
        dispatcher_class=CudagraphDispatcher,
        own_fields={},
        compilation_keys=(),
        check_fields=lambda config: {},
        derive_sizes=derive_sizes,
        resolve=resolve,
        lora_cases=lora_cases,
        make_dispatcher=_make_dispatcher,
        dispatch=_dispatch,
        capture_keys=_capture_keys,
        step_dispatch=_step_dispatch,
        key_columns=("runtime_mode", *(f.name for f in fields(BatchDescriptor))),
        compilation_sizes=compilation_sizes,
        scheduler=SchedulerRules(async_by_default=False, long_prefill_needs_chunked=False),
        planner="cgdispatch.plan.planner:plan_capture_sizes",
        splits_ladders=False,
        keys_count_requests=False,
        cascade_attention=True,
        profiles_graph_memory=False,
        legacy_sizes_deprecated=False,
    )
)
