"""Every count has an upper bound, enforced before anything is allocated for it (issue 21).

Mistakes this catches: ``--max-loras 10**9`` building a dict of 10**9 entries, a capture size
of 2**31-1 building a dense padding list of 2**31 entries, a sweep spec's ``input_sets`` or a
ladder's largest size at 10**9 hanging. Each bound plus one goes through the API in a
subprocess whose address space is capped, so an allocation in proportion to the count fails
the test instead of the machine; docs/bounds.md's table of bounds and reasons is checked against the code.
"""

from __future__ import annotations

import json
import random
import re
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from reference_dispatchers import ReferenceManager, brute_dispatch, expected_keys

from cgdispatch import CudaGraphManager, GraphConfig, ready_dispatcher
from cgdispatch.core import validate as v
from cgdispatch.core.v1 import dispatcher as dispatcher_module
from cgdispatch.core.v2 import cudagraph_manager as manager_module

ROOT = Path(__file__).resolve().parents[2]

CAP_BYTES = 3 << 30  # address-space cap of the subprocesses: numpy and pandas start well under


def run_capped(body: str, timeout: float = 120) -> subprocess.CompletedProcess:
    """Run ``body`` in a fresh interpreter whose address space is capped at CAP_BYTES."""
    code = (
        "import resource\n"
        f"resource.setrlimit(resource.RLIMIT_AS, ({CAP_BYTES}, {CAP_BYTES}))\n"
        + textwrap.dedent(body)
    )
    return subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        timeout=timeout,
        cwd=ROOT,
        env={"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin"},
    )


