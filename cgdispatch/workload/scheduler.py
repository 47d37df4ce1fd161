"""A step-by-step view of the replay of vLLM's scheduler: one :meth:`SchedulerSimulator.step`
per engine step.

A thin wrapper over :func:`~cgdispatch.workload.replay.start_replay`, the same run that
:func:`~cgdispatch.workload.replay.replay_scheduler` returns as a frame: vLLM's own
scheduler of ``limits.vllm_version`` (the newest release when none is given), step for
step. There is no other scheduler model: planning and judging read the same steps. Its
clock is a step-time model, so ``time_s`` is ``model``, not measured.
"""

from __future__ import annotations

from collections.abc import Callable

import pandas as pd

from .exact_run import AcceptFn, ExactRun
from .limits import SchedulerLimits
from .replay import default_step_time_ms, start_replay
from .steps import LORA_COLUMN, Step

__all__ = [
    "SchedulerLimits",
    "Step",
    "SchedulerSimulator",
    "default_step_time_ms",
    "LORA_COLUMN",
]


class SchedulerSimulator:
    """The steps vLLM's scheduler runs for a request table, one at a time or as a frame.

    ``step_time_ms(num_tokens, num_reqs)`` (or an object with ``content_ms``, e.g.
    :func:`~cgdispatch.workload.latency.dispatched_step_time`) orders steps against arrivals;
    ``accept_drafts`` and ``record_calls`` as in :func:`~cgdispatch.workload.replay.start_replay`.
    It replays; it does not read files (see :mod:`cgdispatch.workload.files`).
    """

    def __init__(
        self,
        requests: pd.DataFrame,
        limits: SchedulerLimits | None = None,
        *,
        step_time_ms: Callable[[int, int], float] = default_step_time_ms,
        seed: int = 0,
        accept_drafts: AcceptFn | None = None,
        record_calls: bool = False,
    ) -> None:
        self._exact = start_replay(
            requests, limits, step_time_ms=step_time_ms, seed=seed,
            accept_drafts=accept_drafts, record_calls=record_calls,
        )  # fmt: skip
        self.limits = self._exact.limits

    @property
    def num_requests(self) -> int:
        return len(self._exact.arrival_s)

    @property
    def done(self) -> bool:
        return self._exact.done

    @property
    def exact(self) -> ExactRun:
        """The replay's run: per-request times (``request_times()``), schedule calls."""
        return self._exact

    def step(self) -> Step | None:
        """The next step; None once every request has finished."""
        return self._exact.next_step()

    def run(self, progress: bool = False) -> pd.DataFrame:
        """Every remaining step as a frame with the columns of :class:`Step` (``progress``:
        accepted for callers of the older signature; the replay runs in one go)."""
        return self._exact.frame()
