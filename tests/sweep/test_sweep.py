"""Sweeps: rows against an independent dispatcher, failures recorded, resume without loss
or duplicates (also after SIGKILL), process-pool executor, reference-data loader."""

from __future__ import annotations

import concurrent.futures as cf
import multiprocessing
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pandas as pd
import pytest

from cgdispatch import CudagraphDispatcher, CUDAGraphMode, GraphConfig
from cgdispatch.sweep.run import SweepSpec, run_sweep
from cgdispatch.sweep.store import (
    CAPTURE_COLUMNS,
    KEY_COLUMNS,
    SWEEP_COLUMNS,
    ResultStore,
    load_captures,
    load_reference,
    load_results,
)

ROOT = Path(__file__).resolve().parents[2]
SPEC = SweepSpec(
    vllm_version="0.33",
    name="tiny",
    model="toy-tiny",
    modes=("FULL", "FULL_AND_PIECEWISE"),
    ladders={"two": [2, 8]},
    max_capture_size=8,
    num_tokens=(1, 3, 8, 12, 20),
    max_num_seqs=16,
    repeats=2,
    warmup=1,
    input_sets=2,
)


@pytest.fixture(scope="module")
def tiny(tmp_path_factory: pytest.TempPathFactory) -> tuple[pd.DataFrame, Path]:
    out = tmp_path_factory.mktemp("sweep")
    return run_sweep(SPEC, store=out, progress=False), out


def keys(frame: pd.DataFrame) -> list[tuple]:
    return [tuple(str(v) for v in r) for r in frame[list(KEY_COLUMNS)].itertuples(index=False)]


def test_rows_follow_the_dispatcher_and_failures_are_recorded(tiny) -> None:
    rows, _ = tiny
    assert list(rows.columns) == list(SWEEP_COLUMNS)
    assert len(rows) == len(SPEC.units()) * len(SPEC.shapes) and len(set(keys(rows))) == len(rows)
    for mode in ("FULL", "FULL_AND_PIECEWISE"):
        dispatcher = CudagraphDispatcher(
            GraphConfig(
                vllm_version="0.33",
                cudagraph_mode=mode,
                cudagraph_capture_sizes=[2, 8],
                max_num_seqs=16,
            )
        )
        dispatcher.initialize_cudagraph_keys()
        for r in rows[rows["mode"] == mode].itertuples():
            if r.uniform_decode and r.num_tokens > 16:  # 20 decode requests do not fit 16 slots
                assert r.status == "failed" and "slots" in r.error
                continue
            runtime, desc = dispatcher.dispatch(int(r.num_tokens), bool(r.uniform_decode))
            assert (r.status, r.runtime_mode, r.padded_size) == (
                "ok",
                str(runtime),
                desc.num_tokens,
            )
            assert r.speedup_x == pytest.approx(r.eager_ms / r.graph_ms)
            assert r.source == "measured (CPU)" and r.device_name == "CPU"
            # toy-tiny has 2 layers: 3 piece graphs per PIECEWISE key, 1 graph per FULL key
            pw = len(dispatcher.cudagraph_keys[CUDAGraphMode.PIECEWISE])
            assert r.num_graphs == 3 * pw + len(dispatcher.cudagraph_keys[CUDAGraphMode.FULL])
            assert r.capture_s >= r.graph_capture_s >= 0 and pd.isna(r.pool_bytes)  # CPU: no pool


def test_each_captured_key_is_stored_largest_first(tiny) -> None:
    _, out = tiny
    captures = load_captures(out)
    assert list(captures.columns) == list(CAPTURE_COLUMNS)
    for mode, rows in captures.groupby("mode", sort=False):
        d = CudagraphDispatcher(
            GraphConfig(
                vllm_version="0.33",
                cudagraph_mode=mode,
                cudagraph_capture_sizes=[2, 8],
                max_num_seqs=16,
            )
        )
        d.initialize_cudagraph_keys()
        want = [(str(m), k.num_tokens) for m, keys in d.get_capture_descs() for k in keys]
        assert list(zip(rows["runtime_mode"], rows["num_tokens"])) == want  # PIECEWISE, then FULL
    assert set(captures["mode"]) == {"FULL", "FULL_AND_PIECEWISE"}
    assert (captures["capture_s"] >= 0).all() and captures[
        "pool_bytes"
    ].isna().all()  # CPU: no pool


