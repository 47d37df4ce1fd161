"""vllm bench serve's traffic: random-dataset lengths, send times, the closed loop, and the
ShareGPT stand-in, checked against their definitions on fresh random inputs."""

import math

import numpy as np
import pytest

from cgdispatch.workload.bench_traffic import (
    SHAREGPT_MAX_PROMPT_TOKENS,
    SHAREGPT_MAX_TOTAL_TOKENS,
    bench_requests,
    closed_loop_send_times,
    prompt_hash_ids,
    random_dataset_offsets,
    random_lengths,
    send_times_s,
    sharegpt_like_lengths,
)


def _fresh_seed() -> int:
    return int(np.random.SeedSequence().entropy % 2**32)


@pytest.mark.parametrize("ratio", [0.0, 0.1, 0.5, 0.9])
def test_random_lengths_stay_in_vllms_interval_and_cover_it(ratio):
    rng = np.random.default_rng(_fresh_seed())
    input_len, output_len = int(rng.integers(2, 5000)), int(rng.integers(1, 500))
    prompts, outputs = random_lengths(20_000, input_len, output_len, ratio, rng)
    lo_in, hi_in = math.floor(input_len * (1 - ratio)), math.ceil(input_len * (1 + ratio))
    lo_out = max(math.floor(output_len * (1 - ratio)), 1)
    hi_out = math.ceil(output_len * (1 + ratio))
    assert prompts.min() >= max(lo_in, 1) and prompts.max() <= hi_in
    assert outputs.min() >= lo_out and outputs.max() <= hi_out
    if ratio == 0.0:
        assert (prompts == input_len).all() and (outputs == output_len).all()
    else:  # uniform on the integers of the interval: mean at its middle
        width = hi_in - max(lo_in, 1)
        stderr = (width + 1) / math.sqrt(12 * len(prompts))
        assert abs(prompts.mean() - (max(lo_in, 1) + hi_in) / 2) < 5 * stderr + 1e-9


def test_random_lengths_refuse_a_ratio_vllm_refuses():
    with pytest.raises(ValueError, match="range_ratio=1.0"):
        random_lengths(3, 100, 10, 1.0, np.random.default_rng(0))


@pytest.mark.parametrize("burstiness", [0.5, 1.0, 4.0])
def test_send_times_have_the_rates_mean_gap_and_the_gamma_spread(burstiness):
    rng = np.random.default_rng(_fresh_seed())
    rate = float(rng.uniform(0.5, 50.0))
    n = 40_000
    send = send_times_s(n, rate, burstiness, rng)
    gaps = np.diff(np.concatenate([[0.0], send]))
    # sends never go back in time; two may coincide: a gamma(0.5) gap can fall below the
    # spacing of floats near 10^4 s (about 1e-12 s), as it does in vLLM's own cumulative sum
    assert (gaps >= 0).all() and (gaps > 0).mean() > 0.999
    assert send[-1] == pytest.approx(n / rate, rel=1e-12)  # vLLM's rescaling
    assert gaps.mean() == pytest.approx(1.0 / rate, rel=1e-9)
    # gamma(shape k): coefficient of variation 1 / sqrt(k); 1 for Poisson arrivals
    assert gaps.std() / gaps.mean() == pytest.approx(1.0 / math.sqrt(burstiness), rel=0.05)


def test_infinite_rate_sends_everything_at_once_and_bad_rates_are_refused():
    assert (send_times_s(7, math.inf, 1.0, np.random.default_rng(0)) == 0).all()
    with pytest.raises(ValueError, match="request_rate=0"):
        send_times_s(3, 0, 1.0, np.random.default_rng(0))
    with pytest.raises(ValueError, match="burstiness=-1"):
        send_times_s(3, 2.0, -1, np.random.default_rng(0))


@pytest.mark.parametrize("concurrency", [1, 2, 5])
def test_closed_loop_sends_when_the_k_minus_c_plus_1th_earlier_request_finishes(concurrency):
    rng = np.random.default_rng(_fresh_seed())
    service = rng.exponential(1.0, 300)
    send, finish = np.zeros(300), np.zeros(300)
    for k in range(300):  # the definition: wait until k - c + 1 earlier requests finished
        if k >= concurrency:
            send[k] = np.sort(finish[:k])[k - concurrency]
        finish[k] = send[k] + service[k]
    np.testing.assert_allclose(closed_loop_send_times(finish, concurrency), send)


