"""The bulk path of vLLM's scheduler: steady decodes kept implicitly, and runs of identical
steady steps made at once.

A running request in a steady decode (one token a step, no drafts, nothing near its end) is
a member of the steady set: at the top of engine-loop iteration ``tick`` its computed tokens
are ``tick + off[i]`` and every other field follows, so a step costs nothing per member.
KV blocks the members open are counted by phase (``off mod block_size``); finishes (sync)
and leaves (async) are due by tick. :meth:`SteadyDecodes.schedule_bulk` is ``schedule``
when the step's order cannot matter; :meth:`SteadyDecodes.steady_stretch` makes, at once,
the steps that schedule the steady decodes and nothing else, through their finishes and
through the calls that admit arrivals, until a call would preempt, a running request is no
steady decode, or someone waiting could be admitted. Async, a request joins the loop top after its prefill's call, so its first
decode is already a stretch's.

It is a mixin of :class:`~cgdispatch.workload.vllm_scheduler.VllmSchedulerCore`, whose
request table and ``_admit`` / ``_scheduled`` it uses; it holds no rule of vLLM's that the
per-request path does not (``tests/workload/test_scheduler_bulk.py``,
``test_vllm_steady_stretch.py`` and ``test_stretch_finishes.py`` compare the paths bit for
bit).
"""

from __future__ import annotations

from collections.abc import Callable

from .vllm_call import RUNNING, ScheduleCall, SteadyStretch

__all__ = ["SteadyDecodes"]

_NO_LORAS: frozenset[int] = frozenset()
# the most calls one steady stretch makes; the next loop top starts another. Its records
# (clocks, block counts, the admitting calls) are held until it ends. At 200k requests of
# bench_prefix_cache.py, measured (CPU): 128 faster than 16 (more stretches) and than 16,384,
# whose long-lived records the cyclic collector walks (12.3 CPU s, 9.7 with it off; 128: 9.2)
MAX_STRETCH_CALLS = 128


