"""Traffic as vLLM sees it in ``tune``: max_model_len as vLLM picks it, the requests it rejects
(counted, dropped; a trace refused only when all are), a mooncake_trace's prefix hit rate
in the header, and a client's concurrency limit. Fresh random inputs each run, checked
against counts made here."""

from __future__ import annotations

import json
import random
import sys

import numpy as np
import pandas as pd
import pytest

from cgdispatch.__main__ import main
from cgdispatch.estimate.startup import startup_for
from cgdispatch.plan.tune_run import TuneSettings, tune_for
from cgdispatch.workload.model_len import (
    config_max_model_len,
    served_requests,
    vllm_max_model_len,
)

SMALL = ("--model", "toy-tiny", "--max-num-seqs", "32")


@pytest.fixture(autouse=True)
def _cache(tmp_path_factory, monkeypatch):
    monkeypatch.setenv("CGDISPATCH_CACHE", str(tmp_path_factory.getbasetemp() / "cost-cache"))


def _seed() -> int:
    seed = random.randrange(1 << 30)
    print("seed", seed, file=sys.stderr)  # shown when a test fails; stdout holds the JSON
    return seed


def _brute_hit_rate(hash_ids) -> float:
    seen, blocks, hits = set(), 0, 0
    for ids in hash_ids:
        prefixes = [tuple(ids[: j + 1]) for j in range(len(ids))]
        blocks += len(prefixes)
        hits += sum(p in seen for p in prefixes)
        seen.update(prefixes)
    return hits / blocks


def test_served_requests_drop_long_prompts_and_cap_outputs() -> None:
    rng = np.random.default_rng(_seed())
    n = int(rng.integers(1, 300))
    req = pd.DataFrame({"arrival_s": np.sort(rng.uniform(0, 10, n)),
                        "prompt_tokens": rng.integers(1, 5000, n),
                        "output_tokens": rng.integers(1, 3000, n)})  # fmt: skip
    req.attrs["max_concurrency"] = 3
    mml = int(rng.integers(2, 6000))
    if (req["prompt_tokens"] >= mml).all():
        with pytest.raises(ValueError, match="nothing of this trace could be served"):
            served_requests(req, mml, "here")
        return
    kept, rejected = served_requests(req, mml)
    rows = [r for r in req.itertuples() if r.prompt_tokens < mml]
    assert rejected == n - len(rows)
    assert kept["prompt_tokens"].tolist() == [r.prompt_tokens for r in rows]
    assert kept["output_tokens"].tolist() == [min(r.output_tokens, mml - r.prompt_tokens)
                                              for r in rows]  # fmt: skip
    assert kept.attrs["max_concurrency"] == 3
    assert served_requests(req, None) == (req, 0)


def test_every_request_too_long_is_refused_naming_the_fix() -> None:
    req = pd.DataFrame({"arrival_s": [0.0, 1.0], "prompt_tokens": [900, 1000],
                        "output_tokens": [5, 5]})  # fmt: skip
    with pytest.raises(
        ValueError, match=r"max_model_len=900 tokens or more \(m on d\).*--max-model-len"
    ):
        served_requests(req, 900, "m on d")


