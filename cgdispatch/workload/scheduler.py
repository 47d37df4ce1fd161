"""The continuous-batching scheduler simulator: one :meth:`SchedulerSimulator.step` per engine
step, the way vLLM's scheduler forms batches.

With ``SchedulerLimits(vllm_version=...)`` it is vLLM's own scheduler of that release, step
for step (:mod:`cgdispatch.workload.vllm_scheduler`: KV blocks, preemption, async
scheduling, drafts; checked on the scheduler oracle). Without a version it is the older
vLLM-like model (no KV-cache capacity, no preemption, decodes first). Either way its clock
is a step-time model, so ``time_s`` is ``model``, not measured. It refuses, before the
first step, any input that would make it loop for days: non-finite arrival times (a NaN
arrival never comes due), and token counts above :data:`~cgdispatch.core.validate.MAX_REQUEST_TOKENS`
or needing more than :data:`~cgdispatch.core.validate.MAX_STEPS` steps.
"""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Callable
from operator import attrgetter

import numpy as np
import pandas as pd

from ..core.validate import MAX_STEPS
from .exact_run import AcceptFn, ExactRun
from .limits import SchedulerLimits
from .request_table import check_requests
from .steps import LORA_COLUMN, STEP_FIELDS, Step

__all__ = ["SchedulerLimits", "Step", "SchedulerSimulator", "default_step_time_ms", "LORA_COLUMN"]

# run repeated pure-decode steps in bulk (SchedulerSimulator._decode_stretch); False: one by one
BULK_DECODES = True
# steps without adapters or prompts mid-way by SchedulerSimulator._decode_first_step; False: numpy path
FAST_STEPS = True


def default_step_time_ms(num_tokens: int, num_reqs: int) -> float:
    """Model (not measured): 8 ms per step plus 0.05 ms per token, roughly an 8B model on one
    H100-class GPU; it only orders steps against arrivals in the simulator. A schedule call
    that runs nothing (vLLM makes some) takes no time."""
    return 8.0 + 0.05 * num_tokens if num_tokens else 0.0