class SteadyDecodes:
    """The steady set of :class:`~cgdispatch.workload.vllm_scheduler.VllmSchedulerCore`
    (mixed into it); it never decides what vLLM schedules, only when that is the same."""

    def _init_steady(self, n: int, bulk: bool) -> None:
        # the bulk path needs no drafts: a steady decode is one token a step
        self.bulk = bulk and self.k == 0
        self.tick = 0  # schedule calls made so far
        self.off = [0] * n  # a member's computed tokens minus the tick
        self.d_off_sum = 0  # the members' offsets summed: their contexts at any tick
        self.phase_cnt = [0] * self.bs  # members per (off mod block_size)
        self.d_loras: dict[int, int] = {}  # adapter id -> members using it
        self.d_due: dict[int, list[int]] = {}  # tick -> members that finish (sync) or leave
        self.p_order: dict[int, None] = {}  # running requests not in the steady set
        self.d_members: dict[int, None] = {}  # the steady set, in joining order
        self.due = [0] * n  # the tick of each member's entry in d_due
        self.joined = [0] * n  # the loop top at which each member joined
        # async: tokens in flight at the join (the call in flight lists the member with them:
        # 1, or its last prompt chunk when it joins the top after its prefill)
        self.join_inflight = [1] * n
        # prefix caching: the members per phase, whose next block each call of that phase
        # takes from the pool (which member gets which block is immaterial: blocks differ
        # only by their state, and every block taken in one call comes from the queue's front)
        self.phase_members: list[dict[int, None]] = (
            [{} for _ in range(self.bs)] if self.pc is not None else []
        )

    @property
    def d_count(self) -> int:
        """Steady decodes held in bulk right now."""
        return len(self.d_members)

    def _limit(self, i: int) -> int:
        """Output tokens at which request ``i`` stops: max_tokens, or max_model_len first."""
        return min(self.max_tokens[i], self.mml - self.prompt[i])

    def _join(self, i: int, in_flight: ScheduleCall | None) -> bool:
        """Make running request ``i`` a steady decode if it is one (at a loop top, with
        ``in_flight`` the call not yet updated, async)."""
        computed, out, T = self.computed[i], self.out[i], self.tick
        if (
            self.stale[i]
            or self.spec[i]
            or self.prefill_chunk[i]
            or self.held[i] != -(-min(computed, self.mml) // self.bs)
        ):
            return False
        off = computed - T
        if self.is_async:  # one token in flight: computed = prompt + out, one placeholder
            # the call in flight is the one that sampled it (at a loop top no other call is
            # un-updated) and lists it with its tokens: 1 in a decode, or, the top after its
            # prefill, the prompt's last chunk; that update is then a decode's but for the
            # first token's time, set here (update skips members)
            inflight = self.inflight[i]
            if self.placeholders[i] != 1 or inflight < 1 or computed != self.prompt[i] + out:
                return False
            if inflight != 1 and in_flight is None:
                return False
            # it leaves before the call that would find its last token already in flight
            due = min(self.max_tokens[i] + self.prompt[i] - 1, self.mml - 1) - off
            if due <= T:
                return False
            if out == 0:
                if in_flight is None:
                    return False
                self.first_token_s[i] = in_flight.end_s
            self.join_inflight[i] = inflight
        else:
            if out < 1:
                return False
            if self.placeholders[i] or self.inflight[i] or computed != self.prompt[i] + out - 1:
                return False
            due = T + self._limit(i) - out - 1  # the call whose update gives its last token
            if due < T:
                return False
        self.joined[i] = T
        self.off[i] = off
        self.d_off_sum += off
        self.due[i] = due
        self.d_due.setdefault(due, []).append(i)
        self.phase_cnt[off % self.bs] += 1
        if self.pc is not None:
            self.phase_members[off % self.bs][i] = None
        lo = self.lora[i]
        if lo >= 0:
            self.d_loras[lo] = self.d_loras.get(lo, 0) + 1
        del self.p_order[i]
        self.d_members[i] = None
        return True

    def _leave(self, i: int, tick: int) -> None:
        """Write steady decode ``i``'s fields as they stand at the top of loop ``tick``."""
        off = self.off[i]
        self.d_off_sum -= off
        computed = tick + off
        self.computed[i] = computed
        if self.is_async:
            self.out[i] = computed - self.prompt[i]
            self.placeholders[i] = 1
            self.inflight[i] = 1
        else:
            self.out[i] = computed - self.prompt[i] + 1
        self.held[i] = -(-min(computed, self.mml) // self.bs)
        self.phase_cnt[off % self.bs] -= 1
        if self.pc is not None:
            del self.phase_members[off % self.bs][i]
            # the output blocks vLLM cached meanwhile (schedule-time cache_blocks; async also
            # update-time publishing, one token behind): no one else can hit them, so they
            # enter the hash map now, before anything can free them
            self._pc_cache(i, computed - 1 if self.is_async else computed)
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
        if not joined_before:  # as it joined: the call's tokens in flight
            self.inflight[i] = self.join_inflight[i]
        if call is not None and joined_before:
            call.reqs.append(i)
            call.tokens.append(1)
            call.drafts.append(0)
            call.decode.append(True)
            call.sampled.append(1)

    def bulk_top(self, in_flight: ScheduleCall | None) -> None:
        """At a loop top: steady requests join. Async members whose end is near leave in
        :meth:`bulk_leave` after (a steady stretch from this top takes them itself)."""
        if self.p_order:
            for i in [j for j in self.p_order if self.status[j] == RUNNING]:
                self._join(i, in_flight)

    def _leavers(self, tick: int) -> list[int]:
        """The members due at ``tick``, in the order listed (d_due keeps the entries of members
        that left, and a member that left and rejoined may be listed twice)."""
        members, due = self.d_members, self.due
        listed = dict.fromkeys(self.d_due.get(tick, ()))
        return [i for i in listed if i in members and due[i] == tick]

    def bulk_leave(self, in_flight: ScheduleCall | None) -> None:
        """Async, at a loop top whose call is not a steady stretch's (after :meth:`bulk_top`):
        the members whose end is near leave, their token in flight in ``in_flight``. Leaving
        after the joins orders the steady set, the phases and ``p_order`` as leaving before
        them would: a leaver cannot rejoin, and a dict's other keys keep their order."""
        if self.tick in self.d_due:
            for i in self._leavers(self.tick):
                self._leave_in_flight(i, in_flight)
            del self.d_due[self.tick]

    def materialize(self, in_flight: ScheduleCall | None) -> None:
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
        total = len(self.d_members)
        need = self.phase_cnt[-T % self.bs]  # steady decodes whose next token opens a block
        plan = []
        for i in self.p_order:
            p = ph[i]
            if p > 0 and computed[i] + 2 - p >= prompt[i] + self.max_tokens[i]:
                continue
            n = prompt[i] + out[i] + self.spec[i] + p - computed[i]
            if 0 < lpt < n:
                n = lpt
            if n > mml - computed[i] - 1:
                n = mml - computed[i] - 1
            if n <= 0:
                continue
            want = -(-min(computed[i] + n, self.mml) // self.bs)
            if want > held[i]:
                need += want - held[i]
            plan.append((i, n, want))
            total += n
        budget = self.budget
        if total > budget or need > self.usable - self.used:
            return None
        reqs, tokens, drafts, decode = [], [], [], []
        if self.pc is not None:
            self._pc_phase_blocks(T)
            if len(plan) > 1:  # caching in running order (which copy of a block is found)
                seq = self.run_seq
                plan.sort(key=lambda x: seq[x[0]])
            for i, n, want in plan:
                self._pc_allocate(i, want, computed[i] + n)
        else:
            self.used += need
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
        if waiting:
            self._admit(budget, lpt, False, bool(reqs), loras, lists)
        bulk_loras = frozenset(self.d_loras) if self.d_loras else _NO_LORAS
        return self._scheduled(clock_s, lists, [], len(self.d_members), bulk_loras)

    def _pc_phase_blocks(self, tick: int) -> None:
        """Prefix caching: the members whose token of call ``tick`` opens a block take it."""
        members = self.phase_members[-tick % self.bs]
        if members:
            blocks = self.pc.get_new_blocks(len(members))
            blocks_of = self.blocks_of
            for i, b in zip(members, blocks):
                blocks_of[i].append(b)
            self.used += len(blocks)

    # ----- steady stretches -----------------------------------------------------------------
    def inert(self, call: ScheduleCall) -> bool:
        """Whether ``update(call)`` will change nothing: every request it lists is a steady
        decode (whose update is implicit) and, sync, no steady decode finishes with it."""
        members = self.d_members
        if any(i not in members for i in call.reqs):
            return False
        if self.is_async:
            return True
        due = self.due
        return not any(i in members and due[i] == call.tick for i in self.d_due.get(call.tick, ()))

    def repeats(self, ref: ScheduleCall) -> bool:
        """Whether a call like ``ref`` comes next: it scheduled the steady decodes there are
        and nothing else (nothing admitted, nothing else running). The caller vouches that
        no update since its scheduling changed anything (:meth:`inert`) and that no request
        has arrived since: then the next call's admission checks see what ``ref``'s saw, but
        fewer free blocks, and fail as they did."""
        return not ref.reqs and ref.n_bulk == self.d_count and not self.p_order

    def admits_none(self) -> bool:
        """Whether no waiting request can be admitted, whatever the free blocks: none waits,
        the running set is full, or the steady decodes take the whole token budget."""
        return (
            not self.waiting
            or len(self.running) >= self.max_num_seqs
            or self.d_count >= self.budget
        )

    def steady_kv_tokens(self, tick: int) -> int:
        """The context tokens the steady decodes' attention reads in the call of ``tick``
        (each one's computed tokens after that call)."""
        return self.d_count * (tick + 1) + self.d_off_sum

    def _admits_none_with(self, num_steady: int) -> bool:
        """:meth:`admits_none` with ``num_steady`` steady decodes scheduled."""
        return (
            not self.waiting or len(self.running) >= self.max_num_seqs or num_steady >= self.budget
        )

    def steady_stretch(
        self,
        now_s: float,
        stretch_time_s: Callable[[int], Callable[[int], float]],
        next_arrival_s: Callable[[], float],
        most: int,
        admit: Callable[[float], None] | None = None,
        call_time_s: Callable[[ScheduleCall], float] | None = None,
    ) -> SteadyStretch | None:
        """The calls that schedule the steady decodes and nothing else, made at once from
        the engine loop's top (its arrivals in), with the calls that admit arrivals between
        them (:meth:`_stretch_admit`) and the members' finishes (:meth:`_stretch_finish`);
        None, changing nothing, if none can be made.

        The caller vouches that the first calls admit nothing (:meth:`admits_none`, or
        :meth:`repeats` of the call before) and, async, that the update of the call in
        flight is inert, and has not yet made this top's async leaves (:meth:`bulk_leave`).
        Each steady call is ``schedule_bulk``'s with every running request a steady decode.
        An arrival at or before a call's clock (``next_arrival_s()``, asked again after each
        finish and admission) makes that call an admitting one; without ``admit`` and
        ``call_time_s`` (a closed loop, whose arrivals wait on finishes) it ends the stretch.
        It ends too at a call whose new blocks do not fit (``schedule`` would preempt), when a
        running request is no steady decode or a waiting one could be admitted, or after
        ``most`` calls (or ``MAX_STRETCH_CALLS``). ``stretch_time_s(n)(tick)``: the step time
        of the call of ``tick`` with ``n`` steady decodes; clocks add step times one call at
        a time, as the engine loop does. Blocks are taken at once for the calls between
        finishes and admissions (nothing is freed or cached between them, so they leave the
        queue in the order the calls would take them)."""
        num_reqs = self.d_count
        if not num_reqs or self.p_order or num_reqs > self.budget:
            return None
        first = self.tick
        clocks: list[float] = []
        kv: list[int] = []
        opened: list[int] = []  # prefix caching: the ticks whose calls open blocks
        segments = [(0, num_reqs, frozenset(self.d_loras))]
        calls: list[tuple[int, ScheduleCall]] = []  # the admitting calls made
        last = first + min(most, MAX_STRETCH_CALLS)
        t, used, now_s, updated_last = self._stretch_calls(
            now_s, last, stretch_time_s, next_arrival_s, admit, call_time_s,
            (clocks, kv, opened, segments, calls),
        )  # fmt: skip
        if not clocks:
            return None
        self.tick, self.used = t, used
        self._take_blocks(opened)
        # each call sends the finished ids (_scheduled); a finish after the last call is
        # sent by the next call
        self.finished_pending = updated_last
        while segments[-1][0] == len(clocks):  # no steady call after the last segments
            segments.pop()
        return SteadyStretch(clocks, kv, segments, now_s, first, calls)

    def _stretch_calls(
        self,
        now_s: float,
        last: int,
        stretch_time_s: Callable[[int], Callable[[int], float]],
        next_arrival_s: Callable[[], float],
        admit: Callable[[float], None] | None,
        call_time_s: Callable[[ScheduleCall], float] | None,
        out: tuple[list[float], list[int], list[int], list[tuple], list[tuple[int, ScheduleCall]]],
    ) -> tuple[int, int, float, bool]:
        """:meth:`steady_stretch`'s calls up to tick ``last``, written to ``out`` (clocks, KV
        blocks in use, the ticks that open blocks, the segments, the admitting calls); returns
        the next tick, the blocks in use, the clock and whether the last thing done was an
        update that finished requests."""
        clocks, kv, opened, segments, calls = out
        t, num_reqs, used = self.tick, self.d_count, self.used
        free, phase, bs = self.usable - used, self.phase_cnt, self.bs
        pcache, is_async, d_due = self.pc is not None, self.is_async, self.d_due
        arrive, step_s = next_arrival_s(), stretch_time_s(num_reqs)
        updated_last = False
        while t < last:
            arriving = now_s >= arrive  # this top's call admits: made as the step loop does
            if arriving and (admit is None or call_time_s is None):
                break
            need = phase[-t % bs]  # decodes whose token opens a block this call
            leavers = None
            if t in d_due:
                leavers, opening = self._due_in_stretch(t, num_reqs, arriving)
                if opening < 0:
                    break
                need -= opening
            if need > free:
                break
            if arriving:
                self.used = used
                self._take_blocks(opened)
                call = self._stretch_admit(now_s, t, leavers, admit, call_time_s)  # type: ignore[arg-type]
                calls.append((len(clocks), call))
                now_s, t, updated_last = call.end_s, t + 1, self.finished_pending
                used, num_reqs = self.used, self.d_count  # the admitted joined at the next top
                free = self.usable - used
                if self.p_order or not num_reqs or num_reqs > self.budget or not self.admits_none():
                    break
                segments.append((len(clocks), num_reqs, frozenset(self.d_loras)))
                step_s, arrive = stretch_time_s(num_reqs), next_arrival_s()
                continue
            if leavers and is_async:  # they leave at this top, before the call
                self._stretch_leave(leavers, t, used, opened)
                num_reqs = self.d_count
                segments.append((len(clocks), num_reqs, frozenset(self.d_loras)))
                step_s = stretch_time_s(num_reqs)
            used += need
            free -= need
            if pcache and need:
                opened.append(t)
            clocks.append(now_s)
            kv.append(used)
            now_s += step_s(t)
            t += 1
            updated_last = False
            if not leavers:
                continue
            self._stretch_finish(leavers, t, used, opened, clocks[-1], now_s)
            updated_last, used, num_reqs = True, self.used, self.d_count
            free = self.usable - used
            if not num_reqs or not self.admits_none():
                break
            if not is_async:
                segments.append((len(clocks), num_reqs, frozenset(self.d_loras)))
                step_s = stretch_time_s(num_reqs)
            arrive = next_arrival_s()
        return t, used, now_s, updated_last

    def _due_in_stretch(
        self, t: int, num_reqs: int, arriving: bool
    ) -> tuple[list[int] | None, int]:
        """The members due at tick ``t`` of a steady stretch of ``num_reqs`` (None if none
        is: the entry is dropped) and how many of them would open a block at ``t`` (async:
        they leave before the call); -1: the stretch ends before ``t``'s call."""
        leavers = self._leavers(t)
        if not leavers:
            del self.d_due[t]  # only members that left since: nothing is due
            return None, 0
        if not self.is_async:
            return leavers, 0
        # a steady call schedules the others: it must schedule someone and admit no one (the
        # structural test: fewer decodes may leave budget)
        left = num_reqs - len(leavers)
        if not arriving and (not left or not self._admits_none_with(left)):
            return leavers, -1
        bs, off = self.bs, self.off
        at = -t % bs
        return leavers, sum(1 for i in leavers if off[i] % bs == at)

    def _stretch_leave(self, leavers: list[int], tick: int, used: int, opened: list[int]) -> None:
        """Async, inside a steady stretch: members due at ``tick`` leave at its loop top
        (their last token in flight), before its call; the blocks of the calls before are
        taken first."""
        self.used = used
        self._take_blocks(opened)
        for i in leavers:
            self._leave(i, tick)
        del self.d_due[tick]

    def _stretch_admit(
        self,
        now_s: float,
        tick: int,
        leavers: list[int] | None,
        admit: Callable[[float], None],
        call_time_s: Callable[[ScheduleCall], float],
    ) -> ScheduleCall:
        """Inside a steady stretch, the loop top of ``tick`` that admits, made as the engine
        loop makes it (the blocks of the calls before taken by the caller): ``admit(now_s)``
        moves the arrivals to the waiting queue, async ``leavers`` leave, the call is
        ``schedule_bulk``'s (it fits: the decodes take at most the budget, their blocks fit,
        nothing else runs), priced by ``call_time_s``; its update follows (sync; async the
        update of the call before, which finishes ``leavers``), then the next loop top's
        joins (async, from the call in flight)."""
        admit(now_s)
        if leavers and self.is_async:
            for i in leavers:
                self._leave(i, tick)
            del self.d_due[tick]
        self.tick = tick
        call = self.schedule_bulk(now_s)
        if call is None:
            raise RuntimeError("steady stretch: an admitting call did not fit (a bug)")
        call.end_s = now_s + call_time_s(call)
        if not self.is_async:
            self.update(call)  # sync: its update now (leavers' finishes too)
        elif leavers:
            self._update_leavers(leavers, call.clock_s, tick - 1)
        self.bulk_top(call if self.is_async else None)
        return call

    def _stretch_finish(
        self,
        leavers: list[int],
        tick: int,
        used: int,
        opened: list[int],
        clock_s: float,
        end_s: float,
    ) -> None:
        """Inside a steady stretch, after the steady call of ``tick - 1`` (at ``clock_s``,
        done at ``end_s``): the members due at it finish as the step loop finishes them.
        Sync: that call's update gives their last tokens. Async: they left at its loop top
        (their last token in flight), it scheduled the others (vLLM skips a request whose
        step in flight already reaches its end), and the update of the call before, made
        after it (``EngineCore.step_with_batch_queue``, vllm/v1/engine/core.py, 0.33 and
        0.34), finishes them. Each is :meth:`update` of a call listing only the leavers (the
        others in it are members, which update skips); every other update of the steady
        calls is empty."""
        self.tick, self.used = tick, used
        self._take_blocks(opened)
        if self.is_async:
            self._update_leavers(leavers, clock_s, tick - 2)
        else:  # this call's update: they leave and finish (update reads d_due)
            call = ScheduleCall(clock_s, [], [], [], [], [], used, end_s=end_s, tick=tick - 1)
            self.update(call)

    def _take_blocks(self, opened: list[int]) -> None:
        """Prefix caching: the blocks the steady decodes' calls of ``opened`` ticks open, in
        call order, taken at once and handed to the members of each tick's phase; clears
        ``opened``. ``used`` already counts them."""
        if not opened:
            return
        bs, members_of = self.bs, self.phase_members
        blocks = self.pc.get_new_blocks(sum(len(members_of[-tick % bs]) for tick in opened))
        blocks_of, at = self.blocks_of, 0
        for tick in opened:
            for i in members_of[-tick % bs]:
                blocks_of[i].append(blocks[at])
                at += 1
        opened.clear()

    def _update_leavers(self, leavers: list[int], end_s: float, tick: int) -> None:
        """Async: the update of the call of ``tick`` (ready at ``end_s``), which holds the
        leavers' last tokens: :meth:`_leave_in_flight` would have listed them in it."""
        n = len(leavers)
        call = ScheduleCall(end_s, leavers, [1] * n, [0] * n, [True] * n, [], 0, [1] * n)
        call.end_s, call.tick = end_s, tick
        self.update(call)
