"""capture_each_mode / step_time_table: graph counts against the dispatcher's keys, replay
checks pass, timing rows follow the dispatcher and say where they were measured."""

from __future__ import annotations

import random

import pytest

from cgdispatch import AttentionCGSupport, GraphConfig, ready_dispatcher
from cgdispatch.measure.capture_tour import capture_each_mode, step_time_table

pytest.importorskip("torch")


def expected_keys(
    mode: str,
    sizes: list[int],
    max_num_seqs: int,
    support: AttentionCGSupport = AttentionCGSupport.ALWAYS,
) -> int:
    config = GraphConfig(
        vllm_version="0.33",
        cudagraph_mode=mode,
        cudagraph_capture_sizes=sizes,
        max_num_seqs=max_num_seqs,
    ).resolve(support)
    dispatcher = ready_dispatcher(config, record_stats=False)
    return sum(len(descs) for _, descs in dispatcher.get_capture_descs())


@pytest.fixture(scope="module")
def captures():
    rng = random.Random(81)
    sizes = sorted(rng.sample(range(1, 13), 3))
    yield (
        sizes,
        capture_each_mode(
            ["NONE", "FULL", "FULL_DECODE_ONLY"], sizes=sizes, progress=False, vllm_version="0.33"
        ),
    )


def test_each_mode_captures_the_dispatchers_keys_and_replays_exactly(captures):
    sizes, result = captures
    summary = result.summary.set_index("config_mode")
    assert list(summary.index) == ["NONE", "FULL", "FULL_DECODE_ONLY"]
    for mode in summary.index:
        want = expected_keys(mode, sizes, 16)  # toy-tiny has 16 KV slots
        assert summary.loc[mode, "keys"] == want
        assert summary.loc[mode, "graphs"] == want  # FULL keys: one whole-model graph each
        assert summary.loc[mode, "all_ok"]
        rows = result.checks[result.checks["config_mode"] == mode]
        assert summary.loc[mode, "max_abs_err"] == rows["max_abs_err"].max()
        assert summary.loc[mode, "checks"] == len(rows) > 0
    assert summary.loc["NONE", "replayed"] == 0 and summary.loc["FULL", "replayed"] > 0
    assert set(result.reports["config_mode"]) == {"FULL", "FULL_DECODE_ONLY"}
    assert set(result.reports["source"]) == {"measured (CPU)"} == {result.source}


def test_any_registry_model_is_captured_in_each_mode():
    """The Hugging Face adapter (decode-only, UNIFORM_SINGLE_TOKEN_DECODE) through the same
    function as the toy LM: its keys, its replays within tolerance, on its own weights."""
    pytest.importorskip("transformers")
    rng = random.Random(82)
    sizes = sorted(rng.sample(range(1, 9), 2))
    result = capture_each_mode(
        ["FULL_DECODE_ONLY", "NONE"],
        preset="hf-llama-tiny",
        sizes=sizes,
        progress=False,
        vllm_version="0.33",
    )
    runner = result.runners["FULL_DECODE_ONLY"]
    assert type(runner.model).__name__ == "HFDecodeLM"
    summary = result.summary.set_index("config_mode")
    want = expected_keys(
        "FULL_DECODE_ONLY", sizes, runner.model.num_slots, runner.model.attention_cg_support
    )
    assert summary.loc["FULL_DECODE_ONLY", "keys"] == want > 0
    assert summary["all_ok"].all() and summary.loc["FULL_DECODE_ONLY", "replayed"] > 0
    checks = result.checks[result.checks["config_mode"] == "FULL_DECODE_ONLY"]
    assert (checks["max_abs_err"] <= checks["tol"]).all() and checks["replayed"].all()


def test_step_time_rows_follow_the_dispatcher(captures):
    sizes, result = captures
    n_top = sizes[-1] + 3  # one size above the ladder: eager in every mode
    table = step_time_table(result.runners, [sizes[0], n_top], repeats=2, progress=False)
    assert len(table) == 3 * 2 * 2
    for row in table.itertuples():
        runner = result.runners[row.mode]
        mode, desc = runner.dispatcher.dispatch(row.num_tokens, uniform_decode=row.uniform_decode)
        assert (row.runtime_mode, row.padded_size) == (mode.name, desc.num_tokens)
        assert row.speedup_x == pytest.approx(row.eager_ms / row.graph_ms)
        assert row.eager_ms > 0 and row.graph_ms > 0
    assert set(table["source"]) == {"measured (CPU)"}
    assert set(table.loc[table["num_tokens"] == n_top, "runtime_mode"]) == {"NONE"}


