"""vLLM's own scheduler, step for step: ``Scheduler`` / ``AsyncScheduler`` of vLLM 0.33 and 0.34
with FCFS, no prefix caching, KV blocks of one full-attention group, and preemption.

:class:`VllmSchedulerCore` keeps the request state vLLM keeps (``num_computed_tokens``,
``num_output_placeholders``, in-flight and stale tokens, drafts, blocks held) and runs the
engine loop of ``EngineCore.step`` (sync) or ``EngineCore.step_with_batch_queue`` (async, two
batches in flight). It agrees with vLLM's own classes on every case of the scheduler oracle
(``tests/data/vllm_oracle/scheduler-*.json``); what that oracle cannot reach is listed in
docs/semantics.md. The model is stood in for: a step samples one token per request that is
not mid-prefill, plus the drafts the ``accept`` hook accepts. It schedules; the caller owns
the clock's meaning (:class:`~cgdispatch.workload.scheduler.SchedulerSimulator`).
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field

from ..core.arith import cdiv
from .vllm_rules import SchedulerRules

__all__ = ["VllmSchedulerCore", "ScheduleCall"]

_WAITING, _RUNNING, _FINISHED = 0, 1, 2
_NO_LIMIT = 1 << 62

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

    @property
    def num_tokens(self) -> int:
        return sum(self.tokens) + self.n_bulk

    @property
    def num_reqs(self) -> int:
        return len(self.reqs) + self.n_bulk


class VllmSchedulerCore:
    """vLLM's scheduler state and engine loop for one request table (indices 0..n-1, FCFS in
    index order). Configure, then call :meth:`run` with the arrival and step-time hooks."""

    def __init__(
        self,
        prompt: list[int],
        max_tokens: list[int],
        lora: list[int],  # adapter id, < 0 for none
        *,
        rules: SchedulerRules,
        max_num_seqs: int,
        max_num_batched_tokens: int,
        max_model_len: int | None,
        block_size: int,
        num_gpu_blocks: int | None,  # vLLM's num_blocks (block 0 is the null block)
        enable_chunked_prefill: bool,
        long_prefill_token_threshold: int,
        num_speculative_tokens: int,
        max_loras: int | None,
        async_scheduling: bool,
        accept: AcceptFn,
        bulk: bool = False,
    ) -> None:
        n = len(prompt)
        self.prompt, self.max_tokens, self.lora = prompt, max_tokens, lora
        self.rules = rules
        self.max_num_seqs, self.budget = max_num_seqs, max_num_batched_tokens
        self.mml = max_model_len if max_model_len is not None else _NO_LIMIT
        self.bs = block_size
        self.usable = num_gpu_blocks - 1 if num_gpu_blocks is not None else _NO_LIMIT
        self.chunked, self.lpt = enable_chunked_prefill, long_prefill_token_threshold
        self.k, self.max_loras, self.is_async = num_speculative_tokens, max_loras, async_scheduling
        self.accept = accept
        self.out = [0] * n  # output tokens appended
        self.computed = [0] * n  # num_computed_tokens
        self.placeholders = [0] * n  # num_output_placeholders (async)
        self.inflight = [0] * n  # num_in_flight_tokens
        self.stale = [0] * n  # num_stale_output_tokens
        self.spec = [0] * n  # len(spec_token_ids)
        self.prefill_chunk = [False] * n  # is_prefill_chunk
        self.held = [0] * n  # KV blocks held
        self.status = [_WAITING] * n
        self.used = 0  # blocks held in all
        self.running: list[int] = []
        self.waiting: deque[int] = deque()
        self.finished_pending = False  # finished_req_ids not yet sent by a schedule call
        self.num_unfinished = 0
        self.num_preempted = 0
        self.preemptions_of = [0] * n  # times each request was preempted
        self.first_token_s = [float("nan")] * n
        self.finish_s = [float("nan")] * n
        # the bulk path (no drafts): running requests in a steady decode (one token a step,
        # nothing near their end) are kept implicitly: at the top of loop iteration ``tick``
        # their computed tokens are ``tick + off[i]`` and every other field follows
        self.bulk = bulk and num_speculative_tokens == 0
        self.tick = 0
        self.off = [0] * n
        self.phase_cnt = [0] * block_size  # steady decodes per (off mod block_size)
        self.d_loras: dict[int, int] = {}  # adapter id -> steady decodes using it
        self.d_due: dict[int, list[int]] = {}  # tick -> members that finish (sync) or leave
        self.p_order: dict[int, None] = {}  # running requests not in the steady set
        self.d_members: dict[int, None] = {}  # the steady set, in joining order
        self.due = [0] * n  # the tick of each member's entry in d_due
        self.joined = [0] * n  # the loop top at which each member joined

    @property
    def d_count(self) -> int:
        """Steady decodes held in bulk right now."""
        return len(self.d_members)

    def prompt_total(self) -> int:
        return sum(self.prompt)

    # ----- the scheduler ------------------------------------------------------------------
    def _blocks(self, tokens: int) -> int:
        return cdiv(min(tokens, self.mml), self.bs)

    def _preempt(self, i: int) -> None:
        self.p_order.pop(i, None)
        self.used -= self.held[i]
        self.held[i] = 0
        self.status[i] = _WAITING
        self.computed[i] = 0
        self.spec[i] = 0
        self.stale[i] = self.inflight[i]
        self.placeholders[i] = 0
        self.waiting.appendleft(i)
        self.num_preempted += 1
        self.preemptions_of[i] += 1

    def schedule(self, clock_s: float) -> ScheduleCall:
        prompt, out, computed, ph = self.prompt, self.out, self.computed, self.placeholders
        k, mml = self.k, self.mml
        budget = self.budget
        running, waiting = self.running, self.waiting
        reqs: list[int] = []
        tokens: list[int] = []
        drafts: list[int] = []
        decode: list[bool] = []
        preempted: list[int] = []
        eligible = len(running) + len(waiting)
        lpt = self.lpt if eligible > 1 else 0
        if self.rules.long_prefill_needs_chunked and not self.chunked:
            lpt = 0
        prefill_scheduled = False
        idx = 0
        while idx < len(running) and budget > 0:
            i = running[idx]
            p = ph[i]
            if p > 0 and computed[i] + 2 - p >= prompt[i] + self.max_tokens[i]:
                idx += 1  # async: the step in flight already reaches max_tokens
                continue
            n = prompt[i] + out[i] + self.spec[i] + p - computed[i]
            if 0 < lpt < n:
                n = lpt
            n = min(n, budget, mml - computed[i] - 1)
            if n <= 0:
                idx += 1
                continue
            want = self._blocks(computed[i] + n)
            ok = True
            while want - self.held[i] > self.usable - self.used:
                victim = running.pop()  # FCFS: the last running request
                self._preempt(victim)
                preempted.append(victim)
                if victim == i:
                    ok = False
                    break
            if not ok:
                break
            if want > self.held[i]:
                self.used += want - self.held[i]
                self.held[i] = want
            prefill_scheduled |= self.prefill_chunk[i]
            d = 0
            if self.spec[i]:
                extra = n + computed[i] - prompt[i] - out[i] - p
                d = min(self.spec[i], extra) if extra > 0 else 0
                self.spec[i] = 0
            reqs.append(i)
            tokens.append(n)
            drafts.append(d)
            decode.append(computed[i] >= prompt[i] + out[i] - 1)
            budget -= n
            idx += 1
        if not preempted:
            # vLLM pads a lone token to a uniform decode when the step has decodes
            pad = bool(k and not prefill_scheduled and reqs and k + 2 <= mml)
            loras = None
            if self.max_loras is not None:
                loras = {self.lora[j] for j in running if self.lora[j] >= 0}
            self._admit(budget, lpt, pad, loras, (reqs, tokens, drafts, decode))
        return self._scheduled(clock_s, (reqs, tokens, drafts, decode), preempted)

    def _admit(
        self,
        budget: int,
        lpt: int,
        pad: bool,
        loras: set[int] | None,
        lists: tuple[list[int], list[int], list[int], list[bool]],
    ) -> None:
        """Admit waiting requests in FCFS order while the step has room (``Scheduler.schedule``'s
        waiting loop); ``loras``: adapters running (None without a LoRA limit); ``pad``: a
        lone token may be padded to a uniform decode of 1 + k."""
        prompt, out, k = self.prompt, self.out, self.k
        running, waiting = self.running, self.waiting
        reqs, tokens, drafts, decode = lists
        skipped: list[int] = []
        while len(running) < self.max_num_seqs and budget > 0 and waiting:
            i = waiting[0]
            if self.stale[i] > 0:  # its preempted step's output is still in flight
                skipped.append(waiting.popleft())
                continue
            lo = self.lora[i]
            if loras is not None and lo >= 0 and len(loras) == self.max_loras and lo not in loras:
                skipped.append(waiting.popleft())
                continue
            num_tokens = prompt[i] + out[i]
            n, padded = num_tokens, False
            if pad and n == 1:
                if 1 + k > budget:
                    break
                n, padded = 1 + k, True
            if 0 < lpt < n:
                n = lpt
            if not self.chunked and n > budget:
                break
            n = min(n, budget)
            free = self.usable - self.used
            want = self._blocks(n)
            if self._blocks(num_tokens) > free or want > free:  # the whole sequence must fit
                break
            waiting.popleft()
            running.append(i)
            self.p_order[i] = None
            if loras is not None and lo >= 0:
                loras.add(lo)
            self.status[i] = _RUNNING
            self.computed[i] = 0
            self.held[i] = want
            self.used += want
            reqs.append(i)
            tokens.append(n)
            drafts.append(k if padded else 0)
            decode.append(False)
            budget -= n
        waiting.extendleft(reversed(skipped))

    def _scheduled(
        self,
        clock_s: float,
        lists: tuple[list[int], list[int], list[int], list[bool]],
        preempted: list[int],
        n_bulk: int = 0,
        bulk_loras: frozenset[int] = frozenset(),
    ) -> ScheduleCall:
        """``_update_after_schedule`` (and AsyncScheduler's) for the listed requests; the call."""
        prompt, out, computed, ph = self.prompt, self.out, self.computed, self.placeholders
        reqs, tokens, drafts, decode = lists
        sampled = []
        for i, n, d in zip(reqs, tokens, drafts):
            computed[i] += n
            self.inflight[i] += n
            chunk = computed[i] < prompt[i] + out[i] + ph[i]
            self.prefill_chunk[i] = chunk
            if chunk:
                sampled.append(0)
            else:
                sampled.append(1 + (self.accept(clock_s, i, d) if d else 0))
                if self.is_async:
                    ph[i] += 1 + d
                    self.spec[i] = self.k
        self.finished_pending = False
        self.tick += 1
        return ScheduleCall(
            clock_s, reqs, tokens, drafts, decode, preempted, self.used, sampled,
            n_bulk=n_bulk, bulk_loras=bulk_loras, tick=self.tick - 1,
        )  # fmt: skip

    # ----- the bulk path --------------------------------------------------------------------
    def _limit(self, i: int) -> int:
        """Output tokens at which request ``i`` stops: max_tokens, or max_model_len first."""
        return min(self.max_tokens[i], self.mml - self.prompt[i])

    def _join(self, i: int) -> bool:
        """Make running request ``i`` a steady decode if it is one (at a loop top)."""
        computed, out, T = self.computed[i], self.out[i], self.tick
        if (
            self.stale[i]
            or self.spec[i]
            or self.prefill_chunk[i]
            or out < 1
            or self.held[i] != self._blocks(computed)
        ):
            return False
        off = computed - T
        if self.is_async:  # one token in flight: computed = prompt + out, one placeholder
            if self.placeholders[i] != 1 or self.inflight[i] != 1:
                return False
            if computed != self.prompt[i] + out:
                return False
            # it leaves before the call that would find its last token already in flight
            due = min(self.max_tokens[i] + self.prompt[i] - 1, self.mml - 1) - off
            if due <= T:
                return False
        else:
            if self.placeholders[i] or self.inflight[i] or computed != self.prompt[i] + out - 1:
                return False
            due = T + self._limit(i) - out - 1  # the call whose update gives its last token
            if due < T:
                return False
        self.joined[i] = T
        self.off[i] = off
        self.due[i] = due
        self.d_due.setdefault(due, []).append(i)
        self.phase_cnt[off % self.bs] += 1
        lo = self.lora[i]
        if lo >= 0:
            self.d_loras[lo] = self.d_loras.get(lo, 0) + 1
        del self.p_order[i]
        self.d_members[i] = None
        return True

    def _leave(self, i: int, tick: int) -> None:
        """Write steady decode ``i``'s fields as they stand at the top of loop ``tick``."""
        off = self.off[i]
        computed = tick + off
        self.computed[i] = computed
        if self.is_async:
            self.out[i] = computed - self.prompt[i]
            self.placeholders[i] = 1
            self.inflight[i] = 1
        else:
            self.out[i] = computed - self.prompt[i] + 1
        self.held[i] = self._blocks(computed)
        self.phase_cnt[off % self.bs] -= 1
        lo = self.lora[i]
        if lo >= 0:
            left = self.d_loras[lo] - 1
            if left:
                self.d_loras[lo] = left
            else:
                del self.d_loras[lo]
        del self.d_members[i]
        self.p_order[i] = None

    def _leave_in_flight(self, i: int, call: ScheduleCall | None) -> None:
        """Async: ``i`` leaves the steady set with its token of ``call`` still in flight, so
        that call's update lists it."""
        joined_before = self.joined[i] < self.tick  # else the call lists it already
        self._leave(i, self.tick)
        if call is not None and joined_before:
            call.reqs.append(i)
            call.tokens.append(1)
            call.drafts.append(0)
            call.decode.append(True)
            call.sampled.append(1)

    def _bulk_top(self, in_flight: ScheduleCall | None) -> None:
        """At a loop top: async members whose end is near leave; steady requests join."""
        if self.is_async:
            for i in self.d_due.pop(self.tick, ()):
                if i in self.d_members and self.due[i] == self.tick:
                    self._leave_in_flight(i, in_flight)
        for i in [j for j in self.p_order if self.status[j] == _RUNNING]:
            self._join(i)

    def _materialize(self, in_flight: ScheduleCall | None) -> None:
        """Every steady decode written out, for a call the bulk path cannot take."""
        for i in list(self.d_members):
            if self.is_async:
                self._leave_in_flight(i, in_flight)
            else:
                self._leave(i, self.tick)

    def schedule_bulk(self, clock_s: float) -> ScheduleCall | None:
        """``schedule`` when every running request fits the token budget and the KV cache
        (so neither order nor preemption matters); None, changing nothing, otherwise."""
        prompt, out, computed, ph, held = (
            self.prompt,
            self.out,
            self.computed,
            self.placeholders,
            self.held,
        )
        mml, T = self.mml, self.tick
        running, waiting = self.running, self.waiting
        eligible = len(running) + len(waiting)
        lpt = self.lpt if eligible > 1 else 0
        if self.rules.long_prefill_needs_chunked and not self.chunked:
            lpt = 0
        total = self.d_count
        need = self.phase_cnt[-T % self.bs]  # steady decodes whose next token opens a block
        plan = []
        for i in self.p_order:
            p = ph[i]
            if p > 0 and computed[i] + 2 - p >= prompt[i] + self.max_tokens[i]:
                continue
            n = prompt[i] + out[i] + self.spec[i] + p - computed[i]
            if 0 < lpt < n:
                n = lpt
            n = min(n, mml - computed[i] - 1)
            if n <= 0:
                continue
            want = self._blocks(computed[i] + n)
            if want > held[i]:
                need += want - held[i]
            plan.append((i, n, want))
            total += n
        budget = self.budget
        if total > budget or need > self.usable - self.used:
            return None
        self.used += need
        reqs, tokens, drafts, decode = [], [], [], []
        for i, n, want in plan:
            if want > held[i]:
                held[i] = want
            reqs.append(i)
            tokens.append(n)
            drafts.append(0)
            decode.append(computed[i] >= prompt[i] + out[i] - 1)
        budget -= total
        loras = None
        if self.max_loras is not None:
            loras = set(self.d_loras) | {self.lora[j] for j in self.p_order if self.lora[j] >= 0}
        lists = (reqs, tokens, drafts, decode)
        self._admit(budget, lpt, False, loras, lists)
        return self._scheduled(clock_s, lists, [], self.d_count, frozenset(self.d_loras))

    # ----- the model's output (update_from_output) ------------------------------------------
    def update(self, call: ScheduleCall) -> None:
        prompt, out, computed, ph, mml = (
            self.prompt,
            self.out,
            self.computed,
            self.placeholders,
            self.mml,
        )
        members = self.d_members
        for i, n, d, g in zip(call.reqs, call.tokens, call.drafts, call.sampled):
            if self.status[i] == _FINISHED or i in members:
                continue  # a steady decode's update is implicit in its offset
            self.inflight[i] -= n
            stale = self.stale[i] > 0
            if stale:
                self.stale[i] -= n
            if d and g and not stale:
                rejected = d - (g - 1)
                if computed[i] > 0:
                    computed[i] -= rejected
                if ph[i] > 0:
                    ph[i] -= rejected
            if not g:
                continue
            if out[i] == 0:
                self.first_token_s[i] = call.end_s
            stopped = False
            for m in range(1, g + 1):
                out[i] += 1
                if prompt[i] + out[i] >= mml or out[i] >= self.max_tokens[i]:
                    stopped = True
                    if not stale:
                        computed[i] -= g - m
                    break
            if not stale and ph[i] > 0:
                ph[i] -= g
            if stopped:
                self._finish(i, call.end_s)
        if self.bulk and not self.is_async:
            for i in self.d_due.pop(call.tick, ()):
                if i in members and self.due[i] == call.tick:  # out reaches its limit now
                    self._leave(i, call.tick + 1)
                    self._finish(i, call.end_s)
        if self.k and not self.is_async and call.reqs:
            # update_draft_token_ids: k drafts for every live request that sampled a token
            for i, g in zip(call.reqs, call.sampled):
                if g and self.status[i] != _FINISHED:
                    self.spec[i] = 0 if self.prefill_chunk[i] else self.k

    def _finish(self, i: int, when_s: float) -> None:
        self.p_order.pop(i, None)
        if self.status[i] == _RUNNING:
            self.running.remove(i)
        else:
            self.waiting.remove(i)
        self.used -= self.held[i]
        self.held[i] = 0
        self.status[i] = _FINISHED
        self.finish_s[i] = when_s
        self.num_unfinished -= 1
        self.finished_pending = True

    # ----- the engine loop ----------------------------------------------------------------
    def run(
        self,
        arrival_s: list[float],  # sorted
        step_time_s: Callable[[ScheduleCall], float],
        on_call: Callable[[ScheduleCall], None],
        max_calls: int,
    ) -> None:
        """Run to the end: ``EngineCore.step`` (sync) or ``step_with_batch_queue`` (async)."""
        total, nxt, now = len(arrival_s), 0, 0.0
        queue: deque[ScheduleCall] = deque()
        calls = 0

        def has_requests() -> bool:
            return self.num_unfinished > 0 or self.finished_pending

        while True:
            while nxt < total and arrival_s[nxt] <= now:
                self.waiting.append(nxt)
                self.num_unfinished += 1
                nxt += 1
            if self.bulk:
                self._bulk_top(queue[0] if queue else None)
            if has_requests():
                calls += 1
                if calls > max_calls:
                    raise RuntimeError(
                        f"vLLM's scheduler made no progress in {max_calls} calls: requests keep "
                        "preempting each other in a KV cache this small, or this is a bug; "
                        "give more num_gpu_blocks (and report the trace if that does not help)"
                    )
                call = self.schedule_bulk(now) if self.bulk else None
                if call is None:
                    if self.d_count:
                        self._materialize(queue[0] if queue else None)
                    call = self.schedule(now)
                now += step_time_s(call)
                call.end_s = now
                on_call(call)
                if not self.is_async:
                    self.update(call)
                    continue
                queue.appendleft(call)
                if len(queue) < 2 and (call.num_reqs or has_requests()):
                    continue
            elif not queue:
                if nxt == total:
                    return
                now = max(now, arrival_s[nxt])  # idle: the next arrival
                continue
            if self.is_async:
                self.update(queue.pop())
