"""Stages of ``tune`` that its end-to-end tests reach only on vLLM's default settings."""

from __future__ import annotations

import json
import random

from cgdispatch import GraphConfig
from cgdispatch.core.modes import CUDAGraphMode
from cgdispatch.plan.tune import _flags


def test_keeping_the_default_names_the_mode_only_when_it_is_not_vllms_default() -> None:
    rng = random.Random()
    for mode in CUDAGraphMode:
        seqs, tokens = rng.randrange(1, 512), rng.randrange(512, 16384)
        config = GraphConfig(
            vllm_version=rng.choice(["0.33", "0.34"]),
            cudagraph_mode=mode,
            max_num_seqs=seqs,
            max_num_batched_tokens=tokens,
        ).resolve()
        flags = _flags(None, config, set())
        tail = f"--max-num-seqs {seqs} --max-num-batched-tokens {tokens}"
        assert flags.endswith(tail)
        head = flags[: -len(tail)].strip()
        if config.cudagraph_mode is CUDAGraphMode.FULL_AND_PIECEWISE:
            assert head == ""
        else:  # vLLM reads the mode by name from its --compilation-config JSON
            words = head.split(" ", 1)
            assert words[0] == "--compilation-config"
            assert json.loads(words[1].strip("'")) == {"cudagraph_mode": config.cudagraph_mode.name}
