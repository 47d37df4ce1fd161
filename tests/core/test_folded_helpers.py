"""The helpers that duplicate code was folded into (issue 38, item 5), each against an
independent computation on fresh random inputs: ``is_compatible`` on a ``BatchQuery``,
``check_list_length`` and the "why" lines both generations share."""

from __future__ import annotations

import random
import re

import pytest

from cgdispatch import BatchExecutionDescriptor, CUDAGraphMode
from cgdispatch.core.explain_lines import piecewise_line, plain_eager_line
from cgdispatch.core.v2.cudagraph_manager import BatchQuery, is_compatible
from cgdispatch.core.validate import MAX_CAPTURE_SIZES, check_list_length

RNG = random.Random()


def _maybe(value: int) -> int | None:
    return None if RNG.random() < 0.4 else value


def _fits(desc: BatchExecutionDescriptor, reqs, tokens, q, loras, max_q, ubatches) -> bool:
    """vLLM 0.34's ``_is_compatible`` rules, one at a time (docs/semantics_v2.md)."""
    if desc.uniform_token_count is not None and desc.uniform_token_count != q:
        return False
    if desc.max_query_len is not None and (max_q is None or desc.max_query_len < max_q):
        return False
    if desc.num_reqs is not None and desc.num_reqs < reqs:
        return False
    if desc.num_tokens < tokens:
        return False
    return desc.num_active_loras == loras and desc.num_ubatches == ubatches


def test_is_compatible_reads_the_query_as_vllm_reads_its_arguments():
    agree = {True: 0, False: 0}
    for _ in range(3000):
        desc = BatchExecutionDescriptor(
            RNG.choice([CUDAGraphMode.FULL, CUDAGraphMode.PIECEWISE]),
            RNG.randint(1, 64),
            _maybe(RNG.randint(1, 32)),
            uniform_token_count=_maybe(RNG.randint(1, 4)),
            max_query_len=_maybe(RNG.randint(1, 8)),
            num_active_loras=RNG.randint(0, 2),
            num_ubatches=RNG.randint(1, 2),
        )
        args = (
            RNG.randint(0, 40),
            RNG.randint(1, 80),
            _maybe(RNG.randint(1, 4)),
            RNG.randint(0, 2),
            _maybe(RNG.randint(1, 8)),
            RNG.randint(1, 2),
        )
        want = _fits(desc, *args)
        assert is_compatible(desc, BatchQuery(*args)) is want, (desc, args)
        agree[want] += 1
    assert min(agree.values()) > 0  # both answers were exercised


def test_check_list_length_takes_lists_up_to_the_bound_and_names_the_fix():
    fix = f"fix-{RNG.randint(0, 10**6)}"
    for _ in range(50):
        n = RNG.randint(0, 64)
        check_list_length("sizes", [RNG.randint(-5, 5) for _ in range(n)], fix)  # no raise
        check_list_length("sizes", tuple(range(n)), fix)
    check_list_length("sizes", range(MAX_CAPTURE_SIZES), fix)
    with pytest.raises(ValueError, match=f"sizes has {MAX_CAPTURE_SIZES + 1:_} sizes: at most"):
        check_list_length("sizes", [1] * (MAX_CAPTURE_SIZES + 1), fix)
    for bad in ("1,2", b"12", {1: 2}, 7, None):
        with pytest.raises(ValueError, match=re.escape(f"sizes={bad!r} is invalid: {fix}")):
            check_list_length("sizes", bad, fix)


def test_shared_why_lines():
    why = f" (reason {RNG.randint(0, 999)})"
    assert piecewise_line(why) == f"PIECEWISE graph, attention runs eagerly between pieces{why}"
    n = RNG.randint(1, 10_000)
    for mode in CUDAGraphMode:
        want_none = "cudagraph_mode is NONE: every step runs eagerly"
        got = plain_eager_line(mode, n)
        assert got == (want_none if mode is CUDAGraphMode.NONE else None)
        empty = plain_eager_line(mode, 0)
        assert empty == (want_none if mode is CUDAGraphMode.NONE else "empty batch: nothing to run")
