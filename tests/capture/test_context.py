"""Forward context: set/get, nesting, restore on exception, bad input."""

import pytest

from cgdispatch import BatchDescriptor, CUDAGraphMode
from cgdispatch.capture.context import ForwardContext, get_forward_context, set_forward_context

M = CUDAGraphMode


def test_no_context_outside_a_block():
    assert get_forward_context() is None


def test_set_and_get_carry_mode_descriptor_and_flags():
    desc = BatchDescriptor(8, 8)
    with set_forward_context(M.FULL, desc, allow_capture=False, metadata={"k": 1}) as ctx:
        got = get_forward_context()
        assert got is ctx
        assert got == ForwardContext(M.FULL, desc, False, {"k": 1})
    assert get_forward_context() is None


def test_nested_contexts_restore_the_outer_one():
    outer, inner = BatchDescriptor(16, 16), BatchDescriptor(4)
    with set_forward_context(M.FULL, outer):
        with set_forward_context(M.PIECEWISE, inner):
            assert get_forward_context().batch_descriptor == inner
            assert get_forward_context().runtime_mode is M.PIECEWISE
        assert get_forward_context().batch_descriptor == outer
        assert get_forward_context().runtime_mode is M.FULL
    assert get_forward_context() is None


def test_context_is_restored_when_the_step_raises():
    with set_forward_context(M.NONE, BatchDescriptor(3)):
        with pytest.raises(KeyError), set_forward_context(M.FULL, BatchDescriptor(4, 4)):
            raise KeyError("boom")
        assert get_forward_context().runtime_mode is M.NONE
    assert get_forward_context() is None


@pytest.mark.parametrize("mode", [M.FULL_AND_PIECEWISE, M.FULL_DECODE_ONLY, "FULL", 2])
def test_config_level_or_foreign_modes_are_rejected(mode):
    with pytest.raises(ValueError, match="runtime mode"):
        set_forward_context(mode, BatchDescriptor(1))


def test_descriptor_must_be_a_batch_descriptor():
    with pytest.raises(ValueError, match="BatchDescriptor"):
        set_forward_context(M.FULL, (8, 8))


def test_swap_returns_the_previous_context_and_a_runner_step_that_raises_restores_it():
    """The runner's hot path swaps the context in and out (no context-manager object per
    step); a model that raises inside a step leaves the caller's context in place."""
    import torch

    from cgdispatch import GraphConfig
    from cgdispatch.capture.context import swap_forward_context
    from cgdispatch.capture.runner import GraphRunner
    from cgdispatch.models.toy import PRESETS, build_toy_model

    ctx = ForwardContext(M.PIECEWISE, BatchDescriptor(4))
    assert swap_forward_context(ctx) is None and get_forward_context() is ctx
    assert swap_forward_context(None) is ctx and get_forward_context() is None

    model = build_toy_model(PRESETS["toy-tiny"], seed=0)
    config = GraphConfig(cudagraph_mode="FULL", cudagraph_capture_sizes=[4, 8], max_num_seqs=4)
    runner = GraphRunner(model, config)
    seen = []

    def failing(*inputs):
        seen.append(get_forward_context())
        raise RuntimeError("model failed")

    runner.model_callable = failing
    ids = torch.randint(0, 10, (3,))
    with set_forward_context(M.FULL, BatchDescriptor(8, 8)) as outer:
        with pytest.raises(RuntimeError, match="model failed"):
            runner.execute(ids, torch.arange(3), torch.zeros(3, dtype=torch.long))
        # the step's own context was current: FULL, padded to 4 tokens (the swap in _run)
        assert seen[0].runtime_mode is M.FULL and seen[0].batch_descriptor.num_tokens == 4
        assert get_forward_context() is outer
    assert get_forward_context() is None
