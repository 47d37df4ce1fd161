"""The ladder shape of a release: which size lists a user sets, and how each is read and shown.

V1 (vLLM 0.33) captures one list of token sizes (:class:`TokenLadder`); generation 2
(vLLM 0.34) captures prefill graphs on a token ladder and uniform-decode graphs on a
request ladder (:class:`SplitLadders`). Each release names its shape
(``Generation.ladder``); views, the CLI, sweeps and the planner ask the shape what to show,
parse and plan, and never ask which release it is. A new shape is one class that answers
:class:`LadderShape` plus one planner registered for it.

Planners live in the plan layer, above this one: the plan layer registers each shape's
planner here (:func:`register_planner`, registration goes downward), and this module
names none. It derives no sizes itself: each release's config rules do
(``cgdispatch.core.v1.config``, ``cgdispatch.core.v2.config``).
"""

from __future__ import annotations

import warnings
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any, Protocol, runtime_checkable

from .ladders import vllm_ladder
from .validate import MAX_CAPTURE_SIZE, as_index, check_int, check_list_length

__all__ = [
    "Ladder",
    "LadderShape",
    "TokenLadder",
    "SplitLadders",
    "TOKEN_LADDER",
    "SPLIT_LADDERS",
    "register_planner",
    "planner_for",
]


@dataclass(frozen=True)
class Ladder:
    """One size list a user sets: the GraphConfig field that holds it, and its words."""

    field: str  # GraphConfig field: "prefill_cudagraph_capture_token_sizes"
    name: str  # prose, plural: "prefill token sizes"
    box: str  # a widget's label: "prefill tokens"
    limit: str  # the GraphConfig count that bounds a size: "max_num_batched_tokens"
    # short name: the CLI option's dest, a table column, a data attribute ("decode-sizes")
    flag: str


@runtime_checkable
class LadderShape(Protocol):
    """What a release's size lists look like, as every caller above core asks it.

    A shape reads and writes GraphConfig fields by name (``config`` is a GraphConfig or
    anything with its fields) and never derives sizes: the release's config rules do.
    """

    name: str  # "one token ladder": for prose (the plan CLI's generation line)
    ladders: tuple[Ladder, ...]  # the lists a user sets, in the order they are shown
    # GraphConfig fields only this shape reads, with their defaults; vLLM's JSON keys of them
    own_fields: Mapping[str, Any]
    compilation_keys: tuple[str, ...]
    keyed_by: str  # "one ladder of token sizes": how its graphs are keyed, for prose
    count_label: str  # what a count of its sizes is called on a chart axis

    def check_fields(self, config: Any) -> dict[str, Any]:
        """Its own fields of ``config``, checked and normalised (ValueError on a bad one)."""
        ...

    def sizes(self, config: Any) -> tuple[list[int], ...]:
        """Each ladder's sizes in ``config`` (empty where unset), in ``ladders`` order."""
        ...

    def default_sizes(self, config: Any) -> tuple[list[int], ...]:
        """The release's default ladders for ``config``'s engine settings (no size given),
        in ``ladders`` order: vLLM's own row of a ladder comparison."""
        ...

    def changes(self, lists: Sequence[list[int] | None]) -> dict[str, Any]:
        """GraphConfig changes that set the ladders to ``lists`` (one per ladder, in
        order; None leaves that ladder to the release's default)."""
        ...

    def token_list_changes(self, sizes: list[int]) -> dict[str, Any]:
        """GraphConfig changes that capture one token list (another engine's ladder) the
        way this shape's release reads a token list."""
        ...

    def one_list_changes(self, sizes: list[int], max_num_seqs: int) -> dict[str, Any]:
        """GraphConfig changes that capture ``sizes`` as every ladder of a sweep or tour
        whose decode batches have one token per request (a size is a token count and a
        request count alike)."""
        ...

    def largest_tokens(self, config: Any, keys: Sequence[Any]) -> int:
        """The largest token count a graph covers (``keys``: the capture keys)."""
        ...

    def num_sizes(self, dispatcher: Any, keys: Sequence[Any]) -> int:
        """The sizes that ``max_graphs`` counts, for a ready dispatcher and its keys."""
        ...

    def config_text(self, config: Any, num_graphs: int) -> str:
        """``"12 capture sizes"``: the sizes of ``config`` in words (``num_graphs``: the
        sizes that capture a graph, :meth:`num_sizes`)."""
        ...


