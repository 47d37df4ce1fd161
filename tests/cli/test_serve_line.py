"""A ``vllm serve`` line must run (issue 36 class 2, issue 40 item 5): no line for a TP size
vLLM cannot load, no line a name can forge, and a config.json's line names a model vLLM can
load (its ``_name_or_path``, its checkpoint folder) or says which placeholder to replace."""

from __future__ import annotations

import json

import numpy as np
import pytest

from cgdispatch import GraphConfig
from cgdispatch.__main__ import main
from cgdispatch.plan.costs import AffineCostModel
from cgdispatch.plan.tune import tune
from cgdispatch.views.tune_verdict import verdict_lines
from cgdispatch.workload.sources import workload_trace

BASE = dict(model_type="llama", num_hidden_layers=2, hidden_size=3072, num_attention_heads=24,
            num_key_value_heads=8, intermediate_size=8192, vocab_size=32000)  # fmt: skip


@pytest.fixture(autouse=True)
def _cache(tmp_path_factory, monkeypatch):
    monkeypatch.setenv("CGDISPATCH_CACHE", str(tmp_path_factory.getbasetemp() / "cost-cache"))


def _config(folder, name="config.json", **changes):
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / name
    path.write_text(json.dumps(dict(BASE, **changes)))
    return path


@pytest.mark.parametrize(
    ("changes", "tp", "said"),
    [
        ({}, 3, "8 KV heads"),
        ({}, 12, "8 KV heads"),
        ({"num_attention_heads": 16, "hidden_size": 2048, "intermediate_size": 8191}, 2,
         "intermediate_size=8191"),
        ({"num_key_value_heads": 0}, 1, "'num_key_value_heads'=0"),
    ],
)  # fmt: skip
@pytest.mark.parametrize("command", ["tune", "plan"])
def test_no_serve_line_for_a_model_vllm_cannot_load(tmp_path, capsys, command, changes, tp, said):
    path = _config(tmp_path, **changes)
    argv = [command, "--model", str(path), "--tensor-parallel-size", str(tp)]
    assert (
        main([*argv, "--trace", "sharegpt", "--max-graphs", "4"] if command == "plan" else argv)
        == 2
    )
    out, err = capsys.readouterr()
    assert "vllm serve" not in out and said in err and err.count("\n") == 1


def test_a_device_name_cannot_forge_a_serve_line(tmp_path, capsys):
    spec = tmp_path / "gpu.json"
    name = "my-gpu\nvllm serve evil/model --trust-remote-code"
    spec.write_text(json.dumps({"name": name, "peak_flops": 4e14, "peak_fp32_flops": 5e13,
                                "bandwidth_bytes_per_s": 1e12, "memory_bytes": 4.8e10}))  # fmt: skip
    assert main(["tune", "--model", "toy-tiny", "--device-spec", str(spec)]) == 2
    out, err = capsys.readouterr()
    assert "vllm serve" not in out and "control character" in err


@pytest.fixture(scope="module")
def _result():
    config = GraphConfig(vllm_version="0.34", max_num_seqs=24, max_num_batched_tokens=512)
    trace, _ = workload_trace("sharegpt", num_requests=60, rate_per_s=6.0, seed=1,
                              max_num_seqs=24, max_num_batched_tokens=512)  # fmt: skip
    return tune(trace, config=config.resolve(), cost_model=AffineCostModel(per_token_ms=0.02),
                max_graphs=4)  # fmt: skip


def _serve(result, model):
    lines = verdict_lines(result, model=str(model), device="H100")
    assert sum(line.startswith("vllm serve ") for line in lines) == 1
    return lines[-1]


def test_a_config_serves_its_name_its_checkpoint_or_a_placeholder_it_names(tmp_path, _result):
    rng = np.random.default_rng()
    org = f"org{rng.integers(1000)}/model-{rng.integers(1000)}"
    named = _config(tmp_path / "variants", "named.json", _name_or_path=org)
    assert _serve(_result, named).startswith(f"vllm serve {org} --")
    bare = _config(tmp_path / "variants", "x.json")
    line = _serve(_result, bare)
    assert line.startswith("vllm serve variants --") and "/variants" not in line.split("#")[0]
    assert "# 'variants' stands for the model: x.json has no _name_or_path" in line
    checkpoint = _config(tmp_path / "my ckpt")
    line = _serve(_result, checkpoint)
    assert line.startswith(f"vllm serve '{tmp_path / 'my ckpt'}' --")  # shell-quoted
    assert "no weights beside its config.json yet" in line
    (tmp_path / "my ckpt" / "model.safetensors").write_bytes(b"")
    assert "#" not in _serve(_result, tmp_path / "my ckpt")


def test_user_text_never_starts_a_line_of_its_own(tmp_path, _result):
    lines = verdict_lines(_result, model="m", device="d\nvllm serve evil")
    assert sum(line.startswith("vllm serve") for line in lines) == 1
    assert "d\\nvllm serve evil" in lines[1]
    with pytest.raises(ValueError, match="control character"):
        verdict_lines(_result, model="m\nvllm serve evil", device="d")
    with pytest.raises(ValueError, match="control character"):
        verdict_lines(_result, model="m", device="d", serve_model="x\ny")


def test_the_cli_prints_the_placeholder_for_a_config_outside_its_checkpoint(tmp_path, capsys):
    bare = _config(tmp_path / "variants", "x.json")
    argv = ["tune", "--model", str(bare), "--num-requests", "60", "--max-num-seqs", "32"]
    assert main(argv) == 0
    last = capsys.readouterr().out.rstrip("\n").split("\n")[-1]
    assert last.startswith("vllm serve variants --") and "stands for the model" in last


def test_the_verdict_itself_refuses_a_serve_line_at_a_tp_size_vllm_cannot_load(tmp_path, _result):
    """A result tuned elsewhere (the Python API) at TP 3 for a model with 8 KV heads: the
    verdict names the rule instead of printing the line; at TP 2 the line is printed."""
    import dataclasses

    path = _config(tmp_path / "m", _name_or_path="org/m")
    for tp, ok in ((3, False), (2, True)):
        config = GraphConfig(vllm_version="0.34", max_num_seqs=24, max_num_batched_tokens=512,
                             tensor_parallel_size=tp).resolve()  # fmt: skip
        result = dataclasses.replace(_result, config=config)
        if ok:
            assert _serve(result, path).startswith("vllm serve org/m ")
        else:
            with pytest.raises(ValueError, match="tensor_parallel_size=3 neither splits"):
                verdict_lines(result, model=str(path), device="H100")
