"""A store never loses or hides a row, and every store failure is one line (issue 21): an
interrupted migration, an export given as --out, a second database, a store of a newer
cgdispatch, damaged, full, locked, read-only or vanished stores, and Ctrl-C."""

from __future__ import annotations

import random
import sqlite3
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest

from cgdispatch.__main__ import main
from cgdispatch.sweep import database
from cgdispatch.sweep.failures import StoreError
from cgdispatch.sweep.store import ResultStore, load_results

ROWS = 40


def _rows(seed: int, count: int = ROWS) -> list[dict]:
    rng = random.Random(seed)
    return [
        {
            "sweep": "old", "model": "toy-tiny", "dtype": "float32", "device": "cpu",
            "mode": rng.choice(["FULL", "PIECEWISE"]), "ladder": "l", "capture_sizes": "1,8",
            "max_num_seqs": 16, "repeats": 3, "warmup": 1, "input_sets": 2, "cpu_threads": 1,
            "num_tokens": n, "uniform_decode": bool(n % 2), "status": "ok",
            "eager_ms": rng.uniform(1, 9),
        }
        for n in range(1, count + 1)
    ]  # fmt: skip


def _legacy_store(folder: Path, seed: int) -> pd.DataFrame:
    """What an older cgdispatch left: results.csv and no database."""
    folder.mkdir()
    frame = pd.DataFrame(_rows(seed))
    frame.to_csv(folder / "results.csv", index=False)
    return frame


def _same_rows(found: pd.DataFrame, want: pd.DataFrame) -> None:
    found = found.sort_values("num_tokens").reset_index(drop=True)
    assert found["num_tokens"].tolist() == want["num_tokens"].tolist()
    assert found["eager_ms"].tolist() == pytest.approx(want["eager_ms"].tolist())
    assert found["mode"].tolist() == want["mode"].tolist()


# where a migration is killed: (module attribute to replace, condition on its arguments)
KILL_POINTS = {
    "copying the old export": ("cgdispatch.sweep.store.shutil.copyfile", "True"),
    "filling the new database": ("cgdispatch.sweep.store.insert", "True"),
    "linking it into place": ("cgdispatch.sweep.database.os.link", "True"),
    "writing the new exports": ("cgdispatch.sweep.store.write_export", "True"),
    "removing the kept copy": ("pathlib.Path.unlink", "str(a[0]).endswith('.pre-sqlite')"),
}

_KILLER = """
import importlib, os, signal, sys
from pathlib import Path
target, condition, folder = sys.argv[1:]
module_name, attr = target.rsplit('.', 1)
try:
    owner = importlib.import_module(module_name)
except ModuleNotFoundError:  # a class attribute, e.g. pathlib.Path.unlink
    mod, cls = module_name.rsplit('.', 1)
    owner = getattr(importlib.import_module(mod), cls)
real = getattr(owner, attr)
def killer(*a, **k):
    if eval(condition):
        os.kill(os.getpid(), signal.SIGKILL)
    return real(*a, **k)
setattr(owner, attr, killer)
from cgdispatch.sweep.store import ResultStore
ResultStore(folder)
"""


@pytest.mark.parametrize("point", list(KILL_POINTS))
def test_a_migration_killed_at_any_point_loses_no_row(tmp_path: Path, point: str) -> None:
    folder = tmp_path / "store"
    old = _legacy_store(folder, seed=len(point))
    target, condition = KILL_POINTS[point]
    done = subprocess.run(
        [sys.executable, "-c", _KILLER, target, condition, str(folder)],
        capture_output=True, text=True, timeout=600,
    )  # fmt: skip
    assert done.returncode == -9, done.stderr  # it was killed where the test said
    assert pd.read_csv(folder / "results.csv").shape[0] == ROWS  # the old export is whole
    store = ResultStore(folder)  # the next open migrates again or goes on
    _same_rows(store.load(), old)
    _same_rows(load_results(folder), old)
    assert sorted(p.name for p in folder.glob("*.sqlite")) == ["store.sqlite"]
    assert not (folder / "results.csv.pre-sqlite").exists()  # kept only until verified
    assert not list(folder.glob(".*.tmp"))


def test_a_half_made_store_of_an_older_cgdispatch_is_rebuilt_not_trusted(tmp_path: Path) -> None:
    folder = tmp_path / "store"
    old = _legacy_store(folder, seed=3)
    # an older cgdispatch killed while migrating: an empty, unmarked database linked in
    with sqlite3.connect(folder / "store.sqlite") as con:
        database.create(con)
        con.execute("UPDATE meta SET value = '1' WHERE key = 'version'")
    store = ResultStore(folder)
    _same_rows(store.load(), old)
    store.append(_rows(seed=3, count=2))  # a new write keeps every row in the export
    assert len(pd.read_csv(folder / "results.csv")) == ROWS


def test_out_at_a_stores_own_export_means_that_store(tmp_path: Path) -> None:
    store = ResultStore(tmp_path)
    store.append(_rows(seed=1))
    again = ResultStore(tmp_path / "results.csv")
    assert again.db_path == tmp_path / "store.sqlite"
    again.append(_rows(seed=2, count=ROWS + 5)[ROWS:])
    assert len(load_results(tmp_path)) == ROWS + 5  # nothing hidden in a second database
    assert [p.name for p in tmp_path.glob("*.sqlite")] == ["store.sqlite"]
    with pytest.raises(ValueError, match=f"give --out {tmp_path}"):
        ResultStore(tmp_path / "captures.csv")


