"""The store shared by careless co-workers: concurrent writers, foreign files and folders,
symlinks, rows of other specs, stores of an older cgdispatch (issue 14)."""

from __future__ import annotations

import multiprocessing
import os
import random
import re
import sqlite3
from pathlib import Path

import pandas as pd
import pytest

from cgdispatch.sweep.database import APPLICATION_ID
from cgdispatch.sweep.rows import POINT_COLUMNS, SWEEP_COLUMNS
from cgdispatch.sweep.run import SweepSpec, run_sweep
from cgdispatch.sweep.store import ResultStore, load_results

SPEC = SweepSpec(
    name="share", modes=("FULL",), ladders={"two": [2, 8]}, max_capture_size=8,
    num_tokens=(1, 5), batch_kinds=("decode",), repeats=1, warmup=0, input_sets=1,
)  # fmt: skip


def _row(sweep: str, n: int, rng: random.Random) -> dict:
    return {
        "sweep": sweep, "model": "toy-tiny", "dtype": "float32", "device": "cpu",
        "mode": "FULL", "ladder": "l", "capture_sizes": "1,8", "max_num_seqs": 16,
        "repeats": 3, "warmup": 1, "input_sets": 2, "cpu_threads": 1, "num_tokens": n,
        "uniform_decode": bool(n % 2), "status": "ok", "eager_ms": rng.uniform(1, 9),
    }  # fmt: skip


def _writer(path: str, sweep: str, count: int, seed: int) -> None:
    rng = random.Random(seed)
    store = ResultStore(path)
    for n in range(1, count + 1):
        store.append([_row(sweep, n, rng)])


def test_two_sweeps_writing_one_store_at_once_keep_both_sweeps_rows(tmp_path: Path) -> None:
    ResultStore(tmp_path)  # create it once, then two processes append at the same time
    ctx = multiprocessing.get_context("fork")
    procs = [
        ctx.Process(target=_writer, args=(str(tmp_path), name, 40, seed))
        for seed, name in enumerate(("alice", "bob"))
    ]
    for p in procs:
        p.start()
    for p in procs:
        p.join(60)
    assert [p.exitcode for p in procs] == [0, 0]
    rows = load_results(tmp_path)
    for seed, name in enumerate(("alice", "bob")):
        rng = random.Random(seed)
        want = [_row(name, n, rng)["eager_ms"] for n in range(1, 41)]
        mine = rows[rows["sweep"] == name].sort_values("num_tokens")
        assert mine["eager_ms"].tolist() == want  # every row of each writer, none mixed
    exported = pd.read_csv(tmp_path / "results.csv")  # the export has them all too
    assert len(exported) == 80 and list(exported.columns) == list(SWEEP_COLUMNS)


def test_sweep_out_pointed_at_a_csv_that_is_not_a_store_leaves_it_alone(tmp_path: Path) -> None:
    mine = tmp_path / "budget.csv"
    mine.write_text("item,cost\nrent,1200\n")
    with pytest.raises(ValueError, match="budget.csv is not a cgdispatch store"):
        ResultStore(mine)
    assert mine.read_text() == "item,cost\nrent,1200\n"


def test_sweep_out_pointed_at_a_folder_of_other_files_is_refused(tmp_path: Path) -> None:
    (tmp_path / "thesis.tex").write_text("\\section{}")
    with pytest.raises(ValueError, match=r"holds \['thesis.tex'\] and is not a cgdispatch store"):
        ResultStore(tmp_path)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["thesis.tex"]


def test_a_database_that_is_not_ours_is_refused(tmp_path: Path) -> None:
    with sqlite3.connect(tmp_path / "store.sqlite") as con:
        con.execute("CREATE TABLE t (x)")
    with pytest.raises(ValueError, match="is not a cgdispatch store"):
        ResultStore(tmp_path)
    (tmp_path / "store.sqlite").write_bytes(os.urandom(300))
    with pytest.raises(ValueError, match="is not a cgdispatch store"):
        load_results(tmp_path)


def test_the_store_identifies_itself(tmp_path: Path) -> None:
    ResultStore(tmp_path)
    with sqlite3.connect(tmp_path / "store.sqlite") as con:
        assert con.execute("PRAGMA application_id").fetchone()[0] == APPLICATION_ID
        assert dict(con.execute("SELECT key, value FROM meta"))["format"] == (
            "cgdispatch sweep store"
        )


def test_a_symlink_planted_in_the_store_is_not_written_through(tmp_path: Path) -> None:
    victim = tmp_path / "victim.txt"
    victim.write_text("precious")
    store_dir = tmp_path / "store"
    ResultStore(store_dir)
    (store_dir / "results.csv").unlink(missing_ok=True)
    (store_dir / "results.csv").symlink_to(victim)
    with pytest.raises(ValueError, match="is a symlink"):
        ResultStore(store_dir).append([_row("s", 1, random.Random(0))])
    assert victim.read_text() == "precious"


