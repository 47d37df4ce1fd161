"""The traffic ``vllm bench serve`` sends: request lengths and send times as its client draws
them, so that a published benchmark run can be replayed through the scheduler simulator.

What is followed, and where it comes from (vLLM's benchmark client, read in its current
``vllm/benchmarks/`` form; the same rules appear in ``benchmarks/benchmark_serving.py`` and
``benchmark_dataset.py`` of the 0.8-0.10 releases):

- **random dataset** (``RandomDataset.get_sampling_params``, ``vllm/benchmarks/datasets.py``):
  input lengths uniform on the integers ``[floor(L_in (1 - r)), ceil(L_in (1 + r))]`` and
  output lengths on ``[max(1, floor(L_out (1 - r))), ceil(L_out (1 + r))]``, ``r`` the
  ``--random-range-ratio`` (default 0: every request exactly ``L_in`` / ``L_out``). vLLM
  subtracts the tokenizer's special tokens from ``L_in`` first; that is left to the caller
  (a published run's token totals say what was sent).
- **send times** (``get_request``, ``vllm/benchmarks/serve.py``): gaps drawn from
  ``gamma(shape=burstiness, scale=1 / (rate * burstiness))`` (burstiness 1: Poisson), summed,
  then scaled so that the last request goes at exactly ``num_prompts / rate`` seconds;
  ``--request-rate inf`` sends everything at 0.
- **closed loop** (``--max-concurrency c``): a semaphore of ``c`` slots around each
  request, so request ``k`` is sent when the ``k - c + 1``-th of the earlier ones finishes;
  :func:`closed_loop_send_times` turns finish times into those send times.

- **prompt identity** (``RandomDataset``, ``vllm/benchmarks/datasets.py``, 0.10.1.1 and
  0.11.0): prompt ``i`` is the token run ``(offset_i + i + arange(len_i)) % vocab_size``,
  its offsets drawn after the lengths from a generator seeded with ``--seed`` (default 0;
  0.10.x: the global ``np.random`` legacy generator, 0.11 on: ``np.random.default_rng``).
  A draw over one integer consumes nothing, so at range ratio 0 the offsets are the
  same whatever ``--num-prompts``: runs with one seed send the same prompt ``i``, and
  prompt ``i`` of a shorter ``--random-input-len`` is a prefix of the longer one's.
  :func:`random_dataset_offsets` draws them as vLLM does and :func:`prompt_hash_ids` turns
  them into one id per KV block (the replay's ``hash_ids``: equal ids, equal blocks), which
  is all vLLM's prefix cache sees of a prompt. The tokenizer's decode/encode round trip
  vLLM applies is left out (it may drop a token at the end; the caller's lengths stand).
- **test request** (``benchmark``, ``vllm/benchmarks/serve.py``, 0.10.1.1 and 0.11.0):
  before the timed run the client sends ``input_requests[0]`` once and waits for it
  ("Starting initial single prompt test run..."), so with prefix caching on the first
  prompt's full blocks are cached when the run starts.

ShareGPT itself is not shipped: :func:`sharegpt_like_lengths` is a stand-in (the package's
lognormal ``sharegpt`` preset, clipped as vLLM filters ShareGPT conversations and rescaled
to given means), not the dataset. It draws; it does not simulate.
"""

from __future__ import annotations

import heapq
import math
import re

import numpy as np
import pandas as pd

from ..core.validate import MAX_REQUESTS, check_int
from .steps import HASH_IDS_COLUMN
from .synthetic import LENGTH_PRESETS

__all__ = [
    "send_times_s",
    "random_lengths",
    "sharegpt_like_lengths",
    "bench_requests",
    "closed_loop_send_times",
    "random_dataset_offsets",
    "prompt_hash_ids",
    "RANDOM_VOCAB_SIZE",
    "SHAREGPT_MAX_PROMPT_TOKENS",
    "SHAREGPT_MAX_TOTAL_TOKENS",
]

