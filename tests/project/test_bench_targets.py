"""``make bench`` stops on a missed target (issue 37): each benchmark that prints a verdict
exits non-zero when it is a miss, and the collector names what was missed."""

from __future__ import annotations

import random
import re
from pathlib import Path

import pytest

from tests.load_script import load_script

BENCH = Path(__file__).resolve().parents[2] / "benchmarks"
VERDICT = re.compile(r"FAIL|MISSED|NOT met|targets not met|\"missed\"")


def load_targets():
    return load_script(BENCH / "targets.py").Targets


def test_the_collector_exits_1_naming_every_missed_target(capsys) -> None:
    targets = load_targets()()
    rng = random.Random()
    outcomes = {f"target {i}": rng.random() < 0.5 for i in range(rng.randint(1, 12))}
    for name, met in outcomes.items():
        assert targets.check(name, met) is met
    missed = [name for name, met in outcomes.items() if not met]
    assert targets.exit_code() == (1 if missed else 0)
    err = capsys.readouterr().err
    assert all(name in err for name in missed) and (missed or err == "")


@pytest.mark.parametrize("path", sorted(BENCH.glob("bench_*.py")), ids=lambda p: p.name)
def test_a_benchmark_that_prints_a_verdict_exits_with_it(path: Path) -> None:
    source = path.read_text()
    if not VERDICT.search(source):
        return  # no target: nothing to miss
    assert re.search(r"raise SystemExit\(main\(\)\)|sys\.exit\(main\(\)\)|exit_code\(\)", source)
    assert "return 0\n" not in source.split("def main", 1)[-1]  # not a fixed success


@pytest.mark.parametrize(
    "fixture",
    sorted((BENCH.parent / "tests" / "data" / "vllm_oracle").glob("*.json")),
    ids=lambda p: p.name,
)
def test_the_oracle_fixtures_hold_no_run_time(fixture: Path) -> None:
    """``make oracle`` leaves the checkout clean: nothing in a fixture differs run to run."""
    import json

    doc = json.loads(fixture.read_text())
    assert not {"seconds", "wall_s", "elapsed_s"} & set(doc)
    for script in ("vllm_oracle.py", "vllm_sched_oracle.py"):
        source = (BENCH.parent / "scripts" / script).read_text()
        assert '"seconds":' not in source
