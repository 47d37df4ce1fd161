"""mooncake_trace JSONL and hash_ids CSV cells: requests with prefix identity, sessions,
errors naming file, line, field, rule and fix; the ideal prefix hit rate against a brute
force count; the shared-prompt and multi-turn presets."""

import json
import math

import numpy as np
import pandas as pd
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from cgdispatch.workload.files import load_requests, load_trace
from cgdispatch.workload.mooncake import load_mooncake
from cgdispatch.workload.prefix_presets import PREFIX_PRESETS, prefix_requests
from cgdispatch.workload.prefix_stats import prefix_hit_rate, prefix_stats
from cgdispatch.workload.sources import workload_requests, workload_trace


def _seed() -> int:
    seed = int(np.random.SeedSequence().entropy % 2**32)
    print("seed", seed)  # shown when a test fails
    return seed


def _brute_hit_rate(hash_ids) -> float:
    """The share of blocks whose whole prefix (as a tuple) came in an earlier request."""
    seen, blocks, hits = set(), 0, 0
    for ids in hash_ids:
        prefixes = [tuple(ids[: j + 1]) for j in range(len(ids))]
        blocks += len(prefixes)
        hits += sum(p in seen for p in prefixes)
        seen.update(prefixes)
    return hits / blocks if blocks else 0.0


