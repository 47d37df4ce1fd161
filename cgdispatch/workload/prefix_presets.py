"""Synthetic traffic whose prompts share prefixes, with ``hash_ids`` (one id per
``hash_block_size`` prompt tokens, equal ids for equal blocks): requests that open with one
of a few system prompts, and multi-turn chat sessions whose turns resend the history.

Lengths come from a :class:`~cgdispatch.workload.synthetic.LengthPreset` (lognormal, clipped),
arrivals are gamma (Poisson at ``burstiness=1``), as in :func:`~cgdispatch.workload.synthetic.synthetic_requests`.
Their prefix statistics (the share of prompt blocks an ideal cache would hit,
:mod:`cgdispatch.workload.prefix_stats`) are in docs/usage_planning.md. Synthetic: they
say nothing about any real service's traffic.
"""

from __future__ import annotations

from dataclasses import dataclass
from itertools import count

import numpy as np
import pandas as pd

from ..core.validate import MAX_REQUESTS, check_int
from .mooncake import HASH_BLOCK_SIZE, HASH_IDS, accumulate_sessions
from .synthetic import LENGTH_PRESETS, LengthPreset, lognormal_lengths

__all__ = ["SharedPromptPreset", "MultiTurnPreset", "PREFIX_PRESETS", "prefix_requests"]


def _arrivals(rng: np.random.Generator, n: int, rate_per_s: float, burstiness: float) -> np.ndarray:
    if not rate_per_s > 0 or not burstiness > 0:
        raise ValueError(
            f"rate_per_s={rate_per_s!r}, burstiness={burstiness!r} are invalid: both must be "
            "> 0 (rate inf: every arrival at 0)"
        )
    if np.isinf(rate_per_s):
        return np.zeros(n)
    gaps = rng.gamma(burstiness, 1.0 / (rate_per_s * burstiness), n)
    return np.cumsum(gaps) - gaps[0]