def test_bad_arguments_are_named(captures):
    with pytest.raises(ValueError, match="repeats=0"):
        step_time_table(captures[1].runners, [1], repeats=0)
    with pytest.raises(ValueError, match="'toy-huge' is unknown: use a registry name"):
        capture_each_mode(["FULL"], preset="toy-huge")
    with pytest.raises(ValueError, match="sizes=\\[\\] is invalid"):
        capture_each_mode(["FULL"], sizes=[])
    with pytest.raises(ValueError, match="unknown"):
        capture_each_mode(["FOO"])


@pytest.fixture(scope="module")
def gen2_captures():
    rng = random.Random(83)
    # two sizes within toy-tiny's 16 KV slots and one above: a prefill size only
    sizes = [*sorted(rng.sample(range(1, 13), 2)), rng.randrange(17, 25)]
    modes = ["FULL", "FULL_AND_PIECEWISE", "NONE"]
    yield sizes, capture_each_mode(modes, sizes=sizes, progress=False, vllm_version="0.34")


def test_generation_2_tour_captures_the_managers_keys_and_replays_exactly(gen2_captures):
    from cgdispatch.core.v2.cudagraph_manager import CudaGraphManager

    sizes, result = gen2_captures
    summary = result.summary.set_index("config_mode")
    assert summary["all_ok"].all()
    for mode in ("FULL", "FULL_AND_PIECEWISE"):
        runner = result.runners[mode]
        assert isinstance(runner.dispatcher, CudaGraphManager)
        config = GraphConfig(
            vllm_version="0.34",
            cudagraph_mode=mode,
            max_num_seqs=16,
            prefill_cudagraph_capture_token_sizes=sizes,
            decode_cudagraph_capture_request_sizes=sizes[:2],
        ).resolve()
        want = CudaGraphManager(config).capture_order()
        assert summary.loc[mode, "keys"] == len(want) > 0
        assert summary.loc[mode, "replayed"] > 0
        report = result.reports[result.reports["config_mode"] == mode]
        uniform = report["uniform"]
        assert uniform.dtype == bool  # also after concatenating NONE's empty report
        assert [(r.num_tokens, r.uniform) for r in report.itertuples()] == [
            (d.num_tokens, d.uniform_token_count is not None) for d in want
        ]
        assert sorted(report.loc[~uniform, "num_tokens"]) == sizes  # prefill grid
    # separate decode graphs, sized by request count, only where the mode has a decode
    # routine of its own; pure FULL serves decodes with its token-keyed graphs
    fap = result.reports[result.reports["config_mode"] == "FULL_AND_PIECEWISE"]
    assert sorted(fap.loc[fap["uniform"], "num_reqs"]) == sizes[:2]
    assert not result.reports.loc[result.reports["config_mode"] == "FULL", "uniform"].any()
    assert summary.loc["NONE", "replayed"] == 0


def test_generation_2_step_time_rows_follow_the_manager(gen2_captures):
    sizes, result = gen2_captures
    table = step_time_table(result.runners, [sizes[0], sizes[-1]], repeats=2, progress=False)
    assert len(table) > 0 and set(table["source"]) == {"measured (CPU)"}
    for row in table.itertuples():
        runner = result.runners[row.mode]
        batch = (runner.make_decode_batch if row.uniform_decode else runner.make_mixed_batch)(
            row.num_tokens, seed=0
        )
        answer = runner.dispatcher.dispatch(
            batch.num_reqs, row.num_tokens, 1 if row.uniform_decode else None, 0
        )
        assert (row.runtime_mode, row.padded_size) == (answer.cg_mode.name, answer.num_tokens)
    assert "FULL" in set(table.loc[table["mode"] == "FULL", "runtime_mode"])


def test_default_tour_is_the_newest_and_versions_are_checked():
    from cgdispatch.core.v2.cudagraph_manager import CudaGraphManager
    from cgdispatch.measure.capture_tour import tour_config

    assert tour_config("FULL", [1, 4], 16).vllm_version == "0.34"  # the newest, the default
    assert tour_config("FULL", [1, 4], 16, 0.34).vllm_version == "0.34"  # papermill's float
    assert isinstance(
        ready_dispatcher(tour_config("FULL", [1, 4], 16, "0.33")), type(ready_dispatcher())
    )
    assert CudaGraphManager(tour_config("FULL", [2, 32], 16, "0.34")).capture_order()
    with pytest.raises(ValueError, match="vllm_version='0.35' is unknown"):
        capture_each_mode(["FULL"], vllm_version="0.35")
