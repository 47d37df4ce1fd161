"""Every figure reads: no two texts drawn over each other, no legend over the data (issue 30).

Each figure is built on the inputs its notebook gives it (a sweep of the toy LM on this CPU,
the device model, the shipped reference and published data, a synthetic workload), smaller,
and drawn; :func:`figure_text_problems` compares the boxes of what was drawn. The checker
itself is tested first, on a figure built to collide and one built not to.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from matplotlib.figure import Figure

import cgdispatch as cg
from cgdispatch.sweep.store import load_captures
from cgdispatch.views.capture_figures import capture_per_key_figure, memory_per_key_figure
from cgdispatch.views.figure_checks import drawn_texts, figure_text_problems
from cgdispatch.views.whatif_plots import ladder_comparison_figure, whatif_figure


def test_the_checker_finds_colliding_texts_and_a_legend_over_the_data() -> None:
    fig = Figure(figsize=(4, 3))
    ax = fig.subplots()
    rng = np.random.default_rng(0)
    x = rng.uniform(0, 1, 50)
    ax.plot(x, rng.uniform(0, 1, 50), "o", label="points")
    ax.legend(loc="center")  # the points fill the axes: the legend covers some
    ax.set_xticks(np.linspace(0, 1, 11), [f"label number {i}" for i in range(11)])
    ax.text(0.5, 0.95, "note", transform=ax.transAxes)
    ax.text(0.5, 0.95, "another note", transform=ax.transAxes)
    problems = figure_text_problems(fig)
    assert "text 'note' overlaps text 'another note'" in problems
    assert "text 'label number 0' overlaps text 'label number 1'" in problems
    assert any(p.startswith("legend (points, ...) covers") for p in problems)


def test_the_checker_passes_a_figure_that_reads_and_ignores_what_is_not_drawn() -> None:
    fig = Figure(figsize=(6, 4), layout="constrained")
    ax = fig.subplots()
    ax.plot([1, 2, 3], [1, 4, 9], label="squares")
    ax.legend(loc="upper left")  # the line rises to the right: the corner is empty
    ax.set_xticks([0, 1, 2, 3, 4, 5], ["a", "b", "c", "d", "e", "f"])
    ax.set_xlim(0.5, 3.5)  # ticks 0, 4 and 5 keep labels that are never drawn
    ax.set_title("squares")
    hidden = ax.text(2, 5, "squares", visible=False)  # on the line, but hidden
    ax.text(2, 2, "")
    assert figure_text_problems(fig) == []
    texts = [t.text for t in drawn_texts(fig)]
    assert {"b", "c", "d"} <= set(texts) and not {"a", "e", "f"} & set(texts)
    assert texts.count("squares") == 2 and hidden.get_text() == "squares"  # title, legend


SPEC = cg.SweepSpec(
    vllm_version="0.33",
    name="text",
    model="toy-tiny",
    modes=("FULL", "PIECEWISE", "FULL_DECODE_ONLY", "FULL_AND_PIECEWISE", "NONE"),
    ladders={"pow2": None, "coarse": (4, 8)},
    max_capture_size=8,
    num_tokens=(1, 4, 8, 16),
    max_num_seqs=16,
    repeats=2,
    warmup=1,
    input_sets=2,
)


@pytest.fixture(scope="module")
def swept(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("text")
    cg.run_sweep(SPEC, store=out, progress=False)
    return out


@pytest.fixture(scope="module")
def workload() -> dict:
    config = cg.GraphConfig(vllm_version="0.34", max_num_seqs=32, max_num_batched_tokens=1024)
    config = config.resolve()
    trace, source = cg.workload_trace(
        "sharegpt", num_requests=120, rate_per_s=8.0, seed=3,
        max_num_seqs=32, max_num_batched_tokens=1024,
    )  # fmt: skip
    return {"config": config, "trace": trace, "source": source}


def _rows(store: Path) -> pd.DataFrame:
    return cg.ResultStore(store).load()


def _speedup_measured(store: Path, _: dict) -> Figure:
    return cg.speedup_figure(_rows(store), by="mode")


def _speedup_modelled(_: Path, __: dict) -> Figure:
    return cg.speedup_figure(cg.modelled_speedup(SPEC, device="H200"), by="mode")


@functools.lru_cache(maxsize=1)
def _report_figures(store: Path) -> dict[str, Figure]:
    """The report's figures of the module's sweep, drawn once for the report entries below
    (each entry checks its own figure; drawing the whole report per entry only repeated it)."""
    return cg.draw_report(_rows(store), load_captures(store)).figures


def _report(name: str) -> Callable[[Path, dict], Figure]:
    def build(store: Path, _: dict) -> Figure:
        return _report_figures(store)[name]

    return build


def _memory(store: Path, _: dict) -> Figure:
    return cg.memory_figure(cg.graph_memory_table(_rows(store)), group="bar")


def _capture(store: Path, _: dict) -> Figure:
    return cg.capture_time_figure(cg.unit_table(_rows(store)))


def _capture_per_key(store: Path, _: dict) -> Figure:
    return capture_per_key_figure(load_captures(store))


def _memory_per_key(store: Path, _: dict) -> Figure:
    rows, captures = _rows(store), load_captures(store)
    per_key = cg.memory_estimates(rows).attrs["per_key"]
    cols = ["mode", "ladder", "runtime_mode", "num_tokens", "uniform"]
    estimate = captures.merge(per_key, on=cols, how="left")["pool_increment_bytes"]
    rng = np.random.default_rng(5)  # a CPU has no pool: records as a GPU run near the estimate
    gpu = captures.assign(
        device="cuda",
        source="measured (TestGPU)",
        pool_bytes=(estimate * rng.uniform(0.8, 1.2, len(captures))).round(),
    )
    return memory_per_key_figure(gpu, per_key)


def _step_time(store: Path, _: dict) -> Figure:
    return cg.step_time_figure(_rows(store))


def _ladder(_: Path, w: dict) -> Figure:
    return cg.ladder_figure(
        cg.GraphConfig(vllm_version="0.33", max_num_seqs=64, max_num_batched_tokens=1024)
    )


def _ladder_gen2(_: Path, w: dict) -> Figure:
    return cg.ladder_figure(w["config"])


def _hit_rate(_: Path, w: dict) -> Figure:
    config = cg.GraphConfig(vllm_version="0.33", max_num_seqs=64, max_num_batched_tokens=1024)
    dispatcher = cg.CudagraphDispatcher(config)
    from cgdispatch.views.explain import dispatch_stats, random_batches

    stats = dispatch_stats(dispatcher, random_batches(config, 2000, seed=0))
    return cg.hit_rate_figure(stats, source="synthetic batches (uniform random, seed 0)")


def _generations(_: Path, w: dict) -> Figure:
    return cg.generations_figure(
        cg.GraphConfig(vllm_version="0.33", max_num_seqs=64, max_num_batched_tokens=1024)
    )


def _histogram(_: Path, w: dict) -> Figure:
    return cg.step_histogram_figure(cg.step_histogram(w["trace"]), source=w["source"])


def _compare_table(w: dict) -> pd.DataFrame:
    config, cost = w["config"], cg.device_cost_model("llama-3.1-8b", "H200")
    ladders = cg.engine_ladders(config)
    planned = cg.plan_ladder(w["trace"], 8, config=config)
    ladders[f"padding ({len(planned)})"] = planned
    return cg.compare(w["trace"], ladders, config=config, cost_model=cost)


def _ladder_comparison(_: Path, w: dict) -> Figure:
    return ladder_comparison_figure(_compare_table(w), source=w["source"])


def _whatif(_: Path, w: dict) -> Figure:
    result = cg.evaluate(w["config"], w["trace"])
    return whatif_figure(result, source=w["source"])


def _tradeoff(_: Path, w: dict) -> Figure:
    config = w["config"]
    result = cg.tune(
        w["trace"],
        config=config,
        cost_model=cg.device_cost_model("llama-3.1-8b", "H200"),
        max_graphs=8,
        ladders={k: v for k, v in cg.engine_ladders(config).items() if k != "vllm"},
        trace_label=w["source"],
        startup=cg.startup_for("llama-3.1-8b", "H200"),
    )
    return cg.tradeoff_figure(result)


def _latency(_: Path, w: dict) -> Figure:
    config, cost = w["config"], cg.device_cost_model("llama-3.1-8b", "H200")
    ladders = {
        "vllm": cg.engine_ladders(config)["vllm"],
        "pow2 to 1024": cg.powers_of_two_ladder(1024),
    }
    blocks = cg.kv_blocks_within(
        1.2 * 2**30, kv_bytes_per_token=cg.kv_bytes_per_token("llama-3.1-8b"), cost_model=cost
    )
    table = cg.latency_by_rate(
        ladders, [2, 8, 32], config=config, cost_model=cost, preset="sharegpt",
        num_requests=80, seed=0, kv_blocks=blocks,
    )  # fmt: skip
    return cg.latency_by_rate_figure(table)


FIGURES: dict[str, Callable[[Path, dict], Figure]] = {
    "speedup_figure (measured)": _speedup_measured,
    "speedup_figure (model)": _speedup_modelled,
    "report speedup": _report("speedup"),
    "report speedup_model": _report("speedup_model"),
    "memory_figure": _memory,
    "capture_time_figure": _capture,
    "capture_per_key_figure": _capture_per_key,
    "memory_per_key_figure": _memory_per_key,
    "step_time_figure": _step_time,
    "ladder_figure (0.33)": _ladder,
    "ladder_figure (0.34)": _ladder_gen2,
    "hit_rate_figure": _hit_rate,
    "generations_figure": _generations,
    "step_histogram_figure": _histogram,
    "ladder_comparison_figure": _ladder_comparison,
    "whatif_figure": _whatif,
    "tradeoff_figure": _tradeoff,
    "latency_by_rate_figure": _latency,
    "calibration_figure": lambda _, __: cg.calibration_figure(cg.calibration_table()),
    "mode_step_figure": lambda _, __: cg.mode_step_figure("llama-3.1-8b", "H100"),
    "step_ratio_figure": lambda _, __: cg.step_ratio_figure(cg.published_step_comparison()),
}


@pytest.mark.parametrize("name", list(FIGURES))
def test_figure_text_does_not_overlap(name: str, swept: Path, workload: dict) -> None:
    fig = FIGURES[name](swept, workload)
    assert cg.figure_source(fig), f"{name} lost its source label"
    assert figure_text_problems(fig) == [], name
