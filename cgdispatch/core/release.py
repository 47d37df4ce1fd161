"""One vLLM release as a small declared object: :class:`Generation` and its parts.

A release package (``cgdispatch/core/v1``, ``cgdispatch/core/v2``) declares one class whose
attributes are the :class:`Generation` fields, and registers it
(``cgdispatch.core.generation.register_generation(Generation.from_class(cls))``). The
fields are few and grouped by concern: its ladder shape
(:mod:`cgdispatch.core.ladder_shape`), its config rules (:class:`ConfigRules`), its
dispatcher and graph key (:class:`GraphRules`), its scheduler's rules
(:class:`SchedulerRules`) and what its model runner does (:class:`RunnerTraits`).
Nothing here is read from module globals, and nothing here names a layer above core.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from .ladder_shape import LadderShape, planner_for
from .modes import AttentionCGSupport

__all__ = ["Generation", "ConfigRules", "GraphRules", "SchedulerRules", "RunnerTraits"]


@dataclass(frozen=True)
class ConfigRules:
    """How a release builds a ``GraphConfig`` (``config``): every callable takes one."""

    # GraphConfig fields only this release reads beyond its ladder shape's, with defaults
    own_fields: Mapping[str, Any]
    # config -> normalised values of the release's and its shape's own fields (ValueError)
    check_fields: Callable[[Any], dict[str, Any]]
    # config -> every field vLLM derives when it builds its config (sizes, compile sizes, mode)
    derive_sizes: Callable[[Any], dict[str, Any]]
    # (config, support, piecewise_capture_available) -> the fields the model runner changes
    resolve: Callable[[Any, AttentionCGSupport, bool], dict[str, Any]]
    lora_cases: Callable[[Any], list[int]]  # config -> active-LoRA counts with graphs (0: none)
    compilation_sizes: Callable[[Any], dict[str, Any]]  # config -> its size keys for the JSON


@dataclass(frozen=True)
class GraphRules:
    """A release's dispatcher and graph key, and the adapters of its answers."""

    dispatcher_class: type  # CudaGraphManager
    key_type: type  # its graph key, BatchExecutionDescriptor (a GraphKey)
    key_columns: tuple[str, ...]  # keys table columns: runtime_mode, then descriptor fields
    # config or None, record_stats -> a dispatcher ready to dispatch
    make_dispatcher: Callable[[Any, bool], Any]
    # (dispatcher, num_tokens, num_reqs, uniform_decode, num_active_loras, use_cascade_attn)
    # -> StepDispatch
    dispatch: Callable[[Any, int, int, bool, int, bool], Any]
    capture_keys: Callable[[Any], list[Any]]  # dispatcher -> CaptureKeys in capture order
    # dispatcher -> the runner's per-step question (num_tokens, num_reqs or None, uniform)
    # -> (cache key, answer to keep alive, runtime mode, graph key): the runner's hot path
    step_dispatch: Callable[[Any], Callable[[int, int | None, bool], tuple[Any, Any, Any, Any]]]
    # (dispatcher, num_tokens, num_reqs, uniform_decode, loras, cascade, StepDispatch) -> why,
    # one line (explain_dispatch, the explorer)
    explain: Callable[[Any, int, int, bool, int, bool, Any], str]


@dataclass(frozen=True, slots=True)
class SchedulerRules:
    """What one vLLM release's ``Scheduler`` does where releases differ."""

    async_by_default: bool  # SchedulerConfig.async_scheduling when the user leaves it unset
    # apply long_prefill_token_threshold only with chunked prefill on (0.34), or always (0.33)
    long_prefill_needs_chunked: bool
    # the default stays on with (ngram) drafts; 0.33's V1 runner turns it off for them
    async_with_drafts: bool = True


@dataclass(frozen=True, slots=True)
class RunnerTraits:
    """What a release's model runner does where releases differ, in the words callers use."""

    # graphs hold a request count that each batch's is checked against (V1 reads none)
    keys_count_requests: bool
    cascade_attention: bool  # the runner has cascade attention (excludes FULL)
    # the generation's own release's memory profile subtracts its estimate of graph memory
    # from the KV cache (each release's answer: release_table.release_defaults)
    profiles_graph_memory: bool


@dataclass(frozen=True)
class Generation:
    """One vLLM release's graph dispatch, as the rest of cgdispatch sees it.

    Declared by its release package as a class with these attributes
    (:meth:`from_class`); callers reach its parts by concern (``generation.rules``,
    ``generation.graphs``, ``generation.runner``) and never compare release strings.
    """

    release: str  # the value of GraphConfig.vllm_version, e.g. 0.34
    name: str  # "generation 2": for prose
    label: str  # "gen 2": for widget options and legends
    ladder: LadderShape  # its size lists; the plan layer registers the shape's planner
    rules: ConfigRules
    graphs: GraphRules
    scheduler: SchedulerRules
    runner: RunnerTraits

    @classmethod
    def from_class(cls, declared: type) -> Generation:
        """The Generation a release package declares as a class of the same attributes
        (``cgdispatch/core/v1/__init__.py`` is an example). ValueError names the
        attributes the class lacks."""
        names = [f.name for f in dataclasses.fields(cls)]
        missing = [name for name in names if not hasattr(declared, name)]
        if missing:
            raise ValueError(
                f"release class {declared.__qualname__} lacks {', '.join(missing)}: declare "
                "every Generation field as a class attribute"
            )
        return cls(**{name: getattr(declared, name) for name in names})

    @property
    def own_fields(self) -> dict[str, Any]:
        """GraphConfig fields only this release reads: its shape's, then its rules' own."""
        return {**self.ladder.own_fields, **self.rules.own_fields}

    @property
    def compilation_keys(self) -> tuple[str, ...]:
        """Its own keys in vLLM's --compilation-config JSON (its shape's): a JSON holding
        them names this release."""
        return tuple(self.ladder.compilation_keys)

    @property
    def dispatcher_name(self) -> str:
        return self.graphs.dispatcher_class.__name__

    def describe(self) -> str:
        """``"0.34 (generation 2, CudaGraphManager)"``"""
        return f"{self.release} ({self.name}, {self.dispatcher_name})"

    def plan_ladder(self, *args: Any, **kwargs: Any) -> Any:
        """The capture-size planner registered for the release's ladder shape, called with
        these arguments (ValueError when none is registered)."""
        return planner_for(self.ladder)(*args, **kwargs)
