"""The scheduler oracle: drive vLLM's real ``Scheduler`` / ``AsyncScheduler`` on CPU.

Run inside an oracle virtualenv (``make oracle-scheduler``); cgdispatch is not imported. It
shares :mod:`vllm_oracle`'s CPU bootstrap and tiny Llama config, and writes one JSON fixture
per vLLM version:

    python scripts/vllm_sched_oracle.py --out tests/data/vllm_oracle/scheduler-0.34.0.json

Every case draws a random trace and scheduler settings, builds the engine config with
``EngineArgs(...).create_engine_config()`` and a ``KVCacheConfig`` with one
``FullAttentionSpec`` group of ``num_gpu_blocks`` blocks, then runs the engine loop:
``EngineCore.step`` (sync) or ``EngineCore.step_with_batch_queue`` (async, two batches in
flight). The model is stood in for: a partial prefill samples ``[]``, anything else one
token plus its drafts when they are accepted (all or none, by a rule both sides replay).
The schema is in ``tests/data/vllm_oracle/README.md`` ("Scheduler fixtures").

With ``--prefix`` it runs vLLM's prefix caching (``enable_prefix_caching=True``, the block
hasher vLLM's ``EngineCore`` builds) on traces with shared prefixes: every request carries
``hash_ids`` (one id per ``hash_block_size`` prompt tokens; equal ids = equal tokens) drawn
so that requests share system prompts and grow earlier requests' prompts (multi-turn), under
KV pressure; each step also records the tokens served from the cache to the requests it
admitted. Prompt token ``t`` is ``prompt_token(hash_ids[t // hash_block_size], t %
hash_block_size)``; a request's sampled tokens are ``output_token(rid)``, unique to it.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import random
import sys
import time
from collections import deque
from typing import Any

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import vllm_oracle as base  # noqa: E402  (sets vLLM's environment before it is imported)

MAX_CALLS = 4000  # schedule calls per case; a case that needs more stalled (redrawn)


def prompt_token(hash_id: int, offset: int, hash_block_size: int) -> int:
    """The prompt token at ``offset`` of the block named ``hash_id`` (distinct per pair)."""
    return 1000 + hash_id * hash_block_size + offset


def output_token(rid: int) -> int:
    """Request ``rid``'s sampled token: no other request's, no prompt's."""
    return 50_000_000 + rid


def accepted(t: int, rid: int, accept_mod: int) -> bool:
    """All drafts of request ``rid`` in the step scheduled at clock ``t`` are accepted."""
    return (t + rid) % accept_mod != 0


def random_case(rng: random.Random) -> dict[str, Any]:
    """Random scheduler settings and trace, in vLLM's names."""
    max_model_len = rng.choice([64, 128, 256, 512, 1024, 2048])
    chunked = rng.random() < 0.75
    seqs = rng.choice([1, 2, 3, 4, 6, 8, 16, 32, 128])
    tokens = rng.choice([16, 32, 48, 64, 100, 128, 256, 512, 1024, 2048])
    tokens = max(tokens, seqs)
    if not chunked:
        tokens = max(tokens, max_model_len)
    k = rng.choice([0, 0, 0, 1, 2, 3, 4])
    engine_args: dict[str, Any] = {
        "max_num_seqs": seqs,
        "max_num_batched_tokens": tokens,
        "max_model_len": max_model_len,
        "block_size": rng.choice([16, 32]),
        "enable_chunked_prefill": chunked,
        "async_scheduling": rng.random() < 0.5,
        "num_speculative_tokens": k,
    }
    if chunked and rng.random() < 0.3:
        engine_args["long_prefill_token_threshold"] = rng.choice([1, 4, 16, 33, 64, 200])
    loras = rng.random() < 0.25
    if loras:
        engine_args["enable_lora"] = True
        engine_args["max_loras"] = rng.choice([1, 2, 3])
    n = rng.randint(1, 24)
    spread = rng.choice([0, 0, 3, 10, 40])
    requests = []
    for _ in range(n):
        prompt = rng.choice([rng.randint(1, 40), rng.randint(1, 200), rng.randint(1, 1200)])
        prompt = min(prompt, max_model_len - 1)
        max_tokens = rng.choice([1, 2, rng.randint(1, 20), rng.randint(1, 60)])
        if rng.random() < 0.1 and max_model_len - prompt < 80:
            max_tokens = max_model_len - prompt + rng.randint(1, 30)  # runs into max_model_len
        lora = rng.randint(0, 4) if loras else 0
        requests.append([rng.randint(0, spread), prompt, max_tokens, lora])
    bs = engine_args["block_size"]
    # the most blocks one request can hold (its whole length, its drafts and one more)
    need = max(math.ceil((min(p + m, max_model_len) + 2 * k + 1) / bs) for _, p, m, _ in requests)
    r = rng.random()
    if r < 0.35:
        blocks = None
    elif r < 0.7:
        blocks = need + 1 + rng.randint(0, need)  # +1: vLLM's null block
    else:
        blocks = need + 1 + rng.randint(0, 6 * need)
    return {
        "engine_args": engine_args,
        "num_gpu_blocks": blocks,
        "accept_mod": rng.choice([1, 2, 3, 10**9]),
        "requests": requests,
    }


