"""Core objects refuse bad values where they are made, not three calls later (issue 14)."""

from __future__ import annotations

import random

import numpy as np
import pytest

from cgdispatch import BatchDescriptor, CudagraphDispatcher, GraphConfig
from cgdispatch.core.validate import MAX_STEP_TOKENS, check_int


def _dispatcher() -> CudagraphDispatcher:
    d = CudagraphDispatcher(
        GraphConfig(vllm_version="0.33", cudagraph_mode="FULL", cudagraph_capture_sizes=[1, 4, 8])
    )
    d.initialize_cudagraph_keys()
    return d


def test_dispatching_10_to_the_30_tokens_is_refused_and_stats_stay_readable() -> None:
    d = _dispatcher()
    with pytest.raises(ValueError, match=r"num_tokens=10{30} is invalid: it must be at most"):
        d.dispatch(10**30)
    rng = random.Random(7)
    sizes = [rng.randint(1, 64) for _ in range(200)] + [MAX_STEP_TOKENS]
    for n in sizes:
        d.dispatch(n)
    frame = d.stats_frame()  # an overflowing count used to break the int64 cast here
    assert int(frame["calls"].sum()) == len(sizes)
    assert int(frame["real_tokens"].sum()) == sum(sizes)


def test_sequence_parallel_given_as_the_word_no_is_refused() -> None:
    for flag in ("sequence_parallel", "cudagraph_specialize_lora", "specialize_active_lora"):
        with pytest.raises(ValueError, match=rf"{flag}='no' is invalid: it must be True or False"):
            GraphConfig(**{flag: "no"})
    assert (
        GraphConfig(vllm_version="0.33", sequence_parallel=np.bool_(False)).sequence_parallel
        is False
    )


@pytest.mark.parametrize(
    "fields, name",
    [((-1,), "num_tokens"), (("8",), "num_tokens"), ((8, -2), "num_reqs"), ((8, True), "num_reqs"),
     ((8, None, False, False, -1), "num_active_loras"), ((2.5,), "num_tokens")],
)  # fmt: skip
def test_batch_descriptor_with_negative_or_text_sizes_is_refused(fields, name) -> None:
    with pytest.raises(ValueError, match=rf"BatchDescriptor {name}=.* is invalid"):
        BatchDescriptor(*fields)


def test_batch_descriptor_takes_numpy_sizes_as_plain_ints() -> None:
    rng = np.random.default_rng(3)
    for n, r in rng.integers(0, 10_000, size=(20, 2)):
        desc = BatchDescriptor(n, r)
        assert type(desc.num_tokens) is int and desc == BatchDescriptor(int(n), int(r))
        assert hash(desc) == hash(BatchDescriptor(int(n), int(r)))


def test_check_int_names_the_bound() -> None:
    assert check_int("x", 5, 1, 5) == 5
    with pytest.raises(ValueError, match="x=6 is invalid: it must be at most 5"):
        check_int("x", 6, 1, 5)