def _ids(shared: list[int], prompt: int, block: int, fresh: count) -> list[int]:
    """A prompt's block ids: the shared full blocks, then ids no other block has."""
    return shared + [next(fresh) for _ in range(-(-prompt // block) - len(shared))]


class _PrefixPreset:
    """A preset's public draw: the request count and block size checked, a generator seeded
    with ``seed``, then the preset's own ``_draw``."""

    def requests(
        self,
        num_requests: int,
        *,
        rate_per_s: float = 10.0,
        burstiness: float = 1.0,
        seed: int = 0,
        hash_block_size: int = HASH_BLOCK_SIZE,
    ) -> pd.DataFrame:
        """``num_requests`` requests arriving at ``rate_per_s`` (gamma gaps of shape
        ``burstiness``), their prompts' block ids hashed per ``hash_block_size`` tokens."""
        n = check_int("num_requests", num_requests, 1, MAX_REQUESTS)
        block = check_int("hash_block_size", hash_block_size, 1, 1 << 20)
        return self._draw(n, block, np.random.default_rng(seed), rate_per_s, burstiness)

    def _draw(
        self, n: int, block: int, rng: np.random.Generator, rate_per_s: float, burstiness: float
    ) -> pd.DataFrame:  # pragma: no cover - each preset has its own
        raise NotImplementedError


@dataclass(frozen=True)
class SharedPromptPreset(_PrefixPreset):
    """Requests that each open with one of ``num_system_prompts`` system prompts of
    ``system_prompt_tokens`` tokens (chosen uniformly), then a user text and an answer of
    ``lengths``' distribution. Only the system prompt's whole blocks are shared."""

    system_prompt_tokens: int = 2048  # 4 blocks of 512
    num_system_prompts: int = 4
    lengths: LengthPreset = LENGTH_PRESETS["sharegpt"]  # the user text and the output

    def _draw(
        self, n: int, block: int, rng: np.random.Generator, rate_per_s: float, burstiness: float
    ) -> pd.DataFrame:
        arrival = _arrivals(rng, n, rate_per_s, burstiness)
        p = self.lengths
        user = lognormal_lengths(rng, p.prompt_mean, p.prompt_sigma, n, p.max_prompt_tokens)
        out = lognormal_lengths(rng, p.output_mean, p.output_sigma, n, p.max_output_tokens)
        which = rng.integers(0, self.num_system_prompts, n)
        full = self.system_prompt_tokens // block
        shared = [list(range(k * full, (k + 1) * full)) for k in range(self.num_system_prompts)]
        fresh = count(self.num_system_prompts * full)
        prompt = user + self.system_prompt_tokens
        frame = pd.DataFrame({"arrival_s": arrival, "prompt_tokens": prompt, "output_tokens": out})
        frame[HASH_IDS] = [_ids(shared[k], int(t), block, fresh) for k, t in zip(which, prompt)]
        frame.attrs["hash_block_size"] = block
        return frame


@dataclass(frozen=True)
class MultiTurnPreset(_PrefixPreset):
    """Chat sessions: each starts at a gamma arrival, has 1 + geometric(``1 / turns_mean``)
    - 1 turns (mean ``turns_mean``), and each later turn comes ``think_time_s`` (exponential
    mean) after the previous answer ends (closed loop). A turn's prompt is the session's
    history (every earlier prompt and answer) then its new text, as chat clients send it;
    the first turn may open with a ``system_prompt_tokens`` prompt all sessions share.
    Sessions start at ``rate_per_s / turns_mean`` a second, so turns come at about
    ``rate_per_s``."""

    turns_mean: float = 4.0
    think_time_s: float = 5.0
    system_prompt_tokens: int = 0
    first: LengthPreset = LENGTH_PRESETS["sharegpt"]  # the first turn's text and answer
    follow: LengthPreset = LengthPreset(60.0, 200.0, prompt_sigma=0.8, output_sigma=0.8)

    def _draw(
        self, n: int, block: int, rng: np.random.Generator, rate_per_s: float, burstiness: float
    ) -> pd.DataFrame:
        turns = rng.geometric(1.0 / self.turns_mean, n)  # at most n sessions are needed
        sessions = int(np.searchsorted(np.cumsum(turns), n)) + 1
        turns = turns[:sessions]
        turns[-1] -= int(turns.sum()) - n  # the last session cut to n turns in all
        start = _arrivals(rng, sessions, rate_per_s / self.turns_mean, burstiness)
        session = np.repeat(np.arange(sessions), turns)
        turn = np.concatenate([np.arange(t) for t in turns])
        f, g = self.first, self.follow
        text = np.where(
            turn == 0,
            lognormal_lengths(rng, f.prompt_mean, f.prompt_sigma, n, f.max_prompt_tokens)
            + self.system_prompt_tokens,
            lognormal_lengths(rng, g.prompt_mean, g.prompt_sigma, n, g.max_prompt_tokens),
        )
        out = np.where(
            turn == 0,
            lognormal_lengths(rng, f.output_mean, f.output_sigma, n, f.max_output_tokens),
            lognormal_lengths(rng, g.output_mean, g.output_sigma, n, g.max_output_tokens),
        )
        full = self.system_prompt_tokens // block
        fresh = count(full)
        frame = pd.DataFrame(
            {
                "arrival_s": np.where(turn == 0, start[session], 0.0),
                "prompt_tokens": text,
                "output_tokens": out,
                "session_id": session,
                "turn": turn,
                "delay_s": np.where(turn == 0, np.nan, rng.exponential(self.think_time_s, n)),
            }
        )
        frame[HASH_IDS] = [
            _ids(list(range(full)) if k == 0 else [], int(t), block, fresh)
            for k, t in zip(turn, text)
        ]
        return accumulate_sessions(frame, block)


PREFIX_PRESETS: dict[str, SharedPromptPreset | MultiTurnPreset] = {
    # one of 4 system prompts of 2,048 tokens, then a ShareGPT-length question
    "shared-prompt": SharedPromptPreset(),
    # ShareGPT-length first turns, then short follow-ups, 4 turns a session on average
    "multi-turn": MultiTurnPreset(),
}


def prefix_requests(
    num_requests: int,
    preset: str,
    *,
    rate_per_s: float = 10.0,
    seed: int = 0,
    hash_block_size: int = HASH_BLOCK_SIZE,
) -> pd.DataFrame:
    """The request table of the named preset of :data:`PREFIX_PRESETS`."""
    if preset not in PREFIX_PRESETS:
        raise ValueError(
            f"prefix preset {preset!r} is unknown: use one of {sorted(PREFIX_PRESETS)}"
        )
    return PREFIX_PRESETS[preset].requests(
        num_requests, rate_per_s=rate_per_s, seed=seed, hash_block_size=hash_block_size
    )
