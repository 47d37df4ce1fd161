"""A generation-2 ladder: vLLM 0.34's two size lists, and a config that captures them.

vLLM 0.34 (docs/semantics_v2.md) sizes its graphs with two lists instead of V1's one:
``prefill_cudagraph_capture_token_sizes`` (token-keyed graphs for every batch that is not
a uniform decode, and for decodes above the decode graphs) and
``decode_cudagraph_capture_request_sizes`` (uniform-decode FULL graphs keyed by request
count, ``num_tokens = n * q``). :class:`Gen2Ladder` holds both; :func:`gen2_config` puts
them into a config the way ``--compilation-config`` would, and :func:`vllm_gen2_ladder`
reads vLLM 0.34's own defaults for a config. The planner (:mod:`cgdispatch.plan.planner_v2`)
chooses such ladders, :mod:`cgdispatch.plan.ladder_compare` compares and exports them.
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass
from numbers import Integral

from ..core.config import GraphConfig
from ..core.generation import GENERATIONS
from ..core.ladder_shape import SplitLadders

__all__ = ["Gen2Ladder", "gen2_config", "ladder_config", "resolved_ladder", "vllm_gen2_ladder"]


@dataclass(frozen=True)
class Gen2Ladder:
    """vLLM 0.34's two size lists (ascending, each may be empty).

    ``prefill_token_sizes``: token counts of the token-keyed graphs. ``decode_request_sizes``:
    request counts of the uniform-decode FULL graphs (used only by modes with a separate
    decode routine: FULL_AND_PIECEWISE, FULL_DECODE_ONLY).
    """

    prefill_token_sizes: tuple[int, ...]
    decode_request_sizes: tuple[int, ...]

    def __post_init__(self) -> None:
        for name in ("prefill_token_sizes", "decode_request_sizes"):
            sizes = getattr(self, name)
            if any(isinstance(s, bool) or not isinstance(s, Integral) or s < 1 for s in sizes):
                raise ValueError(f"{name}={list(sizes)} is invalid: sizes must be integers >= 1")
            object.__setattr__(self, name, tuple(sorted({int(s) for s in sizes})))

    @property
    def num_sizes(self) -> int:
        """Sizes in both lists: what ``max_graphs`` counts for generation 2."""
        return len(self.prefill_token_sizes) + len(self.decode_request_sizes)

    def __len__(self) -> int:  # as a V1 ladder's len(): the sizes max_graphs counts
        return self.num_sizes

    def as_dict(self) -> dict[str, list[int]]:
        """vLLM 0.34's field names -> sizes (the CLI's JSON form)."""
        return {
            "prefill_cudagraph_capture_token_sizes": list(self.prefill_token_sizes),
            "decode_cudagraph_capture_request_sizes": list(self.decode_request_sizes),
        }


def _quiet_resolve(config: GraphConfig, **changes: object) -> GraphConfig:
    """``config.replace(**changes).resolve()`` without vLLM's warnings: sizes above the
    limits are dropped and legacy lists are deprecated, both expected here."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return config.replace(**changes).resolve()


def _check_gen2(config: GraphConfig) -> None:
    if config.vllm_version is None or not isinstance(config.generation.ladder, SplitLadders):
        two = [g.release for g in GENERATIONS.values() if isinstance(g.ladder, SplitLadders)]
        raise ValueError(
            f"config has vllm_version={config.vllm_version!r}: a Gen2Ladder is the two ladders "
            f"of vLLM {', '.join(two)}; build the config with vllm_version={two[-1]!r} (or give "
            "V1 a list of token sizes)"
        )


def gen2_config(config: GraphConfig, ladder: Gen2Ladder) -> GraphConfig:
    """``config`` (vLLM 0.34) capturing exactly ``ladder``, resolved.

    The new fields are set and every other size field cleared (legacy lists and the
    ``max_*`` caps), as a user who exports the plan would write it. Sizes above
    ``max_num_batched_tokens`` / ``max_num_seqs`` are dropped as vLLM drops them.
    """
    _check_gen2(config)
    return _quiet_resolve(
        config,
        cudagraph_capture_sizes=None,
        max_cudagraph_capture_size=None,
        prefill_cudagraph_capture_token_sizes=list(ladder.prefill_token_sizes),
        decode_cudagraph_capture_request_sizes=list(ladder.decode_request_sizes),
        max_prefill_cudagraph_capture_tokens=None,
        max_decode_cudagraph_capture_requests=None,
    )


def ladder_config(config: GraphConfig, ladder: Gen2Ladder | list[int]) -> GraphConfig:
    """``config`` with ``ladder`` as its sizes, resolved, for either generation.

    V1 takes a token list as ``cudagraph_capture_sizes``. Generation 2 takes a
    :class:`Gen2Ladder` as its two new fields, or a token list as the legacy
    ``cudagraph_capture_sizes``, which vLLM 0.34 splits itself (prefill sizes = the list,
    decode sizes = ``cdiv(s, q)``; docs/semantics_v2.md rules 14-15): that is how another
    engine's token ladder runs on vLLM 0.34.
    """
    if isinstance(ladder, Gen2Ladder):
        return gen2_config(config, ladder)
    sizes = [int(s) for s in ladder]
    return _quiet_resolve(config, **config.generation.ladder.token_list_changes(sizes))


def resolved_ladder(config: GraphConfig) -> Gen2Ladder:
    """The two lists a resolved vLLM 0.34 config captures."""
    _check_gen2(config)
    return Gen2Ladder(
        tuple(config.prefill_cudagraph_capture_token_sizes or ()),
        tuple(config.decode_cudagraph_capture_request_sizes or ()),
    )


def vllm_gen2_ladder(config: GraphConfig) -> Gen2Ladder:
    """vLLM 0.34's default ladder for ``config``'s engine settings (scheduler limits, mode,
    speculative decoding, device capability, performance mode): every size field unset."""
    _check_gen2(config)
    return as_ladder(config, config.generation.ladder.default_sizes(config))


def as_ladder(config: GraphConfig, lists: tuple[list[int], ...]) -> Gen2Ladder | list[int]:
    """The plan layer's value of a shape's lists: a :class:`Gen2Ladder` for split prefill and
    decode ladders, else the one token list."""
    if isinstance(config.generation.ladder, SplitLadders):
        return Gen2Ladder(*(tuple(sizes) for sizes in lists))
    (sizes,) = lists
    return list(sizes)
