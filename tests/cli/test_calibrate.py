"""``python -m cgdispatch calibrate`` end to end on the committed log excerpts, and
``tune --calibration`` applying its profile: labels, refusals in one line, bands."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from cgdispatch.__main__ import main
from cgdispatch.estimate.setup_profile import FLOORS

LOGS = Path(__file__).resolve().parents[1] / "data" / "vllm_logs"
LLAMA = sorted(str(p) for p in LOGS.glob("llama-3.1-8b-h100-tp1-*.log"))
TUNE = ("tune", "--model", "llama-3.1-8b", "--device", "H100", "--num-requests", "120")


@pytest.fixture(autouse=True)
def _cache(tmp_path_factory, monkeypatch):
    # one cache folder for the session: tune builds the 8B cost model once
    monkeypatch.setenv("CGDISPATCH_CACHE_DIR", str(tmp_path_factory.getbasetemp() / "cost-cache"))


def _one_error_line(capsys) -> str:
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1, err
    return err[0]


def test_calibrate_saves_a_named_profile_that_tune_applies(capsys, tmp_path):
    assert main(["calibrate", *LLAMA, "--device", "H100", "--name", "llama-h100"]) == 0
    out = capsys.readouterr().out
    assert "calibrated on your logs (3 runs)" in out
    assert "use: tune --calibration llama-h100" in out
    for path in LLAMA:  # each run's logged figures in its row
        tokens = re.search(r"KV cache size: ([0-9,]+) tokens", Path(path).read_text()).group(1)
        assert re.search(rf"{re.escape(Path(path).name)}.*{tokens}", out)
    assert main([*TUNE, "--calibration", "llama-h100"]) == 0
    verdict = capsys.readouterr().out
    assert "start-up: model (H100, calibrated on your logs (3 runs), profile llama-h100)" in verdict
    # three runs that agree: the bands are the floors, or the logs' print resolution
    assert re.search(r"graph memory .*\u00b15%", verdict)
    assert re.search(r"KV-cache tokens .*\u00b13%", verdict)


def test_calibrate_json_lists_files_with_digests_and_one_run_says_zero_residual(capsys, tmp_path):
    import hashlib

    out_path = tmp_path / "one.json"
    assert main(["calibrate", LLAMA[0], "--device", "H100", "--out", str(out_path), "--json"]) == 0
    got = json.loads(capsys.readouterr().out)
    assert got["profile"] == str(out_path) and out_path.is_file()
    assert got["files"] == [{"path": LLAMA[0], "sha256": hashlib.sha256(Path(LLAMA[0]).read_bytes()).hexdigest(),
                             "kind": "startup log"}]  # fmt: skip
    assert got["runs"] == 1 and len(got["fit"]) == 1
    assert got["kv_tokens_residuals"] == [0.0] and got["bands"]["kv_tokens"] == FLOORS["kv_tokens"]
    assert main(["calibrate", LLAMA[0], "--device", "H100", "--out", str(out_path)]) == 0
    assert "one run: its residuals are zero by construction" in capsys.readouterr().out


def test_a_log_of_another_model_is_refused_naming_both(capsys, tmp_path):
    qwen = str(LOGS / "qwen2.5-7b-h100-tp1-len8192.log")
    assert (
        main(["calibrate", LLAMA[0], qwen, "--device", "H100", "--out", str(tmp_path / "x.json")])
        == 2
    )
    line = _one_error_line(capsys)
    assert "is a log of Qwen/Qwen2.5-7B-Instruct, not of meta-llama/Llama-3.1-8B-Instruct" in line
    assert (
        main(["calibrate", LLAMA[0], "--model", "Qwen/Qwen2.5-7B-Instruct", "--device", "H100"])
        == 2
    )
    assert "not of Qwen/Qwen2.5-7B-Instruct (--model)" in _one_error_line(capsys)
    assert not (tmp_path / "x.json").exists()


def test_a_log_without_a_gpu_name_needs_device(capsys):
    assert main(["calibrate", LLAMA[0]]) == 2
    assert "prints no GPU name" in _one_error_line(capsys)


def test_tune_refuses_a_profile_of_another_gpu_and_an_edited_one(capsys, tmp_path):
    path = tmp_path / "p.json"
    assert main(["calibrate", LLAMA[0], "--device", "H100", "--out", str(path)]) == 0
    capsys.readouterr()
    assert (
        main(["tune", "--model", "llama-3.1-8b", "--device", "H200", "--calibration", str(path)])
        == 2
    )
    line = _one_error_line(capsys)
    assert (
        "is of meta-llama/Llama-3.1-8B-Instruct on H100 TP1, not of meta-llama/Llama-3.1-8B-Instruct on H200 TP1"
        in line
    )
    head, payload = path.read_text().split("\n", 1)
    path.write_text(
        head
        + "\n"
        + re.sub(
            r'"non_torch_gib":(-?)(\d)',  # any sign: the edit must be caught
            lambda m: f'"non_torch_gib":{m.group(1)}{(int(m.group(2)) + 1) % 10}',
            payload,
            count=1,
        )
    )
    assert main([*TUNE, "--calibration", str(path)]) == 2
    assert "is damaged" in _one_error_line(capsys)


def test_bench_result_gives_a_step_scale_that_tune_labels(capsys, tmp_path):
    bench = tmp_path / "bench.json"  # vLLM bench serve's keys (vllm/benchmarks/serve.py)
    bench.write_text(json.dumps({
        "model_id": "meta-llama/Llama-3.1-8B-Instruct", "num_prompts": 200, "request_rate": "inf",
        "max_concurrency": 32, "request_throughput": 10.0, "mean_e2el_ms": 2500.0,
        "median_ttft_ms": 80.0, "median_tpot_ms": 12.0, "median_itl_ms": 11.0,
    }))  # fmt: skip
    path = tmp_path / "p.json"
    assert main(["calibrate", LLAMA[0], str(bench), "--device", "H100", "--out", str(path)]) == 0
    out = capsys.readouterr().out
    assert "bench median ITL at batch 25" in out  # 10 req/s x 2.5 s in flight
    scale = float(re.search(r"step time x([0-9.]+)", out).group(1))
    assert main([*TUNE, "--calibration", str(path), "--json"]) == 0
    result = json.loads(capsys.readouterr().out)
    assert f"step times x{scale:.3f}, calibrated on your logs (1 run)" in result["source"]


def test_step_files_of_another_setup_are_refused(capsys, tmp_path):
    bench = tmp_path / "bench.json"
    bench.write_text(json.dumps({"model_id": "Qwen/Qwen2.5-7B-Instruct", "median_itl_ms": 9.0}))
    assert (
        main(
            [
                "calibrate",
                LLAMA[0],
                str(bench),
                "--device",
                "H100",
                "--out",
                str(tmp_path / "p.json"),
            ]
        )
        == 2
    )
    assert (
        "benchmarks Qwen/Qwen2.5-7B-Instruct, not meta-llama/Llama-3.1-8B-Instruct"
        in _one_error_line(capsys)
    )
    steps = tmp_path / "gpu_check.csv"
    steps.write_text(
        "mode,batch,num_tokens,runtime_mode,padded_size,eager_ms,graph_ms,speedup_x,source\n"
        "FULL,decode,8,FULL,8,2.0,1.0,2.0,measured (NVIDIA A100-SXM4-40GB)\n"
    )
    assert (
        main(
            [
                "calibrate",
                LLAMA[0],
                str(steps),
                "--device",
                "H100",
                "--out",
                str(tmp_path / "p.json"),
            ]
        )
        == 2
    )
    assert "measured on NVIDIA A100-SXM4-40GB, not H100" in _one_error_line(capsys)
    assert not (tmp_path / "p.json").exists()


def test_a_log_of_a_gpu_with_other_memory_is_refused(capsys, tmp_path):
    rtx = str(LOGS / "qwen2.5-3b-rtx4090-tp1-run0926.log")  # prints 23.65 GiB, not a name
    args = ["--model", "Qwen/Qwen2.5-3B-Instruct", "--out", str(tmp_path / "p.json")]
    assert main(["calibrate", rtx, "--device", "H100", *args]) == 2
    assert "is a log of a GPU with 23.65 GiB, not of H100" in _one_error_line(capsys)
    assert main(["calibrate", rtx, "--device", "RTX-4090", *args]) == 0
