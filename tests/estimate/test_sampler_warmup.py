"""The profile run's sampler warm-up and MoE buffers as each vLLM release has them (issue 35):
how top-k/top-p is applied (the sort before 0.17, FlashInfer where installed in 0.9-0.11,
Triton from 0.17) sets the warm-up's bytes per logit, and before 0.14 the MoE forward's
buffers are freed before it. Checked against the rules written out again from the vLLM
sources, against the tensors each path holds, and on fresh random runs of the estimate."""

from __future__ import annotations

import math
import random
import re

import numpy as np
import pandas as pd
import pytest
import torch

from cgdispatch.core.config import GraphConfig
from cgdispatch.core.release_table import release_defaults
from cgdispatch.estimate.devices import DEVICE_PRESETS
from cgdispatch.estimate.pool_factors import run_max_num_seqs
from cgdispatch.estimate.startup import (
    SAMPLER_PATHS,
    estimate_startup,
    sampler_peak_bytes,
)
from cgdispatch.estimate.startup_data import (
    FLASHINFER_SAMPLER_RUNS,
    reference_config,
    reference_startups,
    run_args,
)
from cgdispatch.estimate.startup_pricing import CALIBRATION, GIB
from cgdispatch.models.published import PUBLISHED_MODELS, published_model


def _random_release(rng: random.Random) -> str:
    parts = [0, rng.randint(8, 34)] + [rng.randint(0, 3) for _ in range(rng.randint(0, 2))]
    return ".".join(map(str, parts))


def _expected_path(parts: tuple[int, ...], rows: int, flashinfer: bool) -> str:
    """topk_topp_sampler.py per release, written out again."""
    if parts >= (0, 34):
        return "model runner v2"
    if parts >= (0, 17):  # apply_top_k_top_p: Triton from 8 rows
        return "triton" if rows >= 8 else "sort"
    if parts >= (0, 12):  # FlashInfer only with VLLM_USE_FLASHINFER_SAMPLER=1
        return "sort"
    if parts < (0, 9):  # 0.8: FlashInfer >= 0.2.3 disabled
        return "sort"
    return "flashinfer" if flashinfer else "sort"


def test_each_release_warms_the_sampler_up_as_its_source_does() -> None:
    rng = random.Random(35)
    for _ in range(400):
        release = _random_release(rng)
        parts = tuple(int(p) for p in release.split("."))
        rows, flashinfer = rng.choice([1, 4, 7, 8, 9, 64, 256, 1024]), rng.random() < 0.5
        d = release_defaults(release)
        assert d.sampler_path(rows, flashinfer_installed=flashinfer) == _expected_path(
            parts, rows, flashinfer
        ), (release, rows, flashinfer)
        assert d.moe_buffers_persist is (parts >= (0, 14)), release


# the tensors alive at each path's peak, beside the model-dtype logits (vLLM's sampler and
# topk_topp_sampler.py; torch's SortStable.cu and cub's buffers)
_FP32, _I64, _INT2 = torch.float32, torch.int64, 2 * torch.int32.itemsize
_ALIVE = {
    "triton": [_FP32, _FP32, _FP32],  # fp32 copy, its probs, random_sample's q
    "flashinfer": [_FP32, _FP32, _FP32],  # fp32 copy, masked logits, probs
    # fp32 copy, sorted values, their indices; segmented_sort_pairs' reverse indices, cub's
    # alternate keys and values
    "sort": [_FP32, _FP32, _I64, _I64, _FP32, _I64],
}
# 2-127 rows: segmented_sort_pairs_by_full_sort (fp32 copy, values, indices; two int2
# index-and-segment arrays, the keys cub writes, cub's alternate keys and int2 values)
_SORT_FEW_ROWS = [_FP32, _FP32, _I64, _INT2, _INT2, _FP32, _FP32, _INT2]
_DTYPES = {"bfloat16": torch.bfloat16, "float16": torch.float16, "float32": torch.float32}


def _size(item: object) -> int:
    return item if isinstance(item, int) else item.itemsize  # type: ignore[union-attr]


@pytest.mark.parametrize("path", sorted(_ALIVE))
def test_the_warm_up_bytes_are_the_tensors_its_path_holds(path: str) -> None:
    rng = random.Random(path)
    for name, dtype in _DTYPES.items():
        for rows in (1, rng.randint(2, 127), 128, rng.randint(129, 4096)):
            alive = _SORT_FEW_ROWS if path == "sort" and 1 < rows < 128 else _ALIVE[path]
            expected = dtype.itemsize + sum(_size(t) for t in alive)
            assert sampler_peak_bytes(path, name, rows) == expected, (name, rows)
    # the path the calibration's runs (vLLM 0.19, bf16) took: 14 bytes, which its fitted
    # logits coefficient (per fp32 logit, 4 bytes) matches within 2%
    assert sampler_peak_bytes("model runner v2", "float32", 3) == 14
    assert sampler_peak_bytes("triton", "bfloat16", 1024) == 14
    assert CALIBRATION.activation_per_logits * 4 == pytest.approx(14, rel=0.02)


@pytest.mark.parametrize(
    ("bad", "named"),
    [
        (("argsort", "bfloat16", 8), "'argsort'"),
        (("sort", "int8", 8), "'int8'"),
        ((None, "float16", 8), "None"),
        (("sort", "float16", 0), "rows=0"),
        (("triton", "float16", True), "rows=True"),
    ],
)
def test_unknown_paths_dtypes_and_rows_are_refused(bad: tuple, named: str) -> None:
    with pytest.raises(ValueError, match=re.escape(named)):
        sampler_peak_bytes(*bad)
    assert set(SAMPLER_PATHS) == {*_ALIVE, "model runner v2"}


