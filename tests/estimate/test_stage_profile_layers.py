"""The stage profile with each distinct layer kind profiled once (issue 38, item 7) is the
profile of the whole stage, exactly: every kernel name, flag and number, in order, and the
bytes the disk cache stores, on fresh random models, parallel layouts and dtypes."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

pytest.importorskip("torch")

from cgdispatch.estimate import startup_pricing  # noqa: E402
from cgdispatch.estimate.datafile import data_bytes  # noqa: E402
from cgdispatch.models.published import PUBLISHED_MODELS, PublishedModel  # noqa: E402

DTYPES = ("bfloat16", "float16", "float32")


def _layout(pm: PublishedModel, rng: np.random.Generator) -> tuple[int, int, int] | None:
    """A random (tp, pp, rank) the model accepts, or None when the draws found none."""
    for _ in range(20):
        tp, pp = int(rng.choice([1, 2, 4, 8])), int(rng.choice([1, 2, 3, 4]))
        try:
            pm.check_parallel(tp, pp)
        except ValueError:
            continue
        return tp, pp, int(rng.integers(pp))
    return None


def _assert_same(pm: PublishedModel, tp: int, pp: int, rank: int, dtype: str) -> None:
    fast = startup_pricing._build_stage_profile(pm, tp, pp, rank, dtype)
    full = startup_pricing._full_stage_profile(pm, tp, pp, rank, dtype)
    case = (pm.model, tp, pp, rank, dtype)
    assert fast.names == full.names, case
    for field in dataclasses.fields(full):
        a, b = getattr(fast, field.name), getattr(full, field.name)
        if isinstance(b, np.ndarray):
            assert a.dtype == b.dtype and a.shape == b.shape, (case, field.name)
            assert a.tobytes() == b.tobytes(), (case, field.name)  # bit for bit
    # what the disk cache stores is the same, so its key needs no new version
    assert data_bytes(fast, kind="LinearProfile") == data_bytes(full, kind="LinearProfile")


def _draw(pool: list[PublishedModel], rng: np.random.Generator, count: int) -> None:
    done = 0
    for i in rng.permutation(len(pool)):
        if done == count:
            break
        pm = pool[int(i)]
        layout = _layout(pm, rng)
        if layout is not None:
            _assert_same(pm, *layout, str(rng.choice(DTYPES)))
            done += 1
    assert done == count, f"only {done} of {count} models had a layout"


def test_registry_models_profile_as_their_full_stage() -> None:
    rng = np.random.default_rng()
    models = list(PUBLISHED_MODELS.values())
    _draw([m for m in models if not m.is_moe and not m.is_mla], rng, 3)
    _draw([m for m in models if m.is_moe], rng, 2)
    _draw([m for m in models if m.is_mla], rng, 1)


def test_mixed_dense_and_expert_layers_across_stage_boundaries() -> None:
    """Leading dense layers anywhere (inside a stage, on its boundary, past it): each stage
    holds dense layers, routed ones or both, in the full stage's order."""
    rng = np.random.default_rng()
    moe = [m for m in PUBLISHED_MODELS.values() if m.is_moe]
    for _ in range(3):
        pm = moe[int(rng.integers(len(moe)))]
        pm = dataclasses.replace(pm, layers=int(rng.integers(4, 9)))
        pm = dataclasses.replace(pm, dense_layers=int(rng.integers(0, pm.layers + 1)))
        layout = _layout(pm, rng)
        assert layout is not None, pm.model
        _assert_same(pm, *layout, str(rng.choice(DTYPES)))


def test_a_model_read_off_transformers_meta_build() -> None:
    pytest.importorskip("transformers", reason="the hf extra is absent")
    from cgdispatch.models.published import published_model

    rng = np.random.default_rng()
    heads = int(rng.choice([4, 8]))
    experts = int(rng.integers(2, 9))
    for model_type in ("mpt", "olmoe"):
        cfg = {
            "model_type": model_type,
            "hidden_size": heads * int(rng.choice([16, 32])),
            "num_attention_heads": heads,
            "num_key_value_heads": heads,
            "num_hidden_layers": int(rng.integers(2, 6)),
            "intermediate_size": 64 * int(rng.integers(1, 6)),
            "vocab_size": 64 * int(rng.integers(2, 20)),
            "max_position_embeddings": 256,
            "torch_dtype": "bfloat16",
        }
        if model_type == "olmoe":
            cfg.update(num_experts=experts, num_experts_per_tok=2)
        pm = published_model(cfg)
        assert pm.family == model_type and pm.is_moe == (model_type == "olmoe")
        layout = _layout(pm, rng)
        assert layout is not None, cfg
        _assert_same(pm, *layout, str(rng.choice(DTYPES)))


def test_device_cost_model_profiles_of_presets_and_published_configs() -> None:
    """device_cost_model's kernel profile of an architecture preset or a published config
    (built with every layer) is the spliced one, at a random context length."""
    from cgdispatch.estimate.device_model import _build, _net_profile
    from cgdispatch.estimate.kernels import linear_profile
    from cgdispatch.models.arch_spec import ARCHITECTURES

    rng = np.random.default_rng()
    published = [m for m in PUBLISHED_MODELS.values() if m.is_moe or m.is_mla]
    for model in (
        str(rng.choice(sorted(ARCHITECTURES))),
        published[int(rng.integers(len(published)))],
    ):
        net = _build(model, None)
        context_len = int(rng.integers(1, 4096))
        fast = _net_profile(net, context_len)
        full = linear_profile(net, context_len=context_len)
        assert fast.names == full.names, model
        for field in dataclasses.fields(full):
            a, b = getattr(fast, field.name), getattr(full, field.name)
            if isinstance(b, np.ndarray):
                assert a.dtype == b.dtype and a.tobytes() == b.tobytes(), (model, field.name)
