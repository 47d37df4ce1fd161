"""`python -m cgdispatch capture`: report, --check passes on CPU and fails on a bad replay."""

import subprocess
import sys
from pathlib import Path

import pytest
import torch

from cgdispatch.__main__ import main
from cgdispatch.capture.backends import CpuReplayBackend
from tests.load_script import load_script

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize("mode", ["FULL", "FULL_DECODE_ONLY", "NONE"])
def test_capture_check_passes_and_prints_report_and_errors(mode, capsys):
    rc = main(
        [
            "capture",
            "--vllm-version",
            "0.33",
            "--model",
            "toy-tiny",
            "--mode",
            mode,
            "--sizes",
            "1,2,4",
            "--check",
            "--no-progress",
        ]
    )
    out = capsys.readouterr().out
    assert rc == 0, out
    assert "vLLM 0.33 (V1, CudagraphDispatcher)" in out
    assert "capture report, measured (CPU)" in out and "max_abs_err" in out
    assert "ok: " in out and "MISMATCH" not in out
    if mode != "NONE":
        report = out.split("capture report")[1].split("replay vs eager")[0]
        sizes = [int(line.split()[1]) for line in report.splitlines() if line.startswith("FULL")]
        assert sizes == [4, 2, 1]


def report_rows(out):
    """(mode, num_tokens, num_reqs) of the printed capture report."""
    report = out.split("capture report")[1].split("replay vs eager")[0]
    rows = [line.split() for line in report.splitlines()]
    rows = [r for r in rows if r and r[0] in ("FULL", "PIECEWISE")]  # NONE: an empty frame
    return [(r[0], int(r[1]), None if r[2] in ("NaN", "None") else int(float(r[2]))) for r in rows]


@pytest.mark.parametrize(
    "mode", ["FULL", "PIECEWISE", "FULL_AND_PIECEWISE", "FULL_DECODE_ONLY", "NONE"]
)
def test_generation_2_is_the_default_and_its_check_passes_in_every_mode(mode, capsys):
    from cgdispatch import GraphConfig
    from cgdispatch.core.v2.cudagraph_manager import CudaGraphManager
    from cgdispatch.models.toy import PRESETS

    argv = ["capture", "--mode", mode, "--prefill-sizes", "2,6", "--decode-sizes", "1,3"]
    rc = main([*argv, "--num-speculative-tokens", "1", "--check", "--no-progress"])
    out = capsys.readouterr().out
    assert rc == 0, out
    assert "vLLM 0.34 (generation 2, CudaGraphManager; the newest, the default)" in out
    assert "ok: " in out and "MISMATCH" not in out
    # the graphs are the manager's descriptors, in its capture order
    config = GraphConfig(
        vllm_version="0.34",
        cudagraph_mode=mode,
        max_num_seqs=PRESETS["toy-tiny"].num_slots,
        num_speculative_tokens=1,
        prefill_cudagraph_capture_token_sizes=[2, 6],
        decode_cudagraph_capture_request_sizes=[1, 3],
    ).resolve()
    want = [
        (str(d.cg_mode), d.num_tokens, d.num_reqs) for d in CudaGraphManager(config).capture_order()
    ]
    assert report_rows(out) == want
    if mode in ("FULL_AND_PIECEWISE", "FULL_DECODE_ONLY"):
        assert ("FULL", 6, 3) in want  # 3 decode requests of q = 2 tokens


def test_generation_2_size_flags_are_refused_under_v1(capsys):
    rc = main(["capture", "--vllm-version", "0.33", "--decode-sizes", "1,2", "--no-progress"])
    assert (
        rc == 2 and "--decode-sizes with --vllm-version 0.33 is invalid" in capsys.readouterr().err
    )


def test_capture_check_fails_on_a_replay_that_differs(monkeypatch, capsys):
    original = CpuReplayBackend.capture

    def corrupt(self, fn, *args, **kwargs):
        graph = original(self, fn, *args, **kwargs)
        replay = graph.replay_fn

        def bad_replay():
            out = replay()
            out.add_(torch.randn_like(out))
            return out

        graph.replay_fn = bad_replay
        return graph

    monkeypatch.setattr(CpuReplayBackend, "capture", corrupt)
    rc = main(["capture", "--mode", "FULL", "--sizes", "1,2", "--check", "--no-progress"])
    out = capsys.readouterr().out
    assert rc == 1
    assert "MISMATCH" in out


@pytest.mark.parametrize(
    "argv, match",
    [
        (["--mode", "SOMETIMES"], "unknown"),
        (["--model", "toy-huge"], "toy-tiny"),
        (["--sizes", "1,x"], "not an integer"),
        (["--sizes", "1", "--check", "--atol", "-1"], "atol=-1.0 is invalid"),
        (["--sizes", "1", "--check", "--rtol", "nan"], "rtol=nan is invalid"),
    ],
)
def test_bad_options_exit_2_with_one_line(argv, match, capsys):
    rc = main(["capture", "--no-progress", *argv])
    err = capsys.readouterr().err
    assert rc == 2 and match in err


def test_module_entry_point_runs():
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "cgdispatch",
            "capture",
            "--sizes",
            "1,2",
            "--check",
            "--no-progress",
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=600,
        env={"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin"},
    )
    assert proc.returncode == 0, proc.stderr
    assert "ok: " in proc.stdout


