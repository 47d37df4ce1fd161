"""One run of vLLM's own scheduler (:class:`~cgdispatch.workload.vllm_scheduler.VllmSchedulerCore`,
driven by :func:`~cgdispatch.workload.vllm_engine.run_engine`) over a request table: step rows for the simulator, and the per-request times that latency
needs. It adapts; it decides nothing (the core does)."""

from __future__ import annotations

from array import array
from collections.abc import Callable

import numpy as np
import pandas as pd

from ..core.arith import cdiv
from ..core.step_content import StepContent
from ..core.validate import MAX_STEPS
from .closed_loop import closed_loop_for
from .limits import SchedulerLimits
from .serving_overhead import serving_overhead_of
from .steps import HASH_IDS_COLUMN, LORA_COLUMN, STEP_FIELDS, TOKEN_IDS_COLUMN, Step
from .vllm_call import AcceptFn, ScheduleCall, SteadyStretch
from .vllm_engine import run_engine
from .vllm_prefix import BlockKeys
from .vllm_rules import scheduler_rules
from .vllm_scheduler import VllmSchedulerCore

__all__ = ["ExactRun", "AcceptFn"]

# prefix caching with every prompt unique (no hash_ids / prompt_token_ids) and an unlimited KV
# cache changes nothing vLLM schedules: no request can hit another's blocks, none is ever
# preempted to hit its own, and no cached block is ever evicted. Such runs take the counting
# path (test_prefix_cache.py checks both give the same steps); False: always block for block.
UNIQUE_UNLIMITED_AS_OFF = True

_BOOL_FIELDS = ("uniform_decode", "has_lora")
_DTYPES = {"time_s": np.float64, **{f: np.bool_ for f in _BOOL_FIELDS}}
_PY = {f: (float if f == "time_s" else bool if f in _BOOL_FIELDS else int) for f in STEP_FIELDS}


def geometric_accept(rate: float, seed: int) -> AcceptFn:
    """Drafts accepted one by one with probability ``rate`` until the first rejection."""
    rng = np.random.default_rng(seed)

    def accept(clock_s: float, row: int, num_drafts: int) -> int:
        if rate == 0.0:
            return 0
        if rate == 1.0:
            return num_drafts
        return min(int(rng.geometric(1.0 - rate)) - 1, num_drafts)

    return accept


