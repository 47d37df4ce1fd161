"""One default vLLM release everywhere (issue 30): the newest registered one, NEWEST.

A config, a sweep, the CLIs and every notebook that leave the release unsaid model the same
release; only stored sweep rows that predate the version column read as the oldest (V1).
"""

import ast
import dataclasses
import json
from pathlib import Path

import pytest

from cgdispatch import GraphConfig
from cgdispatch.__main__ import build_parser
from cgdispatch.core.generation import (
    GENERATIONS,
    NEWEST,
    default_release,
    generation_for,
    register_generation,
    unregister_generation,
)
from cgdispatch.plan.tune_run import TuneSettings
from cgdispatch.sweep.rows import LEGACY_VERSION
from cgdispatch.sweep.spec import SWEEP_PRESETS, SweepSpec
from cgdispatch.views.notebook_params import NOTEBOOK_PARAMETERS

ROOT = Path(__file__).resolve().parents[2]
NOTEBOOKS = sorted((ROOT / "notebooks").glob("*.ipynb"))


def test_the_default_is_the_newest_registered_release():
    assert NEWEST.release == list(GENERATIONS)[-1]
    assert generation_for(None) is NEWEST


def test_a_config_that_names_no_release_is_the_newest():
    assert GraphConfig().vllm_version == NEWEST.release
    assert GraphConfig(vllm_version=None).generation is NEWEST
    assert GraphConfig().replace(max_num_seqs=8).vllm_version == NEWEST.release


def test_sweeps_default_to_the_newest_and_old_rows_read_as_v1():
    assert SweepSpec().vllm_version == NEWEST.release
    assert {spec.vllm_version for spec in SWEEP_PRESETS.values()} == {NEWEST.release}
    # the sweep CLI follows the spec unless --vllm-version is given
    args = build_parser().parse_args(["sweep", "--preset", "smoke", "--out", "x"])
    assert args.vllm_version is None
    assert LEGACY_VERSION == "0.33" != NEWEST.release  # V1's release, by name
    assert SweepSpec(vllm_version=None).vllm_version == NEWEST.release  # one meaning of None


def test_defaults_are_read_when_used_not_frozen_at_import():
    """A release registered after import becomes every tool's default (default_release)."""
    newer = dataclasses.replace(GENERATIONS["0.34"], release="0.98", name="a later release")
    register_generation(newer)
    try:
        assert default_release() == "0.98" and generation_for(None) is newer
        assert GraphConfig().vllm_version == "0.98"
        assert SweepSpec().vllm_version == "0.98" == SweepSpec(vllm_version=None).vllm_version
        assert TuneSettings().vllm_version == "0.98"
        for argv in (
            ["tune"],
            ["dispatch", "4"],
            ["plan", "--trace", "sharegpt", "--max-graphs", "4"],
        ):
            assert build_parser().parse_args(argv).vllm_version == "0.98", argv
        assert LEGACY_VERSION == "0.33"  # old rows keep naming their own release
    finally:
        unregister_generation("0.98")
    assert default_release() == NEWEST.release


@pytest.mark.parametrize(
    "argv",
    [
        ["tune"],
        ["demo"],
        ["dispatch", "4"],
        ["plan", "--trace", "sharegpt", "--max-graphs", "4"],
    ],
)
def test_commands_default_to_the_newest(argv):
    assert build_parser().parse_args(argv).vllm_version == NEWEST.release


def _parameters(notebook: Path) -> dict:
    cells = json.loads(notebook.read_text())["cells"]
    cell = next(c for c in cells if "parameters" in c.get("metadata", {}).get("tags", []))
    values: dict = {}
    exec(compile(ast.parse("".join(cell["source"])), str(notebook), "exec"), {}, values)
    return values


def test_every_notebook_that_takes_a_release_defaults_to_the_newest():
    taking = {stem for stem, rules in NOTEBOOK_PARAMETERS.items() if "vllm_version" in rules}
    found = {}
    for notebook in NOTEBOOKS:
        values = _parameters(notebook) if notebook.stem in NOTEBOOK_PARAMETERS else {}
        if "vllm_version" in values:
            found[notebook.stem] = values["vllm_version"]
    assert set(found) == taking and taking
    assert set(found.values()) == {NEWEST.release}, found
