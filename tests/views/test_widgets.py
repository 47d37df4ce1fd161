"""Dashboard handlers, called directly and through the widget, never raising on bad entries."""

from __future__ import annotations

import random
import re

import numpy as np
import pytest

from cgdispatch import CudagraphDispatcher, CUDAGraphMode, GraphConfig
from cgdispatch.views.widgets import (
    DispatchExplorer,
    build_config,
    decision_html,
    dispatch_explorer,
    explain_dispatch,
    format_sizes,
    parse_sizes_box,
)

BASE = GraphConfig(max_num_seqs=16, max_num_batched_tokens=256)


def shown(explorer: DispatchExplorer) -> dict[str, str]:
    """The data-* attributes of the decision box (empty when an error is shown)."""
    return dict(re.findall(r'data-([a-z-]+)="([^"]*)"', explorer.decision.value.split(">", 1)[0]))


def reference(config: GraphConfig) -> CudagraphDispatcher:
    dispatcher = CudagraphDispatcher(config, record_stats=False)
    dispatcher.initialize_cudagraph_keys()
    return dispatcher


@pytest.mark.parametrize(
    ("text", "fragment"),
    [
        ("1, 2, x", "['x'] are not integers"),
        ("1, 2.5", "['2.5'] are not integers"),
        ("-1, 4", "['-1'] are not integers"),
        ("", "no capture sizes"),
        ("  ,  ", "no capture sizes"),
        ("0, 4", "capture size 0 is invalid"),
        ("1, 300, 512", "[300, 512] exceed max_num_batched_tokens=256"),
    ],
)
def test_parse_sizes_box_explains_bad_entries(text, fragment):
    sizes, error = parse_sizes_box(text, BASE)
    assert sizes is None and fragment in error


def test_parse_sizes_box_round_trips_random_ladders():
    rng = random.Random(31)
    for _ in range(50):
        sizes = rng.sample(range(1, 257), rng.randint(1, 20))
        sep = rng.choice([", ", ",", " ", "; ", "\n"])
        text = sep.join(str(s) for s in sizes + sizes[:2])  # duplicates collapse
        assert parse_sizes_box(text, BASE) == (sorted(set(sizes)), None)
        assert parse_sizes_box(format_sizes(sorted(sizes)), BASE) == (sorted(set(sizes)), None)


def test_build_config_reports_bad_modes_and_configs():
    dispatcher, notes = build_config(BASE, "1, 2, 4", "FOO")
    assert dispatcher is None and "'FOO' is unknown" in notes[0]
    no_split = BASE.replace(splitting_ops=[])
    dispatcher, notes = build_config(no_split, "1, 2, 4", "PIECEWISE")
    assert dispatcher is None and "splitting_ops" in notes[0]
    dispatcher, notes = build_config(BASE, "4, 1, 2", "full")
    assert dispatcher.config.cudagraph_capture_sizes == [1, 2, 4]
    assert dispatcher.cudagraph_mode is CUDAGraphMode.FULL and notes == []


def test_build_config_passes_warnings_on_as_notes():
    with pytest.warns(UserWarning, match="tensor_parallel_size"):  # the default ladder has 1
        sp = BASE.replace(tensor_parallel_size=2, sequence_parallel=True)
    dispatcher, notes = build_config(sp, "1, 2, 4, 6", "FULL")
    assert dispatcher.config.cudagraph_capture_sizes == [2, 4, 6]
    assert any("not multiples of tensor_parallel_size=2" in n for n in notes)


def test_explorer_decisions_equal_the_dispatcher_on_random_moves():
    rng = random.Random(32)
    for _ in range(8):
        sizes = sorted(rng.sample(range(1, 65), rng.randint(1, 10)))
        mode = rng.choice(list(CUDAGraphMode))
        config = GraphConfig(
            cudagraph_mode=mode,
            cudagraph_capture_sizes=sizes,
            max_num_seqs=rng.randint(1, 32),
            max_num_batched_tokens=200,
            max_loras=rng.choice([0, 2]),
        )
        ref = reference(config)
        explorer = dispatch_explorer(config)
        assert explorer.slider.value == ref.max_capture_size  # starts at the largest size
        assert explorer.slider.max == min(200, max(2 * sizes[-1], sizes[-1] + 16, 16))
        for _ in range(25):
            n = rng.randint(1, explorer.slider.max)
            uniform, cascade = rng.random() < 0.5, rng.random() < 0.3
            loras = rng.randint(0, config.max_loras)
            explorer.uniform.value, explorer.cascade.value, explorer.loras.value = (
                uniform,
                cascade,
                loras,
            )
            explorer.slider.value = n
            want_mode, want = ref.dispatch(
                n,
                uniform_decode=uniform,
                has_lora=loras > 0,
                num_active_loras=loras,
                use_cascade_attn=cascade,
            )
            got = shown(explorer)
            assert got["testid"] == "dispatch-decision" and got["num-tokens"] == str(n)
            assert (got["runtime-mode"], int(got["padded-size"])) == (
                want_mode.name,
                want.num_tokens,
            )
            assert explorer.message.value == ""