# vLLM's ShareGPT sampling keeps conversations with 4 <= prompt <= 1024 and
# prompt + completion <= 2048 tokens (is_valid_sequence, vllm/benchmarks/datasets.py)
SHAREGPT_MIN_TOKENS = 4
SHAREGPT_MAX_PROMPT_TOKENS = 1024
SHAREGPT_MAX_TOTAL_TOKENS = 2048
# tokenizer.vocab_size of the Qwen2 / Qwen3 tokenizers (151,643 base tokens), the models of
# every shipped published run; it only sets which offsets could collide
RANDOM_VOCAB_SIZE = 151_643
# the first release whose RandomDataset draws from np.random.default_rng(seed)
# (vllm/benchmarks/datasets.py 0.11.0; 0.10.1.1 seeds the global legacy generator)
_DEFAULT_RNG_SINCE = (0, 11)


def send_times_s(
    num_prompts: int, request_rate: float, burstiness: float, rng: np.random.Generator
) -> np.ndarray:
    """When each of ``num_prompts`` requests is sent (seconds from the benchmark's start),
    as ``vllm bench serve --request-rate R --burstiness B`` schedules them."""
    num_prompts = check_int("num_prompts", num_prompts, 1, MAX_REQUESTS)
    if not request_rate > 0:
        raise ValueError(
            f"request_rate={request_rate!r} is invalid: it must be > 0 (inf sends all at once)"
        )
    if math.isinf(request_rate):
        return np.zeros(num_prompts)
    if not burstiness > 0:
        raise ValueError(f"burstiness={burstiness!r} is invalid: it must be > 0 (1 = Poisson)")
    if math.isinf(burstiness):  # constant gaps in the infinite-burstiness limit
        gaps = np.full(num_prompts, 1.0 / request_rate)
    else:
        gaps = rng.gamma(burstiness, 1.0 / (request_rate * burstiness), num_prompts)
    delays = np.cumsum(gaps)
    # vLLM rescales so that the sampled total lands on num_prompts / rate exactly
    return delays * ((num_prompts / request_rate) / delays[-1])


def random_lengths(
    num_prompts: int,
    input_len: int,
    output_len: int,
    range_ratio: float,
    rng: np.random.Generator,
) -> tuple[np.ndarray, np.ndarray]:
    """(prompt tokens, output tokens) per request as vLLM's random dataset draws them."""
    num_prompts = check_int("num_prompts", num_prompts, 1, MAX_REQUESTS)
    input_len = check_int("input_len", input_len, 1)
    output_len = check_int("output_len", output_len, 1)
    if not 0.0 <= range_ratio < 1.0:
        raise ValueError(
            f"range_ratio={range_ratio!r} is invalid: vLLM takes it in [0, 1) (0: fixed lengths)"
        )
    in_low = math.floor(input_len * (1 - range_ratio))
    in_high = math.ceil(input_len * (1 + range_ratio))
    out_low = max(math.floor(output_len * (1 - range_ratio)), 1)
    out_high = max(math.ceil(output_len * (1 + range_ratio)), 1)
    prompts = rng.integers(max(in_low, 1), in_high + 1, size=num_prompts)
    outputs = rng.integers(out_low, out_high + 1, size=num_prompts)
    return prompts.astype(np.int64), outputs.astype(np.int64)


