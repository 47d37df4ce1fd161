"""``tune --no-prefix-caching`` replays vLLM's scheduler with prefix caching off, in the plan's
trace and in every judging replay (issue 40): on traffic whose prompts share prefixes the
held-out figures change, and off they equal the same requests with no prefix identity at all
(with the KV cache this ample nothing is preempted, so prefix caching has nothing to hit)."""

from __future__ import annotations

import json

import numpy as np

from cgdispatch.__main__ import main
from cgdispatch.workload.prefix_presets import prefix_requests


def _csv(tmp_path, frame, name, ids: bool) -> str:
    out = frame[["arrival_s", "prompt_tokens", "output_tokens"]].rename(
        columns={"arrival_s": "timestamp"}
    )
    if ids:
        out = out.assign(hash_ids=[json.dumps(list(map(int, h))) for h in frame["hash_ids"]])
    path = tmp_path / name
    out.to_csv(path, index=False)
    return str(path)


def _tune(capsys, path: str, *extra: str) -> dict:
    argv = ["tune", "--model", "llama-3.1-8b", "--device", "H200", "--max-num-seqs", "64",
            "--trace", path, "--hash-block-size", "64", "--json", *extra]  # fmt: skip
    assert main(argv) == 0
    return json.loads(capsys.readouterr().out)


def test_prefix_caching_off_is_the_traffic_without_prefixes_and_on_changes_it(
    tmp_path, capsys
) -> None:
    seed = int(np.random.default_rng().integers(0, 2**31))
    frame = prefix_requests(160, "shared-prompt", rate_per_s=6.0, seed=seed, hash_block_size=64)
    with_ids = _csv(tmp_path, frame, "ids.csv", ids=True)
    without = _csv(tmp_path, frame, "plain.csv", ids=False)
    on = _tune(capsys, with_ids)
    off = _tune(capsys, with_ids, "--no-prefix-caching")
    plain = _tune(capsys, without)
    held = {name: r["held_out"]["vllm default"] for name, r in (("on", on), ("off", off),
                                                                  ("plain", plain))}  # fmt: skip
    assert held["off"]["num_preemptions"] == 0 == held["plain"]["num_preemptions"], seed
    for key in ("p99_ttft_ms", "mean_step_ms", "throughput_tok_s"):
        assert held["off"][key] == held["plain"][key], (key, seed)
    # the shared prompts' cached blocks are not computed again: first tokens come sooner
    assert held["on"]["p99_ttft_ms"] < held["off"]["p99_ttft_ms"], seed
    assert on["traffic"]["prefix_hit_rate"] > 0.3