def test_explorer_shows_messages_for_bad_entries_and_recovers():
    explorer = dispatch_explorer(BASE, num_tokens=30)
    explorer.sizes_box.value = "1, 2, x"
    assert explorer.decision.value == "" and "not integers" in explorer.message.value
    assert 'data-testid="dispatch-message"' in explorer.message.value
    explorer.sizes_box.value = "1, 2, 999"
    assert "exceed max_num_batched_tokens=256" in explorer.message.value
    explorer.sizes_box.value = "8, 40"
    assert explorer.message.value == "" and explorer.slider.max == 80
    want_mode, want = reference(BASE.replace(cudagraph_capture_sizes=[8, 40])).dispatch(30)
    assert (shown(explorer)["runtime-mode"], int(shown(explorer)["padded-size"])) == (
        want_mode.name,
        want.num_tokens,
    )
    explorer.loras.value = 3
    assert "max_loras=0" in explorer.message.value and explorer.decision.value == ""
    explorer.loras.value = 0
    explorer.mode_box.value = "FULL"
    want_mode, want = reference(
        BASE.replace(cudagraph_mode="FULL", cudagraph_capture_sizes=[8, 40])
    ).dispatch(30)
    assert (shown(explorer)["runtime-mode"], int(shown(explorer)["padded-size"])) == (
        want_mode.name,
        want.num_tokens,
    )


def test_explorer_escapes_what_it_shows():
    explorer = dispatch_explorer(BASE)
    explorer.sizes_box.value = "<script>alert(1)</script>"
    assert "<script>" not in explorer.message.value and "&lt;script&gt;" in explorer.message.value


def test_explorer_shows_the_cost_model_prediction_and_its_failures():
    rng = random.Random(33)
    slope = rng.uniform(0.01, 0.1)

    def cost(mode, padded):
        return 1.5 + slope * padded

    explorer = dispatch_explorer(BASE, cost, num_tokens=21, cost_source="model (H200 roofline)")
    padded = reference(BASE).dispatch(21)[1].num_tokens
    assert f"{1.5 + slope * padded:.3f} ms (model (H200 roofline))" in explorer.decision.value

    def broken(mode, padded):
        raise KeyError(mode.name)

    explorer = dispatch_explorer(BASE, broken)
    assert "cost model failed: KeyError" in explorer.message.value and explorer.decision.value == ""


def test_decision_html_carries_the_dom_hook():
    decision = explain_dispatch(BASE, 5, uniform=True)
    page = decision_html(decision)
    assert 'data-testid="dispatch-decision"' in page
    assert f'data-runtime-mode="{decision["runtime_mode"]}"' in page
    assert f'data-padded-size="{decision["padded_size"]}"' in page
    assert 'data-uniform="true"' in page


def test_explorer_rejects_a_non_config():
    with pytest.raises(ValueError, match="GraphConfig"):
        dispatch_explorer({"cudagraph_mode": "FULL"})


def test_explorer_takes_the_packages_cost_models_and_shows_their_source():
    """One CostModel (plan.costs) serves the explorer: a latency table labelled with where
    it came from is asked at the padded size, and its label is shown by default."""
    import pandas as pd

    from cgdispatch.plan.costs import TableCostModel

    rng = random.Random(34)
    sizes = [1, 8, 64, 256]
    table = pd.DataFrame(
        [
            {"mode": m, "num_tokens": n, "latency_ms": rng.uniform(0.5, 5.0)}
            for m in ("NONE", "PIECEWISE", "FULL")
            for n in sizes
        ]
    )
    model = TableCostModel(table, source="measured (TestGPU)")
    explorer = dispatch_explorer(BASE, model)
    for n in rng.sample(range(1, explorer.slider.max + 1), 8):  # graphed and eager sizes
        explorer.slider.value = n
        mode, desc = reference(BASE).dispatch(n)
        rows = table[table["mode"] == mode.name]
        want = float(np.interp(desc.num_tokens, rows["num_tokens"], rows["latency_ms"]))
        assert f"{want:.3f} ms (measured (TestGPU))" in explorer.decision.value
