"""The release table: any vLLM release from 0.8 on maps to its generation and defaults,
checked against every reference run's logged start-up and against independent rules."""

from __future__ import annotations

import random
import re

import pandas as pd
import pytest

from cgdispatch.core.config import GraphConfig
from cgdispatch.core.generation import check_version, generation_for
from cgdispatch.core.ladders import vllm_ladder
from cgdispatch.core.release_table import (
    RELEASE_RULES,
    parse_release,
    release_defaults,
    release_rules,
)
from cgdispatch.estimate.devices import DEVICE_PRESETS, device_spec
from cgdispatch.estimate.startup_data import reference_startups

GIB = 1024**3


def _random_release(rng: random.Random) -> str:
    parts = [0, rng.randint(8, 34)]
    parts += [rng.randint(0, 3) for _ in range(rng.choice([0, 1, 2]))]
    return ".".join(map(str, parts))


def _row_memory(row: pd.Series) -> float:
    if not pd.isna(row["total_memory_gib"]):
        return float(row["total_memory_gib"]) * GIB
    return device_spec(row["device"]).memory_bytes if row["device"] in DEVICE_PRESETS else 0.0


def test_every_reference_run_starts_with_its_release_defaults() -> None:
    runs = reference_startups(covered_only=False, split=None)
    assert set(runs["split"]) == {"fit", "held_out", "device_fit"}
    for _, row in runs.iterrows():
        d = release_defaults(str(row["vllm_version"]))
        seqs, tokens = d.batch_limits(f"{row['device_name']} {row['device']}", _row_memory(row))
        assert int(row["max_num_batched_tokens"]) == tokens, row["run"]  # none was set
        if not pd.isna(row["max_num_seqs"]):  # logged (often set): the ladder follows it
            seqs = int(row["max_num_seqs"])
        model_type = "gpt_oss" if "gpt-oss" in row["model"].lower() else None
        sizes = d.capture_sizes(seqs, tokens, model_type=model_type)
        logged = [int(s) for s in str(row["cudagraph_capture_sizes"]).split()]
        assert sizes == logged, row["run"]
        assert d.cudagraph_mode == row["cudagraph_mode"], row["run"]
        # the run's generation: reference_config builds it under the release's own
        assert generation_for(str(row["vllm_version"])).release == d.generation


def test_any_release_maps_to_its_generation() -> None:
    rng = random.Random(35)
    for _ in range(300):
        release = _random_release(rng)
        parts = tuple(int(p) for p in release.split("."))
        expected = "0.34" if parts >= (0, 34) else "0.33"
        assert check_version(release) == expected
        assert GraphConfig(vllm_version=release).vllm_version == expected
        d = release_defaults(release)
        assert d.generation == expected and d.parts == parts
        assert d.subtracts_graph_estimate == (parts >= (0, 20))
        assert d.estimates_graph_memory == (parts >= (0, 18))
        assert d.async_scheduling == (parts >= (0, 14))
        assert d.cudagraph_mode == ("FULL_AND_PIECEWISE" if parts >= (0, 11) else "PIECEWISE")


@pytest.mark.parametrize(
    "bad", ["0.7.3", "abc", "1", "0.10.x", "", "0.8-rc1", "v0.10.1", "0.35", 0.1, 7, None]
)
def test_bad_release_strings_are_refused(bad: object) -> None:
    if bad is None:
        assert check_version(None) is None  # None: the newest generation
        return
    with pytest.raises(ValueError, match=re.escape(repr(bad))) as info:
        parse_release(bad)
    assert any(rule in str(info.value) for rule in ("0.8", "0.34", "dotted numbers"))
    with pytest.raises(ValueError):
        check_version(bad)


def _independent_ladder(parts: tuple[int, ...], seqs: int, tokens: int) -> list[int]:
    """The ladders as the vLLM sources read them, written out again."""
    if parts < (0, 10):
        top = 512
    else:
        top = min(2 * seqs, 512)
    if parts < (0, 11, 1):  # [1, 2, 4] whatever the max (vLLM 0.10.2 logs [4, 2, 1] at 1)
        candidates = [1, 2, 4] + [8 * i for i in range(1, 65) if 8 * i <= top]
        return [s for s in candidates if s <= tokens]
    top = min(top, tokens)
    candidates = [1, 2, 4] + [8 * i for i in range(1, 32)] + [256 + 16 * i for i in range(17)]
    sizes = [s for s in candidates if s <= top]
    if parts >= (0, 21) and tokens <= top:
        sizes = sorted(set(sizes) | {tokens})
    return sizes


def test_default_ladders_follow_each_release_rule() -> None:
    rng = random.Random(7)
    for _ in range(400):
        release = _random_release(rng)
        parts = tuple(int(p) for p in release.split("."))
        seqs = rng.choice([1, 2, 3, 5, 16, 64, 100, 128, 256, 300, 1024])
        tokens = rng.choice([seqs, seqs + rng.randint(0, 4000), 2048, 8192])
        sizes = release_defaults(release).capture_sizes(seqs, tokens)
        if parts >= (0, 31):
            assert sizes == vllm_ladder(max_num_seqs=seqs, max_num_batched_tokens=tokens)
        else:
            assert sizes == _independent_ladder(parts, seqs, tokens), (release, seqs, tokens)


def test_batch_limits_by_gpu() -> None:
    rng = random.Random(3)
    for _ in range(200):
        release = _random_release(rng)
        parts = tuple(int(p) for p in release.split("."))
        memory = rng.uniform(10, 200) * GIB
        name = rng.choice(["nvidia h100 80gb hbm3", "nvidia a100-sxm4-80gb", "nvidia l40s"])
        seqs, tokens = release_defaults(release).batch_limits(name, memory)
        big = memory >= 70 * GIB and "a100" not in name
        if parts >= (0, 28) and memory >= 160 * GIB:
            assert (seqs, tokens) == (1024, 16384)
        elif parts >= (0, 9):
            assert (seqs, tokens) == ((1024, 8192) if big else (256, 2048))
        elif parts < (0, 8, 4):
            assert seqs == 1024


def test_every_rule_names_its_vllm_file_and_release() -> None:
    for rule in RELEASE_RULES:
        assert re.search(r"vllm/[\w/]+\.py", rule.source), rule
        assert re.search(r"\(\d+\.\d+\.\d+", rule.source), rule
    rules = release_rules("0.21.0")
    assert rules["subtracts_graph_estimate"].first == (0, 20)


def test_each_generation_agrees_with_the_table_on_its_own_release() -> None:
    from cgdispatch.core.generation import GENERATIONS

    for release, generation in GENERATIONS.items():
        d = release_defaults(release)
        assert d.generation == release
        assert generation.runner.profiles_graph_memory == d.subtracts_graph_estimate