class SchedulerSimulator:
    """Steps a vLLM-style continuous-batching scheduler runs for a request table.

    Each step has a budget of ``max_num_batched_tokens`` tokens and ``max_num_seqs``
    requests. Running decodes go first (q tokens each), then running partial prefills, then
    waiting requests in arrival order (FIFO), their prompts chunked to fit the budget when
    chunked prefill is on. A decode emits 1 + the accepted draft tokens (each accepted with
    ``spec_acceptance_rate`` until the first rejection); the step that ends a prompt emits
    the first output token. With a ``lora_id`` column and ``max_loras``, a waiting request
    whose adapter would exceed that many in the running batch waits a step, as vLLM's does.
    It simulates; it does not read files (see :mod:`cgdispatch.workload.files`).
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
        """``accept_drafts(clock_s, row, num_drafts)``: drafts accepted for request ``row`` (its
        position in ``requests``) in the step scheduled at ``clock_s``; vLLM's own scheduler
        only. Default: each accepted with ``spec_acceptance_rate`` until the first rejection.
        ``record_calls``: keep every schedule call with its per-request lists
        (``exact.calls``, for replay checks); otherwise steady decodes run in bulk, which
        gives the same steps and request times far faster."""
        self.limits = limits = limits or SchedulerLimits()
        req = check_requests(requests).sort_values("arrival_s", kind="stable")
        self._exact: ExactRun | None = None
        if limits.vllm_version is not None:
            self._exact = ExactRun(req, limits, step_time_ms, seed, accept_drafts, record_calls)
        self._arrival = req["arrival_s"].to_numpy(dtype=np.float64)
        self._prompt_left = req["prompt_tokens"].to_numpy(dtype=np.int64).copy()
        self._out_left = req["output_tokens"].to_numpy(dtype=np.int64).copy()
        biggest = int(self._prompt_left.max())
        if not limits.enable_chunked_prefill and biggest > limits.max_num_batched_tokens:
            raise ValueError(
                f"a prompt of {biggest} tokens exceeds max_num_batched_tokens="
                f"{limits.max_num_batched_tokens} without chunked prefill: enable it or raise "
                "the budget"
            )
        # at least this many steps: every prompt token through the budget, and the longest
        # output one decode step per q tokens; refused up front rather than looped through
        least = max(
            math.ceil(int(self._prompt_left.sum()) / limits.max_num_batched_tokens),
            math.ceil(int(self._out_left.max()) / limits.q),
        )
        if least > MAX_STEPS:
            raise ValueError(
                f"these {len(req)} requests need at least {least:_} steps with "
                f"max_num_batched_tokens={limits.max_num_batched_tokens}: more than the "
                f"{MAX_STEPS:_} steps a simulation may take; simulate fewer or shorter requests"
            )
        # every step schedules at least one token, so more steps than tokens means a bug
        self._step_bound = int(self._prompt_left.sum() + self._out_left.sum()) + 1
        self._lora = req[LORA_COLUMN].to_numpy(dtype=np.int64) if LORA_COLUMN in req else None
        self._limit_loras = self._lora is not None and limits.max_loras is not None
        self._rng = np.random.default_rng(seed)
        self._step_time_ms = step_time_ms
        self._waiting: deque[int] = deque()
        self._run = np.empty(0, dtype=np.int64)  # running request indices, admission order
        self._num_prefilling = 0  # running requests with prompt tokens left
        self.now_s = 0.0
        self.steps = 0
        self._next = 0  # first request not yet arrived
        self.finished = 0

    @property
    def num_requests(self) -> int:
        return len(self._arrival)

    @property
    def done(self) -> bool:
        if self._exact is not None:
            return self._exact.done
        return self.finished == self.num_requests

    @property
    def exact(self) -> ExactRun | None:
        """vLLM's own scheduler's run (with ``vllm_version``): per-request times, preemptions."""
        return self._exact

    def _admit_arrivals(self) -> None:
        arrival, total = self._arrival, self.num_requests
        while self._next < total and arrival[self._next] <= self.now_s:
            self._waiting.append(self._next)
            self._next += 1
        if not len(self._run) and not self._waiting:  # idle: jump to the next arrival
            self.now_s = float(arrival[self._next])
            self._admit_arrivals()

    def step(self) -> Step | None:
        """Schedule and run one step; None once every request has finished."""
        if self._exact is not None:
            return self._exact.next_step()
        if self.done:
            return None
        if self.steps >= self._step_bound:
            raise RuntimeError(f"the simulator ran {self.steps} steps without finishing: a bug")
        self._admit_arrivals()
        if FAST_STEPS and self._lora is None and not self._num_prefilling:
            return self._decode_first_step()
        lim, q = self.limits, self.limits.q
        run, prompt_left, lora, waiting = self._run, self._prompt_left, self._lora, self._waiting
        budget = lim.max_num_batched_tokens
        in_prefill = prompt_left[run] > 0
        dec = run[~in_prefill][: budget // q]
        budget -= len(dec) * q
        pre = run[in_prefill]
        need = prompt_left[pre]
        take = np.minimum(need, np.clip(budget - (np.cumsum(need) - need), 0, None))
        budget -= int(take.sum())
        new, new_take, skipped = [], [], []
        adapters = set(lora[run][lora[run] >= 0].tolist()) if self._limit_loras else set()
        while waiting and len(run) + len(new) < lim.max_num_seqs and budget > 0:
            i = waiting[0]
            t = min(int(prompt_left[i]), budget)
            if t < prompt_left[i] and not lim.enable_chunked_prefill:
                break
            waiting.popleft()
            if self._limit_loras and lora[i] >= 0 and lora[i] not in adapters:
                if len(adapters) >= lim.max_loras:
                    skipped.append(i)  # its adapter does not fit this step: try again next step
                    continue
                adapters.add(int(lora[i]))
            new.append(i)
            new_take.append(t)
            budget -= t
        waiting.extendleft(reversed(skipped))
        sched = np.concatenate([pre, np.asarray(new, dtype=np.int64)])
        chunks = np.concatenate([take, np.asarray(new_take, dtype=np.int64)])
        sched, chunks = sched[chunks > 0], chunks[chunks > 0]
        prefill_tokens = int(chunks.sum())
        num_tokens = len(dec) * q + prefill_tokens
        uniform = num_tokens > 0 and bool(np.all(chunks == q))  # vLLM: every query is q long
        active = 0
        if lora is not None:
            ids = lora[np.concatenate([dec, sched])]
            active = len(np.unique(ids[ids >= 0]))
        num_reqs = len(dec) + len(sched)
        max_q = max(q if len(dec) else 0, int(chunks.max()) if len(chunks) else 0)
        step = Step(num_tokens, num_reqs, uniform, active > 0, active, prefill_tokens, self.now_s,
                    0, max_q, len(dec), 0)  # fmt: skip
        prompt_left[sched] -= chunks
        out_left = self._out_left
        out_left[sched[prompt_left[sched] == 0]] -= 1  # the step ending a prompt emits a token
        if len(dec):
            out_left[dec] -= 1 + _accepted(
                self._rng, lim.num_speculative_tokens, lim.spec_acceptance_rate, len(dec)
            )
        run = np.concatenate([run, np.asarray(new, dtype=np.int64)])
        finished = (out_left[run] <= 0) & (prompt_left[run] == 0)
        self.finished += int(finished.sum())
        self._run = run = run[~finished]
        self._num_prefilling = int(np.count_nonzero(prompt_left[run]))
        self.now_s += self._step_time_ms(num_tokens, num_reqs) / 1e3
        self.steps += 1
        return step

    def _decode_first_step(self) -> Step:
        """:meth:`step` when there is no adapter column and no running request is mid-prompt:
        every running request decodes, so the decodes are a slice of the running array and the
        admissions are counted in Python ints. Why: on the 1M-request trace
        (benchmarks/bench_large_trace.py, nearly all of whose steps take this path) the general
        path's dozen numpy calls on arrays of a few hundred entries cost more than the work. The
        same step, the same draws of ``self._rng`` (a test compares it with FAST_STEPS=False)."""
        lim, q, run, waiting = self.limits, self.limits.q, self._run, self._waiting
        prompt_left, out_left = self._prompt_left, self._out_left
        dec = run[: lim.max_num_batched_tokens // q]
        num_dec = len(dec)
        budget = lim.max_num_batched_tokens - num_dec * q
        seats = lim.max_num_seqs - len(run)
        new, new_take = [], []
        while waiting and len(new) < seats and budget > 0:
            need = int(prompt_left[waiting[0]])
            take = min(need, budget)
            if take < need and not lim.enable_chunked_prefill:
                break
            new.append(waiting.popleft())
            new_take.append(take)
            budget -= take
        prefill_tokens = sum(new_take)
        num_tokens = num_dec * q + prefill_tokens
        num_reqs = num_dec + len(new)
        uniform = num_tokens > 0 and all(take == q for take in new_take)
        max_q = max(q if num_dec else 0, max(new_take, default=0))
        step = Step(num_tokens, num_reqs, uniform, False, 0, prefill_tokens, self.now_s,
                    0, max_q, num_dec, 0)  # fmt: skip
        still = []  # admissions that keep running, in admission order
        for i, take in zip(new, new_take):
            prompt_left[i] -= take
            if prompt_left[i]:
                self._num_prefilling += 1
            else:
                out_left[i] -= 1  # the step ending a prompt emits a token
            if out_left[i] > 0:
                still.append(i)
            else:
                self.finished += 1
        if num_dec:
            k, rate = lim.num_speculative_tokens, lim.spec_acceptance_rate
            out_left[dec] = left = out_left[dec] - (1 + _accepted(self._rng, k, rate, num_dec))
            finished = left <= 0
            if num_finished := int(np.count_nonzero(finished)):
                self.finished += num_finished
                run = np.concatenate([dec[~finished], run[num_dec:]])
        if still:
            run = np.concatenate([run, np.asarray(still, dtype=np.int64)])
        self._run = run
        self.now_s += self._step_time_ms(num_tokens, num_reqs) / 1e3
        self.steps += 1
        return step

    def run(self, progress: bool = False) -> pd.DataFrame:
        """Every remaining step as a frame with the columns of :class:`Step`."""
        from tqdm.auto import tqdm

        if self._exact is not None:
            return self._exact.frame()

        rows = []
        as_row = attrgetter(*STEP_FIELDS)  # a tuple in one C call (dataclasses.astuple deep-copies)
        with tqdm(
            total=self.num_requests, initial=self.finished, desc="simulate", unit="req",
            disable=not progress,
        ) as bar:  # fmt: skip
            while True:
                if BULK_DECODES and self._decode_stretch(rows, as_row):
                    bar.update(self.finished - bar.n)
                    continue
                if (step := self.step()) is None:
                    break
                rows.append(as_row(step))
                bar.update(self.finished - bar.n)
        return pd.DataFrame.from_records(rows, columns=list(STEP_FIELDS))

    def _decode_stretch(self, rows: list, as_row: Callable[[Step], tuple]) -> int:
        """Run the steps that repeat one pure decode in bulk; how many (0: not such a step).

        While every running request decodes, all fit the token budget, no request can be
        admitted and nothing random is drawn (no speculative tokens, no adapters), each step
        until the first request finishes or an admissible request arrives is the same step:
        the same tokens, requests and duration. Their start times are added one step at a
        time, as :meth:`step` adds them, so the frame equals the step-by-step run exactly
        (``BULK_DECODES = False`` runs step by step; a test compares the two)."""
        lim = self.limits
        if (
            self._exact is not None
            or self.done
            or lim.num_speculative_tokens
            or self._lora is not None
        ):
            return 0
        self._admit_arrivals()
        run, n = self._run, len(self._run)
        if not n or n > lim.max_num_batched_tokens or self._num_prefilling:
            return 0
        room = n < lim.max_num_seqs
        if self._waiting and room:
            return 0  # a waiting request is admitted this step
        most = min(int(self._out_left[run].min()), self._step_bound - self.steps)
        nxt = self._arrival[self._next] if room and self._next < self.num_requests else math.inf
        dt = self._step_time_ms(n, n) / 1e3
        now, times = self.now_s, []
        while len(times) < most and (not times or now < nxt):
            times.append(now)
            now += dt
        k = len(times)
        rows.extend(as_row(Step(n, n, True, False, 0, 0, t, 0, 1, n, 0)) for t in times)
        out_left = self._out_left
        out_left[run] -= k
        finished = out_left[run] <= 0
        self.finished += int(finished.sum())
        self._run = run[~finished]
        self.steps += k
        self.now_s = now
        return k


def _accepted(rng: np.random.Generator, k: int, rate: float, n: int) -> np.ndarray:
    """Accepted draft tokens per decode: leading successes of k Bernoulli(rate) trials."""
    if k == 0 or rate == 0.0:
        return np.zeros(n, dtype=np.int64)
    if rate == 1.0:
        return np.full(n, k, dtype=np.int64)
    return np.minimum(rng.geometric(1.0 - rate, n) - 1, k)
