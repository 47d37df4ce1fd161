"""Host-side time of a vLLM server that no GPU kernel accounts for: the API server's front end
per request and its output work per engine step, on the step clock of the replay.

vLLM's V1 engine (0.11.0) runs the scheduler and the model in an engine-core process and the
rest in one API-server process (``--api-server-count``, default 1): HTTP, the chat template
and tokenization of each request, and one ``output_handler`` loop
(``vllm/v1/engine/async_llm.py``) that detokenizes every running request's new token after
every engine step (``vllm/v1/engine/output_processor.py``) and streams it. Four parts, each a
``model`` figure:

- **front end** (``front_end_ms``, per request): the API server's CPU time for a new request
  before its prompt is tokenized (HTTP, request parsing, the chat template), shared by every
  request in the front end at once (processor sharing): each request is an ``async``
  handler in the API server's one event loop, which calls ready callbacks "in the order in
  which they are registered" (Python's ``asyncio`` docs, ``loop.call_soon``), and the
  tokenizer's batching task, woken by the first prompt put on its queue, is scheduled
  behind every handler already ready. A burst of ``n`` requests sent together then leaves
  this part together, ``n * front_end_ms`` later; a request sent to an idle front end waits
  ``front_end_ms`` only. Its TTFT counts from when it was sent.
- **tokenizer** (``tokenize_ms``, per request, 0: no such stage): then the prompts go,
  first come first served, through vLLM's ``AsyncMicrobatchTokenizer``
  (``vllm/utils/__init__.py``, 0.10.1.1 and 0.11.0; every chat and completions prompt of
  ``serving_engine.py``'s ``_normalize_prompt_text_to_input``): one task takes the first
  prompt waiting, up to :data:`TOKENIZER_MAX_BATCH` in all, waiting at most
  :data:`TOKENIZER_BATCH_WAIT_S` for more, and runs the batch on a one-thread executor;
  the next batch is collected only when that one is done. ``tokenize_ms`` prices a
  request's share of its batch and of its hand-off to the engine after it (the input
  processing on the event loop, which overlaps the next batch), and every request of a
  batch leaves when the batch ends (:func:`tokenizer_batches_s`). So a burst reaches the
  scheduler in batches, its first requests prefilling while later ones are still in the
  front end. A closed-loop client's requests (at most ``--max-concurrency`` in the front
  end) take both parts one request at a time (:mod:`~cgdispatch.workload.closed_loop`),
  which differs from sharing and batching by less than ``(max_concurrency - 1) *
  (front_end_ms + tokenize_ms)`` plus the batching window a request.
- **request latency** (``request_latency_ms``, per request, not serialized): time in flight
  that no CPU queue holds (the HTTP round trip, the first token's trip back through the output
  path and the client's stream parsing), added after the front end. With the front end it is
  what a lone request's TTFT carries beyond its prefill at ``--max-concurrency 1``.
- **per step** (``step_ms + step_request_ms * num_reqs``): the host's work for each engine
  step's outputs, which grows with the requests in the step and runs beside the GPU, so a
  step lasts the slower of the two (:meth:`ServingOverhead.paced_ms`): at a thousand running
  requests on a fast GPU the host sets the pace, behind a slow GPU's step it does not show.

:data:`VLLM_SERVING_OVERHEAD` holds the coefficients fitted on a fixed part of the published
``vllm bench serve`` runs (``docs/calibration.md``, "Serving overhead", gives the split and
the error on the held-out runs); :data:`NO_SERVING_OVERHEAD` turns every part off, for
comparisons that need a replay's exact step times (oracle checks, step-cost checks).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

__all__ = [
    "ServingOverhead",
    "NO_SERVING_OVERHEAD",
    "VLLM_SERVING_OVERHEAD",
    "front_end_arrivals_s",
    "tokenizer_batches_s",
    "serving_overhead_of",
    "TOKENIZER_MAX_BATCH",
    "TOKENIZER_BATCH_WAIT_S",
]

_MAX_MS = 10_000.0  # an overhead above 10 s a request or a step is a unit mistake
# AsyncMicrobatchTokenizer's defaults, max_batch_size=32 and batch_wait_timeout_s=0.002, the
# ones serving_engine.py constructs it with (vllm/utils/__init__.py, 0.10.1.1 and 0.11.0)
TOKENIZER_MAX_BATCH = 32
TOKENIZER_BATCH_WAIT_S = 0.002
_FIELDS = ("front_end_ms", "step_ms", "step_request_ms", "request_latency_ms", "tokenize_ms")


def _check(name: str, value: object) -> float:
    try:
        ms = float(value)  # type: ignore[arg-type]
    except (TypeError, ValueError):
        ms = math.nan
    if isinstance(value, bool) or not math.isfinite(ms) or not 0.0 <= ms <= _MAX_MS:
        raise ValueError(
            f"{name}={value!r} is invalid: an overhead is a finite number of milliseconds "
            f"in [0, {_MAX_MS:g}]; give e.g. {name}=0.0 to turn it off"
        )
    return ms


@dataclass(frozen=True)
class ServingOverhead:
    """Host-side serving time the GPU cost model does not price (all in ms, ``model``).

    ``front_end_ms``: per request, the API server's time before tokenizing, shared by the
    requests in it (:func:`front_end_arrivals_s`). ``step_ms``: per engine step.
    ``step_request_ms``: per request in a step. ``request_latency_ms``: per request, in
    flight, not serialized. ``tokenize_ms``: per request, in the tokenizer's batches, first
    come first served (:func:`tokenizer_batches_s`; 0: no tokenizer stage). Sent -> seen
    by the scheduler: :meth:`reach_s`.
    """

    front_end_ms: float = 0.0
    step_ms: float = 0.0
    step_request_ms: float = 0.0
    request_latency_ms: float = 0.0
    tokenize_ms: float = 0.0

    def __post_init__(self) -> None:
        for name in _FIELDS:
            object.__setattr__(self, name, _check(name, getattr(self, name)))

    @property
    def is_off(self) -> bool:
        """Whether every part is zero (the replay's clock is the GPU's alone)."""
        return not any(getattr(self, name) for name in _FIELDS)

    def reach_s(self, sent_s: np.ndarray) -> np.ndarray:
        """When requests sent at ``sent_s`` (seconds, sorted) reach the scheduler: the shared
        front end, then the tokenizer's batches, then the time in flight."""
        ready = front_end_arrivals_s(sent_s, self.front_end_ms)
        done = tokenizer_batches_s(ready, self.tokenize_ms)
        return done + self.request_latency_ms / 1e3

    def step_overhead_ms(self, num_reqs: int) -> float:
        """The host time added to one step holding ``num_reqs`` requests (0 requests: an
        empty schedule call, which costs nothing)."""
        if num_reqs <= 0:
            return 0.0
        return self.step_ms + self.step_request_ms * num_reqs

    def paced_ms(self, gpu_ms: float, num_reqs: int) -> float:
        """A step's duration on the serving clock: the slower of the GPU step (``gpu_ms``)
        and the host's work for its ``num_reqs`` requests, which runs beside it."""
        return max(float(gpu_ms), self.step_overhead_ms(num_reqs))


