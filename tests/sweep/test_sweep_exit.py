"""``cgdispatch sweep`` exits 1 when it measured nothing, or (``--strict``) missed a point."""

from __future__ import annotations

import pandas as pd
import pytest

from cgdispatch.__main__ import main
from cgdispatch.models import registry

SPEC = (
    "name: exit\nmodes: [FULL]\nladders: {few: [1, 2]}\nmax_capture_size: 2\n"
    "num_tokens: [1, 2]\nbatch_kinds: [mixed]\n"
)


def _argv(tmp_path, *extra: str) -> list[str]:
    (tmp_path / "s.yaml").write_text(SPEC)
    out = tmp_path / "out"
    return ["sweep", "--spec", str(tmp_path / "s.yaml"), "--out", str(out), "--repeats", "1",
            "--no-progress", *extra]  # fmt: skip


def test_every_point_failed_exits_1_with_the_error(tmp_path, monkeypatch, capsys):
    def broken(*args, **kwargs):
        raise RuntimeError("no such device: cuda:7")

    monkeypatch.setattr(registry, "build_model", broken)
    assert main(_argv(tmp_path)) == 1
    assert "no such device: cuda:7" in capsys.readouterr().err
    rows = pd.read_csv(tmp_path / "out" / "results.csv")
    assert len(rows) == 2 and (rows["status"] == "failed").all()


def test_one_failed_point_exits_1_only_with_strict(tmp_path, monkeypatch):
    from cgdispatch.sweep import run

    real = run._unit_rows

    def one_fails(spec, mode, ladder, shapes):
        for row in real(spec, mode, ladder, shapes):
            if getattr(row, "num_tokens", None) == 2 and hasattr(row, "status"):
                row.status, row.error = "failed", "broken on purpose"
            yield row

    monkeypatch.setattr(run, "_unit_rows", one_fails)
    assert main(_argv(tmp_path)) == 0  # some points measured: the default passes
    rows = pd.read_csv(tmp_path / "out" / "results.csv")
    assert sorted(rows["status"]) == ["failed", "ok"]
    assert main(_argv(tmp_path, "--resume", "--strict")) == 1


@pytest.mark.parametrize("extra", [(), ("--strict",)])
def test_a_clean_sweep_exits_0(tmp_path, extra):
    assert main(_argv(tmp_path, *extra)) == 0
