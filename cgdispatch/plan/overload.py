"""Traffic one replica cannot hold, the replicas that would, and windows that differ in kind.

``tune`` asks three things of its held-out window before it judges a plan (issue 40):

* does one replica running vLLM's default ladder hold the held-out requests
  (:func:`~cgdispatch.plan.ladder_latency.ladder_sustainability`, the rule in
  :mod:`cgdispatch.workload.sustain`)? When it does not, a p99 TTFT is the queue's length
  and no verdict is drawn from it;
* how many identical replicas would (:func:`replicas_needed`: the smallest N whose every
  replica's share, split as the load balancer splits it, is sustainable; N - 1 is checked
  to be not);
* do the planning and held-out windows differ in kind (:func:`window_notes`: the step mix,
  overload that begins after the cut), and does the plan drop every decode size while the
  held-out window has decodes (:func:`drops_decodes`, :func:`with_default_decodes`)?

It judges nothing itself: ``tune`` decides what the answers change.
"""

from __future__ import annotations

import math

import numpy as np
import pandas as pd

from ..core.config import GraphConfig
from ..workload.latency import serving_step_time, simulate_latencies
from ..workload.replicas import replica_shares, split_requests
from ..workload.scheduler import SchedulerLimits
from ..workload.sustain import RATE_TOLERANCE, Sustainability
from ..workload.trace import simulate_steps
from .costs import CostModel
from .gen2_ladder import Gen2Ladder
from .ladder_compare import Ladder
from .ladder_latency import KvBlocksFn, ladder_sustainability, replay_limits

__all__ = [
    "MAX_REPLICAS",
    "MIX_GAP",
    "replicas_needed",
    "split_for",
    "busiest_share",
    "offered_before",
    "first_guess",
    "decode_share",
    "window_notes",
    "drops_decodes",
    "with_default_decodes",
]

MAX_REPLICAS = 256  # the largest fleet replicas_needed tries
MIX_GAP = 0.3  # decode-step shares of the two windows this far apart differ in kind


def split_for(
    requests: pd.DataFrame,
    replicas: int,
    balance: str,
    config: GraphConfig,
    cost_model: CostModel | None,
    kv_blocks: KvBlocksFn | None,
    limits: SchedulerLimits | None = None,
) -> np.ndarray:
    """:func:`~cgdispatch.workload.replicas.split_requests` with, for least-outstanding,
    shares replayed through vLLM's scheduler on ``config`` (steps priced by its dispatch;
    ``limits``: the replays' scheduler limits, default ``config``'s)."""
    limits = replay_limits(config, limits, kv_blocks)
    step = None if cost_model is None else serving_step_time(config, cost_model)

    def replay(share: pd.DataFrame) -> pd.DataFrame:
        kw = {} if step is None else {"step_time_ms": step}
        return simulate_latencies(share, limits, **kw).requests

    return split_requests(requests, replicas, balance, replay=replay)


def replicas_needed(
    requests: pd.DataFrame,
    config: GraphConfig,
    cost_model: CostModel | None,
    *,
    balance: str = "round-robin",
    kv_blocks: KvBlocksFn | None = None,
    at_least: int = 2,
    guess: int | None = None,
    max_replicas: int = MAX_REPLICAS,
    limits: SchedulerLimits | None = None,
) -> int | None:
    """The smallest replica count N >= ``at_least`` whose every share of ``requests`` (split
    by ``balance``) one replica running ``config`` holds, with ``at_least - 1`` taken as not
    holding it; None when even ``max_replicas`` do not (a prefix that every request shares
    sends them all to one replica).

    The search starts at ``guess`` (e.g. offered over served tokens a second), walks down
    while one fewer holds, else gallops up and bisects: each probe replays every share
    (results cached). It assumes more replicas never hold less, and checks N and N - 1."""
    at_least = max(1, int(at_least))
    n = min(max(at_least, guess or at_least), max_replicas)

    def holds(k: int) -> bool:
        """Every share of ``requests`` split ``k`` ways is sustainable."""
        assignment = split_for(requests, k, balance, config, cost_model, kv_blocks, limits)
        return all(
            not len(share)
            or ladder_sustainability(
                config, share.reset_index(drop=True), cost_model, kv_blocks=kv_blocks, limits=limits
            ).sustainable
            for share in replica_shares(requests, assignment, k)
        )

    if holds(n):
        while n > at_least and holds(n - 1):
            n -= 1
        return n
    low, step = n, 1  # low does not hold
    while True:
        high = min(low + step, max_replicas)
        if holds(high):
            break
        if high == max_replicas:
            return None
        low, step = high, 2 * step
    while high - low > 1:
        mid = (low + high) // 2
        if holds(mid):
            high = mid
        else:
            low = mid
    return high