def test_calibrating_on_measured_rows_fits_them_better(tiny) -> None:
    import math

    from cgdispatch.estimate.calibration import calibrate_rows
    from cgdispatch.estimate.device_model import DEVICE_PRESETS, predict_step
    from cgdispatch.estimate.kernels import toy_profiles
    from cgdispatch.models.toy import build_toy_model

    rows, _ = tiny
    ok = rows[rows["status"] == "ok"]
    profiles = toy_profiles(
        build_toy_model("toy-tiny", device="meta"), sorted({*ok["num_tokens"], *ok["padded_size"]})
    )

    def loss(spec) -> float:  # squared log error of both times, computed here independently
        return sum(
            (
                math.log(predict_step(profiles[int(r.num_tokens)], "NONE", spec)["step_ms"])
                - math.log(r.eager_ms)
            )
            ** 2
            + (
                math.log(
                    predict_step(profiles[int(r.padded_size)], r.runtime_mode, spec)["step_ms"]
                )
                - math.log(r.graph_ms)
            )
            ** 2
            for r in ok.itertuples()
        )

    preset = DEVICE_PRESETS["H100"]
    fitted = calibrate_rows(rows, preset, rounds=15)
    assert fitted.name == "H100 SXM (calibrated)" and loss(fitted) < loss(preset)
    with pytest.raises(ValueError, match="one model"):
        calibrate_rows(pd.concat([rows, rows.assign(model="toy-small")]), preset)


def test_rerun_skips_ok_points_and_retries_failed_ones(tiny) -> None:
    rows, out = tiny
    again = run_sweep(SPEC, store=out, progress=False)
    assert len(again) == len(rows) and len(set(keys(again))) == len(again)
    ok_before = rows[rows["status"] == "ok"].set_index(list(KEY_COLUMNS))["timestamp"]
    ok_after = again[again["status"] == "ok"].set_index(list(KEY_COLUMNS))["timestamp"]
    assert ok_after.loc[ok_before.index].tolist() == ok_before.tolist()  # not re-run
    failed_before = rows[rows["status"] == "failed"]["timestamp"].max()
    assert (again[again["status"] == "failed"]["timestamp"] > failed_before).all()  # retried
    assert len(load_results(out)) == len(rows)
    subset = run_sweep(SPEC.replace(num_tokens=(3,)), store=out, progress=False)
    assert len(subset) == len(SPEC.units()) * 2 and set(subset["num_tokens"]) == {
        3
    }  # its points only
    assert len(load_results(out)) == len(rows)  # nothing added: the subset's points exist


