"""Prefix caching in the replay of vLLM's scheduler, apart from the oracle: the bulk path
against the per-request path on random shared-prefix traces, prefix caching that nothing can
hit against prefix caching off, hit counts against a count made by hand, and the checks on
the inputs (limits, request columns)."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from cgdispatch.core.step_content import StepContent
from cgdispatch.workload import exact_run
from cgdispatch.workload.scheduler import SchedulerLimits, SchedulerSimulator


def shared_trace(rng: np.random.Generator, n: int, hbs: int) -> pd.DataFrame:
    """Requests over a few system prompts, later turns extending earlier prompts."""
    systems = [list(rng.integers(0, 10**6, rng.integers(1, 6))) for _ in range(4)]
    ids_all: list[list[int]] = []
    for _ in range(n):
        roll = rng.random()
        if ids_all and roll < 0.4:
            ids = list(ids_all[rng.integers(len(ids_all))])
        elif roll < 0.8:
            ids = list(systems[rng.integers(len(systems))])
        else:
            ids = []
        ids = (ids + list(rng.integers(0, 10**6, rng.integers(1, 3))))[:12]
        ids_all.append([int(x) for x in ids])
    prompt = [len(ids) * hbs - int(rng.integers(0, hbs)) for ids in ids_all]
    return pd.DataFrame(
        {
            "arrival_s": np.sort(rng.uniform(0, n / 40, n)),
            "prompt_tokens": prompt,
            "output_tokens": rng.integers(1, 200, n),
            "hash_ids": ids_all,
        }
    )


def both_paths(req: pd.DataFrame, lim: SchedulerLimits) -> list[tuple]:
    out = []
    for record in (True, False):
        sim = SchedulerSimulator(req, lim, record_calls=record)
        out.append((sim.run(), sim.exact.request_times(), sim.exact.prefix_hit_rate))
    return out


@pytest.mark.parametrize("seed", range(6))
def test_the_bulk_path_agrees_with_the_per_request_path(seed: int) -> None:
    rng = np.random.default_rng(1000 + seed)
    hbs = int(rng.choice([16, 40, 64]))
    req = shared_trace(rng, 120, hbs)
    bs = int(rng.choice([16, 32]))
    longest = int((req.prompt_tokens + req.output_tokens).max())
    lim = SchedulerLimits(
        vllm_version=("0.33", "0.34")[seed % 2],
        block_size=bs,
        num_gpu_blocks=-(-longest // bs) + 1 + int(rng.integers(0, 150)),
        hash_block_size=hbs,
        max_num_seqs=int(rng.choice([8, 64])),
        max_num_batched_tokens=int(rng.choice([256, 2048])),
        async_scheduling=seed % 3 == 0,
    )
    (a, ta, ha), (b, tb, hb) = both_paths(req, lim)
    assert a.equals(b) and ta.equals(tb) and ha == hb
    assert a["num_cached_tokens"].sum() > 0  # the trace shares prefixes


@pytest.mark.parametrize("seed", range(3))
def test_prefix_caching_that_nothing_can_hit_schedules_as_off(
    seed: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Unique prompts, unlimited KV: nothing can hit and nothing is preempted, so the block
    path gives prefix caching off's steps (the counting path those runs take)."""
    rng = np.random.default_rng(seed)
    n = 150
    req = pd.DataFrame(
        {
            "arrival_s": np.sort(rng.uniform(0, 3, n)),
            "prompt_tokens": rng.integers(1, 900, n),
            "output_tokens": rng.integers(1, 120, n),
        }
    )
    frames = {}
    for label, pc, shortcut in (("off", False, True), ("blocks", True, False), ("on", True, True)):
        monkeypatch.setattr(exact_run, "UNIQUE_UNLIMITED_AS_OFF", shortcut)
        lim = SchedulerLimits(vllm_version="0.34", max_num_batched_tokens=1024,
                              async_scheduling=bool(seed % 2), enable_prefix_caching=pc)  # fmt: skip
        sim = SchedulerSimulator(req, lim)
        frames[label] = sim.run()
        assert (sim.exact.core.pc is not None) == (label == "blocks")
    assert frames["blocks"].equals(frames["off"]) and frames["on"].equals(frames["off"])