def random_prefix_case(rng: random.Random) -> dict[str, Any]:
    """:func:`random_case` with prefix caching: shared system prompts, multi-turn growth,
    repeated prompts, and KV caches small enough to evict and preempt."""
    case = random_case(rng)
    ea = case["engine_args"]
    mml = ea["max_model_len"]
    bs = ea["block_size"]
    hbs = rng.choice([bs, bs, 2 * bs, 8, 24, 40, 100])
    systems = [
        [rng.randint(0, 10**6) for _ in range(rng.randint(1, 4))] for _ in range(rng.randint(1, 3))
    ]
    requests: list[list[Any]] = []
    for r in case["requests"]:
        arrival, _, max_tokens, lora = r
        roll = rng.random()
        if requests and roll < 0.35:  # a later turn: an earlier prompt and more
            ids = list(rng.choice(requests)[4]) + [
                rng.randint(0, 10**6) for _ in range(rng.randint(0, 3))
            ]
        elif requests and roll < 0.45:  # the same prompt again
            ids = list(rng.choice(requests)[4])
        elif roll < 0.8:  # a shared system prompt, then its own
            ids = rng.choice(systems) + [rng.randint(0, 10**6) for _ in range(rng.randint(0, 3))]
        else:
            ids = [rng.randint(0, 10**6) for _ in range(rng.randint(1, 4))]
        ids = ids[: max(1, (mml - 1) // hbs)]
        prompt = len(ids) * hbs - rng.randint(0, hbs - 1)
        prompt = max(1, min(prompt, mml - 1))
        ids = ids[: -(-prompt // hbs)]
        requests.append([arrival, prompt, max_tokens, lora, ids])
    case["requests"] = requests
    case["hash_block_size"] = hbs
    k = ea["num_speculative_tokens"]
    need = max(math.ceil((min(p + m, mml) + 2 * k + 1) / bs) for _, p, m, _, _ in requests)
    if rng.random() < 0.85:  # KV pressure: evictions and preemptions
        case["num_gpu_blocks"] = need + 1 + rng.randint(0, 2 * need)
    return case


def _config(engine_args: dict[str, Any], prefix: bool = False) -> Any:
    from vllm.engine.arg_utils import EngineArgs

    kwargs = dict(engine_args)
    spec = kwargs.pop("num_speculative_tokens", 0)
    if spec:
        kwargs["speculative_config"] = {
            "method": "ngram",
            "num_speculative_tokens": spec,
            "prompt_lookup_max": 3,
            "prompt_lookup_min": 1,
        }
    return EngineArgs(
        model=base.model_dir(), skip_tokenizer_init=True, enable_prefix_caching=prefix, **kwargs
    ).create_engine_config()


def _block_hasher(cfg: Any) -> Any:
    """The request block hasher vLLM's ``EngineCore`` builds with prefix caching on."""
    from vllm.utils.hashing import get_hash_fn_by_name
    from vllm.v1.core.kv_cache_utils import get_request_block_hasher, init_none_hash

    fn = get_hash_fn_by_name(cfg.cache_config.prefix_caching_hash_algo)
    init_none_hash(fn)
    return get_request_block_hasher(
        cfg.cache_config.block_size, fn, getattr(cfg, "num_hash_lookahead_tokens", 0) or 0
    )


def _scheduler(cfg: Any, num_blocks: int) -> Any:
    import torch
    from vllm.v1.core.sched.async_scheduler import AsyncScheduler
    from vllm.v1.core.sched.scheduler import Scheduler
    from vllm.v1.kv_cache_interface import FullAttentionSpec, KVCacheConfig, KVCacheGroupSpec
    from vllm.v1.structured_output import StructuredOutputManager

    bs = cfg.cache_config.block_size
    spec = FullAttentionSpec(block_size=bs, num_kv_heads=2, head_size=16, dtype=torch.bfloat16)
    kv = KVCacheConfig(
        num_blocks=num_blocks,
        kv_cache_tensors=[],
        kv_cache_groups=[KVCacheGroupSpec(["model.layers.0.self_attn.attn"], spec)],
    )
    cfg.cache_config.num_gpu_blocks = num_blocks
    cls = AsyncScheduler if cfg.scheduler_config.async_scheduling else Scheduler
    kwargs = {"hash_block_size": bs} if cfg.cache_config.enable_prefix_caching else {}
    return cls(
        vllm_config=cfg,
        kv_cache_config=kv,
        structured_output_manager=StructuredOutputManager(cfg),
        block_size=bs,
        log_stats=False,
        **kwargs,
    )


def _request(
    rid: int,
    prompt: int,
    max_tokens: int,
    lora: int,
    t: int,
    token_ids: list[int] | None = None,
    block_hasher: Any = None,
) -> Any:
    from vllm.sampling_params import SamplingParams
    from vllm.v1.request import Request

    lora_request = None
    if lora:
        from vllm.lora.request import LoRARequest

        lora_request = LoRARequest(f"adapter{lora}", lora, "/nonexistent")
    params = SamplingParams(max_tokens=max_tokens, ignore_eos=True)
    return Request(
        request_id=str(rid),
        prompt_token_ids=token_ids if token_ids is not None else [7] * prompt,
        sampling_params=params,
        pooling_params=None,
        arrival_time=float(t),
        lora_request=lora_request,
        block_hasher=block_hasher,
    )


def run_case(inputs: dict[str, Any]) -> dict[str, Any]:
    """vLLM's steps for one case, or ``refusal`` / ``stalled``."""
    from vllm.v1.outputs import DraftTokenIds, ModelRunnerOutput

    out: dict[str, Any] = {"inputs": inputs}
    hbs = inputs.get("hash_block_size")  # set: prefix caching on
    prefix = hbs is not None
    try:
        cfg = _config(inputs["engine_args"], prefix)
    except Exception as err:  # noqa: BLE001 - a refusal is an answer
        out["refusal"] = {"type": type(err).__name__, "message": str(err)[:300]}
        return out
    sc = cfg.scheduler_config
    k = cfg.num_speculative_tokens or 0
    mml = cfg.model_config.max_model_len
    bs = cfg.cache_config.block_size
    reqs = inputs["requests"]
    blocks = inputs["num_gpu_blocks"]
    if blocks is None:  # "unlimited": every request's whole length at once, and spare
        blocks = sum(math.ceil((mml + 2 * k + 2) / bs) for _ in reqs) + 2
    out["config"] = {
        "max_num_seqs": sc.max_num_seqs,
        "max_num_batched_tokens": sc.max_num_batched_tokens,
        "max_model_len": mml,
        "block_size": bs,
        "enable_chunked_prefill": sc.enable_chunked_prefill,
        "long_prefill_token_threshold": sc.long_prefill_token_threshold,
        "async_scheduling": bool(sc.async_scheduling),
        "num_speculative_tokens": k,
        "max_loras": cfg.lora_config.max_loras if cfg.lora_config is not None else None,
        "num_blocks": blocks,
    }
    out["config"]["enable_prefix_caching"] = bool(cfg.cache_config.enable_prefix_caching)
    try:
        sched = _scheduler(cfg, blocks)
        hasher = _block_hasher(cfg) if prefix else None
    except Exception as err:  # noqa: BLE001
        out["refusal"] = {"type": type(err).__name__, "message": str(err)[:300]}
        return out
    order = sorted(range(len(reqs)), key=lambda i: (reqs[i][0], i))
    mod = inputs["accept_mod"]
    steps: list[list[Any]] = []
    finished: dict[str, int] = {}
    clock_of: dict[int, int] = {}
    partial_of: dict[int, set[str]] = {}
    live: set[str] = set()
    t, nxt, calls = 0, 0, 0

    def schedule() -> Any:
        nonlocal t, calls
        waiting = {r.request_id for r in sched.requests.values() if not r.is_finished()}
        waiting -= {r.request_id for r in sched.running}
        so = sched.schedule()
        calls += 1
        clock_of[id(so)] = t
        partial_of[id(so)] = {
            r for r in so.num_scheduled_tokens if sched.requests[r].is_prefill_chunk
        }
        flat = [x for r, n in so.num_scheduled_tokens.items() for x in (int(r), n)]
        pre = sorted(int(r) for r in so.preempted_req_ids)
        if flat or pre:
            used = blocks - 1 - sched.kv_cache_manager.block_pool.get_num_free_blocks()
            step = [t, flat, pre, used]
            if prefix:  # tokens served from the cache to the requests admitted now
                step.append(
                    sum(
                        sched.requests[r].num_computed_tokens - n
                        for r, n in so.num_scheduled_tokens.items()
                        if r in waiting
                    )
                )
            steps.append(step)
        t += 1
        return so

    def finish(so: Any) -> list[str]:
        st = clock_of.pop(id(so))
        partial = partial_of.pop(id(so))
        ids = list(so.num_scheduled_tokens)
        sampled = []
        for r in ids:
            if r in partial:
                sampled.append([])
            else:
                drafts = len(so.scheduled_spec_decode_tokens.get(r, ()))
                ok = drafts and accepted(st, int(r), mod)
                sampled.append([output_token(int(r))] * (1 + (drafts if ok else 0)))
        mro = (
            ModelRunnerOutput(
                req_ids=ids,
                req_id_to_index={r: i for i, r in enumerate(ids)},
                sampled_token_ids=sampled,
            )
            if _has_index_field()
            else ModelRunnerOutput(req_ids=ids, sampled_token_ids=sampled)
        )
        sched.update_from_output(so, mro)
        for r in list(live):
            req = sched.requests.get(r)
            if req is None or req.is_finished():
                finished[r] = st
                live.discard(r)
        return [r for r, s in zip(ids, sampled) if s and r in live]

    def arrive() -> None:
        nonlocal nxt
        while nxt < len(order) and reqs[order[nxt]][0] <= t:
            i = order[nxt]
            p, m, lora = reqs[i][1:4]
            ids = None
            if prefix:
                ids = [prompt_token(reqs[i][4][x // hbs], x % hbs, hbs) for x in range(p)]
            sched.add_request(_request(i, p, m, lora, t, ids, hasher))
            live.add(str(i))
            nxt += 1

    def engine_loop() -> None:
        nonlocal t
        queue: deque[Any] = deque()
        while calls < MAX_CALLS:
            arrive()
            if not sc.async_scheduling:
                if not sched.has_requests():
                    if nxt == len(order):
                        break
                    t = max(t, reqs[order[nxt]][0])
                    continue
                so = schedule()
                sampled_ids = finish(so)
                if (
                    k
                    and so.total_num_scheduled_tokens > 0
                    and not getattr(so, "skip_drafts", False)
                ):
                    sched.update_draft_token_ids(
                        DraftTokenIds(sampled_ids, [[11] * k for _ in sampled_ids])
                    )
                continue
            if sched.has_requests():
                so = schedule()
                queue.appendleft(so)
                executed = so.total_num_scheduled_tokens > 0
                if len(queue) < 2 and (executed or sched.has_requests()):
                    continue
            elif not queue:
                if nxt == len(order):
                    break
                t = max(t, reqs[order[nxt]][0])
                continue
            finish(queue.pop())

    try:
        engine_loop()
    except AssertionError as err:  # vLLM's own scheduler gave up on this trace
        where = _vllm_frame(err)
        if where is None:  # an assertion of this driver's: a bug here, not an answer
            raise
        out["crash"] = {"type": "AssertionError", "where": where, "message": str(err)[:300]}
        return out
    if calls >= MAX_CALLS or live:
        out["stalled"] = True
        return out
    out["steps"] = steps
    out["finished"] = [finished[str(i)] for i in range(len(reqs))]
    return out


def _vllm_frame(err: BaseException) -> str | None:
    """``vllm/.../file.py:line`` of the innermost frame of ``err``, when that frame is
    vLLM's (None: raised elsewhere)."""
    import traceback

    frames = traceback.extract_tb(err.__traceback__)
    sep = f"{os.sep}vllm{os.sep}"
    if not frames or sep not in frames[-1].filename:
        return None
    path = frames[-1].filename
    return f"{path[path.rindex(sep) + 1 :]}:{frames[-1].lineno}"


_INDEX_FIELD: bool | None = None


def _has_index_field() -> bool:
    global _INDEX_FIELD
    if _INDEX_FIELD is None:
        import dataclasses

        from vllm.v1.outputs import ModelRunnerOutput

        _INDEX_FIELD = "req_id_to_index" in {f.name for f in dataclasses.fields(ModelRunnerOutput)}
    return _INDEX_FIELD


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", required=True, help="fixture path (JSON)")
    parser.add_argument("--cases", type=int, default=400)
    parser.add_argument("--seed", type=int, default=20261203)
    parser.add_argument(
        "--prefix", action="store_true", help="prefix caching on, traces with shared prefixes"
    )
    args = parser.parse_args(argv)
    t0 = time.time()
    version = base.bootstrap()
    rng = random.Random(args.seed)
    draw = random_prefix_case if args.prefix else random_case
    cases, stalled, refused = [], 0, 0
    crashed: list[str] = []  # where vLLM's scheduler asserted, one entry a redrawn trace
    while len(cases) < args.cases:
        case = run_case(draw(rng))
        if case.get("stalled") or "refusal" in case or "crash" in case:
            # redrawn: only traces vLLM ran to the end count
            stalled += bool(case.get("stalled"))
            refused += "refusal" in case
            if "crash" in case:
                crashed.append(case["crash"]["where"])
            continue
        cases.append({"id": len(cases), **case})
    # no run time in the fixture: it differs on every run, and `make oracle` must leave the
    # checkout as it found it when vLLM's answers are unchanged (printed below instead)
    doc = {
        "schema": 1,
        "kind": "scheduler-prefix" if args.prefix else "scheduler",
        "vllm_version": version,
        "seed": args.seed,
        "num_cases": len(cases),
        "num_stalled_redrawn": stalled,
        "num_refused_redrawn": refused,
        **({"crashed_redrawn": crashed} if crashed else {}),
        "model_config": base.TINY_LLAMA,
        "step_fields": ["clock", "scheduled", "preempted", "kv_blocks_used"]
        + (["num_cached_tokens"] if args.prefix else []),
        "cases": cases,
    }
    with open(args.out, "w") as f:
        json.dump(doc, f, separators=(",", ":"))
        f.write("\n")
    print(
        f"vLLM {version}: {len(cases)} scheduler cases ({refused} refused, {stalled} stalled "
        f"and {len(crashed)} crashed redrawn) -> {args.out} in {time.time() - t0:.1f} s"
        + "".join(f"\n  vLLM asserted at {where}" for where in crashed)
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