NO_SERVING_OVERHEAD = ServingOverhead()

# Fitted by `benchmarks/bench_end_to_end.py --fit` (a grid: FIT_GRID there) on the fit split of
# cgdispatch/data/published_serving_runs.csv (the 15 runs on H100: GPUStack's pages, vLLM
# 0.9.2 and 0.11.0); docs/calibration.md reports the error on the 34 held-out runs (A100,
# RTX 4090). step_ms was not fitted (0): no run separates it from the GPU's fixed cost. The
# tokenizer stage is in the grid (0-10 ms a request). Refitted (was 20 ms front end, 20 ms in
# flight) when the start-up model began counting each release's sampler warm-up, which
# shrinks the fit split's 0.11.0 KV caches; refitted again when decode attention on Hopper
# became FlashAttention 3's split-KV waves: the pick moved from tokenizer 0 to 2.5 ms
# (objective 0.20554 against 0.20594 at 0; the other fields as before).
VLLM_SERVING_OVERHEAD = ServingOverhead(
    front_end_ms=15.0, step_ms=0.0, step_request_ms=0.15, request_latency_ms=35.0, tokenize_ms=2.5
)


def serving_overhead_of(overhead: ServingOverhead | None) -> ServingOverhead:
    """``overhead`` checked (None: :data:`NO_SERVING_OVERHEAD`)."""
    if overhead is None:
        return NO_SERVING_OVERHEAD
    if not isinstance(overhead, ServingOverhead):
        raise ValueError(
            f"overhead={overhead!r} is not a ServingOverhead: give "
            "cgdispatch.workload.serving_overhead.ServingOverhead(...), VLLM_SERVING_OVERHEAD "
            "or None (off)"
        )
    return overhead


