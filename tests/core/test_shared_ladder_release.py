"""A release with a new ladder shape is one package and one planner entry.

``tests/shared_ladder_release`` declares vLLM "0.99": one token ladder shared by prefill and
decode graphs, powers of two by default. Registered, it runs through config, dispatch,
planning, comparison, tune and a sweep, and nothing in cgdispatch names it. Expected answers
come from its rule stated here (the shared list, and its whole decode batches), not from
the code under test.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from shared_ladder_release import RELEASE, SHARED_LADDER, plan_shared, registered

import cgdispatch as cg
from cgdispatch import GraphConfig
from cgdispatch.core.generation import GENERATIONS, dispatch_step, make_graph_dispatcher
from cgdispatch.core.ladder_shape import planner_for
from cgdispatch.plan.costs import AffineCostModel
from cgdispatch.plan.gen2_ladder import ladder_config
from cgdispatch.plan.ladder_compare import compare
from cgdispatch.plan.planner import plan_ladder
from cgdispatch.plan.tune import tune
from cgdispatch.plan.whatif import evaluate
from cgdispatch.sweep.run import SweepSpec, run_sweep
from cgdispatch.workload.sources import split_holdout, workload_trace
from cgdispatch.workload.trace import make_trace

PACKAGE = Path(cg.__file__).resolve().parent


@pytest.fixture
def release():
    with registered() as generation:
        yield generation
    assert RELEASE not in GENERATIONS


def _powers_of_two(top: int) -> list[int]:
    return [2**k for k in range(20) if 2**k <= min(top, 512)]


def _expected(sizes, q, seqs, n, reqs, uniform):
    """(mode, padded tokens) by the release's rule: a whole decode batch pads to the next
    shared size that is one (FULL), else any step to the next shared size (PIECEWISE)."""
    decode = [s for s in sizes if s % q == 0 and s // q <= seqs]
    if uniform and [s for s in decode if s >= n]:
        return cg.CUDAGraphMode.FULL, min(s for s in decode if s >= n)
    fits = [s for s in sizes if s >= n]
    return (cg.CUDAGraphMode.PIECEWISE, fits[0]) if fits else (cg.CUDAGraphMode.NONE, n)


def test_its_config_follows_its_own_size_rule(release):
    rng = np.random.default_rng(99)
    for _ in range(20):
        seqs = int(rng.integers(1, 64))
        tokens = int(rng.integers(seqs, 2000))
        config = GraphConfig(vllm_version=RELEASE, max_num_seqs=seqs, max_num_batched_tokens=tokens)
        assert config.generation is release and config.generation.ladder is SHARED_LADDER
        assert config.cudagraph_capture_sizes == _powers_of_two(tokens)
        assert config.prefill_cudagraph_capture_token_sizes == _powers_of_two(tokens)
        assert config.decode_cudagraph_capture_request_sizes == [
            s for s in _powers_of_two(tokens) if s <= seqs
        ]
    with pytest.raises(ValueError, match="one shared ladder"):
        GraphConfig(vllm_version=RELEASE, prefill_cudagraph_capture_token_sizes=[8])
    assert '"cudagraph_capture_sizes":[1,2,4' in GraphConfig(vllm_version=RELEASE).to_vllm()


@pytest.mark.parametrize("q", [1, 2])
def test_dispatch_follows_the_shared_ladder(release, q):
    rng = np.random.default_rng(q)
    for _ in range(6):
        seqs = int(rng.integers(2, 40))
        sizes = sorted({int(s) for s in rng.integers(1, 300, int(rng.integers(1, 12)))})
        config = GraphConfig(
            vllm_version=RELEASE,
            max_num_seqs=seqs,
            max_num_batched_tokens=512,
            num_speculative_tokens=q - 1,
            cudagraph_capture_sizes=sizes,
        ).resolve()
        manager = make_graph_dispatcher(config)
        for _ in range(200):
            uniform = bool(rng.random() < 0.5)
            if uniform:
                reqs = int(rng.integers(1, seqs + 1))
                n = reqs * q
            else:
                n = int(rng.integers(1, 400))
                reqs = int(rng.integers(1, min(n, seqs) + 1))
            answer = dispatch_step(manager, n, reqs, uniform)
            want = _expected(sizes, q, seqs, n, reqs, uniform)
            assert (answer.runtime_mode, answer.padded_tokens) == want, (sizes, n, reqs, uniform)


def _trace(seed: int = 3, n: int = 600):
    rng = np.random.default_rng(seed)
    uniform = rng.random(n) < 0.6
    reqs = rng.integers(1, 17, n)
    tokens = np.where(uniform, reqs, rng.integers(1, 257, n))
    reqs = np.where(uniform, reqs, np.minimum(reqs, tokens))
    return make_trace(tokens, uniform, reqs)


def test_plan_and_compare_use_its_planner_entry(release):
    trace = _trace()
    config = GraphConfig(vllm_version=RELEASE, max_num_seqs=16, max_num_batched_tokens=256)
    assert planner_for(SHARED_LADDER) is plan_shared  # its one planner entry
    planned = plan_ladder(trace, 6, config=config)
    assert planned == plan_shared(trace, 6, config=config) and 0 < len(planned) <= 6
    table = compare(trace, {"planned": planned, "pow2": [1, 2, 4, 8, 16, 32, 64, 128, 256]},
                    config=config)  # fmt: skip
    assert (table["vllm_version"] == RELEASE).all()
    assert table["sizes"].tolist() == [sorted(planned), [1, 2, 4, 8, 16, 32, 64, 128, 256]]
    assert table["num_graphs"].tolist() == [len(planned), 9]
    # padding of the planned ladder, from the release's rule over the trace
    padded = [
        _expected(sorted(planned), 1, 16, int(t), int(r), bool(u))
        for t, r, u in zip(trace["num_tokens"], trace["num_reqs"], trace["uniform_decode"])
    ]
    eager = sum(mode is cg.CUDAGraphMode.NONE for mode, _ in padded) / len(padded)
    assert table["eager_step_share"].iloc[0] == pytest.approx(eager)


class _MemoryAffine(AffineCostModel):
    """The affine stand-in with a capture time (a tune needs one)."""

    def capture_time_s(self, mode, n):  # noqa: ANN001, ANN201
        return 0.01 + 1e-4 * np.asarray(n, dtype=np.float64)


def test_tune_plans_and_judges_it(release):
    config = GraphConfig(vllm_version=RELEASE, max_num_seqs=16, max_num_batched_tokens=256)
    trace, label = workload_trace(
        "sharegpt", num_requests=80, rate_per_s=8.0, seed=1, max_num_seqs=16,
        max_num_batched_tokens=256,
    )  # fmt: skip
    model = _MemoryAffine()
    result = tune(trace, config=config, cost_model=model, max_graphs=6, trace_label=label)
    assert result.config.vllm_version == RELEASE
    assert 0 < len(result.planned) <= 6
    # the default is the release's own size rule; the held-out figures are its dispatch's
    assert list(result.default) == _powers_of_two(256)
    _, test = split_holdout(trace, 0.5)
    held_out = evaluate(ladder_config(config, result.planned), test, model).summary
    assert result.held_out["planned"]["mean_step_ms"] == pytest.approx(held_out["mean_step_ms"])


def test_a_sweep_runs_on_it(release, tmp_path):
    spec = SweepSpec(
        name="shared",
        model="toy-tiny",
        modes=("FULL_AND_PIECEWISE",),
        ladders={"few": [2, 4, 8]},
        num_tokens=(1, 3, 8, 13),
        max_num_seqs=8,
        repeats=1,
        warmup=1,
        input_sets=1,
        vllm_version=RELEASE,
    )
    rows = run_sweep(spec, store=tmp_path, progress=False)
    assert (rows["status"] == "ok").all(), rows["error"].tolist()
    assert (rows["vllm_version"] == RELEASE).all()
    for row in rows.itertuples():
        want = _expected([2, 4, 8], 1, 8, row.num_tokens, row.num_tokens if row.uniform_decode
                         else 1, row.uniform_decode)  # fmt: skip
        assert (row.runtime_mode, row.padded_size) == (str(want[0]), want[1]), row


def test_cgdispatch_names_no_test_release():
    """The release and its shape live only in tests: the package never names them."""
    names = ("shared_ladder", "SharedLadder", '"0.99"')
    hits = [
        str(path.relative_to(PACKAGE))
        for path in PACKAGE.rglob("*.py")
        if any(name in path.read_text() for name in names)
    ]
    assert hits == []


def test_views_and_the_cli_show_its_one_box(release):
    """The explorer's boxes and the dispatch command's line come from the shape."""
    from cgdispatch.cli.dispatch import _sizes_line
    from cgdispatch.views.explorer_handlers import box_sizes, build_config, largest_size

    base = GraphConfig(vllm_version=RELEASE, max_num_seqs=8, max_num_batched_tokens=256)
    rng = np.random.default_rng(5)
    sizes = sorted({int(s) for s in rng.integers(1, 257, 5)})
    dispatcher, notes = build_config(base, ", ".join(map(str, sizes)), "FULL_AND_PIECEWISE")
    assert notes == [] and dispatcher.config.cudagraph_capture_sizes == sizes
    assert box_sizes(dispatcher.config) == (", ".join(map(str, sizes)), "")
    assert largest_size(dispatcher) == sizes[-1]
    assert _sizes_line(dispatcher.config).startswith(f"{len(sizes)} shared sizes [")