# (label, python expression that must raise ValueError, the bound its message must name)
OVER_THE_BOUND = [
    ("max_num_seqs", "GraphConfig(max_num_seqs=v.MAX_NUM_SEQS + 1, max_num_batched_tokens=2**20)", v.MAX_NUM_SEQS),
    ("max_num_batched_tokens", "GraphConfig(max_num_batched_tokens=v.MAX_STEP_TOKENS + 1)", v.MAX_STEP_TOKENS),
    ("num_speculative_tokens", "GraphConfig(num_speculative_tokens=v.MAX_SPECULATIVE_TOKENS + 1)", v.MAX_SPECULATIVE_TOKENS),
    ("max_loras", "GraphConfig(max_loras=v.MAX_LORAS + 1, specialize_active_lora=True)", v.MAX_LORAS),
    ("max_loras v0.34", "GraphConfig(vllm_version='0.34', max_loras=10**9)", v.MAX_LORAS),
    ("tensor_parallel_size", "GraphConfig(tensor_parallel_size=v.MAX_PARALLEL + 1)", v.MAX_PARALLEL),
    ("warm-ups", "GraphConfig(cudagraph_num_of_warmups=v.MAX_WARMUPS + 1)", v.MAX_WARMUPS),
    ("capture size 2**31-1", "GraphConfig(cudagraph_capture_sizes=[1, 2**31 - 1], max_num_batched_tokens=2**31 - 1)", v.MAX_CAPTURE_SIZE),
    ("capture size v0.34", "GraphConfig(vllm_version='0.34', cudagraph_capture_sizes=[1, v.MAX_CAPTURE_SIZE + 1])", v.MAX_CAPTURE_SIZE),
    ("max capture size", "GraphConfig(max_cudagraph_capture_size=v.MAX_CAPTURE_SIZE + 1)", v.MAX_CAPTURE_SIZE),
    ("sizes in a list", "GraphConfig(cudagraph_capture_sizes=range(1, v.MAX_CAPTURE_SIZES + 2), max_num_batched_tokens=2**20)", v.MAX_CAPTURE_SIZES),
    ("prefill token sizes", "GraphConfig(vllm_version='0.34', prefill_cudagraph_capture_token_sizes=[8, v.MAX_CAPTURE_SIZE + 1])", v.MAX_CAPTURE_SIZE),
    ("max prefill tokens", "GraphConfig(vllm_version='0.34', max_prefill_cudagraph_capture_tokens=10**9)", v.MAX_CAPTURE_SIZE),
    ("data_parallel_size", "GraphConfig(vllm_version='0.34', data_parallel_size=v.MAX_PARALLEL + 1)", v.MAX_PARALLEL),
    ("scheduler max_num_seqs", "SchedulerLimits(max_num_seqs=v.MAX_NUM_SEQS + 1, max_num_batched_tokens=2**20)", v.MAX_NUM_SEQS),
    ("scheduler block_size", "SchedulerLimits(block_size=v.MAX_BLOCK_SIZE + 1, vllm_version='0.34')", v.MAX_BLOCK_SIZE),
    ("scheduler max_model_len", "SchedulerLimits(max_model_len=v.MAX_MODEL_LEN + 1, vllm_version='0.34')", v.MAX_MODEL_LEN),
    ("scheduler max_loras", "SchedulerLimits(max_loras=v.MAX_LORAS + 1)", v.MAX_LORAS),
    ("spec input_sets", "SweepSpec(input_sets=v.MAX_INPUT_SETS + 1)", v.MAX_INPUT_SETS),
    ("spec repeats", "SweepSpec(repeats=v.MAX_REPEATS + 1)", v.MAX_REPEATS),
    ("spec warmup", "SweepSpec(warmup=v.MAX_WARMUPS + 1)", v.MAX_WARMUPS),
    ("spec ladder max", "SweepSpec(max_capture_size=v.MAX_CAPTURE_SIZE + 1)", v.MAX_CAPTURE_SIZE),
    ("spec ladder entry", "SweepSpec(ladders={'mine': [1, 10**9]})", v.MAX_CAPTURE_SIZE),
    ("spec max_num_seqs", "SweepSpec(max_num_seqs=v.MAX_NUM_SEQS + 1)", v.MAX_NUM_SEQS),
    ("every-size ladder", "every_size_ladder(v.MAX_CAPTURE_SIZES + 1)", v.MAX_CAPTURE_SIZES),
    ("sglang ladder", "sglang_ladder(10**9)", v.MAX_CAPTURE_SIZE),
    ("synthetic requests", "synthetic_requests(v.MAX_REQUESTS + 1)", v.MAX_REQUESTS),
    ("random steps", "random_batches(GraphConfig(), v.MAX_STEPS + 1)", v.MAX_STEPS),
    ("num_tokens", "dispatch_step(make_graph_dispatcher(GraphConfig()), v.MAX_STEP_TOKENS + 1)", v.MAX_STEP_TOKENS),
    ("padding table", "padded_token_table(make_graph_dispatcher(GraphConfig()), max_tokens=v.MAX_CAPTURE_SIZE + 1)", v.MAX_CAPTURE_SIZE),
    ("nesting", "GraphConfig.from_vllm(deep(v.MAX_NESTING + 1))", v.MAX_NESTING),
    ("config layers", "model_from_config(dict(CFG, num_hidden_layers=v.MAX_LAYERS + 1))", v.MAX_LAYERS),
    ("config hidden_size", "model_from_config(dict(CFG, hidden_size=v.MAX_MODEL_WIDTH + 1))", v.MAX_MODEL_WIDTH),
    ("config intermediate", "model_from_config(dict(CFG, intermediate_size=10**15))", v.MAX_MODEL_WIDTH),
    ("config heads", "model_from_config(dict(CFG, num_attention_heads=v.MAX_HEADS + 1))", v.MAX_HEADS),
    ("config vocab", "model_from_config(dict(CFG, vocab_size=v.MAX_VOCAB + 1))", v.MAX_VOCAB),
    ("config experts", "model_from_config(dict(CFG, model_type='mixtral', num_local_experts=v.MAX_EXPERTS + 1, num_experts_per_tok=2))", v.MAX_EXPERTS),
    ("device rate", "DeviceSpec('g', 10**18 + 1, 1e12, 1e12)", v.MAX_DEVICE_RATE),
    ("device memory", "DeviceSpec('g', 1e14, 1e12, 1e12, memory_bytes=v.MAX_DEVICE_MEMORY + 1)", v.MAX_DEVICE_MEMORY),
    ("device launch", "DeviceSpec('g', 1e14, 1e12, 1e12, kernel_launch_us=v.MAX_DEVICE_US + 1)", v.MAX_DEVICE_US),
]  # fmt: skip
CONFIG = dict(model_type="llama", num_hidden_layers=2, hidden_size=256, num_attention_heads=4,
              num_key_value_heads=2, intermediate_size=512, vocab_size=1000)  # fmt: skip