def _ints(values: Any) -> list[int]:
    return list(values or [])


def _optional_list(config: Any, name: str) -> list[int] | None:
    """A size list field checked: None, or a list of integers within the bounds."""
    value = getattr(config, name)
    if value is None:
        return None
    check_list_length(
        name,
        value,
        "give a list of integers (e.g. [1, 2, 4, 8]), [] to capture none, "
        "or None for vLLM's default grid",
    )
    out = []
    for s in value:
        number = as_index(s)
        if number is None:
            raise ValueError(f"{name} holds {s!r}: every size must be an integer")
        if number > MAX_CAPTURE_SIZE:
            check_int(f"size in {name}", number, 0, MAX_CAPTURE_SIZE)
        out.append(number)
    return out


class TokenLadder:
    """One list of token sizes, ``cudagraph_capture_sizes`` (V1, vLLM 0.10-0.33).

    Every graph's size is a token count; uniform-decode graphs reuse the same list
    (``num_reqs = size // q``).
    """

    name = "one token ladder"
    ladders = (
        Ladder(
            "cudagraph_capture_sizes",
            "capture sizes",
            "capture sizes",
            "max_num_batched_tokens",
            "sizes",
        ),
    )
    # the legacy size fields every release reads: owned by none (GraphConfig's own)
    own_fields: Mapping[str, Any] = MappingProxyType({})
    compilation_keys: tuple[str, ...] = ()
    keyed_by = "one ladder of token sizes"
    count_label = "capture sizes"

    def check_fields(self, config: Any) -> dict[str, Any]:
        return {}  # the legacy fields: GraphConfig and the release's rules check them

    def sizes(self, config: Any) -> tuple[list[int], ...]:
        return (_ints(config.cudagraph_capture_sizes),)

    def default_sizes(self, config: Any) -> tuple[list[int], ...]:
        # vLLM's ladder from the scheduler limits and q (docs/semantics.md)
        return (
            vllm_ladder(
                max_num_seqs=config.max_num_seqs,
                max_num_batched_tokens=config.max_num_batched_tokens,
                num_speculative_tokens=config.num_speculative_tokens,
            ),
        )

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
        # a dispatcher whose mode captures nothing (NONE) has no keys and no sizes
        return len(dispatcher.config.cudagraph_capture_sizes) if dispatcher.keys_initialized else 0

    def config_text(self, config: Any, num_graphs: int) -> str:
        return f"{num_graphs} capture sizes"

    def __repr__(self) -> str:
        return "TOKEN_LADDER"


# generation 2's size fields (vllm/config/compilation.py, vLLM 0.34) and their defaults
_SPLIT_FIELDS: dict[str, Any] = {
    "prefill_cudagraph_capture_token_sizes": None,
    "max_prefill_cudagraph_capture_tokens": None,
    "decode_cudagraph_capture_request_sizes": None,
    "max_decode_cudagraph_capture_requests": None,
    "max_decode_cudagraph_capture_tokens": None,
}


