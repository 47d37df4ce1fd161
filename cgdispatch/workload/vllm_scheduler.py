"""vLLM's own scheduler, step for step: ``Scheduler`` / ``AsyncScheduler`` of vLLM 0.33 and 0.34
with FCFS, KV blocks of one full-attention group, preemption, and prefix caching on or off.

:class:`VllmSchedulerCore` keeps the request state vLLM keeps (``num_computed_tokens``,
``num_output_placeholders``, in-flight and stale tokens, drafts, blocks held) and makes
``Scheduler.schedule()`` calls and ``update_from_output`` updates; the engine loop that
drives it is :func:`~cgdispatch.workload.vllm_engine.run_engine`, and its bulk path (steady
decodes kept implicitly) is :class:`~cgdispatch.workload.vllm_steady.SteadyDecodes`. It
agrees with vLLM's own classes on every case of the scheduler oracle
(``tests/data/vllm_oracle/scheduler-*.json``); what that oracle cannot reach is listed in
docs/semantics.md. The model is stood in for: a step samples one token per request that is
not mid-prefill, plus the drafts the ``accept`` hook accepts. It schedules; the caller owns
the clock's meaning (:class:`~cgdispatch.workload.scheduler.SchedulerSimulator`).

Without prefix caching, KV blocks are counted (``held``, ``used``); with it (``prefix``: the
requests' block hashes), blocks have identity in a
:class:`~cgdispatch.workload.vllm_prefix.PrefixPool`, as vLLM's ``KVCacheManager`` keeps
them (the ``_pc_*`` methods and the prefix-caching branch of
:meth:`VllmSchedulerCore._admit`).
"""

from __future__ import annotations

from collections import deque

from ..core.arith import cdiv
from .vllm_call import FINISHED, NO_LIMIT, RUNNING, WAITING, AcceptFn, ScheduleCall
from .vllm_prefix import BlockKeys, PrefixPool
from .vllm_rules import SchedulerRules
from .vllm_steady import SteadyDecodes

__all__ = ["VllmSchedulerCore", "ScheduleCall", "AcceptFn"]


# vLLM 0.33.0 and 0.34.0 pad a decode admitted from the waiting queue (a one-token prompt, a
# whole-prompt cache hit) to 1 + num_speculative_tokens tokens, cut it to
# long_prefill_token_threshold when that is smaller, and then assert that it was not cut
# (vllm/v1/core/sched/scheduler.py, 0.33.0 line 1579, 0.34.0 line 1643): the engine dies
_PADDED_CUT = (
    "vLLM's scheduler fails an assertion on this trace (vllm/v1/core/sched/scheduler.py, "
    "0.33.0 and 0.34.0): it pads a decode admitted from the waiting queue to "
    "1 + num_speculative_tokens = {padded} tokens, then cuts it to "
    "long_prefill_token_threshold={lpt}, and the engine stops; set "
    "long_prefill_token_threshold to 0 or to at least {padded}"
)