def _dense_and_moe() -> tuple[list[str], list[str]]:
    dense, moe = [], []
    for name in sorted(PUBLISHED_MODELS):
        pm = published_model(name)
        if pm.weight_bytes(tensor_parallel_size=1, pipeline_parallel_size=1) < 20 * GIB:
            (moe if pm.is_moe else dense).append(name)
    return dense, moe


def _estimate(model: str, release: str, seqs: int, tokens: int, **kw: object):  # noqa: ANN202
    config = GraphConfig(vllm_version=release, max_num_seqs=seqs, max_num_batched_tokens=tokens)
    return estimate_startup(model, "H100", config, vllm_version=release, **kw)


def test_the_kv_budget_moves_by_the_warm_ups_bytes_between_releases() -> None:
    rng = np.random.default_rng(35)
    dense, moe = _dense_and_moe()
    c = CALIBRATION
    for _ in range(6):
        model = str(rng.choice(dense))
        seqs = int(rng.choice([8, 64, 128, 256, 512]))
        tokens = int(rng.choice([2048, 4096, 8192]))
        pm = published_model(model)
        dtype = pm.dtype if pm.dtype in _DTYPES else "bfloat16"
        logits = seqs * pm.padded_vocab(1) * 4 / GIB  # fp32 logits, GiB
        fitted = 2 + 12  # bf16 + Triton's three fp32 tensors
        few = seqs < 128  # segmented_sort_pairs_by_full_sort's buffers
        sort = _DTYPES[dtype].itemsize + (4 + 4 + 8 + 8 + 8 + 4 + 4 + 8 if few else 36)
        flashinfer = _DTYPES[dtype].itemsize + 12
        # 0.16 sorts, 0.17 runs Triton: only the warm-up differs (dense model)
        old, new = (
            _estimate(model, "0.16.0", seqs, tokens),
            _estimate(model, "0.17.0", seqs, tokens),
        )
        gap = c.activation_per_logits * logits * (sort - _DTYPES[dtype].itemsize - 12) / fitted
        assert (new.kv_cache_bytes - old.kv_cache_bytes) / GIB == pytest.approx(gap, rel=1e-9)
        # 0.10.1.1 with FlashInfer installed: its bytes, not the sort's
        fi = _estimate(model, "0.10.1.1", seqs, tokens, flashinfer_installed=True)
        plain = _estimate(model, "0.10.1.1", seqs, tokens)
        gap = c.activation_per_logits * logits * (sort - flashinfer) / fitted
        assert (fi.kv_cache_bytes - plain.kv_cache_bytes) / GIB == pytest.approx(gap, rel=1e-9)
    for _ in range(4):
        model = str(rng.choice(moe))
        seqs, tokens = int(rng.choice([8, 256, 1024])), 8192
        pm = published_model(model)
        logits = seqs * pm.padded_vocab(1) * 4 / GIB
        sort = 2 + (48 if 1 < seqs < 128 else 36)  # both releases sort
        warm_up = c.activation_per_logits * logits * sort / 14
        # 0.13 frees the MoE buffers before the warm-up, 0.14 holds them through it
        old, new = (
            _estimate(model, "0.13.0", seqs, tokens),
            _estimate(model, "0.14.0", seqs, tokens),
        )
        held = c.activation_moe_gib + warm_up - max(c.activation_moe_gib, warm_up)
        assert (old.kv_cache_bytes - new.kv_cache_bytes) / GIB == pytest.approx(held, rel=1e-9)
        assert (new.activation_bytes - old.activation_bytes) / GIB == pytest.approx(held)


def test_flashinfer_installed_must_be_a_bool() -> None:
    with pytest.raises(ValueError, match="flashinfer_installed='yes'"):
        _estimate("Qwen/Qwen3-8B", "0.10.0", 256, 2048, flashinfer_installed="yes")


def _own_and_fitted_path_errors() -> list[tuple[float, float]]:
    """|KV error| of every logged run before 0.17 on a GPU with a preset: with its own
    release's warm-up, and as if it warmed up as the fitted runs (Triton, 0.19)."""
    rows = reference_startups(split=None)
    rows = rows[rows["device"].isin(list(DEVICE_PRESETS))]
    out = []
    for _, row in rows.iterrows():
        parts = tuple(int(p) for p in str(row["vllm_version"]).split("."))
        if parts >= (0, 17) or row["run"] in FLASHINFER_SAMPLER_RUNS:
            continue
        row = row.copy()
        row["max_num_seqs"], _ = run_max_num_seqs(row)
        errors = []
        for release in (str(row["vllm_version"]), "0.19.0"):
            est = estimate_startup(
                row["model"],
                row["device"],
                reference_config(row),
                **{**run_args(row), "vllm_version": release},
            )
            errors.append(abs(est.kv_cache_tokens / float(row["kv_cache_tokens"]) - 1))
        out.append((errors[0], errors[1]))
    return out


def test_runs_before_0_17_log_the_kv_of_their_own_warm_up() -> None:
    errors = _own_and_fitted_path_errors()
    assert len(errors) >= 8
    own, fitted = np.median(errors, axis=0)
    assert own < fitted


def test_the_flashinfer_runs_are_logged_runs_of_releases_that_use_it() -> None:
    rows = reference_startups(covered_only=False, split=None)
    logged = rows[rows["run"].isin(FLASHINFER_SAMPLER_RUNS)]
    assert set(logged["run"]) == set(FLASHINFER_SAMPLER_RUNS)
    for release in logged["vllm_version"]:
        assert release_defaults(str(release)).topk_topp_sampler == "flashinfer or sort"
    assert not math.isnan(float(pd.to_numeric(logged["kv_cache_tokens"]).sum()))
