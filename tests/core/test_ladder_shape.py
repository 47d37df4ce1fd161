"""The ladder shapes: what each release's size lists are, read and written by field name,
and the planner registry the plan layer fills (core names no planner)."""

from __future__ import annotations

import warnings

import numpy as np
import pytest

import cgdispatch.plan  # noqa: F401  (registers the built-in shapes' planners)
from cgdispatch import GraphConfig
from cgdispatch.core.generation import GENERATIONS, capture_keys, make_graph_dispatcher
from cgdispatch.core.ladder_shape import (
    SPLIT_LADDERS,
    TOKEN_LADDER,
    LadderShape,
    SplitLadders,
    TokenLadder,
    planner_for,
    register_planner,
)
from cgdispatch.plan.planner import plan_capture_sizes
from cgdispatch.plan.planner_v2 import plan_two_ladders


def _quiet(**fields):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return GraphConfig(**fields)


def test_the_releases_name_their_shapes():
    assert GENERATIONS["0.33"].ladder is TOKEN_LADDER
    assert GENERATIONS["0.34"].ladder is SPLIT_LADDERS
    for shape in (TOKEN_LADDER, SPLIT_LADDERS):
        assert isinstance(shape, LadderShape)
        assert set(shape.compilation_keys) <= set(shape.own_fields)
        assert {lad.field for lad in shape.ladders} <= {f for f in GraphConfig._field_names()}
    # generation 2's own fields start with its shape's (one home for the size fields)
    assert set(SPLIT_LADDERS.own_fields) <= set(GENERATIONS["0.34"].own_fields)


def test_sizes_and_changes_round_trip_on_random_lists():
    rng = np.random.default_rng(38)
    for _ in range(30):
        seqs = int(rng.integers(1, 64))
        tokens = int(rng.integers(max(seqs, 64), 4096))
        prefill = sorted({int(s) for s in rng.integers(1, tokens + 1, int(rng.integers(1, 9)))})
        decode = sorted({int(s) for s in rng.integers(1, seqs + 1, int(rng.integers(1, 5)))})
        limits = dict(max_num_seqs=seqs, max_num_batched_tokens=tokens)
        v1 = _quiet(vllm_version="0.33", cudagraph_capture_sizes=prefill, **limits)
        assert TOKEN_LADDER.sizes(v1) == (prefill,)
        assert v1.replace(**TOKEN_LADDER.changes([prefill])).cudagraph_capture_sizes == prefill
        gen2 = _quiet(vllm_version="0.34", **limits).replace(
            **SPLIT_LADDERS.changes([prefill, decode])
        )
        assert SPLIT_LADDERS.sizes(gen2) == (prefill, decode)
        # one list for a sweep: every size a prefill size, those <= max_num_seqs decode sizes
        swept = _quiet(vllm_version="0.34", **limits).replace(
            **SPLIT_LADDERS.one_list_changes(prefill, seqs)
        )
        below = [s for s in prefill if s <= seqs]
        assert swept.prefill_cudagraph_capture_token_sizes == prefill
        if below:
            assert swept.decode_cudagraph_capture_request_sizes == below


@pytest.mark.parametrize("q", [1, 3])
def test_a_token_ladders_default_is_what_v1_derives_with_no_size_given(q):
    rng = np.random.default_rng(q)
    for _ in range(20):
        seqs = int(rng.integers(1, 300))
        tokens = int(rng.integers(seqs * q, 9000))
        limits = dict(
            max_num_seqs=seqs, max_num_batched_tokens=tokens, num_speculative_tokens=q - 1
        )
        config = GraphConfig(vllm_version="0.33", **limits)
        assert TOKEN_LADDER.default_sizes(config) == (config.cudagraph_capture_sizes,)
        gen2 = GraphConfig(vllm_version="0.34", **limits).resolve()
        assert SPLIT_LADDERS.default_sizes(gen2) == SPLIT_LADDERS.sizes(gen2)


def test_counts_and_words_follow_the_config():
    for mode, graphs in (("FULL_AND_PIECEWISE", True), ("NONE", False)):
        v1 = GraphConfig(vllm_version="0.33", cudagraph_mode=mode, cudagraph_capture_sizes=[2, 8])
        dispatcher = make_graph_dispatcher(v1)
        keys = capture_keys(v1)
        assert TOKEN_LADDER.num_sizes(dispatcher, keys) == (2 if graphs else 0)
        assert TOKEN_LADDER.largest_tokens(v1, keys) == max(v1.cudagraph_capture_sizes, default=0)
    gen2 = GraphConfig(
        vllm_version="0.34",
        max_num_seqs=8,
        prefill_cudagraph_capture_token_sizes=[4, 16, 64],
        decode_cudagraph_capture_request_sizes=[1, 2, 8],
    )
    keys = capture_keys(gen2)
    assert SPLIT_LADDERS.largest_tokens(gen2, keys) == max(k.num_tokens for k in keys) == 64
    assert SPLIT_LADDERS.num_sizes(make_graph_dispatcher(gen2), keys) == 6
    assert SPLIT_LADDERS.config_text(gen2, 6) == (
        "3 prefill token sizes, 3 decode request sizes (6 that capture graphs)"
    )


def test_planners_are_registered_by_the_plan_layer():
    token, split = planner_for(TOKEN_LADDER), planner_for(SPLIT_LADDERS)
    assert token.__module__ == split.__module__ == "cgdispatch.plan"
    steps = {1: 5, 8: 3, 40: 2}
    config = GraphConfig(vllm_version="0.33")
    assert token(steps, 2, config=config) == plan_capture_sizes(steps, 2, config=config)
    gen2 = GraphConfig(vllm_version="0.34")
    assert split(steps, 2, config=gen2) == plan_two_ladders(steps, 2, config=gen2)

    class Wider(TokenLadder):  # a subclass plans as its parent until it registers its own
        name = "wider"

    assert planner_for(Wider()) is token

    class Unplanned:
        name = "unplanned"

    with pytest.raises(ValueError, match="no planner is registered for the ladder shape"):
        planner_for(Unplanned())
    with pytest.raises(ValueError, match="ladder shape class"):
        register_planner(SPLIT_LADDERS, plan_two_ladders)  # an instance, not the class
    assert isinstance(SPLIT_LADDERS, SplitLadders)