class VllmSchedulerCore(SteadyDecodes):
    """vLLM's scheduler state for one request table (indices 0..n-1, FCFS in index order).
    Configure, then drive it with :func:`~cgdispatch.workload.vllm_engine.run_engine`."""

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
        prefix: BlockKeys | None = None,  # prefix caching on, with these block hashes
    ) -> None:
        n = len(prompt)
        self.prompt, self.max_tokens, self.lora = prompt, max_tokens, lora
        self.rules = rules
        self.max_num_seqs, self.budget = max_num_seqs, max_num_batched_tokens
        self.mml = max_model_len if max_model_len is not None else NO_LIMIT
        self.bs = block_size
        self.usable = num_gpu_blocks - 1 if num_gpu_blocks is not None else NO_LIMIT
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
        self.status = [WAITING] * n
        self.used = 0  # blocks held in all
        self.running: list[int] = []
        self.waiting: deque[int] = deque()
        self.finished_pending = False  # finished_req_ids not yet sent by a schedule call
        self.num_unfinished = 0
        self.num_preempted = 0
        self.preemptions_of = [0] * n  # times each request was preempted
        self.first_token_s = [float("nan")] * n
        self.finish_s = [float("nan")] * n
        # prefix caching (vLLM's BlockPool with real block identity); None: off, blocks counted
        self.keys = prefix
        self.pc: PrefixPool | None = None
        self.step_cached = 0  # num_cached_tokens of the call being made
        self.hit_tokens = 0  # prefix-cache hits of every admission so far (tokens)
        self.query_tokens = 0  # tokens those admissions asked for
        if prefix is not None:
            self.pc = PrefixPool(None if num_gpu_blocks is None else num_gpu_blocks - 1)
            self.blocks_of: dict[int, list[int]] = {}  # running request -> its blocks
            self.ncached: dict[int, int] = {}  # running request -> its blocks cached
            self.run_seq: dict[int, int] = {}  # running request -> its place in running
            self.pc_finished: list[int] = []  # finished in the update under way
            self.pc_preempted: dict[int, bool] = {}  # requests whose own blocks were hashed
        self._init_steady(n, bulk)  # the bulk path's state (SteadyDecodes)

    def prompt_total(self) -> int:
        return sum(self.prompt)

    # ----- the scheduler ------------------------------------------------------------------
    def _blocks(self, tokens: int) -> int:
        return cdiv(min(tokens, self.mml), self.bs)

    def _preempt(self, i: int) -> None:
        self.p_order.pop(i, None)
        if self.pc is not None:
            self._pc_free(i)
        else:
            self.used -= self.held[i]
            self.held[i] = 0
        self.status[i] = WAITING
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
            want = -(-min(computed[i] + n, self.mml) // self.bs)
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
            if self.pc is not None:
                self._pc_allocate(i, want, computed[i] + n)
            elif want > self.held[i]:
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
            loras = None
            if self.max_loras is not None:
                loras = {self.lora[j] for j in running if self.lora[j] >= 0}
            lists = (reqs, tokens, drafts, decode)
            pad_ok = bool(k and not prefill_scheduled)
            self._admit(budget, lpt, pad_ok, bool(reqs), loras, lists)
        return self._scheduled(clock_s, (reqs, tokens, drafts, decode), preempted)

    def _must_wait(self, i: int, loras: set[int] | None) -> bool:
        """A waiting request the admission loop skips this step: its preempted step's output
        is still in flight, or its adapter would exceed ``max_loras``."""
        if self.stale[i] > 0:
            return True
        lo = self.lora[i]
        return loras is not None and lo >= 0 and len(loras) == self.max_loras and lo not in loras

    # ----- prefix caching (vLLM's KVCacheManager with enable_caching) -----------------------
    def _pc_free(self, i: int, finished: bool = False) -> None:
        """``KVCacheManager.free``: request ``i``'s blocks back to the pool, tail first. Its
        own cached blocks (output tokens, a unique prompt) enter the hash map only now, when
        preempted, as only it can hit them; finished, no one can."""
        blocks = self.blocks_of.pop(i, None)
        ncached = self.ncached.pop(i, 0)
        self.run_seq.pop(i, None)
        self.held[i] = 0
        if not blocks:
            return
        pc = self.pc
        shared = len(self.keys.prompt_keys(i))
        if finished:
            hashed = self.pc_preempted.pop(i, False)  # else none of its own blocks has a hash
            self.used -= pc.free(blocks, shared, max(ncached - shared, 0), hashed)
            return
        self.pc_preempted[i] = True
        own = -(i << 32) - 1
        for j in range(shared, ncached):
            pc.insert(own - j, blocks[j])
        self.used -= pc.free(blocks)

    def _pc_cache(self, i: int, num_tokens: int) -> None:
        """``cache_blocks``: request ``i``'s full blocks up to ``num_tokens`` (capped at the
        tokens it has: drafts and in-flight tokens are never cached) count as cached; those
        others may share enter the hash map now, its own ones when it is preempted."""
        full = min(num_tokens, self.prompt[i] + self.out[i]) // self.bs
        done = self.ncached.get(i, 0)
        if done >= full:
            return
        self.ncached[i] = full
        keys = self.keys.prompt_keys(i)
        if done >= len(keys):
            return
        pc = self.pc
        hashes, setdefault = pc.hash, pc.cached.setdefault
        stop = full if full < len(keys) else len(keys)
        for key, b in zip(keys[done:stop], self.blocks_of[i][done:stop]):
            if hashes[b] is not None:
                continue  # a hit: cached under this key already
            hashes[b] = key
            first = setdefault(key, b)
            if first != b:
                pc.add_dup(key, first, b)

    def _pc_allocate(self, i: int, want: int, cache_to: int) -> None:
        """``allocate_slots`` for running request ``i`` once the blocks fit: blocks up to
        ``want``, then its full blocks up to ``cache_to`` tokens cached."""
        have = self.held[i]
        if want > have:
            new = self.pc.get_new_blocks(want - have)
            self.blocks_of.setdefault(i, []).extend(new)
            self.used += want - have
            self.held[i] = want
        self._pc_cache(i, cache_to)

    def _pc_hits(self, i: int, max_tokens: int) -> list[int]:
        """``get_computed_blocks``: the cached blocks of request ``i``'s longest prefix of
        whole blocks within ``max_tokens`` tokens (vLLM passes num_tokens - 1)."""
        most = min(max_tokens, self.prompt[i] + self.out[i]) // self.bs  # its block hashes
        keys = self.keys.prompt_keys(i)
        hits: list[int] = []
        append = hits.append
        for b in map(self.pc.cached.get, keys[:most]):
            if b is None:
                return hits
            append(b)
        if most > len(keys) and i in self.pc_preempted:  # its own blocks, cached when preempted
            own = -(i << 32) - 1
            for j in range(len(keys), most):
                b = self.pc.cached.get(own - j)
                if b is None:
                    break
                hits.append(b)
        return hits

    def _admit(
        self,
        budget: int,
        lpt: int,
        pad_ok: bool,
        running_scheduled: bool,
        loras: set[int] | None,
        lists: tuple[list[int], list[int], list[int], list[bool]],
    ) -> None:
        """Admit waiting requests in FCFS order while the step has room (``Scheduler.schedule``'s
        waiting loop); ``loras``: adapters running (None without a LoRA limit); ``pad_ok``: a
        lone token may be padded to a uniform decode of 1 + k (no prefill scheduled, drafts
        on), when some running request was scheduled (``running_scheduled``) or the token
        follows a prefix-cache hit. With prefix caching each admission starts from its cached
        blocks (hits in whole blocks, the last token always recomputed), and the block checks
        count hit blocks in the free queue as vLLM's ``allocate_slots`` does; without it,
        blocks are counted."""
        prompt, out, k, bs, mml = self.prompt, self.out, self.k, self.bs, self.mml
        running, waiting, pc = self.running, self.waiting, self.pc
        reqs, tokens, drafts, decode = lists
        skipped: list[int] = []
        hits: list[int] = []
        h = evictable = 0
        while len(running) < self.max_num_seqs and budget > 0 and waiting:
            i = waiting[0]
            if self._must_wait(i, loras):
                skipped.append(waiting.popleft())
                continue
            lo = self.lora[i]
            num_tokens = prompt[i] + out[i]
            if pc is not None:
                hits = self._pc_hits(i, num_tokens - 1)
                h = len(hits) * bs
                evictable = pc.evictable(hits) if hits else 0
            n, padded = num_tokens - h, False
            if pad_ok and n == 1 and (running_scheduled or h > 0) and h + k + 2 <= mml:
                if 1 + k > budget:
                    break
                n, padded = 1 + k, True
            if 0 < lpt < n:
                if padded:
                    raise ValueError(_PADDED_CUT.format(k=k, lpt=lpt, padded=1 + k))
                n = lpt
            if n > budget:
                if not self.chunked:
                    break
                n = budget
            free = self.usable - self.used
            if max(-(-min(num_tokens, mml) // bs) - len(hits), 0) + evictable > free:
                break  # the whole sequence must fit (scheduler_reserve_full_isl)
            want = -(-min(min(h, mml) + n, mml) // bs)
            if max(want - len(hits), 0) + evictable > free:
                break
            waiting.popleft()
            running.append(i)
            self.p_order[i] = None
            if loras is not None and lo >= 0:
                loras.add(lo)
            self.status[i] = RUNNING
            self.computed[i] = h
            if pc is None:
                self.held[i] = want
                self.used += want
            else:
                self.run_seq[i] = self.query_tokens  # grows with every admission
                self.used += pc.touch(hits)
                self.blocks_of[i] = hits
                self.ncached[i] = len(hits)
                self.held[i] = len(hits)
                self._pc_allocate(i, want, min(h, mml) + n)
                self.step_cached += h
                self.hit_tokens += h
                self.query_tokens += num_tokens
            reqs.append(i)
            tokens.append(n)
            drafts.append(k if padded else 0)
            decode.append(h > 0 and h >= num_tokens - 1)
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
        cached, self.step_cached = self.step_cached, 0
        return ScheduleCall(
            clock_s, reqs, tokens, drafts, decode, preempted, self.used, sampled,
            n_bulk=n_bulk, bulk_loras=bulk_loras, tick=self.tick - 1, num_cached_tokens=cached,
        )  # fmt: skip

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
            if self.status[i] == FINISHED or i in members:
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
            publish = self.pc is not None and not stale and (ph[i] > 0 or self.k > 0)
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
            if publish and self.status[i] == RUNNING:
                # update_from_output publishes the blocks its tokens finalised
                self._pc_cache(i, computed[i] - self.inflight[i])
            if stopped:
                self._finish(i, call.end_s)
        if self.bulk and not self.is_async:
            for i in self.d_due.pop(call.tick, ()):
                if i in members and self.due[i] == call.tick:  # out reaches its limit now
                    self._leave(i, call.tick + 1)
                    self._finish(i, call.end_s)
        if self.pc is not None and self.pc_finished:
            # vLLM frees finished requests' blocks in the call's (running) order; the bulk
            # path meets them out of it, so they are freed here, sorted
            done, self.pc_finished = self.pc_finished, []
            if len(done) > 1:
                seq = self.run_seq
                done.sort(key=lambda j: seq.get(j, -1))
            for i in done:
                self._pc_free(i, finished=True)
                self.keys.forget(i)
        if self.k and not self.is_async and call.reqs:
            # update_draft_token_ids: k drafts for every live request that sampled a token
            for i, g in zip(call.reqs, call.sampled):
                if g and self.status[i] != FINISHED:
                    self.spec[i] = 0 if self.prefill_chunk[i] else self.k

    def _finish(self, i: int, when_s: float) -> None:
        self.p_order.pop(i, None)
        if self.status[i] == RUNNING:
            self.running.remove(i)
        else:
            self.waiting.remove(i)
        if self.pc is not None:
            self.pc_finished.append(i)  # freed at the end of the update, in running order
        else:
            self.used -= self.held[i]
            self.held[i] = 0
        self.status[i] = FINISHED
        self.finish_s[i] = when_s
        self.num_unfinished -= 1
        self.finished_pending = True
