"""Sweeps on a real dask.distributed cluster (a LocalCluster of two worker processes): the
same points as a serial run, and a worker killed mid-sweep loses no point and duplicates none."""

from __future__ import annotations

import contextlib
import os
import threading
import time
from pathlib import Path

import pandas as pd
import pytest

from cgdispatch.sweep.rows import POINT_COLUMNS
from cgdispatch.sweep.run import SweepSpec, run_sweep
from cgdispatch.sweep.store import load_results

distributed = pytest.importorskip("distributed")

SPEC = SweepSpec(
    name="dask", modes=("FULL", "FULL_DECODE_ONLY"), ladders={"a": [2, 8], "b": [4, 8]},
    max_capture_size=8, num_tokens=(1, 3, 8), repeats=2, warmup=1, input_sets=2,
)  # fmt: skip
ROOT = Path(__file__).resolve().parents[2]
# what a point's dispatch decides: equal on any machine, unlike its timings
DECIDED = [*POINT_COLUMNS, "status", "runtime_mode", "padded_size", "num_graphs"]


@pytest.fixture(scope="module")
def client():
    # workers are fresh processes: they import this checkout's cgdispatch as the test does
    os.environ["PYTHONPATH"] = os.pathsep.join(
        p for p in (str(ROOT), os.environ.get("PYTHONPATH")) if p
    )
    with distributed.LocalCluster(
        n_workers=2, threads_per_worker=1, processes=True, dashboard_address=None
    ) as cluster, distributed.Client(cluster) as client:  # fmt: skip
        yield client


def _decided(rows: pd.DataFrame) -> pd.DataFrame:
    return rows[DECIDED].astype(str).sort_values(list(POINT_COLUMNS)).reset_index(drop=True)


def test_a_dask_cluster_gives_the_rows_of_a_serial_run(client, tmp_path: Path) -> None:
    spec = SPEC.replace(ladders={"a": [2, 8]}, num_tokens=(3, 8))
    serial = run_sweep(spec, store=None, progress=False)
    spread = run_sweep(spec, store=tmp_path, executor=client.get_executor(), progress=False)
    assert (spread["status"] == "ok").all() and len(spread) == len(spec.units()) * len(spec.shapes)
    pd.testing.assert_frame_equal(_decided(spread), _decided(serial))
    assert len(load_results(tmp_path)) == len(spread)


def test_a_worker_killed_mid_sweep_loses_no_point_and_duplicates_none(client, tmp_path) -> None:
    spec = SPEC.replace(name="killed", repeats=20)
    killed = threading.Event()
    killed_at: list[float] = []

    def kill_one_worker_once_rows_land() -> None:
        deadline = time.time() + 900  # the condition, bounded: rows may take minutes under load
        while time.time() < deadline:
            db = tmp_path / "store.sqlite"
            if db.exists() and len(load_results(tmp_path)) > 0:
                break
            time.sleep(0.05)
        victim = sorted(client.scheduler_info()["workers"])[0]
        # the worker dies before it can answer; its nanny starts a new one
        with contextlib.suppress(Exception):
            client.run(os._exit, 1, workers=[victim])
        killed_at.append(time.time())
        killed.set()

    killer = threading.Thread(target=kill_one_worker_once_rows_land)
    killer.start()
    rows = run_sweep(spec, store=tmp_path, executor=client.get_executor(), progress=False)
    finished_at = time.time()
    killer.join(960)
    assert killed.is_set() and killed_at[0] < finished_at  # killed while the sweep ran
    total = len(spec.units()) * len(spec.shapes)
    assert len(rows) == total and not rows[list(POINT_COLUMNS)].duplicated().any()
    # a unit whose worker died is retried by dask or stored as failed; a rerun finishes it
    final = run_sweep(spec, store=tmp_path, executor=client.get_executor(), progress=False)
    assert len(final) == total and (final["status"] == "ok").all()
    assert len(load_results(tmp_path)) == total
    serial = run_sweep(spec.replace(repeats=1, warmup=0, input_sets=1), store=None, progress=False)
    pd.testing.assert_frame_equal(
        _decided(final).drop(columns=["repeats", "warmup", "input_sets"]),
        _decided(serial).drop(columns=["repeats", "warmup", "input_sets"]),
    )
