"""Types at the API edge (issue 21): booleans must be booleans, integers may be Python's or
numpy's (and the facade and the raw dispatchers agree on them), wrong types in vLLM JSON
are a ValueError naming the field, and nesting is limited instead of a RecursionError.

Mistakes this catches: ``dispatch(4, uniform_decode="no")`` answering FULL with
uniform=True; ``dispatch_step(num_tokens=np.int64(5))`` refused while the raw dispatcher
took it; ``from_vllm`` with a scalar where a list belongs raising TypeError; deeply nested
JSON raising RecursionError.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import random
import warnings

import numpy as np
import pytest

from cgdispatch import (
    CudagraphDispatcher,
    CudaGraphManager,
    GraphConfig,
    SchedulerLimits,
    dispatch_step,
    make_graph_dispatcher,
    ready_dispatcher,
)
from cgdispatch.core.v2 import config as config_v2
from cgdispatch.core.validate import MAX_NESTING, check_int
from cgdispatch.core.vllm_io import COMPILATION_KEYS as _COMPILATION_KEYS

NOT_BOOLS = ["no", "yes", 1, 0, None, "False", 1.0]


@pytest.mark.parametrize("value", NOT_BOOLS)
def test_a_non_bool_flag_is_refused_by_the_facade_and_both_raw_dispatchers(value) -> None:
    v1 = make_graph_dispatcher(GraphConfig(vllm_version="0.33"))
    v2 = make_graph_dispatcher(GraphConfig(vllm_version="0.34"))
    for d in (v1, v2):
        with pytest.raises(ValueError, match="uniform_decode"):
            dispatch_step(d, 4, uniform_decode=value)
    with pytest.raises(ValueError, match="use_cascade_attn"):
        dispatch_step(v1, 4, use_cascade_attn=value)
    with pytest.raises(ValueError, match="uniform_decode"):
        v1.dispatch(4, uniform_decode=value)
    with pytest.raises(ValueError, match="has_lora"):
        v1.dispatch(4, has_lora=value)
    for flag in ("cudagraph_specialize_lora", "specialize_active_lora", "sequence_parallel"):
        with pytest.raises(ValueError, match=flag):
            GraphConfig(**{flag: value})
    for flag in ("enable_dbo", "enable_adaptive_verification"):
        with pytest.raises(ValueError, match=flag):
            GraphConfig(vllm_version="0.34", **{flag: value})
    if value is not None:  # None means "the release's default" here
        with pytest.raises(ValueError, match="async_scheduling"):
            SchedulerLimits(async_scheduling=value, vllm_version="0.34")
    with pytest.raises(ValueError, match="enable_chunked_prefill"):
        SchedulerLimits(enable_chunked_prefill=value)


def test_numpy_bools_are_bools() -> None:
    d = ready_dispatcher(GraphConfig(vllm_version="0.33"))
    assert d.dispatch(4, uniform_decode=np.bool_(True)) == d.dispatch(4, uniform_decode=True)
    assert dispatch_step(d, 4, uniform_decode=np.bool_(False)) == dispatch_step(d, 4)


@pytest.mark.parametrize("version", ["0.33", "0.34"])
@pytest.mark.parametrize("seed", range(3))
def test_numpy_integers_answer_as_python_ints_everywhere(version: str, seed: int) -> None:
    rng = random.Random(seed)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        config = GraphConfig(
            vllm_version=version,
            max_num_seqs=np.int64(rng.randint(8, 64)),
            max_num_batched_tokens=np.int32(1024),
            num_speculative_tokens=np.int16(rng.randint(0, 2)),
            max_loras=np.int64(rng.choice([0, 2])),
        )
    assert type(config.max_num_seqs) is int and type(config.max_num_batched_tokens) is int
    d = make_graph_dispatcher(config.resolve())
    for _ in range(200):
        n = rng.randint(0, 1100)
        uniform = rng.random() < 0.5
        loras = rng.choice([0, config.max_loras])
        plain = dispatch_step(d, n, None, uniform, loras)
        for kind in (np.int64, np.int32, np.uint16):
            numpy = dispatch_step(d, kind(n), None, uniform, kind(loras))
            assert numpy == plain and type(numpy.padded_tokens) is int
        if isinstance(d, CudagraphDispatcher):  # the raw V1 dispatcher agrees with the facade
            raw = d.dispatch(np.int64(n), uniform, loras > 0, np.int64(loras))
            assert (raw.runtime_mode, raw.batch_descriptor.num_tokens) == (
                plain.runtime_mode,
                plain.padded_tokens,
            )
        else:
            assert isinstance(d, CudaGraphManager)
            reqs = max(1, n // config.uniform_decode_query_len) if n else 0
            raw = d.dispatch(np.int64(reqs), np.int64(n), None, np.int64(loras))
            assert raw == d.dispatch(reqs, n, None, loras)
            assert type(raw.num_tokens) is int


@pytest.mark.parametrize("bad", [8, "x", 1.5, True, {"a": 1}, [1, "a"], [[1]], -3, [2**40]])
def test_wrong_types_in_vllm_json_name_the_field(bad) -> None:
    keys = [*_COMPILATION_KEYS, *config_v2.GEN2_COMPILATION_KEYS]
    for key in keys:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            try:
                GraphConfig.from_vllm(json.dumps({key: bad}))
            except ValueError as err:
                assert key in str(err) or "compile size" in str(err) or "mode" in str(err), (
                    key,
                    err,
                )
            # accepted values are fine (e.g. an int for a max); any other exception fails


def test_wrong_types_in_graph_config_fields_are_value_errors() -> None:
    fields = [f.name for f in dataclasses.fields(GraphConfig) if not f.name.startswith("_")]
    for name in fields:
        for bad in (8, "x", 1.5, True, {"a": 1}, [1, "a"], [[1]], -3, (1, 2)):
            for version in ("0.33", "0.34"):
                kwargs = (
                    {name: bad} if name == "vllm_version" else {name: bad, "vllm_version": version}
                )
                with warnings.catch_warnings():
                    warnings.simplefilter("ignore")
                    with contextlib.suppress(ValueError):
                        GraphConfig(**kwargs)


def _nested(depth: int) -> dict:
    out: dict = {}
    for _ in range(depth - 1):
        out = {"a": out}
    return out


def test_nesting_is_limited_with_a_value_error() -> None:
    GraphConfig.from_vllm({"pass_config": _nested(MAX_NESTING - 1)})  # within the limit
    with pytest.raises(ValueError, match="nests deeper"):
        GraphConfig.from_vllm({"pass_config": _nested(MAX_NESTING + 1)})
    hostile = "[" * 100_000 + "]" * 100_000  # RecursionError inside json without the guard
    with pytest.raises(ValueError, match="nests deeper"):
        GraphConfig.from_vllm('{"pass_config": ' + hostile + "}")


def test_check_int_takes_numpy_and_refuses_bools_and_floats() -> None:
    assert check_int("n", np.int64(3), 0) == 3 and type(check_int("n", np.uint8(3), 0)) is int
    for bad in (True, np.bool_(True), 3.0, np.float64(3), "3", None):
        with pytest.raises(ValueError, match="n="):
            check_int("n", bad, 0)
