"""The generation registry, and one question for every release: what does vLLM run a step
with, and what does it capture?

vLLM has had two generations of graph dispatch (docs/semantics.md): V1's
``CudagraphDispatcher`` keyed on ``BatchDescriptor`` (:mod:`cgdispatch.core.v1`) and
generation 2's ``CudaGraphManager`` keyed on ``BatchExecutionDescriptor``
(:mod:`cgdispatch.core.v2`). Each release lives in its own package and declares itself as
one :class:`~cgdispatch.core.release.Generation`: its ladder shape, its config rules, its
dispatcher and the adapter of its answer to :class:`StepDispatch`, its scheduler rules and
what its runner does. The package registers itself with :func:`register_generation` when
``cgdispatch.core`` is imported;
everything else asks the registry (:func:`generation_of`, :func:`generation_for`,
:data:`GENERATIONS`, :data:`NEWEST`) and never compares release strings.

The facade below (:func:`make_graph_dispatcher`, :func:`dispatch_step`,
:func:`capture_keys`, :func:`padded_token_table`) maps a step onto whichever generation a
config names. It decides nothing itself: every answer is the generation's dispatcher's.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any, Protocol

from .arith import cdiv
from .modes import CUDAGraphMode
from .release import ConfigRules, Generation, GraphRules, RunnerTraits, SchedulerRules
from .release_table import parse_release, release_defaults
from .validate import MAX_CAPTURE_SIZE, MAX_STEP_TOKENS, check_bool, check_int

__all__ = [
    "Generation",
    "ConfigRules",
    "GraphRules",
    "SchedulerRules",
    "RunnerTraits",
    "GENERATIONS",
    "NEWEST",  # noqa: F822  (computed on access by __getattr__, after registration)
    "VLLM_VERSIONS",  # noqa: F822
    "register_generation",
    "unregister_generation",
    "generation_for",
    "generation_of",
    "normalize_release",
    "check_version",
    "release_arg",
    "full_release",
    "default_release",
    "GraphDispatcher",
    "GraphKey",
    "StepDispatch",
    "CaptureKey",
    "PaddingTable",
    "make_graph_dispatcher",
    "for_generation",
    "default_num_reqs",
    "dispatch_step",
    "capture_keys",
    "padded_token_table",
]

_M = CUDAGraphMode


class GraphKey(Protocol):
    """A generation's graph descriptor: V1 ``BatchDescriptor``, generation 2
    ``BatchExecutionDescriptor``. Every one answers what the capture layer, the estimates
    and the tables read, so that none of them asks which generation made it."""

    @property
    def num_tokens(self) -> int: ...

    @property
    def num_reqs(self) -> int | None: ...

    def query_len(self, uniform_decode_query_len: int) -> int | None:
        """q of a uniform-decode key (V1 keys take the config's), None otherwise."""
        ...

    @property
    def decode_graph(self) -> bool:
        """A graph for uniform decode batches."""
        ...

    @property
    def lora_active(self) -> bool:
        """The graph runs with LoRA adapters."""
        ...


class GraphDispatcher(Protocol):
    """A generation's dispatcher, built by :func:`make_graph_dispatcher`."""

    config: Any


@dataclass(frozen=True, slots=True)
class StepDispatch:
    """A dispatch answer in the same shape for every generation.

    ``padded_tokens``: the tokens the step runs with (the graph's size; the batch's own
    count when eager). ``padded_reqs``: the request count the graph is built for, None when
    the graph takes any count (PIECEWISE) or the step runs eagerly. ``key``: the
    generation's own descriptor.
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


_REGISTRY: dict[str, Generation] = {}
# release -> Generation, oldest first (a read-only live view of the registry)
GENERATIONS: Mapping[str, Generation] = MappingProxyType(_REGISTRY)


def _release_order(release: str) -> tuple[int, ...]:
    return tuple(int(part) for part in re.findall(r"\d+", release))


def register_generation(generation: Generation) -> Generation:
    """Add a release to the registry (each release package does this once, on import).

    ValueError when its release is registered already; returns the generation.
    """
    if not isinstance(generation, Generation):
        raise ValueError(f"generation={generation!r} is invalid: pass a Generation")
    if generation.release in _REGISTRY:
        raise ValueError(
            f"vLLM {generation.release} is registered already "
            f"({_REGISTRY[generation.release].describe()}): unregister it first"
        )
    entries = sorted([*_REGISTRY.values(), generation], key=lambda g: _release_order(g.release))
    _REGISTRY.clear()
    _REGISTRY.update((g.release, g) for g in entries)
    return generation


def unregister_generation(release: str) -> Generation:
    """Remove a release from the registry (tests register and remove their own)."""
    if release not in _REGISTRY:
        raise ValueError(f"vLLM {release!r} is not registered: registered are {list(_REGISTRY)}")
    return _REGISTRY.pop(release)


def default_release() -> str:
    """The release a tool models when none is given: the newest registered one.

    The one place that decides what "no release" means (``GraphConfig()``,
    ``generation_for(None)``, the CLIs' and settings' defaults, read when they are built,
    never frozen at import). Stored sweep rows that predate the version column are not
    "no release": they name theirs when read (``cgdispatch.sweep.rows.LEGACY_VERSION``).
    """
    if not _REGISTRY:
        raise ValueError("no vLLM release is registered: import cgdispatch.core first")
    return next(reversed(_REGISTRY))


def _newest() -> Generation:
    return _REGISTRY[default_release()]


def __getattr__(name: str) -> Any:
    # computed on access: the release packages register after this module is imported
    if name == "NEWEST":  # the release tools that choose for the user default to
        return _newest()
    if name == "VLLM_VERSIONS":  # the releases cgdispatch models, oldest first
        return tuple(_REGISTRY)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def check_version(version: Any) -> str | None:
    """``version`` as the release string of the registered generation that dispatches it
    (or None), else ValueError.

    Any vLLM release from 0.8 on is accepted (``"0.10.1.1"``, ``"0.11.2"``, ``"0.26.1"``,
    ``"0.34.0"``): :mod:`cgdispatch.core.release_table` maps it to its generation (V1's
    ``CudagraphDispatcher`` up to 0.33, generation 2's ``CudaGraphManager`` from 0.34). A
    float naming one (``0.34``) is taken as its string: papermill's ``-p vllm_version
    0.34`` and YAML hand the release over as a number. That release's own defaults:
    :func:`~cgdispatch.core.release_table.release_defaults`.
    """
    if version is None or (isinstance(version, str) and version in _REGISTRY):
        return version
    if isinstance(version, float) and repr(version) in _REGISTRY:
        return repr(version)
    try:
        parts = parse_release(version)  # not dotted numbers, older than 0.8 or unknown
    except ValueError as exc:
        known = ", ".join(
            f"'{g.release}' ({g.name}, {g.dispatcher_name})" for g in _REGISTRY.values()
        )
        raise ValueError(f"{exc}; the registered generations are {known}") from None
    generation = release_defaults(version).generation
    if generation in _REGISTRY:
        return generation
    # a registry without the table's generation (tests register their own): the newest
    # registered release at or below it, else the oldest
    older = [r for r in _REGISTRY if _release_order(r) <= parts]
    if older:
        return older[-1]
    if _REGISTRY:
        return next(iter(_REGISTRY))
    raise ValueError(
        f"vllm_version={version!r} has no registered generation: import cgdispatch.core first"
    )


def full_release(version: Any) -> str:
    """The whole release ``version`` names, normalised (``"0.10.1.1"``, ``"0.11.0"``; a
    registered generation's own string as it is, ``"0.33"``; None: the newest,
    :func:`default_release`), where :func:`check_version` keeps only its generation. The
    release's own defaults (async scheduling, KV budget, ...) are read with it
    (:func:`~cgdispatch.core.release_table.release_defaults`); ValueError as
    :func:`check_version`'s."""
    generation = check_version(version)  # ValueError naming the value, rule and fix
    if generation is None:
        return default_release()
    if (isinstance(version, str) and version in _REGISTRY) or (
        isinstance(version, float) and repr(version) in _REGISTRY
    ):
        return generation
    return release_defaults(version).release


def normalize_release(text: str) -> str:
    """A release as a person types it: a registered release as it is, else any release from
    0.8 on, normalised (``" 0.10.1.1"`` -> ``"0.10.1.1"``). ValueError names the rule."""
    if text in _REGISTRY:
        return text
    check_version(text)
    return ".".join(str(p) for p in parse_release(text))


def release_arg(text: str) -> str:
    """A command line's ``--vllm-version`` (:func:`normalize_release`); argparse reports the
    ValueError's text (it converts string defaults too)."""
    import argparse

    try:
        return normalize_release(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def generation_for(version: Any) -> Generation:
    """The generation of a release string (a float or patch release is accepted).

    None is the newest generation (:data:`NEWEST`): the one default release of every
    tool (``GraphConfig()``, the CLIs, the notebooks). Stored sweep rows that predate the
    version column read as the oldest (``cgdispatch.sweep.rows.LEGACY_VERSION``).
    """
    version = check_version(version)
    return _newest() if version is None else _REGISTRY[version]


def generation_of(target: Any) -> Generation:
    """The generation of a config or of a dispatcher (the release its config names)."""
    if any(isinstance(target, g.graphs.dispatcher_class) for g in _REGISTRY.values()):
        return generation_for(target.config.vllm_version)
    if hasattr(target, "vllm_version") and hasattr(target, "cudagraph_capture_sizes"):
        return generation_for(target.vllm_version)
    names = ", ".join(sorted({g.dispatcher_name for g in _REGISTRY.values()}))
    raise ValueError(
        f"{target!r} is neither a GraphConfig nor a dispatcher: pass a cgdispatch.GraphConfig "
        f"or a dispatcher ({names})"
    )


def make_graph_dispatcher(config: Any = None, *, record_stats: bool = True) -> GraphDispatcher:
    """The dispatcher the config's ``vllm_version`` names, ready to dispatch.

    None as the release means the newest generation (:data:`NEWEST`);
    ``config=None`` means ``GraphConfig()``. A
    dispatcher passed in is returned itself (V1's keys initialised if they were not).
    ``record_stats`` applies to a new V1 dispatcher only (generation 2 counts nothing).
    Resolve the config first (``config.resolve(support)``) as the model runner does.
    """
    if config is None:
        return _newest().graphs.make_dispatcher(None, record_stats)
    return generation_of(config).graphs.make_dispatcher(config, record_stats)


def for_generation(config: Any, vllm_version: Any) -> Any:
    """The same engine settings under another generation's rules.

    Mode, scheduler limits, speculative decoding, LoRA and the legacy size fields
    (``cudagraph_capture_sizes``, ``max_cudagraph_capture_size``, which every release
    reads) carry over as the user gave them; fields only the source generation owns are
    dropped, fields both own keep the user's values. A release that deprecates the legacy
    sizes warns as vLLM does. Pass the config before ``resolve()``: V1's resolution rounds
    sizes for speculative decoding into the legacy fields, which would then reach the
    other release as user-given sizes.
    """
    release = full_release(vllm_version)  # the whole release named (None: the newest)
    vllm_version = check_version(vllm_version)  # a release, a float (papermill) or None
    source, target = generation_of(config), generation_for(vllm_version)
    if source is target:
        if config.release == release:
            return config
        return config.replace(vllm_version=release)
    fields = {f: v for f, v in config._user_fields().items() if f not in source.own_fields}
    fields.update((f, v) for f, v in config._asked_own.items() if f in target.own_fields)
    fields["cudagraph_capture_sizes"], fields["max_cudagraph_capture_size"] = config._asked
    fields["vllm_version"] = release
    return type(config)(**fields)


def default_num_reqs(config: Any, num_tokens: int, uniform_decode: bool) -> int:
    """The request count vLLM's scheduler gives a step when none is stated.

    A uniform decode has ``cdiv(num_tokens, q)`` requests (q = 1 + speculative tokens);
    any other batch is taken as one request (a single prefill or chunk). V1 does not read
    the count; generation 2 checks it against each graph's ``num_reqs``.
    """
    if num_tokens <= 0:
        return 0
    if uniform_decode:
        return cdiv(num_tokens, config.uniform_decode_query_len)
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
    """Dispatch one step on any generation and answer in one shape.

    The generation's adapter asks its dispatcher the question its release asks: V1
    ``dispatch(num_tokens, uniform_decode, has_lora, num_active_loras)`` (no request
    count), generation 2 ``dispatch(num_reqs, num_tokens, uniform_token_count,
    num_active_loras)`` (vLLM 0.34's runner passes the common per-request token count of a
    uniform decode batch). ``num_reqs=None``: :func:`default_num_reqs`.
    ``use_cascade_attn`` (excludes FULL) exists only where the runner has cascade
    attention.
    """
    num_tokens = check_int("num_tokens", num_tokens, 0, MAX_STEP_TOKENS)
    num_active_loras = check_int("num_active_loras", num_active_loras, 0, MAX_STEP_TOKENS)
    uniform_decode = check_bool("uniform_decode", uniform_decode)
    use_cascade_attn = check_bool("use_cascade_attn", use_cascade_attn)
    generation = _dispatcher_generation(dispatcher)
    if num_reqs is None:
        num_reqs = default_num_reqs(dispatcher.config, num_tokens, uniform_decode)
    num_reqs = check_int("num_reqs", num_reqs, 0, MAX_STEP_TOKENS)
    if num_reqs > num_tokens:
        raise ValueError(
            f"num_reqs={num_reqs} is invalid with num_tokens={num_tokens}: every request "
            "schedules at least one token; lower num_reqs or leave it None"
        )
    if use_cascade_attn and not generation.runner.cascade_attention:
        raise ValueError(
            f"use_cascade_attn=True is invalid for vLLM {generation.describe()}: its model "
            "runner has no cascade attention; pass False, or use a release that has it"
        )
    return generation.graphs.dispatch(
        dispatcher, num_tokens, num_reqs, uniform_decode, num_active_loras, use_cascade_attn
    )


def _dispatcher_generation(dispatcher: Any) -> Generation:
    if not any(isinstance(dispatcher, g.graphs.dispatcher_class) for g in _REGISTRY.values()):
        names = " or ".join(sorted({g.dispatcher_name for g in _REGISTRY.values()}))
        raise ValueError(
            f"dispatcher={dispatcher!r} is invalid: pass a {names} "
            "(make_graph_dispatcher(config) builds one)"
        )
    return generation_of(dispatcher)


def capture_keys(config: Any) -> list[CaptureKey]:
    """Every graph the generation captures, in its capture order.

    Every release captures PIECEWISE before FULL, each widest first, into one pool.
    """
    dispatcher = make_graph_dispatcher(config, record_stats=False)
    return generation_of(dispatcher).graphs.capture_keys(dispatcher)


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
