"""``python -m cgdispatch tune`` end to end on small traces (toy model, cost model cached in a
temporary folder): the verdict's shape, the JSON, flags that paste into ``vllm serve``."""

from __future__ import annotations

import json
import shlex
from pathlib import Path

import numpy as np
import pytest

from cgdispatch.__main__ import main
from cgdispatch.views.tune_verdict import MAX_VERDICT_LINES
from cgdispatch.workload.synthetic import synthetic_requests

SMALL = ("--model", "toy-tiny", "--num-requests", "120", "--max-num-seqs", "32")


@pytest.fixture(autouse=True)
def _cache(tmp_path_factory, monkeypatch):
    monkeypatch.setenv("CGDISPATCH_CACHE_DIR", str(tmp_path_factory.getbasetemp() / "cost-cache"))


def _serve_flags(line: str) -> dict[str, str]:
    """A ``vllm serve MODEL --flag value ...`` line as {flag: value}, split as a shell would."""
    words = shlex.split(line)
    assert words[:2] == ["vllm", "serve"] and not words[2].startswith("--")
    flags = words[3:]
    assert len(flags) % 2 == 0 and all(f.startswith("--") for f in flags[::2])
    return dict(zip(flags[::2], flags[1::2]))


@pytest.mark.parametrize("version", ["0.33", "0.34"])
def test_json_agrees_with_its_figures_and_the_flags_paste(version, capsys):
    assert main(["tune", *SMALL, "--vllm-version", version, "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["recommendation"] in ("planned", "vllm default")
    planned, default = out["held_out"]["planned"], out["held_out"]["vllm default"]
    assert out["objective"] == "p99-ttft"  # the default with requests
    assert out["gain"] == pytest.approx(default["p99_ttft_ms"] - planned["p99_ttft_ms"])
    assert out["recommendation"] == ("planned" if out["gain"] > out["band"] else "vllm default")
    assert out["deltas"]["mean_step_ms"] == pytest.approx(
        planned["mean_step_ms"] - default["mean_step_ms"]
    )
    assert out["vllm_version"] == version and out["source"] == "model (H200 SXM)"
    flags = _serve_flags(f"vllm serve m {out['flags']}")
    assert flags["--max-num-seqs"] == "32" and flags["--max-num-batched-tokens"] == "8192"
    if out["recommendation"] == "planned":
        compilation = json.loads(flags["--compilation-config"])
        sizes = out["sizes"]["planned"]
        if version == "0.34":
            for field, values in sizes.items():
                assert compilation[field] == values
        else:
            assert compilation["cudagraph_capture_sizes"] == sizes


def test_verdict_is_short_and_labelled(tmp_path, capsys):
    req = synthetic_requests(150, "sharegpt", rate_per_s=6, seed=2)
    path = tmp_path / "requests.csv"
    req.rename(columns={"arrival_s": "timestamp"}).to_csv(path, index=False)
    assert main(["tune", *SMALL, "--trace", str(path)]) == 0
    lines = capsys.readouterr().out.rstrip("\n").split("\n")
    assert 6 <= len(lines) <= MAX_VERDICT_LINES
    assert lines[0].startswith("recommendation: ")
    assert lines[-1].startswith("vllm serve ")
    _serve_flags(lines[-1])
    assert (
        "figures: model (H200 SXM)" in lines[1]
        and "traffic: requests from requests.csv" in lines[1]
    )
    assert lines[2].startswith("held out") and "planned" in lines[2]
    assert any(line.startswith("mean step time") for line in lines)
    assert any(line.startswith("graph memory") and "MiB" in line for line in lines)


@pytest.mark.parametrize(
    ("argv", "needle"),
    [
        (["--trace", "nope.csv"], "--trace nope.csv"),
        (["--holdout", "1.5"], "--holdout=1.5"),
        (["--rate", "0"], "--rate=0"),
        (["--model", "gpt-9"], "--model 'gpt-9'"),
        (["--max-graphs", "0"], "--max-graphs=0"),
        (["--replicas", "0"], "--replicas=0"),
    ],
)
def test_bad_flags_end_in_one_line(argv, needle, capsys):
    assert main(["tune", *argv]) == 2
    err = capsys.readouterr().err.strip().split("\n")
    assert len(err) == 1 and err[0].startswith("error: ") and needle in err[0]


def test_overload_is_the_first_line_and_replicas_give_a_per_replica_verdict(capsys):
    """Traffic far above one replica: the first line says so with a replica count N;
    ``--replicas N`` then tunes one replica's share, and its verdict says per replica."""
    flood = (*SMALL, "--rate", "400", "--num-requests", "200", "--max-num-batched-tokens", "1024")
    assert main(["tune", *flood]) == 0
    lines = capsys.readouterr().out.rstrip("\n").split("\n")
    assert lines[0].startswith("overloaded: one replica cannot hold the held-out traffic")
    assert len(lines) <= MAX_VERDICT_LINES and lines[-1].startswith("vllm serve ")
    assert main(["tune", *flood, "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    n = out["replicas_needed"]
    assert out["overload"]["sustainable"] is False and f"--replicas {n}" in lines[0]
    assert main(["tune", *flood, "--replicas", str(n), "--json"]) == 0
    share = json.loads(capsys.readouterr().out)
    assert share["replicas"] == n and share["balance"] == "round-robin"
    assert f"of {n} (round-robin, the busiest)" in share["trace"]
    with pytest.raises(SystemExit):  # argparse's choices: one line, exit status 2
        main(["tune", *SMALL, "--balance", "random"])
    assert "invalid choice: 'random'" in capsys.readouterr().err


CONFIGS = Path(__file__).resolve().parents[1] / "data" / "configs"


def test_a_config_json_on_a_listed_gpu_tunes_end_to_end(tmp_path, capsys):
    """Issue 28: ``tune --model path/to/config.json --device L40S``, offline; vllm serve
    gets the checkpoint's folder, the figures say what the GPU's start-up costs are calibrated on."""
    folder = tmp_path / "Qwen2-7B"
    folder.mkdir()
    (folder / "config.json").write_text((CONFIGS / "qwen2-7b.json").read_text())
    argv = ["--model", str(folder / "config.json"), "--device", "L40S", "--num-requests", "120"]
    assert main(["tune", *argv]) == 0
    lines = capsys.readouterr().out.rstrip("\n").split("\n")
    assert lines[-1].startswith(f"vllm serve {folder} ")
    assert (
        "figures: model (L40S, its start-ups fit only the graph-pool factor; calibrated on 59"
        in lines[1]
    )
    assert any(line.startswith("KV-cache tokens") for line in lines)
    spec = tmp_path / "gpu.json"
    spec.write_text(
        '{"name": "my-gpu", "peak_flops": 3e14, "peak_fp32_flops": 5e13, '
        '"bandwidth_bytes_per_s": 8e11, "memory_bytes": 4.8e10}'
    )
    assert main(["tune", *argv, "--device-spec", str(spec), "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["source"].startswith("model (my-gpu, no logged start-ups on this GPU")


@pytest.mark.parametrize(
    ("argv", "needle"),
    [
        (["--model", "meta-llama/Llama-3.1-70B-Instruct", "--device", "H100"],
         "error: meta-llama/Llama-3.1-70B-Instruct does not fit on H100 (TP1 PP1)"),
        (["--model", "llama-3.1-8b", "--gpu-memory-utilization", "0.05"],
         "error: meta-llama/Llama-3.1-8B-Instruct does not fit on H200 (TP1 PP1)"),
        (["--model", "no/such/config.json"], "no such config.json"),
        (["--device-spec", "no-such-gpu.json"], "no-such-gpu.json"),
    ],
)  # fmt: skip
def test_a_model_that_does_not_fit_is_an_error_not_a_serve_line(argv, needle, capsys):
    assert main(["tune", *argv, "--num-requests", "50"]) == 2
    captured = capsys.readouterr()
    err = captured.err.strip().split("\n")
    assert "vllm serve" not in captured.out
    assert len(err) == 1 and err[0].startswith("error: ") and needle in err[0]


def test_replicas_of_a_file_of_steps_is_refused_naming_the_fix(tmp_path, capsys):
    import numpy as np
    import pandas as pd

    rng = np.random.default_rng()
    n = int(rng.integers(50, 200))
    path = tmp_path / "steps.csv"
    pd.DataFrame({"num_tokens": rng.integers(1, 64, n), "num_reqs": 1,
                  "uniform_decode": False}).to_csv(path, index=False)  # fmt: skip
    assert main(["tune", *SMALL, "--trace", str(path), "--replicas", "2"]) == 2
    err = capsys.readouterr().err.strip().split("\n")
    assert len(err) == 1 and "replicas=2" in err[0] and "file of steps" in err[0]


def test_any_release_from_0_8_is_taken_and_dispatches_as_its_generation(capsys):
    """issue 35: real release strings; each runs under its generation's dispatcher."""
    assert main(["tune", *SMALL, "--vllm-version", "0.10.1.1", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["vllm_version"] == "0.33"  # V1's dispatch
    # the verdict names the release as given, and the generation whose dispatch it replays
    release = f"0.{int(np.random.default_rng().integers(8, 14))}.1"
    assert main(["tune", *SMALL, "--vllm-version", release]) == 0
    assert f"vLLM {release}, dispatch of 0.33, max_num_seqs" in capsys.readouterr().out
    with pytest.raises(SystemExit) as exit_:
        main(["tune", *SMALL, "--vllm-version", "0.7.3", "--json"])
    err = capsys.readouterr().err
    assert exit_.value.code == 2 and "'0.7.3' is older than vLLM 0.8" in err