class ExactRun:
    """vLLM's scheduler over ``requests`` (sorted by arrival, as checked by the simulator)."""

    def __init__(
        self,
        requests: pd.DataFrame,
        limits: SchedulerLimits,
        step_time_ms: Callable[[int, int], float],
        seed: int,
        accept_drafts: AcceptFn | None,
        record_calls: bool = False,
    ) -> None:
        self.limits = lim = limits
        self.rows = requests.index.to_numpy()  # core index -> row of the caller's table
        self.arrival_s = requests["arrival_s"].to_numpy(dtype=np.float64)
        # the serving front end (the step clock's, when it has one): requests reach the
        # scheduler after it; their arrival stays when the client sent them
        self.overhead = serving_overhead_of(getattr(step_time_ms, "serving_overhead", None))
        self.reach_s = self.overhead.reach_s(self.arrival_s)
        prompt = requests["prompt_tokens"].to_numpy(dtype=np.int64)
        output = requests["output_tokens"].to_numpy(dtype=np.int64)
        lora = (
            requests[LORA_COLUMN].to_numpy(dtype=np.int64)
            if LORA_COLUMN in requests
            else np.full(len(requests), -1, dtype=np.int64)
        )
        if lim.max_model_len is not None and int(prompt.max()) >= lim.max_model_len:
            row = int(self.rows[int(np.argmax(prompt))])
            raise ValueError(
                f"request row {row}: prompt_tokens={int(prompt.max())} reaches max_model_len="
                f"{lim.max_model_len}: vLLM refuses such a prompt; raise max_model_len or drop it"
            )
        if lim.num_gpu_blocks is not None:
            longest = prompt + output
            if lim.max_model_len is not None:
                longest = np.minimum(longest, lim.max_model_len)
            need = int(cdiv(int(longest.max()), lim.block_size))
            if need > lim.num_gpu_blocks - 1:
                raise ValueError(
                    f"num_gpu_blocks={lim.num_gpu_blocks} cannot hold one request of "
                    f"{int(longest.max())} tokens ({need} blocks of {lim.block_size} besides "
                    "vLLM's null block): vLLM would never run it; give more blocks"
                )
        rows = self.rows
        accept = accept_drafts or geometric_accept(lim.spec_acceptance_rate, seed)
        prompt_list, lora_list = prompt.tolist(), lora.tolist()
        keys = None
        if lim.enable_prefix_caching:
            keys = _block_keys(requests, prompt_list, lora_list, lim, rows)
            if keys.all_unique and lim.num_gpu_blocks is None and UNIQUE_UNLIMITED_AS_OFF:
                keys = None
        self._pc_on = lim.enable_prefix_caching
        self.core = VllmSchedulerCore(
            prompt_list,
            output.tolist(),
            lora_list,
            rules=scheduler_rules(lim.vllm_version),
            max_num_seqs=lim.max_num_seqs,
            max_num_batched_tokens=lim.max_num_batched_tokens,
            max_model_len=lim.max_model_len,
            block_size=lim.block_size,
            num_gpu_blocks=lim.num_gpu_blocks,
            enable_chunked_prefill=lim.enable_chunked_prefill,
            long_prefill_token_threshold=lim.long_prefill_token_threshold,
            num_speculative_tokens=lim.num_speculative_tokens,
            max_loras=lim.max_loras,
            async_scheduling=lim.is_async,
            accept=lambda clock_s, i, d: accept(clock_s, int(rows[i]), d),
            bulk=not record_calls,  # the bulk path lists only the requests it must
            prefix=keys,
        )
        # arrivals that wait on finishes (a client's concurrency limit, delayed turns): the
        # core tells the closed loop of each finish; None keeps the fixed arrival times
        self.closed = closed_loop_for(requests, self.overhead)
        if self.closed is not None:
            self.core._finish = self._finish_closed  # type: ignore[method-assign]
        self.record_calls = record_calls
        self.step_time_ms = step_time_ms
        self._content_ms = getattr(step_time_ms, "content_ms", None)
        # every schedule call with its per-request lists (record_calls=True only)
        self.calls: list[ScheduleCall] = []
        # the step rows, one typed array per Step field (about 90 bytes a step)
        self._cols = [array("d" if f == "time_s" else "q") for f in STEP_FIELDS]
        self._appends = [col.append for col in self._cols]
        self._any_lora = bool((lora >= 0).any())  # else no step has an adapter
        self._pending_preempted = 0
        self._ran = False
        self._next_row = 0

    def _finish_closed(self, i: int, when_s: float) -> None:
        VllmSchedulerCore._finish(self.core, i, when_s)
        self.closed.finished(i, when_s)

    def _on_call(self, call: ScheduleCall) -> None:
        if self.record_calls:
            self.calls.append(call)
        self._pending_preempted += len(call.preempted)
        bulk = call.n_bulk
        num_reqs = len(call.reqs) + bulk
        if not num_reqs:
            return  # nothing ran: its preemptions go to the next step that runs
        q = self.limits.q
        num_tokens = sum(call.tokens) + bulk
        max_q = max(call.tokens) if call.tokens else 0
        if bulk and not max_q:
            max_q = 1
        if self._any_lora:
            lora = self.core.lora
            ids = {lora[i] for i in call.reqs if lora[i] >= 0} | call.bulk_loras
        else:
            ids = call.bulk_loras  # empty
        prefill = sum([n for n, dec in zip(call.tokens, call.decode) if not dec])
        row = (
            num_tokens,
            num_reqs,
            max_q == q and num_tokens == q * num_reqs,
            bool(ids),
            len(ids),
            prefill,
            call.clock_s,
            self._pending_preempted,
            max_q,
            sum(call.decode) + bulk,
            call.kv_blocks_used,
            call.num_cached_tokens,
        )  # in STEP_FIELDS order
        for append, value in zip(self._appends, row):
            append(value)
        self._pending_preempted = 0

    def _on_stretch(self, run: SteadyStretch) -> None:
        """The rows of a steady stretch's calls in call order: ``_on_call``'s for each."""
        segments, k = run.segments, len(run.clock_s)
        seg, at = 0, 0  # the segment of steady call ``at``
        for pos, call in [*run.calls, (k, None)]:
            while at < pos:  # the steady calls before this admitting one, by segment
                stop = segments[seg + 1][0] if seg + 1 < len(segments) else k
                if stop <= at:
                    seg += 1
                    continue
                end = min(stop, pos)
                self._steady_rows(run, at, end, segments[seg][1], segments[seg][2])
                at = end
            if call is not None:
                self._on_call(call)

    def _steady_rows(
        self, run: SteadyStretch, lo: int, hi: int, n: int, ids: frozenset[int]
    ) -> None:
        """The rows of a stretch's steady calls ``lo`` to ``hi - 1``, of ``n`` decodes with
        adapters ``ids`` each, at once."""
        k = hi - lo
        q = self.limits.q
        whole = k == len(run.clock_s)
        n_col = [n] * k
        values = {
            "num_tokens": n_col,
            "num_reqs": n_col,
            "uniform_decode": [q == 1] * k,  # every query is one token long
            "has_lora": [bool(ids)] * k,
            "num_active_loras": [len(ids)] * k,
            "num_prefill_tokens": [0] * k,
            "time_s": run.clock_s if whole else run.clock_s[lo:hi],
            "num_preempted": [self._pending_preempted] + [0] * (k - 1),
            "max_query_len": [1] * k,
            "num_decode_reqs": n_col,
            "kv_blocks_used": run.kv_blocks_used if whole else run.kv_blocks_used[lo:hi],
            "num_cached_tokens": [0] * k,
        }
        for f, col in zip(STEP_FIELDS, self._cols):
            col.extend(values[f])
        self._pending_preempted = 0

    def _call_time_s(self, call: ScheduleCall) -> float:
        """A schedule call's step time: priced from what it holds when the step-time
        function can (``content_ms``, e.g. :func:`~cgdispatch.workload.latency.dispatched_step_time`),
        else from its token and request counts."""
        content_ms = self._content_ms
        if content_ms is None:
            return self.step_time_ms(call.num_tokens, call.num_reqs) / 1e3
        return content_ms(call_content(self.core, call)) / 1e3

    def _stretch_time_s(self, num_reqs: int) -> Callable[[int], float]:
        """The step time of each call of a steady stretch of ``num_reqs`` decodes, by tick
        (their contexts grow one token a call)."""
        content_ms = self._content_ms
        if content_ms is None:
            step_s = self.step_time_ms(num_reqs, num_reqs) / 1e3
            return lambda tick: step_s
        core = self.core
        decode_ms = getattr(self.step_time_ms, "decode_ms", None)
        if decode_ms is not None and num_reqs:  # the same floats, no content built per call
            ms = decode_ms(num_reqs)

            def fast(tick: int) -> float:
                return ms(core.steady_kv_tokens(tick)) / 1e3

            return fast

        def at(tick: int) -> float:
            content = StepContent(num_reqs, num_reqs, core.steady_kv_tokens(tick))
            return content_ms(content) / 1e3

        return at

    def run(self) -> None:
        if self._ran:
            return
        self._ran = True
        bound = int(self.core.prompt_total() + sum(self.core.max_tokens)) * 2 + 16
        run_engine(
            self.core,
            self.reach_s.tolist(),
            self._call_time_s,
            self._stretch_time_s,
            self._on_call,
            self._on_stretch,
            min(bound, 4 * MAX_STEPS),
            self.closed,
        )
        if self.closed is not None:  # when each request reached the server
            self.arrival_s = np.asarray(self.closed.arrived_s, dtype=np.float64)

    @property
    def prefix_hit_rate(self) -> float:
        """Prompt tokens served from vLLM's prefix cache over the tokens the admissions asked
        for (vLLM's ``PrefixCacheStats``: a resumed request's admission counts again); NaN
        with prefix caching off or nothing admitted."""
        self.run()
        core = self.core
        if not self._pc_on:
            return float("nan")
        if core.pc is None:  # every prompt unique, KV unlimited: nothing could hit
            return 0.0
        if not core.query_tokens:
            return float("nan")
        return core.hit_tokens / core.query_tokens

    @property
    def num_steps(self) -> int:
        return len(self._cols[0])

    @property
    def done(self) -> bool:
        return self._ran and self._next_row >= self.num_steps

    def next_step(self) -> Step | None:
        self.run()
        i = self._next_row
        if i >= self.num_steps:
            return None
        self._next_row += 1
        return Step(*(_PY[f](col[i]) for f, col in zip(STEP_FIELDS, self._cols)))

    def frame(self) -> pd.DataFrame:
        self.run()
        start, self._next_row = self._next_row, self.num_steps
        return pd.DataFrame(
            {
                f: np.frombuffer(col, dtype=np.float64 if f == "time_s" else np.int64)[start:]
                .copy()
                .astype(_DTYPES.get(f, np.int64))
                for f, col in zip(STEP_FIELDS, self._cols)
            }
        )

    def request_times(self) -> pd.DataFrame:
        """Per request, in the caller's row order: arrival, first token and finish (model
        clock, s) and the output tokens it got (max_model_len can end it early). With a
        closed loop the arrival is when the client sent it (after a free slot, after its
        session's previous turn)."""
        self.run()
        core = self.core
        out = pd.DataFrame(
            {
                "arrival_s": self.arrival_s,
                "prompt_tokens": core.prompt,
                "output_tokens": core.out,
                "first_token_s": core.first_token_s,
                "finish_s": core.finish_s,
                "num_preemptions": core.preemptions_of,
            },
            index=self.rows,
        ).sort_index()
        out.index.name = None
        return out


