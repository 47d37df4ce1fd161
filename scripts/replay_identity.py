"""The replay of vLLM's scheduler in two checkouts, compared step for step on the same random
traces: a gate for changes to the replay's speed that must not change its output.

Each checkout runs in its own process (``PYTHONPATH`` set to it) and writes, per case, the
step frame, the request times and the prefix hit rate; the two are compared with
``pandas.testing.assert_frame_equal(check_exact=True)``. Cases are drawn fresh from a seed:
prefix caching on (``hash_ids`` over shared system prompts and extended turns) and off,
vLLM 0.33 and 0.34, sync and async, drafts, LoRA limits, max_model_len, chunked prefill off,
KV caches from one request's worth (preemption) to ample, open and closed loop (a client's
concurrency limit, session turns with think times), and the step loop's per-call path
(``record_calls``) as well as the bulk path.

Run: ``python scripts/replay_identity.py OTHER_CHECKOUT [NUM_CASES] [SEED]`` from a checkout;
it compares this checkout (the script's own) against ``OTHER_CHECKOUT``.
"""

from __future__ import annotations

import os
import pickle
import random
import subprocess
import sys
import tempfile
import warnings
from pathlib import Path

import numpy as np
import pandas as pd


def random_case(seed: int) -> tuple[pd.DataFrame, dict, bool]:
    """(requests, SchedulerLimits keywords, record_calls) for ``seed``."""
    rng, r = np.random.default_rng(seed), random.Random(seed)
    n = r.randint(1, 220)
    gaps = rng.exponential(r.choice([0.001, 0.02, 0.1, 0.5]), n)
    if r.random() < 0.3:
        gaps[rng.random(n) < 0.6] = 0.0
    hbs = r.choice([16, 32, 64])
    prefix = r.random() < 0.7
    out_hi = r.choice([3, 60, 300, 900])
    if prefix:
        systems = [list(rng.integers(0, 10**6, rng.integers(1, 5))) for _ in range(r.randint(1, 6))]
        ids_all: list[list[int]] = []
        for _ in range(n):
            roll = rng.random()
            if ids_all and roll < 0.45:
                ids = list(ids_all[int(rng.integers(len(ids_all)))])
            elif roll < 0.85:
                ids = list(systems[int(rng.integers(len(systems)))])
            else:
                ids = []
            ids = (ids + list(rng.integers(0, 10**6, rng.integers(1, 3))))[:14]
            ids_all.append([int(x) for x in ids])
        prompt = [len(ids) * hbs - int(rng.integers(0, hbs)) for ids in ids_all]
    else:
        prompt = rng.integers(1, r.choice([8, 200, 900]), n).tolist()
    req = pd.DataFrame(
        {
            "arrival_s": np.cumsum(gaps),
            "prompt_tokens": prompt,
            "output_tokens": rng.integers(1, out_hi, n),
        }
    )
    if prefix and r.random() < 0.9:
        req["hash_ids"] = ids_all
        req.attrs["hash_block_size"] = hbs
    lora = r.random() < 0.2
    if lora:
        req["lora_id"] = rng.integers(-1, 4, n)
    closed = r.random() < 0.25
    if closed:
        if r.random() < 0.5:
            sessions = rng.integers(0, max(1, n // 4), n)
            req["session_id"] = sessions
            req["turn"] = pd.Series(sessions).groupby(sessions).cumcount().to_numpy()
            req["delay_s"] = np.where(req["turn"] > 0, rng.exponential(0.2, n), np.nan)
        req.attrs["max_concurrency"] = r.choice([1, 3, 16, 64])
    block_size = r.choice([1, 4, 16, 16, 32])
    mml = r.choice([None, None, None, 1024, 500])
    if mml is not None:
        req = req[req.prompt_tokens < mml].reset_index(drop=True)
        if not len(req):
            req = pd.DataFrame({"arrival_s": [0.0], "prompt_tokens": [5], "output_tokens": [9]})
    longest = int((req.prompt_tokens + req.output_tokens).max())
    longest = min(longest, mml) if mml is not None else longest
    need = -(-longest // block_size) + 1
    seqs = r.choice([1, 3, 8, 32, 256])
    chunked = r.random() < 0.8
    tokens = max(r.choice([seqs, 64, 512, 2048, 8192]), seqs, 3)
    if not chunked:
        tokens = max(tokens, int(req.prompt_tokens.max()))
    limits = dict(
        max_num_seqs=seqs,
        max_num_batched_tokens=tokens,
        vllm_version=r.choice(["0.33", "0.34"]),
        block_size=block_size,
        num_gpu_blocks=r.choice([None, need, need + 3, need * 2, need * 6, need * 40]),
        max_model_len=mml,
        enable_chunked_prefill=chunked,
        long_prefill_token_threshold=r.choice([0, 0, 48]),
        async_scheduling=r.choice([True, True, False]),
        max_loras=r.choice([None, 1, 2]) if lora else None,
        num_speculative_tokens=r.choice([0] * 6 + [2]),
        enable_prefix_caching=prefix or r.random() < 0.3,
        hash_block_size=hbs,
    )
    return req, limits, r.random() < 0.1


def dump(num_cases: int, seed: int, path: str) -> None:
    """Run the cases in this process's checkout; pickle their outcomes to ``path``."""
    from cgdispatch.workload.scheduler import SchedulerLimits, SchedulerSimulator

    def step_time(num_tokens: int, num_reqs: int) -> float:
        return 0.7 + 0.013 * num_tokens + 0.1 * num_reqs  # inexact in binary: sums drift

    results = []
    for k in range(num_cases):
        req, lim, record = random_case(seed + k)
        sim = SchedulerSimulator(
            req, SchedulerLimits(**lim), step_time_ms=step_time, record_calls=record
        )
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            try:
                got = (sim.run(), sim.exact.request_times(), sim.exact.prefix_hit_rate)
            except RuntimeError as err:
                got = str(err)
        results.append(got)
    with open(path, "wb") as f:
        pickle.dump(results, f)


def main() -> int:
    other = Path(sys.argv[1]).resolve()
    num_cases = int(sys.argv[2]) if len(sys.argv) > 2 else 300
    seed = int(sys.argv[3]) if len(sys.argv) > 3 else random.randrange(1 << 30)
    here = Path(__file__).resolve().parent.parent
    outs = []
    with tempfile.TemporaryDirectory() as tmp:
        for k, root in enumerate((here, other)):
            path = os.path.join(tmp, f"{k}.pkl")
            env = {**os.environ, "PYTHONPATH": str(root)}
            code = (
                f"import sys; sys.path.insert(0, {str(here / 'scripts')!r}); "
                f"import replay_identity as m; m.dump({num_cases}, {seed}, {path!r})"
            )
            subprocess.run([sys.executable, "-c", code], env=env, cwd=root, check=True)
            with open(path, "rb") as f:
                outs.append(pickle.load(f))
    mine, theirs = outs
    stretched = 0
    for k, (a, b) in enumerate(zip(mine, theirs)):
        case = f"seed {seed + k}"
        if isinstance(a, str) or isinstance(b, str):
            assert a == b, f"{case}: {a!r} vs {b!r}"
            continue
        pd.testing.assert_frame_equal(a[0], b[0], check_exact=True, obj=f"{case} steps")
        pd.testing.assert_frame_equal(a[1], b[1], check_exact=True, obj=f"{case} times")
        assert a[2] == b[2] or (np.isnan(a[2]) and np.isnan(b[2])), f"{case} hit rate"
        stretched += len(a[0])
    print(f"{num_cases} cases from seed {seed}: identical ({stretched} steps)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