@pytest.mark.parametrize("seed", range(4))
def test_repeated_prompts_hit_all_their_whole_blocks_but_the_last_token(seed: int) -> None:
    """The same prompt sent again after the first has finished hits every whole block of
    its first ``prompt - 1`` tokens, counted by hand; fresh prompts hit nothing."""
    rng = np.random.default_rng(seed)
    bs = int(rng.choice([16, 32]))
    hbs = int(rng.choice([8, 24, 64]))
    n = int(rng.integers(3, 8))
    prompt = int(rng.integers(1, 1500))
    ids = [int(x) for x in rng.integers(0, 10**6, -(-prompt // hbs))]
    req = pd.DataFrame(
        {
            "arrival_s": np.arange(n) * 1000.0,  # one at a time
            "prompt_tokens": [prompt] * n,
            "output_tokens": [int(rng.integers(1, 30))] * n,
            "hash_ids": [ids] * n,
        }
    )
    lim = SchedulerLimits(vllm_version="0.34", block_size=bs, hash_block_size=hbs)
    sim = SchedulerSimulator(req, lim)
    steps = sim.run()
    per_repeat = (prompt - 1) // bs * bs
    assert int(steps["num_cached_tokens"].sum()) == (n - 1) * per_repeat
    assert sim.exact.prefix_hit_rate == pytest.approx((n - 1) * per_repeat / (n * prompt))
    fresh = req.assign(hash_ids=[[i] * len(ids) for i in range(n)])  # no two alike
    assert int(SchedulerSimulator(fresh, lim).run()["num_cached_tokens"].sum()) == 0


def test_hash_ids_as_a_csv_holds_them_read_as_lists(tmp_path) -> None:
    rng = np.random.default_rng()
    req = shared_trace(rng, 40, 32)
    path = tmp_path / "t.csv"
    req.assign(hash_ids=[str(ids) for ids in req["hash_ids"]]).to_csv(path, index=False)
    back = pd.read_csv(path)
    lim = SchedulerLimits(vllm_version="0.34", hash_block_size=32, num_gpu_blocks=400)
    assert SchedulerSimulator(back, lim).run().equals(SchedulerSimulator(req, lim).run())


def test_bad_prefix_inputs_are_refused_with_the_fix() -> None:
    with pytest.raises(ValueError, match="hash_block_size=0"):
        SchedulerLimits(vllm_version="0.34", hash_block_size=0)
    with pytest.raises(ValueError, match="enable_prefix_caching='yes'"):
        SchedulerLimits(vllm_version="0.34", enable_prefix_caching="yes")
    base = pd.DataFrame(
        {"arrival_s": [0.0, 1.0], "prompt_tokens": [3, 600], "output_tokens": [2, 2]}
    )
    lim = SchedulerLimits(vllm_version="0.34")
    with pytest.raises(ValueError, match="row 1: hash_ids="):
        SchedulerSimulator(base.assign(hash_ids=[[1], "ab"]), lim)
    with pytest.raises(ValueError, match="row 1: hash_ids="):
        SchedulerSimulator(base.assign(hash_ids=[[1], "[1, x]"]), lim)
    with pytest.raises(ValueError, match="row 0: hash_ids="):
        SchedulerSimulator(base.assign(hash_ids=[[1.5], [1, 2]]), lim)
    with pytest.raises(ValueError, match="2 token ids but prompt_tokens=3"):
        SchedulerSimulator(base.assign(prompt_token_ids=[[1, 2], [1] * 600]), lim)
    with pytest.raises(ValueError, match="both 'hash_ids' and 'prompt_token_ids'"):
        SchedulerSimulator(
            base.assign(hash_ids=[[1], [1, 2]], prompt_token_ids=[[1] * 3, [1] * 600]), lim
        )
    with pytest.raises(ValueError, match="1 hash_ids for prompt_tokens=600 at hash_block_size=512"):
        SchedulerSimulator(base.assign(hash_ids=[[1], [1]]), lim).run()


class Recorder:
    """A content-aware step-time function that records what it prices (a content clock)."""

    def __init__(self) -> None:
        self.contents: list[StepContent] = []

    def __call__(self, num_tokens: int, num_reqs: int) -> float:
        raise AssertionError("a content-aware function is priced by content_ms")

    def content_ms(self, content: StepContent) -> float:
        if content.num_tokens == 0:
            return 0.0
        self.contents.append(content)
        return 5.0 + 0.001 * content.decode_kv_tokens + 0.01 * content.num_tokens


def _expand(contents: list[StepContent]) -> list[tuple]:
    return [(c.decode_reqs, c.decode_tokens, c.decode_kv_tokens, c.chunks) for c in contents]


@pytest.mark.parametrize("version", ["0.33", "0.34"])
def test_step_contents_price_cached_context_alike_on_both_paths(version: str) -> None:
    """A prompt chunk after a hit runs over its cached tokens as context: the contents the
    step-time function sees start each admitted request's chunk at its hits (summing to the
    call's num_cached_tokens), and the bulk path hands over the same contents."""
    rng = np.random.default_rng()
    req = shared_trace(rng, 80, 32)
    lim = SchedulerLimits(vllm_version=version, hash_block_size=32, num_gpu_blocks=300,
                          max_num_batched_tokens=512)  # fmt: skip
    per_call, bulk = Recorder(), Recorder()
    sim = SchedulerSimulator(req, lim, step_time_ms=per_call, record_calls=True)
    sim.run()
    SchedulerSimulator(req, lim, step_time_ms=bulk).run()
    assert _expand(bulk.contents) == _expand(per_call.contents)
    seen: set[int] = set()
    ran = [c for c in sim.exact.calls if c.num_reqs]
    for call, content in zip(ran, per_call.contents):
        for i in call.preempted:
            seen.discard(i)
        starts = dict(zip((i for i, d in zip(call.reqs, call.decode) if not d), content.chunks))
        admitted = [i for i in call.reqs if i not in seen]
        seen.update(call.reqs)
        hits = sum(starts[i][0] if i in starts else 0 for i in admitted)
        assert hits == call.num_cached_tokens or any(
            call.decode[call.reqs.index(i)] for i in admitted
        )


@pytest.mark.parametrize("is_async", [False, True])
def test_steady_stretches_take_blocks_as_the_step_loop_does_under_eviction(
    is_async: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Long decodes in a KV cache small enough to evict cached prefixes: the bulk path, whose
    steady stretches take all their calls' blocks at once, gives the per-request path's steps,
    times and hits on a fresh random trace (seed in the failure message)."""
    from cgdispatch.workload import vllm_steady

    seed = int(np.random.SeedSequence().entropy % 2**32)
    rng = np.random.default_rng(seed)
    hbs = int(rng.choice([16, 48]))
    req = shared_trace(rng, 150, hbs)
    req["output_tokens"] = rng.integers(40, 400, len(req))
    bs = 16
    longest = int((req.prompt_tokens + req.output_tokens).max())
    lim = SchedulerLimits(
        vllm_version=("0.33", "0.34")[int(rng.integers(2))],
        block_size=bs,
        num_gpu_blocks=-(-longest // bs) + 1 + int(rng.integers(20, 120)),
        hash_block_size=hbs,
        max_num_seqs=int(rng.choice([8, 32])),
        async_scheduling=is_async,
    )
    taken = []  # blocks each steady stretch took
    real = vllm_steady.SteadyDecodes.steady_stretch

    def counting(self, *args, **kwargs):
        before = self.used
        run = real(self, *args, **kwargs)
        if run is not None:
            taken.append(self.used - before)
        return run

    monkeypatch.setattr(vllm_steady.SteadyDecodes, "steady_stretch", counting)
    (a, ta, ha), (b, tb, hb) = both_paths(req, lim)
    assert a.equals(b) and ta.equals(tb) and ha == hb, f"seed {seed}"
    assert sum(1 for t in taken if t > 1) > 0, f"seed {seed}: no stretch took several blocks"
    assert a["num_cached_tokens"].sum() > 0, f"seed {seed}"


@pytest.mark.parametrize("seed", range(4))
def test_hash_ids_chained_at_once_name_blocks_as_one_request_at_a_time(
    seed: int, monkeypatch
) -> None:
    """BlockKeys chains every request's hash_ids at load (numpy, depth by depth) and names
    the blocks of a chunk of requests at once; the hashes it gives must be equal exactly
    where the one-request-at-a-time interning's are, on fresh random ids with heavy sharing,
    LoRA adapters and block sizes either side of the hash block size, asked for in any
    order with chunks of any size dropped and made again."""
    from cgdispatch.workload import vllm_prefix
    from cgdispatch.workload.vllm_prefix import BlockKeys

    rng = np.random.default_rng(np.random.SeedSequence().entropy)
    n = int(rng.integers(1, 400))
    bs, hbs = int(rng.choice([1, 4, 16])), int(rng.choice([1, 3, 16, 64]))
    pool = rng.integers(-(2**62), 2**62, int(rng.integers(1, 6)))  # few ids: much sharing
    ids = [[int(x) for x in rng.choice(pool, int(rng.integers(0, 12)))] for _ in range(n)]
    prompt = [len(x) * hbs - int(rng.integers(0, hbs)) if x else 0 for x in ids]
    lora = [int(x) for x in rng.integers(-1, 3, n)]
    at_once = BlockKeys(prompt, lora, bs, ids, None, hbs)
    one_by_one = BlockKeys(prompt, lora, bs, ids, None, hbs)
    one_by_one._chains = None  # the per-request interning
    per_request = BlockKeys(prompt, lora, bs, ids, None, hbs)
    per_request._prompt_np = None  # chained at load, named one request at a time
    assert at_once._chains is not None, "the ids were not chained at load"
    monkeypatch.setattr(vllm_prefix, "KEY_CHUNK", int(rng.integers(1, 50)))
    monkeypatch.setattr(vllm_prefix, "KEY_CHUNKS_KEPT", int(rng.integers(1, 3)))
    for i in rng.permutation(n).tolist():  # any order: chunks dropped, made again
        at_once.prompt_keys(i)
    fast = [k for i in range(n) for k in at_once.prompt_keys(i)]
    slow = [k for i in range(n) for k in one_by_one.prompt_keys(i)]
    assert fast == [k for i in range(n) for k in per_request.prompt_keys(i)]
    assert len(fast) == len(slow) == sum(p // bs for p in prompt)
    # a bijection between the two namings: equal in one exactly where equal in the other
    assert len(set(zip(fast, slow))) == len(set(fast)) == len(set(slow)), seed
