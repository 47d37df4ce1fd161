"""vLLM 0.33: V1's ``CudagraphDispatcher``, keyed on ``BatchDescriptor``.

This package is V1's one home: its config rules (:mod:`.config`), its dispatcher
(:mod:`.dispatcher`) and, at module level here, every field of its
:class:`~cgdispatch.core.generation.Generation` (``Generation.from_module`` reads them by
name), registered on import.
"""

from __future__ import annotations

from dataclasses import fields
from typing import Any

from ..batch import BatchDescriptor
from ..generation import CaptureKey, Generation, SchedulerRules, StepDispatch, register_generation
from ..ladder_shape import TOKEN_LADDER
from ..modes import CUDAGraphMode
from .config import RELEASE

# the config rules, Generation fields under their own names (read by Generation.from_module)
from .config import compilation_sizes as compilation_sizes
from .config import derive_sizes as derive_sizes
from .config import lora_cases as lora_cases
from .config import resolve as resolve
from .dispatcher import CudagraphDispatcher, ready_dispatcher
from .explain import explain as explain

__all__ = ["GENERATION", "RELEASE"]

release, name, label = RELEASE, "V1", "V1"
# V1 reads no field of its own; its sizes are the one token list (cudagraph_capture_sizes)
own_fields: dict[str, Any] = {}
compilation_keys: tuple[str, ...] = ()


def check_fields(config: Any) -> dict[str, Any]:
    """No field of its own to check."""
    return {}


# ----- its dispatcher -----------------------------------------------------------------------
dispatcher_class, key_type = CudagraphDispatcher, BatchDescriptor
key_columns = ("runtime_mode", *(f.name for f in fields(BatchDescriptor)))


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


# ----- its scheduler and planner, and what differs from other releases -----------------------
scheduler = SchedulerRules(async_by_default=False, long_prefill_needs_chunked=False)
ladder = TOKEN_LADDER  # its planner: registered by cgdispatch.plan
keys_count_requests = profiles_graph_memory = False
cascade_attention = True  # the V1 runner has cascade attention (it excludes FULL)

GENERATION = register_generation(Generation.from_module(__name__))
