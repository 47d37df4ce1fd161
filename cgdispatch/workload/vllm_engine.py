"""vLLM's engine loop around its scheduler: ``EngineCore.step`` (sync: schedule, run, update)
or ``EngineCore.step_with_batch_queue`` (async: two batches in flight, each updated after
the next is scheduled), over :class:`~cgdispatch.workload.vllm_scheduler.VllmSchedulerCore`.

It owns the clock and the arrivals; the core decides every batch. With the core's bulk path
on, runs of steady-decode steps are made at once, with the calls that admit arrivals
between them (:meth:`~cgdispatch.workload.vllm_steady.SteadyDecodes.steady_stretch`, which
takes open-loop arrivals through ``admit``), and handed over as one
:class:`~cgdispatch.workload.vllm_call.SteadyStretch`.
"""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Callable

from .closed_loop import ClosedLoop
from .vllm_call import ScheduleCall, SteadyStretch
from .vllm_scheduler import VllmSchedulerCore

__all__ = ["run_engine", "STEADY_STRETCHES"]

# make runs of identical steady steps at once (the bulk path only); False: call by call.
# tune --trace azure-conv makes 91-93% of its schedule calls in such runs, each ~25 us on
# the step loop (bench_trace_switch.py); test_vllm_steady_stretch.py compares both
STEADY_STRETCHES = True


def run_engine(
    core: VllmSchedulerCore,
    arrival_s: list[float],  # sorted
    call_time_s: Callable[[ScheduleCall], float],  # a schedule call's step, seconds
    stretch_time_s: Callable[[int], Callable[[int], float]],  # steady decodes -> tick -> s
    on_call: Callable[[ScheduleCall], None],
    on_stretch: Callable[[SteadyStretch], None],
    max_calls: int,
    closed: ClosedLoop | None = None,
) -> None:
    """Run ``core`` to the end. ``on_call`` sees every schedule call as it is made, except
    the calls of a steady stretch, which ``on_stretch`` sees at once; a RuntimeError after
    ``max_calls`` calls (requests that keep preempting each other). ``closed``: arrivals
    that wait on finishes (:mod:`~cgdispatch.workload.closed_loop`; its ``finished`` must be
    told of each finish), read instead of ``arrival_s``."""
    total, nxt, now = len(arrival_s), 0, 0.0
    queue: deque[ScheduleCall] = deque()
    calls = 0
    stretches = core.bulk and STEADY_STRETCHES

    def next_open_s() -> float:
        """The next open-loop arrival's time (inf: none left)."""
        return arrival_s[nxt] if nxt < total else math.inf

    def admit_open(now: float) -> None:
        """The open-loop arrivals by ``now`` into the waiting queue (a loop top's first step)."""
        nonlocal nxt
        while nxt < total and arrival_s[nxt] <= now:
            core.waiting.append(nxt)
            core.num_unfinished += 1
            nxt += 1

    def stretch(now: float) -> SteadyStretch | None:
        """At a loop top whose calls admit nothing (the caller checked): a steady stretch."""
        nonlocal calls
        if closed is not None:  # finishes inside the stretch may move the next arrival
            arrive, admit = closed.next_s, None
        else:
            arrive, admit = next_open_s, admit_open
        run = core.steady_stretch(
            now, stretch_time_s, arrive, max_calls - calls, admit, call_time_s
        )
        if run is not None:
            calls += run.num_calls
            on_stretch(run)
            if queue:  # async: the last call is in flight, the others were updated (inert)
                queue[0] = run.last_call()
        return run

    # a call that repeats (sync: updated, async: the one before updated, both inert): the
    # next top admits nothing unless a request arrives first (core.repeats)
    repeated = False
    while True:
        if closed is not None:
            due = closed.pop_due(now)
            arrived = bool(due)
            core.waiting.extend(due)
            core.num_unfinished += len(due)
        else:
            arrived = nxt < total and arrival_s[nxt] <= now
            if arrived:
                admit_open(now)
        if core.bulk:
            core.bulk_top(queue[0] if queue else None)
        if (
            stretches
            and (core.admits_none() or (repeated and not arrived))
            and (not core.is_async or (len(queue) == 1 and core.inert(queue[0])))
            and (run := stretch(now)) is not None
        ):
            now = run.end_s
            repeated = False  # the next top holds the event that ended the stretch
            continue
        if core.bulk and core.is_async:
            core.bulk_leave(queue[0] if queue else None)
        repeated = False
        if core.num_unfinished > 0 or core.finished_pending:
            calls += 1
            if calls > max_calls:
                raise RuntimeError(
                    f"vLLM's scheduler made no progress in {max_calls} calls: requests keep "
                    "preempting each other in a KV cache this small, or this is a bug; "
                    "give more num_gpu_blocks (and report the trace if that does not help)"
                )
            call = core.schedule_bulk(now) if core.bulk else None
            if call is None:
                if core.d_count:
                    core.materialize(queue[0] if queue else None)
                call = core.schedule(now)
            now += call_time_s(call)
            call.end_s = now
            on_call(call)
            if not core.is_async:
                inert = stretches and core.inert(call)
                core.update(call)
                repeated = inert and core.repeats(call)
                continue
            queue.appendleft(call)
            if len(queue) < 2 and (
                call.num_reqs or core.num_unfinished > 0 or core.finished_pending
            ):
                continue
        elif not queue:
            if closed is not None:
                if not closed.left:
                    return
                t = closed.next_s()
                if t == math.inf:  # idle with every slot free: only a bug gets here
                    raise RuntimeError(f"{closed.left} requests wait on requests that never ran")
                now = max(now, t)
                continue
            if nxt == total:
                return
            now = max(now, arrival_s[nxt])  # idle: the next arrival
            continue
        if core.is_async:
            done = queue.pop()
            inert = stretches and len(queue) == 1 and core.inert(done)
            core.update(done)
            repeated = inert and core.repeats(queue[0])
