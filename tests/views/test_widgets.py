"""Dashboard handlers, called directly and through the widget, never raising on bad entries."""

from __future__ import annotations

import random
import re

import numpy as np
import pytest

from cgdispatch import CudagraphDispatcher, CUDAGraphMode, GraphConfig, for_generation
from cgdispatch.views.explain import explain_dispatch
from cgdispatch.views.explorer_handlers import (
    build_config,
    decision_html,
    format_sizes,
    parse_sizes_box,
)
from cgdispatch.views.widgets import DispatchExplorer, dispatch_explorer

BASE = GraphConfig(vllm_version="0.33", max_num_seqs=16, max_num_batched_tokens=256)


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
    no_split = BASE.replace(splitting_ops=["cgdispatch::attention"])  # not every attention op
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
        # NONE keeps no capture sizes (vLLM 0.33): test_explorer_with_mode_none
        mode = rng.choice([m for m in CUDAGraphMode if m is not CUDAGraphMode.NONE])
        config = GraphConfig(
            vllm_version="0.33",
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


def test_explorer_with_mode_none():
    # vLLM 0.33 keeps no capture sizes under NONE: every batch is eager
    config = GraphConfig(
        vllm_version="0.33", cudagraph_mode="NONE", cudagraph_capture_sizes=[1, 8], max_num_seqs=8
    )
    assert config.cudagraph_capture_sizes == []
    explorer = dispatch_explorer(config)
    explorer.slider.value = 5
    assert shown(explorer)["runtime-mode"] == "NONE"


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


# ----- the generation toggle: every decision shown is the chosen class's own answer
def test_gen2_explorer_decisions_equal_the_manager_on_random_moves():
    import warnings

    from cgdispatch import CudaGraphManager

    rng = random.Random(35)
    for _ in range(6):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            config = GraphConfig(
                vllm_version="0.34",
                cudagraph_mode=rng.choice(["FULL_AND_PIECEWISE", "FULL", "PIECEWISE",
                                           "FULL_DECODE_ONLY"]),
                max_num_seqs=rng.randint(2, 32),
                max_num_batched_tokens=200,
                num_speculative_tokens=rng.choice([0, 1, 3]),
                max_loras=rng.choice([0, 2]),
            )  # fmt: skip
        explorer = dispatch_explorer(config)
        assert explorer.version_box.value == "0.34" and explorer.cascade.disabled
        assert explorer.sizes_box.value == format_sizes(
            config.prefill_cudagraph_capture_token_sizes or []
        )
        manager, q = CudaGraphManager(config), config.uniform_decode_query_len
        widest = max((d.num_tokens for d in manager.capture_order()), default=0)
        assert explorer.slider.value == min(widest, explorer.slider.max)
        for _ in range(25):
            n = rng.randint(1, explorer.slider.max)
            uniform, loras = rng.random() < 0.5, rng.randint(0, config.max_loras)
            explorer.uniform.value, explorer.loras.value = uniform, loras
            explorer.slider.value = n
            reqs = -(-n // q) if uniform else 1
            want = manager.dispatch(reqs, n, q if uniform else None, loras)
            got = shown(explorer)
            assert (got["runtime-mode"], int(got["padded-size"]), got["num-reqs"]) == (
                want.cg_mode.name,
                want.num_tokens,
                str(want.num_reqs),
            )
            assert got["vllm-version"] == "0.34" and explorer.message.value == ""


def test_generation_toggle_switches_the_class_and_its_sizes():
    from cgdispatch import CudaGraphManager

    config = GraphConfig(
        vllm_version="0.33", max_num_seqs=16, max_num_batched_tokens=256, num_speculative_tokens=1
    )
    explorer = dispatch_explorer(config, num_tokens=30)
    assert explorer.version_box.value == "0.33"  # vllm_version None is V1
    assert explorer.decode_box.layout.display == "none"
    explorer.cascade.value = True
    explorer.version_box.value = "0.34"
    assert not explorer.cascade.value and explorer.cascade.disabled
    assert isinstance(explorer.dispatcher, CudaGraphManager)
    gen2 = explorer.base_config
    assert gen2.vllm_version == "0.34" and explorer.decode_box.layout.display is None
    assert gen2 == for_generation(config, "0.34").resolve()  # the same settings, resolved
    assert explorer.decode_box.value == format_sizes(gen2.decode_cudagraph_capture_request_sizes)
    # edit the decode request sizes: the decision follows a manager built with them
    explorer.decode_box.value = "1, 4, 16"
    explorer.uniform.value = True
    rng = random.Random(36)
    manager = CudaGraphManager(
        gen2.replace(
            cudagraph_capture_sizes=None,
            max_cudagraph_capture_size=None,
            prefill_cudagraph_capture_token_sizes=gen2.prefill_cudagraph_capture_token_sizes,
            decode_cudagraph_capture_request_sizes=[1, 4, 16],
        )
    )
    for reqs in rng.sample(range(1, 17), 8):
        explorer.slider.value = 2 * reqs
        want = manager.dispatch(reqs, 2 * reqs, 2, 0)
        got = shown(explorer)
        assert (got["runtime-mode"], int(got["padded-size"])) == (
            want.cg_mode.name,
            want.num_tokens,
        )
    explorer.decode_box.value = "1, 99"
    assert "decode request sizes" in explorer.message.value and "max_num_seqs=16" in (
        explorer.message.value
    )
    explorer.decode_box.value = "1, 4, 16"
    explorer.version_box.value = "0.33"  # back: the V1 config as given
    assert isinstance(explorer.dispatcher, CudagraphDispatcher)
    assert explorer.sizes_box.value == format_sizes(config.cudagraph_capture_sizes)
    for n in rng.sample(range(1, explorer.slider.max + 1), 8):
        explorer.slider.value = n
        mode, desc = reference(config).dispatch(n, uniform_decode=True)
        got = shown(explorer)
        assert (got["vllm-version"], got["runtime-mode"], int(got["padded-size"])) == (
            "0.33",
            mode.name,
            desc.num_tokens,
        )


def test_build_config_builds_the_bases_generation():
    from cgdispatch import CudaGraphManager

    base = GraphConfig(vllm_version="0.34", max_num_seqs=16, max_num_batched_tokens=256)
    manager, notes = build_config(base, "8, 4, 64", "FULL_AND_PIECEWISE", "2, 1, 8")
    assert isinstance(manager, CudaGraphManager) and notes == []
    assert manager.config.prefill_cudagraph_capture_token_sizes == [4, 8, 64]
    assert manager.config.decode_cudagraph_capture_request_sizes == [1, 2, 8]
    manager, notes = build_config(base, "8, 4, 64", "FULL")  # decode sizes: vLLM's default
    assert manager.config.decode_cudagraph_capture_request_sizes == (
        base.decode_cudagraph_capture_request_sizes
    )
    assert manager.cudagraph_mode is CUDAGraphMode.FULL
    none, notes = build_config(base, "8", "FULL", "0, 2")
    assert none is None and notes[0].startswith("decode request sizes: capture size 0")
