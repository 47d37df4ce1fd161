"""One question, either generation: what does vLLM run a step with, and what does it capture?

vLLM has had two generations of graph dispatch (docs/semantics.md): V1's
``CudagraphDispatcher`` (vLLM 0.33, :mod:`cgdispatch.core.dispatcher`) keyed on
``BatchDescriptor`` and generation 2's ``CudaGraphManager`` (vLLM 0.34,
:mod:`cgdispatch.core.cudagraph_manager`) keyed on ``BatchExecutionDescriptor``. Their
``dispatch`` signatures differ (V1 takes no request count; generation 2 takes no
``uniform_decode`` flag but a uniform token count). This module is the one place that maps
a step onto either: :func:`make_graph_dispatcher` builds the class the config's
``vllm_version`` names, :func:`dispatch_step` answers a :class:`StepDispatch`,
:func:`capture_keys` lists what would be captured, :func:`padded_token_table` gives the
answers per token count for vectorised code. It decides nothing itself: every answer is
the underlying class's.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TypeAlias

from .arith import cdiv
from .batch import BatchDescriptor
from .config import GraphConfig
from .config_v2 import GEN2_FIELDS, check_version
from .cudagraph_manager import BatchExecutionDescriptor, CudaGraphManager
from .dispatcher import CudagraphDispatcher, ready_dispatcher
from .modes import CUDAGraphMode
from .validate import MAX_CAPTURE_SIZE, MAX_STEP_TOKENS, check_bool, check_int

__all__ = [
    "GraphDispatcher",
    "GraphKey",
    "StepDispatch",
    "CaptureKey",
    "PaddingTable",
    "NEWEST_VLLM_VERSION",
    "make_graph_dispatcher",
    "generation_of",
    "for_generation",
    "default_num_reqs",
    "dispatch_step",
    "capture_keys",
    "padded_token_table",
]

GraphDispatcher: TypeAlias = CudagraphDispatcher | CudaGraphManager
GraphKey: TypeAlias = BatchDescriptor | BatchExecutionDescriptor
# the release tools that choose for the user default to (the issue: newest generation)
NEWEST_VLLM_VERSION = "0.34"
_M = CUDAGraphMode


@dataclass(frozen=True, slots=True)
class StepDispatch:
    """A dispatch answer in the same shape for both generations.

    ``padded_tokens``: the tokens the step runs with (the graph's size; the batch's own
    count when eager). ``padded_reqs``: the request count the graph is built for, None when
    the graph takes any count (PIECEWISE) or the step runs eagerly. ``key``: the
    generation's own descriptor (V1 ``BatchDescriptor`` or ``BatchExecutionDescriptor``).
    """

    runtime_mode: CUDAGraphMode  # NONE, PIECEWISE or FULL
    padded_tokens: int
    padded_reqs: int | None
    key: GraphKey


@dataclass(frozen=True, slots=True)
class CaptureKey:
    """One graph to capture: its runtime mode and the generation's descriptor."""

    runtime_mode: CUDAGraphMode  # PIECEWISE or FULL
    key: GraphKey

    @property
    def num_tokens(self) -> int:
        return self.key.num_tokens

    @property
    def num_reqs(self) -> int | None:
        return self.key.num_reqs


@dataclass(frozen=True)
class PaddingTable:
    """Answers for every token count 0..max_tokens of one batch kind (index = num_tokens).

    Built by dispatching each count once, so vectorised code (numpy ``take``) gets the
    dispatcher's own answers without a Python call per step.
    """

    uniform_decode: bool
    num_active_loras: int
    runtime_modes: tuple[CUDAGraphMode, ...]
    padded_tokens: tuple[int, ...]


def generation_of(target: GraphConfig | GraphDispatcher) -> str:
    """``"0.33"`` (V1) or ``"0.34"`` (generation 2) for a config or a dispatcher.

    A config with ``vllm_version=None`` is V1: that is what ``CudagraphDispatcher`` (the
    class every caller used before generation 2) does with it.
    """
    if isinstance(target, CudaGraphManager):
        return "0.34"
    if isinstance(target, CudagraphDispatcher):
        return "0.33"
    if isinstance(target, GraphConfig):
        return "0.34" if target.vllm_version == "0.34" else "0.33"
    raise ValueError(
        f"{target!r} is neither a GraphConfig nor a dispatcher: pass a cgdispatch.GraphConfig, "
        "CudagraphDispatcher or CudaGraphManager"
    )