def test_no_temporary_file_has_a_fixed_name(tmp_path: Path, monkeypatch) -> None:
    import tempfile

    names = []
    real = tempfile.mkstemp

    def spy(*args, **kwargs):
        fd, name = real(*args, **kwargs)
        names.append(Path(name).name)
        return fd, name

    monkeypatch.setattr(tempfile, "mkstemp", spy)
    store = ResultStore(tmp_path)
    store.save_spec(SPEC.to_dict())
    store.append([_row("s", 1, random.Random(0))])
    assert names and len(set(names)) == len(names)  # random names: a planted file is no target
    assert not [p for p in tmp_path.iterdir() if p.name.endswith(".tmp")]


def test_rows_of_another_spec_in_the_store_are_not_reused(tmp_path: Path) -> None:
    first = run_sweep(SPEC, store=tmp_path, progress=False)
    assert (first["status"] == "ok").all()
    for change in ({"max_num_seqs": 8}, {"repeats": 2}, {"name": "other"}):
        again = run_sweep(SPEC.replace(**change), store=tmp_path, progress=False)
        assert len(again) == len(first)
        assert set(again["timestamp"]).isdisjoint(first["timestamp"])  # measured anew
    rows = load_results(tmp_path)
    assert len(rows) == 4 * len(first)  # each spec's points kept apart
    assert not rows[list(POINT_COLUMNS)].duplicated().any()
    same = run_sweep(SPEC, store=tmp_path, progress=False)  # identical points: reused
    assert sorted(same["timestamp"]) == sorted(first["timestamp"])


def test_a_csv_store_of_an_older_cgdispatch_is_migrated_not_stranded(tmp_path: Path) -> None:
    old = run_sweep(SPEC, store=None, progress=False)
    legacy = old.drop(columns=["warmup", "input_sets", "cpu_threads"])  # the old schema
    legacy.to_csv(tmp_path / "results.csv", index=False)
    (tmp_path / "spec.json").write_text(__import__("json").dumps({"share": SPEC.to_dict()}))
    resumed = run_sweep(SPEC, store=tmp_path, progress=False)  # nothing left to run
    assert sorted(resumed["timestamp"]) == sorted(old["timestamp"])
    assert (tmp_path / "store.sqlite").is_file()
    assert len(pd.read_csv(tmp_path / "results.csv")) == len(old)


def test_report_out_into_a_folder_with_its_own_summary_is_refused(tmp_path: Path) -> None:
    from cgdispatch.views.report import write_report

    store = tmp_path / "store"
    run_sweep(SPEC, store=store, progress=False)
    notes = tmp_path / "notes"
    notes.mkdir()
    (notes / "summary.md").write_text("my notes")
    with pytest.raises(ValueError, match="cgdispatch did not write"):
        write_report(store, notes, estimate=False)
    assert (notes / "summary.md").read_text() == "my notes"
    path = write_report(store, tmp_path / "rep", estimate=False)
    assert path.is_file() and write_report(store, tmp_path / "rep", estimate=False) == path


@pytest.mark.parametrize(
    "change, says",
    [({"modes": ()}, "modes=()"), ({"device": "tpu"}, "device='tpu'"), ({"repeats": 10**12}, "at most"),
     ({"warmup": -1}, "warmup=-1"), ({"name": ""}, "non-empty name"), ({"dtype": "fp8"}, "dtype='fp8'"),
     ({"num_tokens": (10**12,)}, "num_tokens")],
)  # fmt: skip
def test_a_spec_with_an_impossible_value_is_refused_when_made(change, says) -> None:
    with pytest.raises(ValueError, match=re.escape(says)):
        SPEC.replace(**change)


def test_a_co_worker_can_read_the_shared_store(tmp_path: Path) -> None:
    umask = os.umask(0o022)
    try:
        ResultStore(tmp_path).append([_row("s", 1, random.Random(0))])
    finally:
        os.umask(umask)
    for name in ("store.sqlite", "results.csv", "spec.json"):
        if (tmp_path / name).exists():
            assert (tmp_path / name).stat().st_mode & 0o044 == 0o044, name  # not mkstemp's 0600


def test_a_report_folder_of_an_older_cgdispatch_is_reused_and_a_planted_link_refused(
    tmp_path: Path,
) -> None:
    from cgdispatch.views.report import write_report

    store = tmp_path / "store"
    run_sweep(SPEC, store=store, progress=False)
    old = tmp_path / "old"
    old.mkdir()
    (old / "summary.md").write_text("# cgdispatch sweep report\n\nthe previous run")
    (old / "capture_per_key.png").write_text("a chart an older version drew")
    assert "the previous run" not in write_report(store, old, estimate=False).read_text()
    victim = tmp_path / "victim.txt"
    victim.write_text("precious")
    (old / "summary.md").unlink()
    (old / "summary.md").symlink_to(victim)
    with pytest.raises(ValueError, match="symlink"):
        write_report(store, old, estimate=False)
    assert victim.read_text() == "precious"