def test_a_second_database_in_a_store_folder_is_refused(tmp_path: Path) -> None:
    ResultStore(tmp_path / "a.csv").append(_rows(seed=4, count=3))
    with pytest.raises(ValueError, match="a folder holds one store") as err:
        ResultStore(tmp_path / "b.csv")
    assert "a.sqlite" in str(err.value) and str(tmp_path) in str(err.value)
    assert not (tmp_path / "b.sqlite").exists()


def test_a_store_of_a_newer_cgdispatch_is_refused_for_writing_and_read_with_a_warning(
    tmp_path: Path,
) -> None:
    ResultStore(tmp_path).append(_rows(seed=5, count=4))
    newer = database.SCHEMA_VERSION + 7
    with sqlite3.connect(tmp_path / "store.sqlite") as con:
        con.execute("UPDATE meta SET value = ? WHERE key = 'version'", (str(newer),))
    with pytest.raises(StoreError, match=f"version {newer}.*up to {database.SCHEMA_VERSION}"):
        ResultStore(tmp_path)
    with pytest.warns(UserWarning, match=f"version {newer}"):
        assert len(load_results(tmp_path)) == 4


def _damage(db: Path) -> None:
    """Keep SQLite's header (so the file still says it is ours), garble the rest."""
    data = bytearray(db.read_bytes())
    rng = random.Random(11)
    for i in range(100, len(data)):
        data[i] = rng.randrange(256)
    db.write_bytes(bytes(data))
    for extra in db.parent.glob(f"{db.name}-*"):
        extra.unlink()


def test_a_damaged_store_is_read_from_its_export_and_writing_says_how_to_rebuild(
    tmp_path: Path, capsys
) -> None:
    ResultStore(tmp_path).append(_rows(seed=6, count=5))
    _damage(tmp_path / "store.sqlite")
    with pytest.warns(UserWarning, match="damaged"):
        assert len(load_results(tmp_path)) == 5
    assert main(["sweep", "--out", str(tmp_path), "--no-progress"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "damaged" in err and "move" in err and "5 rows" in err
    # the fix the message gives works: the export becomes a new store, nothing lost
    (tmp_path / "store.sqlite").rename(tmp_path.parent / "damaged.sqlite")
    assert len(ResultStore(tmp_path).load()) == 5


@pytest.mark.parametrize(
    "message, says",
    [("database or disk is full", "is full"), ("database is locked", "locked"),
     ("attempt to write a readonly database", "cannot be written by you"),
     ("disk I/O error", "failed while writing")],
)  # fmt: skip
def test_a_failing_write_is_one_line_with_its_real_cause(
    tmp_path: Path, capsys, monkeypatch, message: str, says: str
) -> None:
    import cgdispatch.sweep.store as store_module

    real = store_module.insert

    def fail(con, *args, **kwargs):
        real(con, *args, **kwargs)
        con.execute("ROLLBACK")  # SQLite rolls back by itself on such errors
        raise sqlite3.OperationalError(message)

    monkeypatch.setattr(store_module, "insert", fail)
    assert main(["sweep", "--out", str(tmp_path / "o"), "--no-progress"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and says in err and message in err, err
    assert "no transaction" not in err  # the failed rollback does not hide the cause


def test_a_store_folder_deleted_mid_sweep_is_one_line(tmp_path: Path) -> None:
    import shutil

    store = ResultStore(tmp_path / "o")
    store.append(_rows(seed=7, count=2))
    shutil.rmtree(tmp_path / "o")
    with pytest.raises(StoreError, match="is gone"):
        store.append(_rows(seed=8, count=3))


def test_ctrl_c_ends_with_one_line_naming_what_was_saved_and_the_resume_command(
    tmp_path: Path, capsys, monkeypatch
) -> None:
    import cgdispatch.sweep.run as run_module

    def interrupted(spec, store, **kwargs):
        store.append(_rows(seed=9, count=3))
        raise KeyboardInterrupt

    monkeypatch.setattr(run_module, "run_sweep", interrupted)
    out = tmp_path / "o"
    assert main(["sweep", "--out", str(out), "--repeats", "2", "--no-progress"]) == 130
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("interrupted: 3 points")
    assert f"--out {out} --repeats 2 --resume" in err


def test_resuming_a_finished_sweep_needs_no_write_access(tmp_path: Path, monkeypatch) -> None:
    # the smoke preset's two graph modes: FULL_AND_PIECEWISE would add only its compile time
    argv = ["sweep", "--out", str(tmp_path), "--no-progress", "--repeats", "1",
            "--modes", "FULL,FULL_DECODE_ONLY"]  # fmt: skip
    assert main(argv) == 0
    finished = load_results(tmp_path)
    assert (
        len(finished) == 2 * 2 * 8 and (finished["status"] == "ok").all()
    )  # 2 modes x 2 ladders x 8 shapes
    import cgdispatch.sweep.store as store_module

    def read_only(self, work):
        raise sqlite3.OperationalError("attempt to write a readonly database")

    monkeypatch.setattr(store_module.ResultStore, "_write", read_only)
    assert main([*argv, "--resume"]) == 0
    assert load_results(tmp_path).equals(finished)