def _block_keys(
    requests: pd.DataFrame,
    prompt: list[int],
    lora: list[int],
    lim: SchedulerLimits,
    rows: np.ndarray,
) -> BlockKeys:
    """The block hashes prefix caching reads: from the table's hash_ids or prompt_token_ids
    column (checked against the prompt lengths), else every prompt unique. The tokens per
    hash id are the trace's own where its loader recorded them (``attrs["hash_block_size"]``:
    a property of the ids, not of the engine), else the limits'."""
    hash_ids = token_ids = None
    hbs = int(requests.attrs.get("hash_block_size", lim.hash_block_size))
    if HASH_IDS_COLUMN in requests:
        hash_ids = requests[HASH_IDS_COLUMN].tolist()
        lens = np.fromiter(map(len, hash_ids), dtype=np.int64, count=len(hash_ids))
        bad = np.flatnonzero(lens != -(-np.asarray(prompt, dtype=np.int64) // hbs))
        if bad.size:  # the first request whose ids do not match its prompt
            i = int(bad[0])
            ids, p = hash_ids[i], prompt[i]
            raise ValueError(
                f"request row {int(rows[i])}: {len(ids)} hash_ids for prompt_tokens={p} "
                f"at hash_block_size={hbs}: one id per {hbs} prompt tokens needs "
                f"{-(-p // hbs)}; fix the ids or set hash_block_size to the trace's"
            )
    elif TOKEN_IDS_COLUMN in requests:
        token_ids = requests[TOKEN_IDS_COLUMN].tolist()
    return BlockKeys(prompt, lora, lim.block_size, hash_ids, token_ids, hbs)


def call_content(core: VllmSchedulerCore, call: ScheduleCall) -> StepContent:
    """What a schedule call's step holds, read right after the call (its requests' computed
    tokens include the ones it scheduled): decodes with their contexts, prompt chunks with
    their cached and new tokens, and the bulk path's steady decodes."""
    computed = core.computed
    d_reqs = d_tokens = d_kv = 0
    chunks = []
    for i, n, decode in zip(call.reqs, call.tokens, call.decode):
        if decode:
            d_reqs += 1
            d_tokens += n
            d_kv += computed[i]
        else:
            chunks.append((computed[i] - n, n))
    if call.n_bulk:
        d_reqs += call.n_bulk
        d_tokens += call.n_bulk
        d_kv += core.steady_kv_tokens(call.tick)
    return StepContent(d_reqs, d_tokens, d_kv, tuple(chunks))