def front_end_arrivals_s(
    sent_s: np.ndarray, front_end_ms: float, request_latency_ms: float = 0.0
) -> np.ndarray:
    """When requests sent at ``sent_s`` (seconds, sorted) reach the scheduler through a front
    end whose time is shared by the requests in it (processor sharing: with ``k`` requests in
    it, each gets ``1 / k`` of it), each needing ``front_end_ms``, then ``request_latency_ms``
    later. Equal needs make the requests leave in the order they came, the way this walks
    them: one event (a send or a departure) at a time, ``O(n)``."""
    sent = np.asarray(sent_s, dtype=np.float64)
    if front_end_ms <= 0.0 or len(sent) == 0:
        return sent + request_latency_ms / 1e3
    if np.any(np.diff(sent) < 0):
        raise ValueError("sent_s must be sorted: sort the requests by arrival_s first")
    cost = front_end_ms / 1e3
    n = len(sent)
    times = sent.tolist()
    done = [0.0] * n
    # served_s: the service each request in the front end has had since it was empty, in
    # s of its own; request i leaves when served_s reaches its entry's served_s + cost
    leave_at = [0.0] * n
    served_s, clock_s, entered, left = 0.0, times[0], 0, 0
    while left < n:
        inside = entered - left
        depart_s = clock_s + (leave_at[left] - served_s) * inside if inside else math.inf
        if entered < n and times[entered] <= depart_s:
            if inside:
                served_s += (times[entered] - clock_s) / inside
            clock_s = times[entered]
            leave_at[entered] = served_s + cost
            entered += 1
        else:
            served_s, clock_s = leave_at[left], depart_s
            done[left] = depart_s
            left += 1
    return np.asarray(done) + request_latency_ms / 1e3


def tokenizer_batches_s(
    ready_s: np.ndarray,
    tokenize_ms: float,
    max_batch: int = TOKENIZER_MAX_BATCH,
    wait_s: float = TOKENIZER_BATCH_WAIT_S,
) -> np.ndarray:
    """When requests ready for the tokenizer at ``ready_s`` (seconds, sorted) leave it, as
    ``AsyncMicrobatchTokenizer``'s one batching task moves them: when it is free it takes
    the first waiting request at ``start = max(free, its ready time)``, then every request
    ready by ``start + wait_s`` up to ``max_batch`` in all; the batch closes when it is
    full (at its last member's ready time) or at ``start + wait_s``, takes ``tokenize_ms``
    a request, and all its requests leave when it ends, the task free again.
    ``tokenize_ms`` 0: no tokenizer stage (``ready_s`` back as it is)."""
    ready = np.asarray(ready_s, dtype=np.float64)
    if tokenize_ms <= 0.0 or len(ready) == 0:
        return ready.copy()
    if np.any(np.diff(ready) < 0):
        raise ValueError("ready_s must be sorted: sort the requests by when they are ready")
    if max_batch < 1 or not wait_s >= 0.0:
        raise ValueError(
            f"max_batch={max_batch!r}, wait_s={wait_s!r} are invalid: a batch holds at least "
            "one request and waits >= 0 s; give vLLM's 32 and 0.002"
        )
    cost = tokenize_ms / 1e3
    times = ready.tolist()
    done = [0.0] * len(times)
    free, first, n = -math.inf, 0, len(times)
    while first < n:
        start = max(free, times[first])
        # members: ready by the window's end, at most max_batch (ready is sorted)
        last = int(np.searchsorted(ready, start + wait_s, side="right"))
        last = min(last, first + max_batch)
        size = last - first
        close = max(start, times[last - 1]) if size == max_batch else start + wait_s
        free = close + cost * size
        done[first:last] = [free] * size
        first = last
    return np.asarray(done)