def test_reading_a_store_writes_nothing_and_exports_match(tmp_path: Path) -> None:
    pytest.importorskip("pyarrow")
    rng = random.Random(5)
    store = ResultStore(tmp_path / "s")
    store.append([_row("s", n, rng) for n in range(1, 9)])
    before = {p.name: p.stat().st_mtime_ns for p in (tmp_path / "s").iterdir()}
    rows = load_results(tmp_path / "s")
    assert {p.name: p.stat().st_mtime_ns for p in (tmp_path / "s").iterdir()
            if p.name in before} == before  # fmt: skip
    for name in ("all.csv", "all.parquet"):
        store.export(tmp_path / name)
        again = load_results(tmp_path / name)  # pandas-readable exports, same rows
        pd.testing.assert_frame_equal(again, rows)
    ref = random.Random(5)  # the same draws, made again: the values went in and came out
    want = [_row("s", n, ref)["eager_ms"] for n in range(1, 9)]
    assert rows.sort_values("num_tokens")["eager_ms"].tolist() == want


def test_a_store_sqlite_cannot_open_read_only_is_read_from_its_export(
    tmp_path: Path, monkeypatch
) -> None:
    import cgdispatch.sweep.store as store_module

    rng = random.Random(9)
    ResultStore(tmp_path).append([_row("s", n, rng) for n in (1, 2, 3)])
    real = sqlite3.connect

    def read_only_fails(target, *args, **kwargs):
        if str(target).endswith("?mode=ro"):  # as on a read-only folder without the -shm file
            raise sqlite3.OperationalError("unable to open database file")
        return real(target, *args, **kwargs)

    monkeypatch.setattr(store_module.sqlite3, "connect", read_only_fails)
    rows = load_results(tmp_path)
    ref = random.Random(9)
    assert rows["eager_ms"].tolist() == [_row("s", n, ref)["eager_ms"] for n in (1, 2, 3)]


def test_an_older_store_folder_keeps_its_captures_and_specs(tmp_path: Path) -> None:
    from cgdispatch.sweep.store import load_captures

    rows = run_sweep(SPEC, store=tmp_path, progress=False)
    captures = load_captures(tmp_path)
    assert len(captures) > 0
    (tmp_path / "store.sqlite").unlink()  # what an older cgdispatch left: the CSVs only
    for extra in tmp_path.glob("store.sqlite-*"):
        extra.unlink()
    again = run_sweep(SPEC, store=tmp_path, progress=False)  # migrated, nothing re-run
    assert sorted(again["timestamp"]) == sorted(rows["timestamp"])
    pd.testing.assert_frame_equal(load_captures(tmp_path), captures, check_dtype=False)


def test_two_sweep_resumes_started_at_once_on_one_new_folder_both_finish(tmp_path: Path) -> None:
    """Issue 36: two `sweep --resume` on a folder that does not exist yet both create and fill
    the one store (no error, no point twice); the rows are each point's, once."""
    import subprocess
    import sys

    out = tmp_path / "new" / "store"
    cmd = [sys.executable, "-m", "cgdispatch", "sweep", "--preset", "smoke", "--out", str(out),
           "--resume", "--modes", "NONE", "--no-progress"]  # fmt: skip
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[2])}
    procs = [subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
             for _ in range(2)]  # fmt: skip
    results = [p.communicate(timeout=900) for p in procs]
    assert [p.returncode for p in procs] == [0, 0], [err.decode()[-500:] for _, err in results]
    rows = load_results(out)
    keys = rows[["mode", "ladder", "num_tokens", "uniform_decode"]]
    assert len(rows) == 16 and not keys.duplicated().any() and (rows["status"] == "ok").all()


def test_a_store_made_first_by_another_process_that_swept_our_temporary_is_opened(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Two first writers on a new folder: the other process links its database in and, in
    its first write, sweeps the temporaries of killed writers, ours included, while we still
    write ours (SQLite then calls our unlinked file read-only). Ours yields: the store is
    theirs, and both see the same rows (a fresh-clone run failed once on this race)."""
    from cgdispatch.sweep import database

    out = tmp_path / "new" / "store"
    rng = random.Random()
    rows = [_row("s", n, rng) for n in range(1, rng.randint(2, 6))]
    original = database.mark_complete
    other: list[ResultStore] = []

    def the_other_process_gets_there_first(con: sqlite3.Connection) -> None:
        if not other:  # in our creation: theirs runs whole, then writes its first rows
            monkeypatch.setattr(database, "mark_complete", original)
            other.append(ResultStore(out))
            other[0].append(rows)
            assert not list(out.glob(".*.tmp"))  # our temporary is swept
        original(con)

    monkeypatch.setattr(database, "mark_complete", the_other_process_gets_there_first)
    ours = ResultStore(out)
    assert other and ours.db_path == other[0].db_path
    assert sorted(ours.done_keys()) == sorted(other[0].done_keys())
    assert len(ours.done_keys()) == len(rows)
    ours.append([_row("s", len(rows) + 1, rng)])
    assert len(other[0].done_keys()) == len(rows) + 1