def test_sharegpt_stand_in_hits_the_means_within_vllms_filter():
    rng = np.random.default_rng(_fresh_seed())
    mean_in, mean_out = float(rng.uniform(100, 400)), float(rng.uniform(100, 400))
    prompts, outputs = sharegpt_like_lengths(20_000, rng, mean_input=mean_in, mean_output=mean_out)
    assert prompts.mean() == pytest.approx(mean_in, rel=0.02)
    assert outputs.mean() == pytest.approx(mean_out, rel=0.02)
    assert prompts.min() >= 4 and prompts.max() <= SHAREGPT_MAX_PROMPT_TOKENS
    assert outputs.min() >= 4 and (prompts + outputs).max() <= SHAREGPT_MAX_TOTAL_TOKENS
    with pytest.raises(ValueError, match="mean_input=2000"):
        sharegpt_like_lengths(3, rng, mean_input=2000)


def test_bench_requests_is_a_request_table_in_send_order():
    table = bench_requests(np.array([5, 6]), np.array([1, 2]), np.array([0.0, 0.5]))
    assert list(table.columns) == ["arrival_s", "prompt_tokens", "output_tokens"]
    with pytest.raises(ValueError, match="lengths differ"):
        bench_requests(np.array([5]), np.array([1, 2]), np.array([0.0, 0.5]))


@pytest.mark.parametrize("release", ["0.10.1.1", "0.11.0"])
def test_random_dataset_offsets_are_the_seeded_generators_and_do_not_depend_on_the_count(release):
    seed, vocab = _fresh_seed(), int(np.random.default_rng().integers(1000, 200_000))
    n_small, n_large = 7, 300
    small = random_dataset_offsets(
        n_small, 1024, 1024, seed=seed, vocab_size=vocab, vllm_version=release
    )
    large = random_dataset_offsets(
        n_large, 1024, 1024, seed=seed, vocab_size=vocab, vllm_version=release
    )
    # range ratio 0: the length draws span one integer and use no randomness, so the offsets
    # are the generator's first draws, whatever the number of prompts
    if release == "0.11.0":
        direct = np.random.default_rng(seed).integers(0, vocab, size=n_large)
    else:
        legacy = np.random.RandomState(seed)
        direct = legacy.randint(0, vocab, size=n_large)
    np.testing.assert_array_equal(large, direct)
    np.testing.assert_array_equal(small, large[:n_small])
    # a non-zero range ratio draws the lengths first: other offsets
    ranged = random_dataset_offsets(
        n_large, 1024, 1024, 0.5, seed=seed, vocab_size=vocab, vllm_version=release
    )
    assert not np.array_equal(ranged, large)
    with pytest.raises(ValueError, match="vllm_version='next' is invalid"):
        random_dataset_offsets(3, 10, 10, vllm_version="next")


@pytest.mark.parametrize("block_size", [1, 4, 16])
def test_prompt_hash_ids_are_equal_exactly_where_the_prompts_blocks_are(block_size):
    rng = np.random.default_rng(_fresh_seed())
    vocab, n = 97, 40  # a small vocabulary: starts collide and sequences wrap around
    prompts = rng.integers(1, 6 * block_size + 3, n)
    offsets = rng.integers(0, vocab, n)
    ids = prompt_hash_ids(prompts, offsets, block_size, vocab)
    tokens = [(offsets[i] + i + np.arange(prompts[i])) % vocab for i in range(n)]
    for i in range(n):
        assert len(ids[i]) == -(-int(prompts[i]) // block_size)
        for k in range(n):
            for j in range(min(len(ids[i]), len(ids[k]))):
                a = tuple(tokens[i][j * block_size : (j + 1) * block_size])
                b = tuple(tokens[k][j * block_size : (j + 1) * block_size])
                assert (ids[i][j] == ids[k][j]) == (a == b)
    table = bench_requests(prompts, np.ones(n, int), np.zeros(n), ids, block_size)
    assert table["hash_ids"].tolist() == ids and table.attrs["hash_block_size"] == block_size
    with pytest.raises(ValueError, match="give one list per request"):
        bench_requests(prompts, np.ones(n, int), np.zeros(n), ids[:-1], block_size)
