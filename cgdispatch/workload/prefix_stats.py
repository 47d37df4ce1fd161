"""How much of a trace's prompts an ideal prefix cache would hold: the share of prompt blocks
whose whole prefix (that block and every block before it in the prompt) came in an earlier
request, counted in arrival order with an unbounded cache that never evicts.

It is an upper bound for what vLLM's prefix caching can hit on the trace (a real cache
evicts, hits only whole blocks of its own block size and recomputes a prompt's last token);
the replay with prefix caching gives the achieved figure. It reads ``hash_ids`` only.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass

import pandas as pd

from .mooncake import HASH_IDS

__all__ = ["PrefixStats", "prefix_stats", "prefix_hit_rate"]


@dataclass(frozen=True)
class PrefixStats:
    """Ideal prefix-cache figures of a trace (module docstring)."""

    blocks: int  # prompt blocks in all (one per hash id)
    hit_blocks: int  # of them, blocks whose chained prefix appeared in an earlier request

    @property
    def hit_rate(self) -> float:
        """``hit_blocks / blocks`` (0 for a trace without blocks)."""
        return self.hit_blocks / self.blocks if self.blocks else 0.0


def prefix_stats(hash_ids: Iterable[Sequence[int]]) -> PrefixStats:
    """:class:`PrefixStats` of prompts given as block ids, in arrival order.

    Each prefix is a node of a trie keyed by (parent node, block id), so a block hits only
    when every block before it matches too, as vLLM's chained block hashes do; a prompt's
    blocks past its first miss all miss."""
    seen: dict[tuple[int, int], int] = {}
    blocks = hits = 0
    for ids in hash_ids:
        node, known = 0, True
        for block in ids:
            blocks += 1
            key = (node, int(block))
            child = seen.get(key) if known else None
            if child is None:
                known = False
                child = seen[key] = len(seen) + 1
            else:
                hits += 1
            node = child
    return PrefixStats(blocks, hits)


def prefix_hit_rate(requests: pd.DataFrame) -> float | None:
    """The ideal prefix hit rate of a request table (requests taken by ``arrival_s``, ties
    in row order), or None when it has no ``hash_ids`` column."""
    if HASH_IDS not in requests.columns:
        return None
    order = requests["arrival_s"].argsort(kind="stable").to_numpy()
    return prefix_stats(requests[HASH_IDS].to_numpy()[order]).hit_rate
