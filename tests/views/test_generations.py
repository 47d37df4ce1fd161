"""Both generations side by side (cgdispatch.views.generations) against each class asked
directly: the table's answers and the figure's lines."""

from __future__ import annotations

import random
import warnings

import numpy as np
import pytest

from cgdispatch import (
    AttentionCGSupport,
    CudagraphDispatcher,
    CudaGraphManager,
    CUDAGraphMode,
    GraphConfig,
)
from cgdispatch.views.generations import (
    generation_configs,
    generations_figure,
    generations_table,
)
from cgdispatch.views.sources import figure_source


def random_settings(rng: random.Random) -> GraphConfig:
    return GraphConfig(
        cudagraph_mode=rng.choice(["FULL_AND_PIECEWISE", "FULL", "PIECEWISE", "FULL_DECODE_ONLY"]),
        max_num_seqs=rng.randint(1, 40),
        max_num_batched_tokens=rng.randint(64, 400),
        num_speculative_tokens=rng.choice([0, 1, 2, 3]),
    )


def direct(settings: GraphConfig, support: AttentionCGSupport):
    """Each generation built and asked without the facade."""
    v1_config = GraphConfig(**{**_engine_fields(settings), "vllm_version": "0.33"}).resolve(support)
    v1 = CudagraphDispatcher(v1_config, record_stats=False)
    v1.initialize_cudagraph_keys()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        gen2_config = GraphConfig(**{**_engine_fields(settings), "vllm_version": "0.34"})
    gen2 = CudaGraphManager(gen2_config.resolve(support))
    q = settings.uniform_decode_query_len

    def ask_v1(n, uniform):
        mode, desc = v1.dispatch(n, uniform_decode=uniform)
        return mode, desc.num_tokens

    def ask_gen2(n, uniform):
        desc = gen2.dispatch(-(-n // q) if uniform else min(n, 1), n, q if uniform else None, 0)
        return desc.cg_mode, desc.num_tokens

    return ask_v1, ask_gen2


def _engine_fields(settings: GraphConfig) -> dict:
    keys = ("cudagraph_mode", "max_num_seqs", "max_num_batched_tokens", "num_speculative_tokens")
    return {k: getattr(settings, k) for k in keys}


def test_table_answers_are_each_classes():
    rng = random.Random(51)
    for _ in range(12):
        settings = random_settings(rng)
        support = rng.choice([AttentionCGSupport.ALWAYS, AttentionCGSupport.UNIFORM_BATCH])
        try:
            ask_v1, ask_gen2 = direct(settings, support)
        except ValueError:
            continue  # refused by one generation: the rule tests cover it
        sizes = sorted(rng.sample(range(0, settings.max_num_batched_tokens + 1), 12))
        table = generations_table(settings, sizes, attention_support=support)
        assert len(table) == 2 * len(sizes)
        for row in table.itertuples():
            n, uniform = row.num_tokens, row.uniform_decode
            v1 = ask_v1(n, uniform)
            gen2 = ask_gen2(n, uniform)
            assert (row._3, row._4) == (v1[0].name, v1[1])
            assert (row._6, row._7) == (gen2[0].name, gen2[1])
            assert row.same == (v1 == gen2)


def test_table_columns_and_configs():
    settings = GraphConfig(max_num_seqs=16, max_num_batched_tokens=256, num_speculative_tokens=2)
    table = generations_table(settings, [3, 9])
    assert list(table.columns) == [
        "num_tokens",
        "uniform_decode",
        "mode_0.33",
        "padded_0.33",
        "graph_reqs_0.33",
        "mode_0.34",
        "padded_0.34",
        "graph_reqs_0.34",
        "same",
    ]
    configs = generation_configs(settings)
    assert [c.vllm_version for c in configs.values()] == ["0.33", "0.34"]
    # a mixed batch of 9 tokens: V1 pads to 9 (sizes rounded to multiples of q=3),
    # generation 2 to 12 (its prefill sizes are not rounded)
    row = table[(table.num_tokens == 9) & ~table.uniform_decode].iloc[0]
    assert (row["padded_0.33"], row["padded_0.34"], row["same"]) == (9, 12, False)


@pytest.mark.parametrize("seed", [52, 53, 54])
def test_figure_lines_are_the_classes_padded_sizes(seed):
    rng = random.Random(seed)
    settings = random_settings(rng)
    ask = dict(zip(("0.33", "0.34"), direct(settings, AttentionCGSupport.ALWAYS)))
    fig = generations_figure(settings)
    assert figure_source(fig) == "computed from the config (vLLM 0.33 and 0.34 dispatch rules)"
    q = settings.uniform_decode_query_len
    for panel, uniform in ((0, False), (1, True)):
        for version, answer in ask.items():
            graph = [ln for ln in fig.axes[panel].get_lines() if ln.get_gid() == f"graph-{version}"]
            eager = [ln for ln in fig.axes[panel].get_lines() if ln.get_gid() == f"eager-{version}"]
            x = np.asarray(graph[0].get_xdata())
            y = np.asarray(graph[0].get_ydata(), dtype=float)
            if eager:
                y = np.where(np.isnan(y), np.asarray(eager[0].get_ydata(), dtype=float), y)
            assert x[0] == (q if uniform else 1) and x[-1] <= settings.max_num_batched_tokens
            for i in rng.sample(range(len(x)), min(25, len(x))):
                mode, padded = answer(int(x[i]), uniform)
                assert y[i] == padded
                shown_graph = not np.isnan(graph[0].get_ydata()[i])
                assert shown_graph == (mode is not CUDAGraphMode.NONE)