def make_graph_dispatcher(
    config: GraphConfig | GraphDispatcher | None = None, *, record_stats: bool = True
) -> GraphDispatcher:
    """The dispatcher the config's ``vllm_version`` names, ready to dispatch.

    ``"0.34"``: a ``CudaGraphManager``. ``"0.33"`` or None: a ``CudagraphDispatcher`` with
    its keys initialised (None stays V1 so that configs written before generation 2 keep
    their answers); ``config=None`` means ``GraphConfig()``, also V1. A dispatcher passed
    in is returned itself. ``record_stats`` applies to a new V1 dispatcher only
    (generation 2 counts nothing). Resolve the config first (``config.resolve(support)``)
    as the model runner does.
    """
    if isinstance(config, CudaGraphManager):
        return config
    if config is not None and not isinstance(config, (GraphConfig, CudagraphDispatcher)):
        raise ValueError(
            f"config={config!r} is invalid: pass a cgdispatch.GraphConfig, "
            "CudagraphDispatcher or CudaGraphManager"
        )
    if isinstance(config, GraphConfig) and config.vllm_version == "0.34":
        return CudaGraphManager(config)
    return ready_dispatcher(config, record_stats=record_stats)


def for_generation(config: GraphConfig, vllm_version: str | None) -> GraphConfig:
    """The same engine settings under the other generation's rules.

    Mode, scheduler limits, speculative decoding, LoRA and the legacy size fields
    (``cudagraph_capture_sizes``, ``max_cudagraph_capture_size``, which both releases
    read) carry over; generation-2-only fields are dropped for V1, where vLLM 0.33 has no
    such flags. Going to 0.34 with legacy sizes warns as vLLM 0.34 does (deprecated).
    Pass the config before ``resolve()``: V1's resolution rounds sizes for speculative
    decoding into the legacy fields, which would then reach 0.34 as user-given sizes.
    """
    vllm_version = check_version(vllm_version)  # "0.34", 0.34 (papermill) or None
    if generation_of(config) == ("0.34" if vllm_version == "0.34" else "0.33"):
        return (
            config
            if config.vllm_version == vllm_version
            else config.replace(vllm_version=vllm_version)
        )
    if vllm_version == "0.34":
        return config.replace(vllm_version="0.34")
    # gen 2 -> V1: rebuild from the user's fields without the generation-2 ones
    fields = {f: v for f, v in config._user_fields().items() if f not in GEN2_FIELDS}
    fields["cudagraph_capture_sizes"], fields["max_cudagraph_capture_size"] = config._asked
    fields["vllm_version"] = vllm_version
    return GraphConfig(**fields)


def default_num_reqs(config: GraphConfig, num_tokens: int, uniform_decode: bool) -> int:
    """The request count vLLM's scheduler gives a step when none is stated.

    A uniform decode has ``cdiv(num_tokens, q)`` requests (q = 1 + speculative tokens);
    any other batch is taken as one request (a single prefill or chunk). V1 does not read
    the count; generation 2 checks it against each graph's ``num_reqs``.
    """
    if num_tokens <= 0:
        return 0
    if uniform_decode:
        q = config.uniform_decode_query_len
        return cdiv(num_tokens, q)
    return 1