def sharegpt_like_lengths(
    num_prompts: int,
    rng: np.random.Generator,
    *,
    mean_input: float | None = None,
    mean_output: float | None = None,
) -> tuple[np.ndarray, np.ndarray]:
    """A stand-in for ShareGPT's lengths (not the dataset): the ``sharegpt`` preset's
    lognormal shapes, rescaled to ``mean_input`` / ``mean_output`` tokens (default: the
    preset's means), within vLLM's ShareGPT filter (prompt 4..1024 tokens, output >= 4,
    prompt + output <= 2048)."""
    num_prompts = check_int("num_prompts", num_prompts, 1, MAX_REQUESTS)
    preset = LENGTH_PRESETS["sharegpt"]
    want_in = preset.prompt_mean if mean_input is None else float(mean_input)
    want_out = preset.output_mean if mean_output is None else float(mean_output)
    limit_in = SHAREGPT_MAX_PROMPT_TOKENS
    if not SHAREGPT_MIN_TOKENS <= want_in <= limit_in or not want_out >= SHAREGPT_MIN_TOKENS:
        raise ValueError(
            f"mean_input={want_in}, mean_output={want_out} is invalid: ShareGPT-like means "
            f"must be {SHAREGPT_MIN_TOKENS}..{limit_in} input and >= {SHAREGPT_MIN_TOKENS} output tokens"
        )

    def draw(mean: float, sigma: float) -> np.ndarray:
        mu = np.log(mean) - sigma**2 / 2  # E[lognormal] = exp(mu + sigma^2 / 2)
        return rng.lognormal(mu, sigma, num_prompts)

    prompts = draw(want_in, preset.prompt_sigma)
    outputs = draw(want_out, preset.output_sigma)
    for _ in range(4):  # clipping lowers the mean: rescale toward it a few times
        prompts = np.clip(prompts * want_in / prompts.mean(), SHAREGPT_MIN_TOKENS, limit_in)
        room = SHAREGPT_MAX_TOTAL_TOKENS - prompts
        outputs = np.clip(outputs * want_out / outputs.mean(), SHAREGPT_MIN_TOKENS, room)
    return np.rint(prompts).astype(np.int64), np.rint(outputs).astype(np.int64)


def random_dataset_offsets(
    num_prompts: int,
    input_len: int,
    output_len: int,
    range_ratio: float = 0.0,
    *,
    seed: int = 0,
    vocab_size: int = RANDOM_VOCAB_SIZE,
    vllm_version: str = "0.11.0",
) -> np.ndarray:
    """The per-prompt offsets vLLM's random dataset draws with ``--seed seed``: the input and
    output lengths first, then one offset in ``[0, vocab_size)`` per prompt, from the
    release's generator (legacy ``np.random.seed`` before 0.11, ``default_rng`` from 0.11).
    ``input_len`` is vLLM's after it subtracts the tokenizer's special tokens."""
    num_prompts = check_int("num_prompts", num_prompts, 1, MAX_REQUESTS)
    input_len = check_int("input_len", input_len, 1)
    output_len = check_int("output_len", output_len, 1)
    vocab_size = check_int("vocab_size", vocab_size, 1)
    seed = check_int("seed", seed, 0, 2**32 - 1)
    if not 0.0 <= range_ratio < 1.0:
        raise ValueError(
            f"range_ratio={range_ratio!r} is invalid: vLLM takes it in [0, 1) (0: fixed lengths)"
        )
    release = tuple(int(p) for p in re.findall(r"\d+", str(vllm_version))[:2])
    if len(release) < 2:
        raise ValueError(
            f"vllm_version={vllm_version!r} is invalid: give a release such as '0.11.0'"
        )
    if release >= _DEFAULT_RNG_SINCE:  # get_sampling_params, 0.11.0
        in_low = math.floor(input_len * (1 - range_ratio))
        in_high = math.ceil(input_len * (1 + range_ratio))
        out_low = max(math.floor(output_len * (1 - range_ratio)), 1)
        out_high = math.ceil(output_len * (1 + range_ratio))
        draw = np.random.default_rng(seed).integers
    else:  # RandomDataset.sample, 0.10.1.1: truncated bounds
        in_low, in_high = int(input_len * (1 - range_ratio)), int(input_len * (1 + range_ratio))
        out_low = int(output_len * (1 - range_ratio))
        out_high = int(output_len * (1 + range_ratio))
        draw = np.random.RandomState(seed).randint  # what np.random.seed(seed) sets up
    draw(in_low, in_high + 1, size=num_prompts)
    draw(out_low, out_high + 1, size=num_prompts)
    return np.asarray(draw(0, vocab_size, size=num_prompts), dtype=np.int64)