def test_gpu_check_script_runs_on_cpu(tmp_path, capsys):
    module = load_script("scripts/gpu_check.py")
    out_csv = tmp_path / "check.csv"
    argv = [
        "--device",
        "cpu",
        "--model",
        "toy-tiny",
        "--sizes",
        "1,4",
        "--iters",
        "2",
        "--repeats",
        "1",
    ]
    argv += ["--out", str(out_csv)]
    assert module.main(argv) == 0
    printed = capsys.readouterr().out
    assert "measured (CPU)" in printed and "speed-up (eager ms / graph ms)" in printed
    import pandas as pd

    table = pd.read_csv(out_csv)
    modes = ["FULL", "FULL_DECODE_ONLY", "PIECEWISE", "FULL_AND_PIECEWISE"]
    assert sorted(table["mode"].unique()) == sorted(modes)
    for _, rows in table.groupby(["mode", "batch"]):
        assert rows["num_tokens"].tolist() == [1, 4]
    assert (table["speedup_x"] - table["eager_ms"] / table["graph_ms"]).abs().max() < 1e-9
    # the runtime mode each row ran in is the dispatcher's answer for that mode and batch
    fdo = table[(table["mode"] == "FULL_DECODE_ONLY") & (table["batch"] == "mixed")]
    assert set(fdo["runtime_mode"]) == {"NONE"}
    captures = pd.read_csv(tmp_path / "check_captures.csv")
    assert set(captures["config_mode"]) == set(modes)
    assert (table["eager_ms"] > 0).all() and (table["graph_ms"] > 0).all()
    assert (table["source"] == "measured (CPU)").all()
    # graph pool per mode and output policy: on CPU the stand-in's ledger, beside the estimate
    pools = pd.read_csv(tmp_path / "check_pools.csv")
    assert sorted(pools["outputs"].unique()) == ["strong", "weak"] and len(pools) == 2 * len(modes)
    assert (pools["stand_in_MiB"] - pools["estimate_MiB"]).abs().max() < 1e-12
    weak, strong = (pools[pools["outputs"] == o].set_index("mode") for o in ("weak", "strong"))
    assert (weak["estimate_MiB"] < strong["estimate_MiB"]).all()
    assert "graph memory per mode and outputs" in printed
    # the model's prediction beside the measures, from the same device model as the planner
    assert (pools["predicted_MiB"] > 0).all() and pools["device_MiB"].isna().all()
    checks = pd.read_csv(tmp_path / "check_checks.csv")
    assert checks["ok"].all() and set(checks["check"]) == {"checked", "replay"}  # CPU rules


def test_gpu_check_script_runs_generation_2_on_cpu(tmp_path, capsys):

    import pandas as pd

    from cgdispatch import GraphConfig
    from cgdispatch.core.v2.cudagraph_manager import CudaGraphManager
    from cgdispatch.models.toy import PRESETS

    module = load_script("scripts/gpu_check.py")
    out_csv = tmp_path / "check.csv"
    argv = ["--device", "cpu", "--model", "toy-tiny", "--sizes", "1,4", "--iters", "2"]
    argv += ["--repeats", "1", "--vllm-version", "0.34", "--modes", "FULL,FULL_AND_PIECEWISE"]
    assert module.main([*argv, "--out", str(out_csv)]) == 0
    assert "speed-up (eager ms / graph ms)" in capsys.readouterr().out
    table = pd.read_csv(out_csv)
    assert sorted(table["mode"].unique()) == ["FULL", "FULL_AND_PIECEWISE"]
    assert (table["source"] == "measured (CPU)").all() and (table["graph_ms"] > 0).all()
    # each row ran as vLLM 0.34's manager answers that batch (uniform decode: by requests)
    for mode, rows in table.groupby("mode"):
        manager = CudaGraphManager(
            GraphConfig(
                vllm_version="0.34",
                cudagraph_mode=mode,
                max_num_seqs=PRESETS["toy-tiny"].num_slots,
                prefill_cudagraph_capture_token_sizes=[1, 4],
                decode_cudagraph_capture_request_sizes=[1, 4],
            ).resolve()
        )
        for row in rows.itertuples():
            uniform = row.batch == "decode"
            # a mixed batch's graph holds min(tokens, max_num_seqs) >= its requests: any
            # count gives the same answer, so one request stands for it
            desc = manager.dispatch(row.num_tokens if uniform else 1, row.num_tokens,
                                    1 if uniform else None, 0)  # fmt: skip
            assert (row.runtime_mode, row.padded_size) == (desc.cg_mode.name, desc.num_tokens)
    captures = pd.read_csv(tmp_path / "check_captures.csv")
    fap = captures[captures["config_mode"] == "FULL_AND_PIECEWISE"]
    assert fap["uniform"].tolist() == [False, False, True, True]  # PIECEWISE, then decode FULL
    pools = pd.read_csv(tmp_path / "check_pools.csv")
    # the estimate models generation 2's keys: on CPU it equals the stand-in's ledger
    assert (pools["stand_in_MiB"] > 0).all()
    assert pools["estimate_MiB"].tolist() == pytest.approx(pools["stand_in_MiB"].tolist())