def dispatch_step(
    dispatcher: GraphDispatcher,
    num_tokens: int,
    num_reqs: int | None = None,
    uniform_decode: bool = False,
    num_active_loras: int = 0,
    *,
    use_cascade_attn: bool = False,
) -> StepDispatch:
    """Dispatch one step on either generation and answer in one shape.

    V1 is asked ``dispatch(num_tokens, uniform_decode, has_lora=num_active_loras > 0,
    num_active_loras)`` (``num_reqs`` is not part of its question). Generation 2 is asked
    ``dispatch(num_reqs, num_tokens, uniform_token_count=q if uniform_decode else None,
    num_active_loras)``: vLLM 0.34's runner passes the common per-request token count of a
    uniform decode batch (``get_uniform_decode_token_count``). ``num_reqs=None``:
    :func:`default_num_reqs`. ``use_cascade_attn`` (excludes FULL) exists in V1 only.
    """
    num_tokens = check_int("num_tokens", num_tokens, 0, MAX_STEP_TOKENS)
    num_active_loras = check_int("num_active_loras", num_active_loras, 0, MAX_STEP_TOKENS)
    uniform_decode = check_bool("uniform_decode", uniform_decode)
    use_cascade_attn = check_bool("use_cascade_attn", use_cascade_attn)
    config = dispatcher.config
    if num_reqs is None:
        num_reqs = default_num_reqs(config, num_tokens, uniform_decode)
    num_reqs = check_int("num_reqs", num_reqs, 0, MAX_STEP_TOKENS)
    if num_reqs > num_tokens:
        raise ValueError(
            f"num_reqs={num_reqs} is invalid with num_tokens={num_tokens}: every request "
            "schedules at least one token; lower num_reqs or leave it None"
        )
    if isinstance(dispatcher, CudaGraphManager):
        if use_cascade_attn:
            raise ValueError(
                "use_cascade_attn=True is invalid for vLLM 0.34 (generation 2): its model "
                "runner has no cascade attention; pass False, or use a vllm_version='0.33' config"
            )
        q = config.uniform_decode_query_len
        desc = dispatcher.dispatch(
            num_reqs, num_tokens, q if uniform_decode else None, num_active_loras
        )
        mode = desc.cg_mode
        reqs = desc.num_reqs if mode is not _M.NONE else None
        return StepDispatch(mode, desc.num_tokens, reqs, desc)
    if not isinstance(dispatcher, CudagraphDispatcher):
        raise ValueError(
            f"dispatcher={dispatcher!r} is invalid: pass a CudagraphDispatcher or a "
            "CudaGraphManager (make_graph_dispatcher(config) builds either)"
        )
    mode, desc = dispatcher.dispatch(
        num_tokens,
        uniform_decode=uniform_decode,
        has_lora=num_active_loras > 0,
        num_active_loras=num_active_loras,
        use_cascade_attn=use_cascade_attn,
    )
    return StepDispatch(mode, desc.num_tokens, desc.num_reqs if mode is not _M.NONE else None, desc)


def capture_keys(config: GraphConfig | GraphDispatcher) -> list[CaptureKey]:
    """Every graph the generation captures, in its capture order.

    Both capture PIECEWISE before FULL, each widest first, into one pool: V1 from
    ``get_capture_descs`` (``BatchDescriptor`` keys), generation 2 from ``capture_descs``
    (``BatchExecutionDescriptor`` s, whose ``cg_mode`` is the mode).
    """
    dispatcher = make_graph_dispatcher(config, record_stats=False)
    if isinstance(dispatcher, CudaGraphManager):
        return [CaptureKey(d.cg_mode, d) for d in dispatcher.capture_order()]
    return [CaptureKey(mode, d) for mode, descs in dispatcher.get_capture_descs() for d in descs]


def padded_token_table(
    dispatcher: GraphDispatcher,
    uniform_decode: bool = False,
    num_active_loras: int = 0,
    max_tokens: int | None = None,
) -> PaddingTable:
    """:func:`dispatch_step` for every count 0..``max_tokens`` (default
    ``max_num_batched_tokens``) of one batch kind, with the default request count.

    A V1 dispatcher that records statistics counts these calls: pass one built with
    ``record_stats=False`` (``make_graph_dispatcher(config, record_stats=False)``).
    """
    top = dispatcher.config.max_num_batched_tokens if max_tokens is None else max_tokens
    if max_tokens is None and top > MAX_CAPTURE_SIZE:
        raise ValueError(
            f"max_num_batched_tokens={top:_} is above the {MAX_CAPTURE_SIZE:_} counts a padding "
            "table lists: pass max_tokens= (the largest capture size is enough)"
        )
    top = check_int("max_tokens", top, 0, MAX_CAPTURE_SIZE)
    uniform_decode = check_bool("uniform_decode", uniform_decode)
    answers = [
        dispatch_step(dispatcher, n, None, uniform_decode, num_active_loras) for n in range(top + 1)
    ]
    return PaddingTable(
        bool(uniform_decode),
        num_active_loras,
        tuple(a.runtime_mode for a in answers),
        tuple(a.padded_tokens for a in answers),
    )