def prompt_hash_ids(
    prompt_tokens: np.ndarray,
    offsets: np.ndarray,
    block_size: int,
    vocab_size: int = RANDOM_VOCAB_SIZE,
) -> list[list[int]]:
    """One id per ``block_size`` prompt tokens of each request whose prompt ``i`` is vLLM's
    random-dataset run ``(offsets[i] + i + arange(prompt_tokens[i])) % vocab_size``: a full
    block's id is its first token (its content follows from it), a last partial block's
    id also encodes its length, so equal ids mean equal tokens (read with
    ``hash_block_size = block_size``)."""
    block_size = check_int("block_size", block_size, 1)
    prompts = np.asarray(prompt_tokens, dtype=np.int64)
    offsets = np.asarray(offsets, dtype=np.int64)
    if len(prompts) != len(offsets):
        raise ValueError(
            f"lengths differ: {len(prompts)} prompts, {len(offsets)} offsets: give one each"
        )
    out = []
    for i, (p, off) in enumerate(zip(prompts.tolist(), offsets.tolist())):
        starts = (off + i + block_size * np.arange(-(-p // block_size))) % vocab_size
        ids = starts.tolist()
        tail = p % block_size
        if tail:  # a partial block: (first token, its length) as one id
            ids[-1] += vocab_size * tail
        out.append(ids)
    return out


def bench_requests(
    prompt_tokens: np.ndarray,
    output_tokens: np.ndarray,
    send_s: np.ndarray,
    hash_ids: list[list[int]] | None = None,
    hash_block_size: int | None = None,
) -> pd.DataFrame:
    """A request table (``arrival_s``, ``prompt_tokens``, ``output_tokens``) in send order;
    with ``hash_ids`` (one list per request, one id per ``hash_block_size`` prompt tokens,
    e.g. :func:`prompt_hash_ids`) also their prompt identity, for the replay's prefix cache."""
    if not len(prompt_tokens) == len(output_tokens) == len(send_s):
        raise ValueError(
            f"lengths differ: {len(prompt_tokens)} prompts, {len(output_tokens)} outputs, "
            f"{len(send_s)} send times: give one of each per request"
        )
    table = pd.DataFrame(
        {
            "arrival_s": np.asarray(send_s, dtype=np.float64),
            "prompt_tokens": np.asarray(prompt_tokens, dtype=np.int64),
            "output_tokens": np.asarray(output_tokens, dtype=np.int64),
        }
    )
    if hash_ids is not None:
        if len(hash_ids) != len(table) or hash_block_size is None:
            raise ValueError(
                f"hash_ids has {len(hash_ids)} lists for {len(table)} requests (hash_block_size="
                f"{hash_block_size}): give one list per request and the tokens per id"
            )
        table[HASH_IDS_COLUMN] = hash_ids
        table.attrs["hash_block_size"] = check_int("hash_block_size", hash_block_size, 1)
    return table


def closed_loop_send_times(finish_s: np.ndarray, max_concurrency: int) -> np.ndarray:
    """Send times of requests 0..n-1 under ``--max-concurrency``: the first ``c`` at 0, each
    later one when a slot frees, given each request's finish time ``finish_s`` (seconds; a
    request's finish must not precede its own send time for the answer to be consistent)."""
    c = check_int("max_concurrency", max_concurrency, 1)
    finish = np.asarray(finish_s, dtype=np.float64)
    send = np.zeros(len(finish))
    running = [float(f) for f in finish[:c]]
    heapq.heapify(running)
    for k in range(c, len(finish)):
        send[k] = max(heapq.heappop(running), send[k - 1])  # the earliest slot to free
        heapq.heappush(running, max(float(finish[k]), send[k]))
    return send
