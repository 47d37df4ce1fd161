"""A test-only vLLM release with a ladder shape no real release has: one token ladder shared
by prefill and uniform-decode graphs, powers of two by default.

It is the whole of what a release with a new shape adds: this one package (its shape, its
config rules, its Generation) and one planner entry (:func:`plan_shared`, registered for
:class:`SharedLadder`). It runs on generation 2's ``CudaGraphManager``: the shared list is
its prefill token grid, and the sizes that are whole decode batches (``s % q == 0`` and
``s // q <= max_num_seqs``) are its decode request grid. Nothing in ``cgdispatch`` names it.

:func:`registered` adds it to the registry for the length of a ``with`` block.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Sequence
from typing import Any

from cgdispatch.core.generation import (
    GENERATIONS,
    ConfigRules,
    Generation,
    register_generation,
    unregister_generation,
)
from cgdispatch.core.ladder_shape import Ladder, register_planner
from cgdispatch.core.v2 import config as v2_config

RELEASE = "0.99"
BASE = "0.34"  # the release whose runner, scheduler and mode rules it keeps
TOP_DEFAULT = 512  # the default ladder's cap, as V1's and 0.34's defaults cap theirs


def shared_default(max_num_batched_tokens: int) -> list[int]:
    """Its size rule: the powers of two up to min(max_num_batched_tokens, 512)."""
    top = min(max_num_batched_tokens, TOP_DEFAULT)
    return [1 << k for k in range(top.bit_length()) if 1 << k <= top]


def decode_requests(sizes: Sequence[int], q: int, max_num_seqs: int) -> list[int]:
    """The request counts of the shared sizes that are whole uniform-decode batches."""
    return [s // q for s in sizes if s % q == 0 and s // q <= max_num_seqs]


class SharedLadder:
    """One list of token sizes (``cudagraph_capture_sizes``) that prefill graphs and
    uniform-decode graphs share; a LadderShape."""

    name = "one ladder shared by prefill and decode graphs"
    ladders = (
        Ladder(
            "cudagraph_capture_sizes",
            "shared sizes",
            "shared sizes",
            "max_num_batched_tokens",
            "sizes",
        ),
    )
    own_fields: dict[str, Any] = {}
    compilation_keys: tuple[str, ...] = ()
    keyed_by = "one ladder of token sizes shared by prefill and decode graphs"
    count_label = "shared sizes"

    def sizes(self, config: Any) -> tuple[list[int], ...]:
        return (list(config.cudagraph_capture_sizes or []),)

    def default_sizes(self, config: Any) -> tuple[list[int], ...]:
        return (shared_default(config.max_num_batched_tokens),)

    def changes(self, lists: Sequence[list[int] | None]) -> dict[str, Any]:
        (sizes,) = lists
        return {"cudagraph_capture_sizes": sizes}

    def token_list_changes(self, sizes: list[int]) -> dict[str, Any]:
        return {"cudagraph_capture_sizes": sizes}

    def one_list_changes(self, sizes: list[int], max_num_seqs: int) -> dict[str, Any]:
        return {"cudagraph_capture_sizes": list(sizes)}

    def largest_tokens(self, config: Any, keys: Sequence[Any]) -> int:
        return max(config.cudagraph_capture_sizes, default=0)

    def num_sizes(self, dispatcher: Any, keys: Sequence[Any]) -> int:
        return len(dispatcher.config.cudagraph_capture_sizes) if keys else 0

    def config_text(self, config: Any, num_graphs: int) -> str:
        return f"{num_graphs} shared sizes"


SHARED_LADDER = SharedLadder()
_LISTS = ("prefill_cudagraph_capture_token_sizes", "decode_cudagraph_capture_request_sizes")


def check_fields(config: Any) -> dict[str, Any]:
    """0.34's checks, and the two grids refused: the shared list sets both."""
    given = [name for name in _LISTS if getattr(config, name) is not None]
    if given:
        raise ValueError(
            f"{', '.join(given)} cannot be set for vLLM {RELEASE}: its one shared ladder "
            "(cudagraph_capture_sizes) sets prefill and decode sizes; give that instead"
        )
    return v2_config.check_fields(config)


def derive_sizes(config: Any) -> dict[str, Any]:
    """The shared list (given, else :func:`shared_default`, cut at the step budget and the
    max size), then 0.34's derivation of the two grids it makes."""
    asked = config.cudagraph_capture_sizes
    sizes = shared_default(config.max_num_batched_tokens) if asked is None else sorted(set(asked))
    top = config.max_cudagraph_capture_size or config.max_num_batched_tokens
    sizes = [s for s in sizes if s <= min(top, config.max_num_batched_tokens)]
    if not sizes:
        raise ValueError(
            f"cudagraph_capture_sizes={asked!r} leaves no size at most "
            f"max_num_batched_tokens={config.max_num_batched_tokens}: give smaller sizes"
        )
    q = config.uniform_decode_query_len
    decode = decode_requests(sizes, q, config.max_num_seqs)
    grids = config._with(
        cudagraph_capture_sizes=None,
        max_cudagraph_capture_size=None,
        prefill_cudagraph_capture_token_sizes=sizes,
        decode_cudagraph_capture_request_sizes=decode,  # none: no decode graphs
    )
    out = v2_config.derive_sizes(grids)
    out.update(cudagraph_capture_sizes=sizes, max_cudagraph_capture_size=sizes[-1])
    return out


def compilation_sizes(config: Any) -> dict[str, Any]:
    """Its size keys in vLLM's JSON: the one shared list and its max."""
    return {
        "cudagraph_capture_sizes": list(config.cudagraph_capture_sizes),
        "max_cudagraph_capture_size": config.max_cudagraph_capture_size,
    }


def plan_shared(steps: Any, max_graphs: int, *, config: Any, **options: Any) -> list[int]:
    """Its planner entry: one token list, planned by cgdispatch's token planner."""
    from cgdispatch.plan.planner import plan_capture_sizes

    return plan_capture_sizes(steps, max_graphs, config=config, **options)


class SharedRelease:
    """Its Generation, declared: 0.34's runner, dispatcher, scheduler and mode rules, with
    its own release, shape, field checks, size rule and JSON."""

    release, name, label = RELEASE, "shared-ladder test release", "shared"
    ladder = SHARED_LADDER
    # it runs the 0.34 manager, so it owns every field 0.34 reads; its rules set the grids
    rules = ConfigRules(
        v2_config.GEN2_FIELDS,
        check_fields,
        derive_sizes,
        v2_config.resolve,
        v2_config.lora_cases,
        compilation_sizes,
    )
    graphs = GENERATIONS[BASE].graphs
    scheduler = GENERATIONS[BASE].scheduler
    runner = GENERATIONS[BASE].runner


register_planner(SharedLadder, plan_shared)  # the one planner entry


@contextlib.contextmanager
def registered() -> Iterator[Generation]:
    """The release in the registry for the block, removed after it."""
    release = register_generation(Generation.from_class(SharedRelease))
    try:
        yield release
    finally:
        unregister_generation(RELEASE)