def test_each_bound_plus_one_is_refused_under_a_memory_cap() -> None:
    cases = json.dumps([(label, expr) for label, expr, _ in OVER_THE_BOUND])
    proc = run_capped(
        f"""
        import json, warnings
        warnings.simplefilter("ignore")
        from cgdispatch import GraphConfig, SchedulerLimits, dispatch_step, make_graph_dispatcher
        from cgdispatch import padded_token_table, synthetic_requests, random_batches
        from cgdispatch.core import validate as v
        from cgdispatch.core.ladders import every_size_ladder, sglang_ladder
        from cgdispatch.sweep.spec import SweepSpec
        from cgdispatch.models.published import model_from_config
        from cgdispatch.estimate.devices import DeviceSpec

        CFG = {CONFIG!r}

        def deep(n):
            out = {{}}
            for _ in range(n):
                out = {{"a": out}}
            return out

        results = {{}}
        for label, expr in json.loads({cases!r}):
            try:
                eval(expr)
                results[label] = "accepted"
            except ValueError as err:
                results[label] = "ValueError: " + str(err)
            except BaseException as err:
                results[label] = type(err).__name__ + ": " + str(err)
        print(json.dumps(results))
        """
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    results = json.loads(proc.stdout)
    for label, _, bound in OVER_THE_BOUND:
        said = results[label]
        assert said.startswith("ValueError: "), (label, said)
        assert f"{bound:_}" in said or str(bound) in said, (label, said)


def test_the_bounds_themselves_are_accepted_without_a_dense_table() -> None:
    """A capture size of MAX_CAPTURE_SIZE (and 65,536 sizes) builds and dispatches under the
    cap: above DENSE_TABLE_LIMIT the dispatchers bisect instead of listing every count."""
    proc = run_capped(
        """
        import bisect, warnings
        warnings.simplefilter("ignore")
        from cgdispatch import GraphConfig, make_graph_dispatcher, dispatch_step
        from cgdispatch.core import validate as v

        top = v.MAX_CAPTURE_SIZE
        for version in ("0.33", "0.34"):
            config = GraphConfig(
                vllm_version=version, cudagraph_capture_sizes=[1, 8, 40_000, top],
                max_num_batched_tokens=top, max_num_seqs=v.MAX_NUM_SEQS,
            )
            d = make_graph_dispatcher(config)
            for n in (1, 5, 9, 39_999, 40_001, top - 1, top, top + 1):
                got = dispatch_step(d, n).padded_tokens
                want = [1, 8, 40_000, top][bisect.bisect_left([1, 8, 40_000, top], n)] if n <= top else n
                assert got == want, (version, n, got, want)
        many = GraphConfig(
            cudagraph_capture_sizes=range(1, v.MAX_CAPTURE_SIZES + 1), max_num_batched_tokens=2**20
        )
        assert dispatch_step(make_graph_dispatcher(many), 70_000).padded_tokens == 70_000
        lora = GraphConfig(max_loras=v.MAX_LORAS, specialize_active_lora=True)
        assert lora.lora_cases()[-1] == v.MAX_LORAS + 1
        print("ok")
        """
    )
    assert proc.returncode == 0 and proc.stdout.strip() == "ok", proc.stderr[-3000:]


def _random_config(rng: random.Random, version: str) -> GraphConfig:
    tokens = rng.choice([64, 128, 512])
    sizes = sorted(rng.sample(range(1, tokens + 1), rng.randint(1, 12)))
    spec = rng.choice([0, 0, 1, 2])
    seqs = rng.randint(1, max(1, tokens // (1 + spec)))
    mode = rng.choice(["FULL", "PIECEWISE", "FULL_AND_PIECEWISE", "FULL_DECODE_ONLY"])
    return GraphConfig(
        vllm_version=version,
        cudagraph_mode=mode,
        cudagraph_capture_sizes=sizes,
        max_num_batched_tokens=tokens,
        max_num_seqs=seqs,
        num_speculative_tokens=spec,
        max_loras=rng.choice([0, 0, 2, 3]),
        specialize_active_lora=rng.random() < 0.5,
    ).resolve()


@pytest.mark.parametrize("seed", range(6))
def test_bisected_counts_answer_as_the_reference_dispatchers(monkeypatch, seed: int) -> None:
    """With the dense part cut to 8 tokens, every count above it (bisected) still answers as
    the slow reference implementations of vLLM's rules, and statistics count it."""
    import warnings

    rng = random.Random(seed)
    monkeypatch.setattr(dispatcher_module, "DENSE_TABLE_LIMIT", 8)
    monkeypatch.setattr(manager_module, "DENSE_TABLE_LIMIT", 8)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        v1 = _random_config(rng, "0.33")
        v2 = _random_config(rng, "0.34")
    d1 = ready_dispatcher(v1)
    keys = expected_keys(v1)
    top = v1.max_num_batched_tokens
    calls = 0
    for n in range(0, top + 3):
        for uniform in (False, True):
            for loras in {0, v1.max_loras}:
                got = d1.dispatch(n, uniform, loras > 0, loras)
                assert tuple(got) == brute_dispatch(v1, keys, n, uniform, loras), (
                    n,
                    uniform,
                    loras,
                )
                calls += 1
    assert int(d1.stats_frame()["calls"].sum()) == calls
    mgr, ref = CudaGraphManager(v2), ReferenceManager(v2)
    q = v2.uniform_decode_query_len
    for n in range(1, v2.max_num_batched_tokens + 3):
        for loras in {0, v2.max_loras}:
            reqs = rng.randint(1, n)
            assert mgr.dispatch(reqs, n, None, loras) == ref.dispatch(reqs, n, None, loras), n
            if n % q == 0 and n // q <= v2.max_num_seqs:
                args = (n // q, n, q, loras)
                assert mgr.dispatch(*args) == ref.dispatch(*args), args


def test_the_documented_bounds_table_is_the_enforced_one() -> None:
    doc = (ROOT / "docs" / "bounds.md").read_text()
    short = doc[doc.index("## Each bound and why") :]  # the table with each bound's reason
    rows = re.findall(r"^\| (.+?) \| ([0-9_]+) \| (.+?) \|$", short, flags=re.M)
    table = {name: (int(value.replace("_", "")), why) for name, value, why in rows}
    assert table == dict(v.BOUNDS.items())
