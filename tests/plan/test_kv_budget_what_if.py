"""A what-if KV budget is judged and printed alike (issue 37): ``within_kv_budget`` gives
``tune`` the KV tokens of the budget's blocks, the verdict prints those tokens and names the
what-if, and the flags each engine gets are the verdict's."""

from __future__ import annotations

import numpy as np
import pytest

import cgdispatch as cg
from cgdispatch.plan.ladder_compare import export_plan
from cgdispatch.plan.latency_sweep import within_kv_budget
from cgdispatch.views.tune_verdict import engine_flags, verdict_text


@pytest.fixture(scope="module")
def what_if():
    rng = np.random.default_rng()
    budget_gib = float(rng.uniform(0.9, 2.0))
    config = cg.GraphConfig(vllm_version="0.34", max_num_seqs=32, max_num_batched_tokens=1024)
    config = config.resolve()
    seed = int(rng.integers(0, 100))
    trace, label = cg.workload_trace(
        "sharegpt", num_requests=120, rate_per_s=8.0, seed=seed,
        max_num_seqs=32, max_num_batched_tokens=1024,
    )  # fmt: skip
    requests = cg.workload_requests("sharegpt", num_requests=120, rate_per_s=8.0, seed=seed)
    cost_model = cg.device_cost_model("llama-3.1-8b", "H200")
    kv_blocks = cg.kv_blocks_within(
        budget_gib * 2**30, kv_bytes_per_token=cg.kv_bytes_per_token("llama-3.1-8b"),
        cost_model=cost_model,
    )  # fmt: skip
    text = f"{budget_gib:.2f} GiB budget"
    startup = within_kv_budget(cg.startup_for("llama-3.1-8b", "H200"), kv_blocks, what_if=text)
    result = cg.tune(
        trace, config=config, cost_model=cost_model, max_graphs=8, requests=requests,
        trace_label=label, startup=startup, kv_blocks=kv_blocks,
    )  # fmt: skip
    return result, kv_blocks, text


def test_the_judged_kv_tokens_are_the_budgets_and_the_verdict_prints_them(what_if) -> None:
    result, kv_blocks, text = what_if
    for name, ladder in (("planned", result.planned), ("vllm default", result.default)):
        blocks = kv_blocks(cg.ladder_config(result.config, ladder))
        assert result.held_out[name]["kv_cache_tokens"] == (blocks - 1) * 16
    verdict = verdict_text(result, model="llama-3.1-8b", device="H200")
    assert f"KV cache: what-if {text}" in verdict
    planned = result.held_out["planned"]["kv_cache_tokens"]
    row = next(line for line in verdict.splitlines() if line.startswith("KV-cache tokens"))
    assert f"{planned:,.0f}" in row
    startup = cg.startup_for("llama-3.1-8b", "H200")
    full = startup(cg.ladder_config(result.config, result.planned)).kv_cache_tokens
    assert f"{full:,}" not in verdict  # the full GPU's tokens are not what was judged


def test_the_longest_verdict_keeps_every_figure(what_if) -> None:
    """Overloaded, with a note and a Pareto set, the verdict still prints each held-out
    figure of ``delta_rows`` and the serve line, within MAX_VERDICT_LINES (a KV row was cut
    when overload added its line)."""
    import dataclasses

    from cgdispatch.views.tune_verdict import MAX_VERDICT_LINES, delta_rows
    from cgdispatch.workload.sustain import Sustainability

    result, _, _ = what_if
    rng = np.random.default_rng()
    queue = float(rng.uniform(1, 50))
    overload = Sustainability(120, 6.0, queue, queue * 10, 6000.0, 4000.0)
    pareto = {f"p{i}": dict(result.held_out["planned"]) for i in range(int(rng.integers(1, 4)))}
    longest = dataclasses.replace(
        result, overload=overload, notes=("a note", "another"), pareto=pareto
    )
    verdict = verdict_text(longest, model="llama-3.1-8b", device="H200")
    lines = verdict.splitlines()
    assert len(lines) <= MAX_VERDICT_LINES
    assert lines[0].startswith("overloaded:") and lines[-1].startswith("vllm serve ")
    assert any(line.startswith("Pareto set") for line in lines)
    for name, _, _, change, _ in delta_rows(longest):
        assert any(line.startswith(name) and change in line for line in lines), name


def test_each_engines_flags_are_the_verdicts(what_if) -> None:
    import dataclasses

    result, _, _ = what_if
    for recommendation in ("planned", "vllm default"):
        shown = dataclasses.replace(result, recommendation=recommendation)
        flags = engine_flags(shown)
        assert flags["vllm"] == shown.flags
        assert flags["vllm"] in verdict_text(shown, model="m", device="d")
        planned = export_plan(shown.planned, shown.config)
        for engine in ("sglang", "trtllm"):
            if recommendation == "planned":
                assert flags[engine] == planned[engine]
            else:
                assert "keep the engine's default" in flags[engine]


def test_a_what_if_needs_a_name() -> None:
    with pytest.raises(ValueError, match="what_if='' is invalid"):
        within_kv_budget(lambda c: None, lambda c: 2, what_if=" ")


def test_notebook_04_judges_and_flags_what_it_prints() -> None:
    """Its tune call takes the what-if start-up with the blocks it is judged on, and its
    flags section prints the verdict's flags (source cells; the outputs are re-executed)."""
    import json
    from pathlib import Path

    path = Path(__file__).resolve().parents[2] / "notebooks" / "04_what_if.ipynb"
    cells = ["".join(c["source"]) for c in json.loads(path.read_text())["cells"]]
    tune_cell = next(c for c in cells if "cg.tune(" in c)
    assert "within_kv_budget(" in tune_cell and "startup=startup" in tune_cell
    assert "kv_blocks=kv_blocks" in tune_cell
    assert any("engine_flags(result)" in c for c in cells)
    assert not any("export_plan(planned" in c for c in cells)
    assert any("verdict_text(result" in c and "width=" in c for c in cells)