def test_sigkill_in_the_middle_loses_and_duplicates_nothing(tmp_path: Path, capsys) -> None:
    """The killed sweep is a real process; the resume and the refusal run in process."""
    from cgdispatch.__main__ import main

    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    cmd = [
        sys.executable,
        "-m",
        "cgdispatch",
        "sweep",
        "--preset",
        "smoke",
        "--out",
        str(tmp_path),
        "--repeats",
        "2",
        "--modes",
        "FULL",
        "--no-progress",
    ]
    proc = subprocess.Popen(cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    results = tmp_path / "results.csv"
    # wait for the condition (two rows stored), not for a time: on a loaded CI machine the
    # first rows take minutes; the bound only stops a sweep that never writes one
    deadline = time.monotonic() + 900
    partial = None
    while proc.poll() is None:
        if results.exists():
            frame = load_results(results)
            if (frame["status"] == "ok").sum() >= 2:
                proc.send_signal(signal.SIGKILL)
                break
        if time.monotonic() > deadline:
            proc.kill()
            pytest.fail("the sweep stored no two rows in 900 s")
        time.sleep(0.05)
    proc.wait()  # killed (or ended): returns at once
    assert proc.returncode == -signal.SIGKILL, "the sweep ended before it could be killed"
    partial = load_results(results)  # the file is whole: the old table or the new one
    total = 2 * 8  # smoke with one mode: 2 ladders x 8 shapes
    assert 2 <= len(partial) < total
    assert main([*cmd[3:], "--resume"]) == 0
    final = load_results(results)
    assert len(final) == total and len(set(keys(final))) == total
    kept = final.set_index(list(KEY_COLUMNS))
    for key, row in partial[partial["status"] == "ok"].set_index(list(KEY_COLUMNS)).iterrows():
        assert (
            kept.loc[key, "timestamp"] == row["timestamp"]
        )  # finished before the kill: kept as is
    assert not any(p.name.startswith(".results") for p in tmp_path.iterdir())  # no temp file left
    capsys.readouterr()
    assert main(cmd[3:]) == 2  # the same command without --resume is refused
    assert "--resume" in capsys.readouterr().err


def test_process_pool_executor_gives_the_same_points(tiny) -> None:
    rows, _ = tiny
    spec = SPEC.replace(name="pool", modes=("FULL", "FULL_DECODE_ONLY"), num_tokens=(3, 12))
    # fork: workers start in milliseconds (the CLI uses spawn, the safe default with CUDA)
    with cf.ProcessPoolExecutor(2, mp_context=multiprocessing.get_context("fork")) as pool:
        pooled = run_sweep(spec, store=None, executor=pool, progress=False)
    assert len(pooled) == 2 * len(spec.shapes) and (pooled["status"] == "ok").all()
    decode_only = pooled[(pooled["mode"] == "FULL_DECODE_ONLY") & ~pooled["uniform_decode"]]
    assert (decode_only["runtime_mode"] == "NONE").all()  # mixed batches stay eager
    shared = rows[(rows["mode"] == "FULL") & rows["num_tokens"].isin([3, 12])]
    merged = pooled[pooled["mode"] == "FULL"].merge(shared, on=["num_tokens", "uniform_decode"])
    assert (merged["padded_size_x"] == merged["padded_size_y"]).all()


def test_store_replaces_by_key_and_writes_parquet(tmp_path: Path) -> None:
    pytest.importorskip("pyarrow")
    store = ResultStore(tmp_path / "r.parquet")
    base = {
        "model": "m",
        "dtype": "float32",
        "device": "cpu",
        "mode": "FULL",
        "ladder": "l",
        "capture_sizes": "1,2",
        "num_tokens": 1,
        "uniform_decode": True,
        "sweep": "s",
    }
    store.append([{**base, "status": "failed", "error": "boom"}])
    store.append(
        [
            {**base, "status": "ok", "eager_ms": 2.0, "graph_ms": 1.0},
            {**base, "num_tokens": 2, "status": "ok"},
        ]
    )
    frame = ResultStore(tmp_path / "r.parquet").load()  # a fresh store reads the file
    assert (
        len(frame) == 2 and (frame["status"] == "ok").all() and frame["error"].tolist() == ["", ""]
    )


def test_engine_ladders_follow_the_max_and_lists_stay() -> None:
    from cgdispatch.core.ladders import vllm_ladder

    spec = SweepSpec(
        vllm_version="0.33", ladders={"vllm": None, "mine": [8, 2, 2]}, max_capture_size=64
    )
    assert spec.ladder_sizes("vllm") == tuple(vllm_ladder(64)) and spec.ladder_sizes("mine") == (
        2,
        8,
    )
    smaller = spec.replace(max_capture_size=16)
    assert smaller.ladder_sizes("vllm") == tuple(vllm_ladder(16)) and smaller.ladder_sizes(
        "mine"
    ) == (2, 8)


def test_spec_files_round_trip(tmp_path: Path) -> None:
    import json

    from cgdispatch.sweep.spec import load_spec

    (tmp_path / "s.json").write_text(json.dumps(SPEC.to_dict()))
    assert load_spec(tmp_path / "s.json") == SPEC
    (tmp_path / "s.yaml").write_text(
        "name: y\nmodes: [FULL]\nladders: {vllm: null, few: [1, 8]}\nmax_capture_size: 8\n"
        "num_tokens: [2]\nbatch_kinds: [mixed]\n"
    )
    spec = load_spec(tmp_path / "s.yaml")
    assert spec.ladder_sizes("vllm") == (1, 2, 4, 8) and spec.ladder_sizes("few") == (1, 8)
    from cgdispatch.__main__ import main

    assert main(["sweep", "--spec", str(tmp_path / "s.yaml"), "--out", str(tmp_path / "out"),
                 "--repeats", "1", "--no-progress"]) == 0  # fmt: skip
    assert set(load_results(tmp_path / "out")["ladder"]) == {"vllm", "few"}
    (tmp_path / "bad.yaml").write_text("name: y\nrepeat: 3\n")
    with pytest.raises(ValueError, match="unknown fields"):
        load_spec(tmp_path / "bad.yaml")


def test_bad_specs_raise_value_error() -> None:
    with pytest.raises(ValueError, match="unknown"):
        SweepSpec(vllm_version="0.33", modes=("FAST",))
    with pytest.raises(ValueError, match="engine ladder"):
        SweepSpec(vllm_version="0.33", ladders={"mine": None})
    with pytest.raises(ValueError, match="batch_kinds"):
        SweepSpec(vllm_version="0.33", batch_kinds=("prefill",))
    with pytest.raises(ValueError, match="num_tokens"):
        SweepSpec(vllm_version="0.33", num_tokens=(0,))
    with pytest.raises(ValueError, match="integers"):
        SweepSpec(vllm_version="0.33", ladders={"mine": [0, 4]})
    with pytest.raises(ValueError, match="preset"):
        run_sweep("nope")
    if not __import__("torch").cuda.is_available():
        with pytest.raises(ValueError, match="no CUDA GPU"):
            run_sweep("gpu-small", store=None, progress=False)


def test_reference_loader_labels_rows_and_is_empty_without_files(tmp_path: Path) -> None:
    assert load_reference(data_dir=tmp_path) is None
    shipped = load_reference()  # whatever cgdispatch/data ships is labelled as reference data
    assert shipped is None or shipped["source"].str.startswith("reference data (").all()
    pd.DataFrame(
        [
            {
                "device_name": "NVIDIA H200",
                "reference_date": "2026-01-02",
                "mode": "FULL",
                "num_tokens": 8,
                "speedup_x": 2.0,
                "status": "ok",
            }
        ]
    ).to_csv(tmp_path / "reference_h200.csv", index=False)
    rows = load_reference(data_dir=tmp_path)
    assert rows["source"].tolist() == ["reference data (NVIDIA H200, 2026-01-02)"]
    assert load_reference("A100", data_dir=tmp_path) is None
    pd.DataFrame([{"mode": "FULL"}]).to_csv(tmp_path / "reference_bad.csv", index=False)
    with pytest.raises(ValueError, match="reference_date"):
        load_reference(data_dir=tmp_path)