def _random_lines(rng, n, block):
    """Open-loop mooncake lines whose ids come from a small pool (so prefixes recur)."""
    lines, stamps = [], np.sort(rng.uniform(0, 60_000, n))
    for t in stamps:
        prompt = int(rng.integers(1, 6 * block))
        ids = rng.integers(0, 4, -(-prompt // block)).tolist()
        lines.append({"timestamp": float(t), "input_length": prompt,
                      "output_length": int(rng.integers(1, 500)), "hash_ids": ids})  # fmt: skip
    return lines


def _write(tmp_path, lines, name="t.jsonl"):
    path = tmp_path / name
    path.write_text("".join((json.dumps(r) if isinstance(r, dict) else r) + "\n" for r in lines))
    return path


def test_open_loop_lines_become_requests(tmp_path):
    rng = np.random.default_rng(_seed())
    block = int(rng.choice([16, 64, 512]))
    lines = _random_lines(rng, 50, block)
    rng.shuffle(lines)  # a file need not be in time order
    kind, req = load_trace(_write(tmp_path, lines), hash_block_size=block)
    assert kind == "requests"
    order = sorted(lines, key=lambda r: r["timestamp"])
    t0 = order[0]["timestamp"]
    assert np.allclose(req["arrival_s"], [(r["timestamp"] - t0) / 1e3 for r in order])
    assert req["prompt_tokens"].tolist() == [r["input_length"] for r in order]
    assert req["output_tokens"].tolist() == [r["output_length"] for r in order]
    assert req["hash_ids"].tolist() == [r["hash_ids"] for r in order]
    assert "session_id" not in req.columns
    assert prefix_hit_rate(req) == pytest.approx(_brute_hit_rate([r["hash_ids"] for r in order]))


def test_sessions_resend_their_history(tmp_path):
    rng = np.random.default_rng(_seed())
    block = 32
    lines, first = [], {}
    for s in range(5):
        for turn in range(int(rng.integers(1, 5))):
            text = int(rng.integers(1, 200))
            row = {"session_id": f"s{s}", "input_length": text,
                   "output_length": int(rng.integers(1, 100)),
                   "hash_ids": list(range(1000 * s + 10 * turn, 1000 * s + 10 * turn + -(-text // block)))}  # fmt: skip
            if turn == 0:
                row["timestamp"] = first[s] = int(rng.integers(0, 5000))
            else:
                row["delay"] = int(rng.integers(0, 3000))
            lines.append(row)
    req = load_mooncake(_write(tmp_path, lines), hash_block_size=block)
    t0 = min(first.values())
    for s in range(5):
        rows = req[req["session_id"] == s]  # codes in order of first appearance
        mine = [r for r in lines if r["session_id"] == f"s{s}"]
        # turn k's prompt: every earlier prompt and answer, then its own text
        history, arrival = 0, (first[s] - t0) / 1e3
        for k, r in enumerate(mine):
            got = rows[rows["turn"] == k].iloc[0]
            assert got["prompt_tokens"] == history + r["input_length"]
            assert len(got["hash_ids"]) == math.ceil(got["prompt_tokens"] / block)
            if k:
                arrival += r["delay"] / 1e3
                assert got["delay_s"] == pytest.approx(r["delay"] / 1e3)
                prev = rows[rows["turn"] == k - 1].iloc[0]
                keep = prev["prompt_tokens"] // block  # the previous prompt's full blocks
                assert got["hash_ids"][:keep] == prev["hash_ids"][:keep]
            else:
                assert math.isnan(got["delay_s"])
            assert got["arrival_s"] == pytest.approx(arrival)  # the earliest it could come
            history = got["prompt_tokens"] + r["output_length"]
    # ids past the kept blocks are new: no block outside its session shares them
    owners = {}
    for s, ids in zip(req["session_id"], req["hash_ids"]):
        for i in ids:
            assert owners.setdefault(i, s) == s


@pytest.mark.parametrize(
    "line, match",
    [
        ('{"timestamp": 0, "input_length": 600', "line 2: not JSON"),
        ("[1, 2]", "line 2: found list, expected one JSON object"),
        ('{"timestamp": 0, "input_length": 0, "output_length": 5, "hash_ids": []}',
         "line 2, field 'input_length': found 0, expected an integer from 1"),
        ('{"timestamp": -5, "input_length": 5, "output_length": 5, "hash_ids": [1]}',
         "line 2, field 'timestamp': found -5, expected milliseconds"),
        ('{"input_length": 5, "output_length": 5, "hash_ids": [1]}',
         "line 2, field 'timestamp': missing"),
        ('{"timestamp": 1, "input_length": 600, "output_length": 5, "hash_ids": [1]}',
         r"line 2, field 'hash_ids': 1 block ids for 600 prompt tokens, expected 2 .*--hash-block-size"),
        ('{"timestamp": 1, "input_length": 5, "output_length": 5, "hash_ids": [-1]}',
         "line 2, field 'hash_ids': found \\[-1\\], expected a list of integers >= 0"),
        ('{"timestamp": 1, "input_length": 5, "output_length": 5}',
         "line 2, field 'hash_ids': missing here but present on line 1"),
    ],
)  # fmt: skip
def test_bad_lines_name_file_line_field_and_fix(tmp_path, line, match):
    good = {"timestamp": 0, "input_length": 5, "output_length": 5, "hash_ids": [0]}
    path = _write(tmp_path, [good, line])
    with pytest.raises(ValueError, match=match) as err:
        load_trace(path)
    assert str(path) in str(err.value)


def test_csv_hash_ids_json_or_spaces(tmp_path):
    rng = np.random.default_rng(_seed())
    n, block = 30, 16
    prompt = rng.integers(1, 100, n)
    ids = [rng.integers(0, 3, -(-int(p) // block)).tolist() for p in prompt]
    cells = [json.dumps(i) if k % 2 else " ".join(map(str, i)) for k, i in enumerate(ids)]
    frame = pd.DataFrame({"timestamp": np.arange(n) * 0.5, "prompt_tokens": prompt,
                          "output_tokens": 7, "hash_ids": cells})  # fmt: skip
    frame.to_csv(tmp_path / "r.csv", index=False)
    kind, req = load_trace(tmp_path / "r.csv", hash_block_size=block)
    assert kind == "requests" and req["hash_ids"].tolist() == ids
    as_lists = frame.assign(hash_ids=[np.asarray(i) if k % 2 else i for k, i in enumerate(ids)])
    assert load_requests(as_lists, hash_block_size=block)["hash_ids"].tolist() == ids
    frame.loc[3, "hash_ids"] = "1 x"
    with pytest.raises(ValueError, match="row 4, column 'hash_ids': found '1 x'"):
        load_requests(frame, hash_block_size=block)


def test_shipped_sample_reads_and_tunes_its_prefixes():
    req = workload_requests("cgdispatch/data/mooncake_sample.jsonl")
    assert {"hash_ids", "session_id", "delay_s"} <= set(req.columns)
    assert prefix_hit_rate(req) == pytest.approx(_brute_hit_rate(req["hash_ids"]))
    trace, label = workload_trace("cgdispatch/data/mooncake_sample.jsonl")
    assert "mooncake_sample.jsonl" in label and trace["num_tokens"].sum() > 0


def test_prefix_stats_match_brute_force_on_random_ids():
    rng = np.random.default_rng(_seed())
    prompts = [rng.integers(0, int(rng.integers(1, 5)), int(rng.integers(0, 8))).tolist()
               for _ in range(300)]  # fmt: skip
    stats = prefix_stats(prompts)
    assert stats.blocks == sum(map(len, prompts))
    assert stats.hit_rate == pytest.approx(_brute_hit_rate(prompts))


@pytest.mark.parametrize("name", sorted(PREFIX_PRESETS))
def test_prefix_presets_hit_rates_and_ids(name):
    seed, block = _seed(), int(np.random.default_rng().choice([64, 256, 512]))
    req = prefix_requests(400, name, rate_per_s=5.0, seed=seed, hash_block_size=block)
    assert len(req) == 400
    assert (req["prompt_tokens"] >= 1).all() and (req["output_tokens"] >= 1).all()
    assert [len(i) for i in req["hash_ids"]] == [math.ceil(p / block) for p in req["prompt_tokens"]]
    assert prefix_hit_rate(req) == pytest.approx(_brute_hit_rate(req["hash_ids"]))
    assert prefix_hit_rate(req) > 0  # they share prefixes
    again = prefix_requests(400, name, rate_per_s=5.0, seed=seed, hash_block_size=block)
    pd.testing.assert_frame_equal(req, again)


def test_shared_prompt_shares_only_the_system_prompt_blocks():
    seed = _seed()
    preset = PREFIX_PRESETS["shared-prompt"]
    req = preset.requests(300, seed=seed, hash_block_size=512)
    full = preset.system_prompt_tokens // 512
    heads = {tuple(i[:full]) for i in req["hash_ids"]}
    assert len(heads) <= preset.num_system_prompts
    tails = [i for ids in req["hash_ids"] for i in ids[full:]]
    assert len(tails) == len(set(tails))  # the user's blocks are never shared


def test_multi_turn_sessions_chain_their_turns():
    req = prefix_requests(500, "multi-turn", seed=_seed())
    for _, rows in req.groupby("session_id"):
        rows = rows.sort_values("turn")
        assert rows["turn"].tolist() == list(range(len(rows)))
        p, o = rows["prompt_tokens"].to_numpy(), rows["output_tokens"].to_numpy()
        assert (p[1:] > p[:-1] + o[:-1]).all()  # history plus a new text of >= 1 token
        assert rows["delay_s"].iloc[1:].notna().all() and math.isnan(rows["delay_s"].iloc[0])


VALUES = st.one_of(
    st.none(), st.booleans(), st.integers(-5, 10**20), st.floats(allow_nan=True),
    st.text(max_size=4), st.lists(st.integers(-2, 10**20), max_size=5),
    st.lists(st.lists(st.integers(0, 3), max_size=2), max_size=2),
)  # fmt: skip
FIELDS = ["timestamp", "input_length", "output_length", "hash_ids", "session_id", "delay"]


@settings(
    max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(lines=st.lists(st.dictionaries(st.sampled_from(FIELDS), VALUES, max_size=6), max_size=6))
def test_random_lines_give_requests_or_one_error_line(tmp_path, lines) -> None:
    """Any JSON objects: a request table, or one ValueError naming the file."""
    path = tmp_path / "r.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in lines))
    try:
        req = load_mooncake(path, hash_block_size=2)
    except ValueError as err:
        text = " ".join(str(err).split())
        assert str(path) in text and len(text) < 2000
        return
    assert len(req) == len(lines) and req["arrival_s"].min() == 0.0
    assert (req["prompt_tokens"] >= 1).all() and (req["output_tokens"] >= 1).all()