class SplitLadders:
    """Prefill graphs on a token ladder, uniform-decode graphs on a request ladder
    (generation 2, vLLM 0.34: ``prefill_cudagraph_capture_token_sizes`` and
    ``decode_cudagraph_capture_request_sizes``).

    The legacy ``cudagraph_capture_sizes`` still reaches it as one token list, which the
    release splits itself (docs/semantics_v2.md rules 14-15).
    """

    name = "decode graphs by request count and prefill graphs by token count"
    ladders = (
        Ladder(
            "prefill_cudagraph_capture_token_sizes",
            "prefill token sizes",
            "prefill tokens",
            "max_num_batched_tokens",
            "prefill_sizes",
        ),
        Ladder(
            "decode_cudagraph_capture_request_sizes",
            "decode request sizes",
            "decode requests",
            "max_num_seqs",
            "decode_sizes",
        ),
    )
    own_fields: Mapping[str, Any] = MappingProxyType(_SPLIT_FIELDS)
    compilation_keys = tuple(_SPLIT_FIELDS)
    keyed_by = "decode graphs keyed by request count, prefill graphs by token count"
    count_label = "sizes (prefill + decode)"

    def check_fields(self, config: Any) -> dict[str, Any]:
        out: dict[str, Any] = {lad.field: _optional_list(config, lad.field) for lad in self.ladders}
        for name, minimum in (
            ("max_prefill_cudagraph_capture_tokens", 0),
            ("max_decode_cudagraph_capture_requests", 0),
            ("max_decode_cudagraph_capture_tokens", 1),
        ):
            value = getattr(config, name)
            out[name] = None if value is None else check_int(name, value, minimum, MAX_CAPTURE_SIZE)
        return out

    def sizes(self, config: Any) -> tuple[list[int], ...]:
        return tuple(_ints(getattr(config, ladder.field)) for ladder in self.ladders)

    def default_sizes(self, config: Any) -> tuple[list[int], ...]:
        # every size field unset, resolved for the device, mode and speculative decoding;
        # quietly: sizes above the limits are dropped and legacy lists deprecated, both
        # expected here
        unset = dict.fromkeys(
            ("cudagraph_capture_sizes", "max_cudagraph_capture_size", *self.own_fields)
        )
        unset.pop("max_decode_cudagraph_capture_tokens")
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            return self.sizes(config.replace(**unset).resolve())

    def changes(self, lists: Sequence[list[int] | None]) -> dict[str, Any]:
        prefill, decode = lists
        # the boxes are the only size source: legacy fields would have to agree
        out: dict[str, Any] = {
            "cudagraph_capture_sizes": None,
            "max_cudagraph_capture_size": None,
            "prefill_cudagraph_capture_token_sizes": prefill,
        }
        if decode is not None:
            out["decode_cudagraph_capture_request_sizes"] = decode
        return out

    def token_list_changes(self, sizes: list[int]) -> dict[str, Any]:
        # the legacy list, which the release splits: prefill = the list, decode = cdiv(s, q)
        return {
            "cudagraph_capture_sizes": sizes,
            "prefill_cudagraph_capture_token_sizes": None,
            "decode_cudagraph_capture_request_sizes": None,
            "max_prefill_cudagraph_capture_tokens": None,
            "max_decode_cudagraph_capture_requests": None,
        }

    def one_list_changes(self, sizes: list[int], max_num_seqs: int) -> dict[str, Any]:
        # a decode graph for more requests than the scheduler forms would never run; with
        # none left, the release's default decode grid
        decode = [s for s in sizes if s <= max_num_seqs]
        return {
            "prefill_cudagraph_capture_token_sizes": list(sizes),
            "decode_cudagraph_capture_request_sizes": decode or None,
        }

    def largest_tokens(self, config: Any, keys: Sequence[Any]) -> int:
        return max((k.num_tokens for k in keys), default=0)

    def num_sizes(self, dispatcher: Any, keys: Sequence[Any]) -> int:
        # LoRA cases and microbatch twins of one size count once
        return len(
            {
                (
                    k.key.uniform_token_count,
                    k.num_reqs if k.key.uniform_token_count else k.num_tokens,
                )
                for k in keys
            }
        )

    def config_text(self, config: Any, num_graphs: int) -> str:
        prefill, decode = self.sizes(config)
        return (
            f"{len(prefill)} prefill token sizes, {len(decode)} decode request sizes "
            f"({num_graphs} that capture graphs)"
        )

    def __repr__(self) -> str:
        return "SPLIT_LADDERS"


TOKEN_LADDER = TokenLadder()
SPLIT_LADDERS = SplitLadders()

# shape class -> its planner (steps, max_graphs, *, config, **options) -> a ladder
_PLANNERS: dict[type, Callable[..., Any]] = {}


def register_planner(shape: type, planner: Callable[..., Any]) -> None:
    """Register the capture-size planner of a ladder shape (the plan layer calls this for
    the built-in shapes; a new shape's package for its own). A later registration for the
    same shape replaces the earlier one."""
    if not isinstance(shape, type) or not callable(planner):
        raise ValueError(
            f"register_planner({shape!r}, {planner!r}) is invalid: pass a ladder shape class "
            "and a callable planner"
        )
    _PLANNERS[shape] = planner


def planner_for(shape: LadderShape) -> Callable[..., Any]:
    """The planner registered for ``shape``'s class, else ValueError saying how to get one."""
    for cls in type(shape).__mro__:
        if cls in _PLANNERS:
            return _PLANNERS[cls]
    raise ValueError(
        f"no planner is registered for the ladder shape {shape.name!r}: import "
        "cgdispatch.plan (it registers the built-in shapes' planners), or call "
        "cgdispatch.core.ladder_shape.register_planner for a new shape"
    )
