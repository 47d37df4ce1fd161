"""What one of vLLM's schedule calls hands on: :class:`ScheduleCall` (one call, with its step's
outcome) and :class:`SteadyStretch` (a run of identical steady-decode calls made at once).

Records only: :class:`~cgdispatch.workload.vllm_scheduler.VllmSchedulerCore` makes them, the
engine loop (:mod:`~cgdispatch.workload.vllm_engine`) hands them to its caller.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

__all__ = ["ScheduleCall", "SteadyStretch", "AcceptFn"]

# a request's status in the core's table
WAITING, RUNNING, FINISHED = 0, 1, 2
NO_LIMIT = 1 << 62  # an unset max_model_len or num_gpu_blocks

# accept(clock_s, request, num_drafts) -> accepted drafts (0..num_drafts)
AcceptFn = Callable[[float, int, int], int]


@dataclass(slots=True)
class ScheduleCall:
    """One ``Scheduler.schedule()`` call and what its step did."""

    clock_s: float  # when it was scheduled (the simulator's clock)
    reqs: list[int]  # scheduled requests, vLLM's order (running, then admitted)
    tokens: list[int]  # scheduled tokens per request
    drafts: list[int]  # scheduled draft tokens per request (within tokens)
    decode: list[bool]  # the request had its whole sequence computed but its last token
    preempted: list[int]  # requests preempted by this call, in order
    kv_blocks_used: int  # blocks held right after the call
    sampled: list[int] = field(default_factory=list)  # tokens the stand-in model returns
    end_s: float = 0.0  # clock when the step's output is ready
    # the bulk path: steady decodes scheduled one token each, not listed in reqs
    n_bulk: int = 0
    bulk_loras: frozenset[int] = frozenset()  # their adapter ids
    tick: int = 0  # the schedule call's number
    num_cached_tokens: int = 0  # prefix-cache hits of the requests it admitted (tokens)

    @property
    def num_tokens(self) -> int:
        return sum(self.tokens) + self.n_bulk

    @property
    def num_reqs(self) -> int:
        return len(self.reqs) + self.n_bulk


@dataclass(frozen=True, slots=True)
class SteadyStretch:
    """Consecutive schedule calls made at once from the engine loop's top. Most schedule the
    steady decodes one token each and nothing else (no admission, no preemption, no draft):
    they differ in their clock, in the blocks held where a decode opens a KV block, and,
    from each finish or admission on, in the decodes there are. Between them may come calls
    that admit arrivals (``calls``), made as the step loop makes them. Made by
    ``VllmSchedulerCore.steady_stretch``; it stands for the steady calls, it does not list
    them."""

    clock_s: list[float]  # each steady call's schedule time, as the step loop adds them
    kv_blocks_used: list[int]  # blocks held right after each steady call
    # (first steady call's index in clock_s, steady decodes in it and the steady calls after,
    # their adapter ids): one segment per set of decodes, in call order, the first at 0
    segments: list[tuple[int, int, frozenset[int]]]
    end_s: float  # clock when the last call's output is ready
    first_tick: int  # the first call's number
    # the calls that admit, each after the steady calls before index pos: (pos, call)
    calls: list[tuple[int, ScheduleCall]] = field(default_factory=list)

    @property
    def num_calls(self) -> int:
        """Schedule calls made, steady or admitting."""
        return len(self.clock_s) + len(self.calls)

    @property
    def num_reqs(self) -> int:
        """Steady decodes in the last steady call."""
        return self.segments[-1][1]

    @property
    def loras(self) -> frozenset[int]:
        """The last steady call's adapter ids."""
        return self.segments[-1][2]

    def last_call(self) -> ScheduleCall:
        """The last call as the step loop would have made it (async keeps it in flight)."""
        if self.calls and self.calls[-1][0] == len(self.clock_s):
            return self.calls[-1][1]
        return ScheduleCall(
            self.clock_s[-1], [], [], [], [], [], self.kv_blocks_used[-1], [],
            end_s=self.end_s, n_bulk=self.num_reqs, bulk_loras=self.loras,
            tick=self.first_tick + self.num_calls - 1,
        )  # fmt: skip