def busiest_share(
    fleet: pd.DataFrame,
    replicas: int,
    balance: str,
    config: GraphConfig,
    default_cfg: GraphConfig,
    cost_model: CostModel,
    kv_blocks: KvBlocksFn | None,
    trace_label: str,
    limits: SchedulerLimits | None = None,
) -> tuple[pd.DataFrame, pd.DataFrame, str]:
    """(steps, requests, label) of the busiest replica's share (the most prompt and output
    tokens; ties: the lowest index) when ``fleet`` is split ``replicas`` ways by ``balance``."""
    assignment = split_for(fleet, replicas, balance, default_cfg, cost_model, kv_blocks, limits)
    work = (fleet["prompt_tokens"] + fleet["output_tokens"]).to_numpy(dtype=np.float64)
    which = int(np.argmax(np.bincount(assignment, weights=work, minlength=replicas)))
    share = fleet[assignment == which].reset_index(drop=True)
    trace = simulate_steps(
        share,
        max_num_seqs=config.max_num_seqs,
        max_num_batched_tokens=config.max_num_batched_tokens,
        num_speculative_tokens=config.num_speculative_tokens,
        max_loras=config.max_loras or None,
    )
    label = (
        f"{trace_label}; per replica: replica {which + 1} of {replicas} ({balance}, the "
        f"busiest), {len(share):,} of {len(fleet):,} requests"
    )
    return trace, share, label


def offered_before(requests: pd.DataFrame, cut_s: float) -> float | None:
    """Tokens a second the requests arriving before ``cut_s`` (the planning window) need
    computed, as :mod:`~cgdispatch.workload.sustain` counts them; None without a span."""
    first = requests[requests["arrival_s"].to_numpy() < cut_s]
    span = float(cut_s - first["arrival_s"].min()) if len(first) else 0.0
    if not span > 0:
        return None
    work = (first["prompt_tokens"] + first["output_tokens"] - 1).clip(lower=0).sum()
    return float(work) / span


def first_guess(held: Sustainability, replicas: int) -> int:
    """Replicas the token rates ask for: ``replicas`` times offered over served, rounded up."""
    if not held.served_tok_s > 0:
        return replicas + 1
    return max(replicas + 1, math.ceil(replicas * held.offered_tok_s / held.served_tok_s))


def decode_share(steps: pd.DataFrame) -> float | None:
    """The share of ``steps`` that are uniform decodes; None when the kinds are unknown."""
    if not len(steps) or not steps.attrs.get("step_kinds_known", True):
        return None
    if "uniform_decode" not in steps.columns:
        return None
    return float(np.mean(steps["uniform_decode"].to_numpy(dtype=bool)))


def window_notes(
    train: pd.DataFrame,
    test: pd.DataFrame,
    *,
    held: Sustainability | None = None,
    planning_offered_tok_s: float | None = None,
) -> list[str]:
    """What differs in kind between the planning window (``train``) and the held-out one
    (``test``): a decode-step share :data:`MIX_GAP` or more apart, and overload that the
    held-out window has (``held`` not sustainable) while the planning window's offered rate
    was within what one replica served held out."""
    notes = []
    plan_d, held_d = decode_share(train), decode_share(test)
    if plan_d is not None and held_d is not None and abs(plan_d - held_d) >= MIX_GAP:
        notes.append(
            f"the windows differ in kind: planned on {100 * plan_d:.0f}% decode steps, "
            f"held out on {100 * held_d:.0f}%"
        )
    if (
        held is not None
        and not held.sustainable
        and planning_offered_tok_s is not None
        and planning_offered_tok_s <= (1 + RATE_TOLERANCE) * held.served_tok_s
    ):
        notes.append(
            f"overload begins after the cut: {planning_offered_tok_s:,.0f} tok/s offered in "
            f"the planning window, {held.offered_tok_s:,.0f} held out"
        )
    return notes


def drops_decodes(ladder: Ladder, config: GraphConfig) -> bool:
    """True when ``ladder`` has no size a decode batch can use: vLLM 0.34's two lists with
    no decode request size, or a token list with no size up to ``q * max_num_seqs``."""
    top = config.uniform_decode_query_len * config.max_num_seqs
    if isinstance(ladder, Gen2Ladder):
        if config.cudagraph_mode.separate_routine():  # decodes have their own list
            return not ladder.decode_request_sizes
        ladder = list(ladder.prefill_token_sizes)  # decodes pad to a token size
    return not any(int(s) <= top for s in ladder)


def with_default_decodes(planned: Ladder, default: Ladder, config: GraphConfig) -> Ladder:
    """``planned`` with vLLM's default decode sizes added (``default``'s decode request
    sizes, or its token sizes up to ``q * max_num_seqs``): what vLLM itself captures for
    decodes when it is given no decode list."""
    top = config.uniform_decode_query_len * config.max_num_seqs
    if isinstance(planned, Gen2Ladder) and isinstance(default, Gen2Ladder):
        if config.cudagraph_mode.separate_routine():
            return Gen2Ladder(planned.prefill_token_sizes, default.decode_request_sizes)
        small = [s for s in default.prefill_token_sizes if s <= top]
        return Gen2Ladder((*planned.prefill_token_sizes, *small), planned.decode_request_sizes)
    extra = [int(s) for s in default if int(s) <= top]
    return sorted({*map(int, planned), *extra})
