"""vLLM 0.33: V1's ``CudagraphDispatcher``, keyed on ``BatchDescriptor``.

This package is V1's one home: its config rules (:mod:`.config`), its dispatcher
(:mod:`.dispatcher`) and, here, its :class:`~cgdispatch.core.release.Generation` declared
as one class (:class:`V1`), registered on import.
"""

from __future__ import annotations

from dataclasses import fields
from typing import Any

from ..batch import BatchDescriptor
from ..generation import CaptureKey, StepDispatch, register_generation
from ..ladder_shape import TOKEN_LADDER
from ..modes import CUDAGraphMode
from ..release import ConfigRules, Generation, GraphRules, RunnerTraits, SchedulerRules
from .config import RELEASE, compilation_sizes, derive_sizes, lora_cases, resolve
from .dispatcher import CudagraphDispatcher, ready_dispatcher
from .explain import explain

__all__ = ["GENERATION", "RELEASE", "V1"]


def check_fields(config: Any) -> dict[str, Any]:
    """No field of its own to check."""
    return {}


def make_dispatcher(config: Any, record_stats: bool) -> CudagraphDispatcher:
    return ready_dispatcher(config, record_stats=record_stats)


def dispatch(dispatcher, num_tokens, num_reqs, uniform_decode, num_active_loras, cascade):  # noqa: ANN001, ANN201
    """``Generation.dispatch`` (arguments checked by ``dispatch_step``): V1 is asked without
    a request count, ``dispatch(num_tokens, uniform_decode, has_lora, num_active_loras,
    use_cascade_attn)``; a :class:`StepDispatch`."""
    mode, desc = dispatcher.dispatch(
        num_tokens,
        uniform_decode=uniform_decode,
        has_lora=num_active_loras > 0,
        num_active_loras=num_active_loras,
        use_cascade_attn=cascade,
    )
    reqs = desc.num_reqs if mode is not CUDAGraphMode.NONE else None
    return StepDispatch(mode, desc.num_tokens, reqs, desc)


def step_dispatch(dispatcher: CudagraphDispatcher):  # noqa: ANN201
    """The runner's hot path: the dispatcher's own answer, one shared object per count."""
    ask = dispatcher.dispatch

    def answer(num_tokens: int, num_reqs: int | None, uniform_decode: bool):  # noqa: ANN202
        result = ask(num_tokens, uniform_decode)
        return id(result), result, result[0], result[1]

    return answer


def capture_keys(dispatcher: CudagraphDispatcher) -> list[CaptureKey]:
    """``get_capture_descs``: PIECEWISE then FULL, each widest first."""
    return [CaptureKey(mode, d) for mode, descs in dispatcher.get_capture_descs() for d in descs]


class V1:
    """vLLM 0.33's Generation: one token ladder, ``CudagraphDispatcher``, cascade attention."""

    release, name, label = RELEASE, "V1", "V1"
    ladder = TOKEN_LADDER  # cudagraph_capture_sizes; its planner: registered by cgdispatch.plan
    # V1 reads no field of its own
    rules = ConfigRules({}, check_fields, derive_sizes, resolve, lora_cases, compilation_sizes)
    graphs = GraphRules(
        dispatcher_class=CudagraphDispatcher,
        key_type=BatchDescriptor,
        key_columns=("runtime_mode", *(f.name for f in fields(BatchDescriptor))),
        make_dispatcher=make_dispatcher,
        dispatch=dispatch,
        capture_keys=capture_keys,
        step_dispatch=step_dispatch,
        explain=explain,
    )
    # async scheduling is on unless turned off: vllm/config/vllm.py of 0.33.0
    # (VllmConfig.__post_init__: async_scheduling None -> True for a generative model whose
    # executor and runner support it, which for ngram drafts it does not; since 0.14.0,
    # core/release_table.py)
    scheduler = SchedulerRules(
        async_by_default=True, long_prefill_needs_chunked=False, async_with_drafts=False
    )
    # the V1 runner has cascade attention (it excludes FULL); its keys count no requests
    runner = RunnerTraits(
        # vLLM 0.33 takes its graph estimate from the KV budget (from 0.20, vllm/envs.py;
        # older releases dispatched as V1 differ: core/release_table.py)
        keys_count_requests=False,
        cascade_attention=True,
        profiles_graph_memory=True,
    )


GENERATION = register_generation(Generation.from_class(V1))
