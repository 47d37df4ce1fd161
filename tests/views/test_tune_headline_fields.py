"""Notebook 04's headline reads its seven parameters into the TuneSettings fields a person
maps them to (``workload`` is the trace), on random parameters; a missing one is named."""

from __future__ import annotations

import numpy as np
import pytest

from cgdispatch.core.generation import GENERATIONS
from cgdispatch.plan.tune_run import TuneSettings
from cgdispatch.views.tune_headline import notebook_tune_settings
from cgdispatch.workload.trace_source import TRACE_NAMES


def _random_params(rng: np.random.Generator) -> dict:
    return {
        "model": str(rng.choice(["llama-3.1-8b", "qwen3-8b", "toy-tiny"])),
        "device": str(rng.choice(["H100", "H200", "L40S"])),
        "vllm_version": str(rng.choice([g.release for g in GENERATIONS.values()])),
        "workload": str(rng.choice(TRACE_NAMES)),
        "rate_per_s": int(rng.integers(1, 100)) if rng.random() < 0.5 else rng.uniform(0.1, 99),
        "seed": int(rng.integers(0, 10_000)),
        "holdout": float(rng.uniform(0.05, 0.95)),
        # the what-if's own parameters: not the headline's
        "max_num_seqs": int(rng.integers(1, 512)),
        "num_requests": int(rng.integers(1, 5000)),
    }


def test_headline_settings_from_random_parameters():
    seed = int(np.random.SeedSequence().entropy % 2**32)
    params = _random_params(np.random.default_rng(seed))
    expected = TuneSettings(
        model=params["model"],
        device=params["device"],
        vllm_version=params["vllm_version"],
        trace=params["workload"],
        rate_per_s=float(params["rate_per_s"]),
        seed=params["seed"],
        holdout=float(params["holdout"]),
    )
    got = notebook_tune_settings(params)
    assert got == expected, seed
    assert isinstance(got.rate_per_s, float) and got.max_num_seqs == TuneSettings().max_num_seqs


def test_a_missing_parameter_is_named():
    rng = np.random.default_rng()
    params = _random_params(rng)
    order = ["model", "device", "vllm_version", "workload", "rate_per_s", "seed", "holdout"]
    dropped = sorted(rng.choice(order, size=int(rng.integers(1, 4)), replace=False).tolist())
    with pytest.raises(ValueError) as err:
        notebook_tune_settings({k: v for k, v in params.items() if k not in dropped})
    assert str([n for n in order if n in dropped]) in str(err.value)
