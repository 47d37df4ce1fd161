"""vLLM's own dispatcher scenarios, re-expressed against cgdispatch's API.

Source: ``tests/v1/cudagraph/test_cudagraph_dispatch.py`` of vllm-project/vllm (the test is
not shipped in the 0.33.0 wheel; read from the repository). Its ``TestCudagraphDispatcher``
cases are kept with vLLM 0.33.0's dispatcher semantics where the stored test predates
them: FULL mixed keys carry ``num_reqs = min(num_tokens, max_num_seqs)`` and cascade
attention is ``invalid_modes={FULL}`` (0.33 replaced ``disable_full``). "Compilation mode
NONE" (attention not split out) is a ``splitting_ops`` list without every attention op. Its
wrapper and integration classes need CUDA; cgdispatch's own wrapper tests cover them.
"""

from __future__ import annotations

import pytest

from cgdispatch.core.batch import BatchDescriptor
from cgdispatch.core.config import GraphConfig
from cgdispatch.core.modes import CUDAGraphMode
from cgdispatch.core.v1.dispatcher import CudagraphDispatcher

M = CUDAGraphMode
# vLLM's CompilationMode.NONE (attention not compiled piecewise): a list that does not
# hold every attention op
NO_ATTENTION_SPLIT = ["cgdispatch::attention"]


def _config(mode: str, compiled: bool, *, sizes: list[int], max_num_seqs: int, lora: bool):
    return GraphConfig(
        vllm_version="0.33",
        cudagraph_mode=mode,
        cudagraph_capture_sizes=sizes,
        max_num_seqs=max_num_seqs,
        splitting_ops=None if compiled else NO_ATTENTION_SPLIT,
        max_loras=4 if lora else 0,
        specialize_active_lora=lora,
    )


@pytest.mark.parametrize(
    "mode,compiled,lora",
    [
        ("FULL", False, False),  # full graphs for mixed batches, no separate routine
        ("FULL_AND_PIECEWISE", False, False),  # refused: piecewise needs attention split out
        ("FULL_DECODE_ONLY", False, False),  # full graphs for uniform batches, none for mixed
        ("PIECEWISE", True, False),  # piecewise for all
        ("PIECEWISE", True, True),  # piecewise for all, LoRA counts specialised
    ],
)
def test_dispatcher(mode: str, compiled: bool, lora: bool) -> None:
    config = _config(mode, compiled, sizes=[1, 8], max_num_seqs=8, lora=lora)
    if mode == "FULL_AND_PIECEWISE" and not compiled:
        with pytest.raises(ValueError, match="every attention op"):
            CudagraphDispatcher(config)
        return
    d = CudagraphDispatcher(config)
    d.initialize_cudagraph_keys(config.cudagraph_mode, 1)

    # LoRA with max_loras=4 specialised: cases [0, 1, 2, 4, 5] -> 2 sizes x 5 = 10 keys
    per_mode = 10 if lora else 2
    has_pw = mode in ("FULL_AND_PIECEWISE", "PIECEWISE")
    has_full = mode not in ("NONE", "PIECEWISE")
    assert len(d.cudagraph_keys[M.PIECEWISE]) == (per_mode if has_pw else 0)
    assert len(d.cudagraph_keys[M.FULL]) == (per_mode if has_full else 0)

    # 1. non-uniform batch, size in the capture list
    rt_mode, key = d.dispatch(8, uniform_decode=False, has_lora=False)
    if mode == "FULL":
        assert (rt_mode, key) == (M.FULL, BatchDescriptor(8, 8, False))
    elif has_pw:
        assert (rt_mode, key) == (M.PIECEWISE, BatchDescriptor(8))
    else:
        assert rt_mode is M.NONE

    # 2. uniform decode batch, size in the capture list
    rt_mode, key = d.dispatch(8, uniform_decode=True, has_lora=False)
    if mode == "FULL":  # pure FULL uses non-uniform keys for all batches
        assert (rt_mode, key) == (M.FULL, BatchDescriptor(8, 8, False))
    elif mode in ("FULL_DECODE_ONLY", "FULL_AND_PIECEWISE"):
        assert (rt_mode, key) == (M.FULL, BatchDescriptor(8, 8, True))
    elif mode == "PIECEWISE":
        assert (rt_mode, key) == (
            M.PIECEWISE,
            BatchDescriptor(8, 8, True).relax_for_mixed_batch_cudagraphs(),
        )
    else:
        assert rt_mode is M.NONE

    # 3. no key match
    assert d.dispatch(15, uniform_decode=False, has_lora=False) == (M.NONE, BatchDescriptor(15))

    # 4. FULL excluded (cascade attention, encoder outputs) falls back
    rt_mode, key = d.dispatch(8, uniform_decode=False, has_lora=False, invalid_modes={M.FULL})
    if "PIECEWISE" in mode:
        assert (rt_mode, key) == (M.PIECEWISE, BatchDescriptor(8))
    else:
        assert rt_mode is M.NONE
    assert d.dispatch(8, use_cascade_attn=True) == (rt_mode, key)


@pytest.mark.parametrize(
    "mode,compiled,expected_modes",
    [
        ("FULL", False, [M.FULL]),
        ("PIECEWISE", True, [M.PIECEWISE]),
        ("FULL_DECODE_ONLY", False, [M.FULL]),
        ("NONE", False, []),
    ],
)
def test_get_capture_descs(mode: str, compiled: bool, expected_modes: list[CUDAGraphMode]):
    config = _config(mode, compiled, sizes=[1, 4, 8, 16], max_num_seqs=16, lora=False)
    d = CudagraphDispatcher(config)
    d.initialize_cudagraph_keys(config.cudagraph_mode, 1)
    capture = d.get_capture_descs()
    assert [m for m, _ in capture] == expected_modes
    for _, descs in capture:
        assert descs, "each group has at least one descriptor"
        tokens = [x.num_tokens for x in descs]
        assert tokens == sorted(tokens, reverse=True)  # largest first
        assert len({x.uniform for x in descs}) == 1


def test_get_capture_descs_empty_when_not_initialized():
    config = _config("FULL", False, sizes=[1, 8], max_num_seqs=8, lora=False)
    assert CudagraphDispatcher(config).get_capture_descs() == []