def test_config_length_is_vllm_s_smallest_key_and_the_kv_cache_caps_it(tmp_path) -> None:
    rng = random.Random(_seed())
    keys = ["max_position_embeddings", "n_positions", "max_seq_len", "seq_length",
            "max_sequence_length", "max_seq_length", "seq_len"]  # fmt: skip
    cfg = {k: rng.randrange(512, 1 << 18) for k in rng.sample(keys, rng.randint(1, 4))}
    assert config_max_model_len(cfg) == min(cfg.values())
    assert config_max_model_len({"text_config": cfg}) == min(cfg.values())
    (tmp_path / "config.json").write_text(json.dumps({**cfg, "model_max_length": 777}))
    assert config_max_model_len(tmp_path) == 777  # Command-R's key wins, as in vLLM
    assert config_max_model_len("llama-3.1-8b") is None  # a registry name states none
    kv = rng.uniform(100, 1e6)
    length = rng.choice([None, rng.randrange(2, 1 << 20)])
    fits = int(kv // 16) * 16
    assert vllm_max_model_len(length, kv) == (fits if length is None else min(length, fits))
    assert vllm_max_model_len(None, None) is None


def _mooncake(path, rng, n, block=64):
    """Open-loop lines with ids from a small pool (prefixes recur), prompts up to 2,000."""
    lines = []
    for t in np.sort(rng.uniform(0, 30_000, n)):
        prompt = int(rng.integers(2, 2000))
        lines.append({"timestamp": float(t), "input_length": prompt,
                      "output_length": int(rng.integers(1, 200)),
                      "hash_ids": rng.integers(0, 3, -(-prompt // block)).tolist()})  # fmt: skip
    path.write_text("".join(json.dumps(r) + "\n" for r in lines))
    return lines


def test_a_mooncake_trace_tunes_with_its_rejections_and_hit_rate(tmp_path, capsys) -> None:
    rng = np.random.default_rng(_seed())
    lines = _mooncake(tmp_path / "t.jsonl", rng, 150)
    mml = int(rng.integers(800, 1900))
    served = [r for r in lines if r["input_length"] < mml]
    flags = [*SMALL, "--trace", str(tmp_path / "t.jsonl"), "--hash-block-size", "64",
             "--max-model-len", str(mml)]  # fmt: skip
    assert main(["tune", *flags, "--json"]) == 0
    traffic = json.loads(capsys.readouterr().out)["traffic"]
    assert traffic["rejected_requests"] == len(lines) - len(served)
    assert traffic["max_model_len"] == mml
    want = _brute_hit_rate([r["hash_ids"] for r in served])
    assert traffic["prefix_hit_rate"] == pytest.approx(want)
    assert main(["tune", *flags]) == 0
    header = capsys.readouterr().out.split("\n")[1]
    assert f"prefix hit rate (trace): {100 * want:.1f}%" in header
    rejected = len(lines) - len(served)
    said = f"{rejected:,} request{'s' if rejected > 1 else ''} rejected as vLLM would"
    assert (said in header) == (rejected > 0)


def test_a_trace_vllm_would_reject_whole_is_one_error_line(tmp_path, capsys) -> None:
    rng = np.random.default_rng(_seed())
    lines = _mooncake(tmp_path / "t.jsonl", rng, 20)
    shortest = min(r["input_length"] for r in lines)
    argv = ["tune", *SMALL, "--trace", str(tmp_path / "t.jsonl"), "--hash-block-size", "64",
            "--max-model-len", str(shortest)]  # fmt: skip
    capsys.readouterr()
    assert main(argv) == 2
    err = capsys.readouterr().err.strip().split("\n")
    assert len(err) == 1 and "nothing of this trace could be served" in err[0]


def test_a_max_model_len_the_kv_cache_cannot_hold_is_refused() -> None:
    s = TuneSettings(model="qwen2.5-7b", device="H100", num_requests=50)
    from cgdispatch.core.config import GraphConfig

    config = GraphConfig(vllm_version=s.vllm_version).resolve()
    kv = startup_for(s.model, s.device)(config).kv_cache_tokens
    with pytest.raises(ValueError, match="vLLM would refuse to start"):
        tune_for(TuneSettings(**{**s.__dict__, "max_model_len": int(kv) + 16}))


def test_max_concurrency_is_a_closed_loop_in_the_header(capsys) -> None:
    n = random.choice([1, 4, 16])
    argv = ["tune", *SMALL, "--trace", "multi-turn", "--num-requests", "80"]
    assert main([*argv, "--max-concurrency", str(n), "--json"]) == 0
    closed = json.loads(capsys.readouterr().out)
    assert closed["traffic"]["max_concurrency"] == n
    assert main([*argv, "--json"]) == 0
    open_ = json.loads(capsys.readouterr().out)
    assert open_["traffic"]["max_concurrency"] is None
    # the held-out replay's arrivals differ: one slot serialises the requests
    if n == 1:
        assert (
            closed["held_out"]["vllm default"]["p99_ttft_ms"]
            != open_["held_out"]["vllm default"]["p99_ttft_ms"]
        )
    assert main([*argv, "--max-concurrency", str(n)]) == 0
    assert f"closed loop, at most {n} requests in flight" in capsys.readouterr().out
