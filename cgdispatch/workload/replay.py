"""The one entry point to the replay of vLLM's scheduler: :func:`replay_scheduler`.

A request table goes in, one row per engine step comes out, formed by vLLM's own scheduler
of ``limits.vllm_version`` (the newest release when none is given) step for step
(:mod:`cgdispatch.workload.vllm_scheduler`: FCFS admission, chunked prefill, KV blocks and
preemption, async scheduling, drafts; checked on the scheduler oracle against vLLM's
``vllm/v1/core/sched/scheduler.py`` of each release). Planning (``tune``, ``plan``), judging
(the latency replay of each ladder), the what-if engine, the sweeps and the notebooks all take
their steps from it; :class:`~cgdispatch.workload.scheduler.SchedulerSimulator` is a thin
step-by-step view of the same run.

The clock is a step-time model, so ``time_s`` is ``model``, not measured. Inputs that would
make it loop for days are refused before the first step: non-finite arrival times, token
counts above :data:`~cgdispatch.core.validate.MAX_REQUEST_TOKENS`, or work needing more
than :data:`~cgdispatch.core.validate.MAX_STEPS` steps.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from numbers import Integral
from typing import Any

import numpy as np
import pandas as pd

from ..core.step_content import StepContent
from ..core.validate import MAX_STEPS
from .exact_run import AcceptFn, ExactRun
from .limits import SchedulerLimits, scheduler_limits
from .request_table import check_requests

__all__ = ["replay_scheduler", "start_replay", "default_step_time_ms", "StepClock"]

# a step's duration in ms from its token and request counts (the replay's internal clock form)
StepClock = Callable[[int, int], float]


def default_step_time_ms(num_tokens: int, num_reqs: int) -> float:
    """Model (not measured): 8 ms per step plus 0.05 ms per token, roughly an 8B model on one
    H100-class GPU; it only orders steps against arrivals in the replay. A schedule call
    that runs nothing (vLLM makes some) takes no time."""
    return 8.0 + 0.05 * num_tokens if num_tokens else 0.0


def start_replay(
    requests: pd.DataFrame,
    limits: SchedulerLimits | None = None,
    *,
    step_time_ms: StepClock = default_step_time_ms,
    seed: int = 0,
    accept_drafts: AcceptFn | None = None,
    record_calls: bool = False,
) -> ExactRun:
    """The replay of vLLM's scheduler over ``requests``, checked and ready (nothing run yet).

    ``step_time_ms(num_tokens, num_reqs)``, or an object that also has ``content_ms(StepContent)``
    (:func:`~cgdispatch.workload.latency.dispatched_step_time`), which the replay then prices
    each step with. ``accept_drafts(clock_s, row, num_drafts)``: drafts accepted for request
    ``row`` in the step scheduled at ``clock_s`` (default: each with ``spec_acceptance_rate``
    until the first rejection, drawn from ``seed``). ``record_calls``: keep every schedule call
    with its per-request lists (``calls``, for oracle checks); otherwise steady decodes run in
    bulk, which gives the same steps and request times far faster."""
    if limits is None:
        limits = scheduler_limits()  # vLLM's defaults, the newest release
    elif not isinstance(limits, SchedulerLimits):
        raise ValueError(
            f"limits={limits!r} is not a SchedulerLimits: build one with "
            "cgdispatch.scheduler_limits(config, **settings) or cgdispatch.SchedulerLimits"
        )
    if isinstance(seed, bool) or not isinstance(seed, Integral) or seed < 0:
        raise ValueError(f"seed={seed!r} is invalid: give a whole number >= 0")
    req = check_requests(requests).sort_values("arrival_s", kind="stable")
    prompt = req["prompt_tokens"].to_numpy(dtype=np.int64)
    output = req["output_tokens"].to_numpy(dtype=np.int64)
    biggest = int(prompt.max())
    if not limits.enable_chunked_prefill and biggest > limits.max_num_batched_tokens:
        raise ValueError(
            f"a prompt of {biggest} tokens exceeds max_num_batched_tokens="
            f"{limits.max_num_batched_tokens} without chunked prefill: enable it or raise "
            "the budget"
        )
    # at least this many steps: every prompt token through the budget, and the longest
    # output one decode step per q tokens; refused up front rather than looped through
    least = max(
        math.ceil(int(prompt.sum()) / limits.max_num_batched_tokens),
        math.ceil(int(output.max()) / limits.q),
    )
    if least > MAX_STEPS:
        raise ValueError(
            f"these {len(req)} requests need at least {least:_} steps with "
            f"max_num_batched_tokens={limits.max_num_batched_tokens}: more than the "
            f"{MAX_STEPS:_} steps a replay may take; replay fewer or shorter requests"
        )
    return ExactRun(req, limits, step_time_ms, int(seed), accept_drafts, record_calls)


class _RecordClock:
    """A person's ``step_time_ms(record)`` as the replay's clock: each step's record (a
    :class:`~cgdispatch.core.step_content.StepContent`) in, its duration checked out."""

    def __init__(self, fn: Callable[[StepContent], Any]) -> None:
        self.fn = fn

    def content_ms(self, record: StepContent) -> float:
        if record.num_tokens == 0:
            return 0.0  # a schedule call that runs nothing (vLLM makes some) takes no time
        value = self.fn(record)
        try:
            ms = float(value)
        except (TypeError, ValueError):
            ms = math.nan
        if not math.isfinite(ms) or ms < 0:
            raise ValueError(
                f"step_time_ms returned {value!r} for a step of {record.num_tokens} tokens and "
                f"{record.num_reqs} requests: a step's duration must be a finite number of ms "
                ">= 0; fix the callable"
            )
        return ms

    def __call__(self, num_tokens: int, num_reqs: int) -> float:
        return self.content_ms(StepContent(num_reqs, num_tokens))  # unused: content_ms is read


def replay_scheduler(
    requests: pd.DataFrame,
    limits: SchedulerLimits | None = None,
    *,
    step_time_ms: Callable[[StepContent], float] | None = None,
    seed: int = 0,
    progress: bool = False,
) -> pd.DataFrame:
    """The steps vLLM's scheduler forms for ``requests``, one row per engine step.

    ``requests``: a DataFrame with ``arrival_s`` (seconds from the start), ``prompt_tokens``
    and ``output_tokens`` (whole numbers >= 1), optionally ``lora_id`` (-1: none).
    ``limits``: a :class:`~cgdispatch.workload.limits.SchedulerLimits` (default: vLLM's
    defaults for the newest release; :func:`~cgdispatch.workload.limits.scheduler_limits`
    builds one from a config). ``step_time_ms``: called with each step's record, a
    :class:`~cgdispatch.core.step_content.StepContent` (``num_tokens``, ``num_reqs``, the
    decodes with their summed contexts, each prompt chunk's computed and new tokens), returns
    its duration in ms; it orders steps against arrivals. Default:
    :func:`default_step_time_ms` (8 ms + 0.05 ms a token, ``model``). ``seed``: the draft
    acceptance draws (speculative decoding only). ``progress``: a bar on stderr.

    Returns the columns of :class:`~cgdispatch.workload.steps.Step`: ``num_tokens``,
    ``num_reqs``, ``uniform_decode``, ``has_lora``, ``num_active_loras``,
    ``num_prefill_tokens``, ``time_s`` (step start, model clock), ``num_preempted``,
    ``max_query_len``, ``num_decode_reqs``, ``kv_blocks_used``. Raises ValueError naming a bad
    input, the rule and the fix.
    """
    if step_time_ms is None:
        clock: StepClock = default_step_time_ms
    elif not callable(step_time_ms):
        raise ValueError(
            f"step_time_ms={step_time_ms!r} is not callable: give a function of one step's "
            "record returning its duration in ms, or None for the default model"
        )
    elif callable(getattr(step_time_ms, "content_ms", None)):
        clock = step_time_ms  # type: ignore[assignment]  # dispatched_step_time(...) as is
    else:
        clock = _RecordClock(step_time_ms)
    if not isinstance(progress, bool):
        raise ValueError(f"progress={progress!r} is invalid: give True or False")
    run = start_replay(requests, limits, step_time_ms=clock, seed=seed)
    if not progress:
        return run.frame()
    from tqdm.auto import tqdm

    with tqdm(total=1, desc="replay vLLM's scheduler", unit="run") as bar:
        steps = run.frame()
        bar.set_postfix(steps=len(steps))
        bar.update(1)
    return steps
