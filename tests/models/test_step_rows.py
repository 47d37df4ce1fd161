"""``StepRows`` (what every layer reads of a step) and ``SlotsFromConfig`` (the slot
properties every model shares), against direct reads of the model's tables and config."""

from __future__ import annotations

import random

import torch

from cgdispatch.capture.model import RunnerModel
from cgdispatch.models.registry import build_model
from cgdispatch.models.toy import PRESETS, StepRows, build_toy_model

RNG = random.Random()


def test_step_rows_index_the_rotary_tables_at_each_position():
    model = build_toy_model("toy-tiny", seed=RNG.randint(0, 999))
    for _ in range(20):
        n = RNG.randint(1, 40)
        positions = torch.tensor([RNG.randrange(model.config.max_seq_len) for _ in range(n)])
        slots = torch.tensor([RNG.randrange(model.num_slots) for _ in range(n)])
        rows = StepRows.of(model, positions, slots)
        for t in range(n):
            p = int(positions[t])
            assert torch.equal(rows.cos[t, 0], model.rope_cos[p])
            assert torch.equal(rows.sin[t, 0], model.rope_sin[p])
        assert rows.cos.shape == (n, 1, model.config.head_dim // 2)
        assert rows.positions is positions and rows.slots is slots


def test_every_family_reads_its_slots_from_its_config():
    slots = RNG.randint(1, 64)
    toy = build_toy_model(PRESETS["toy-tiny"].replace(num_slots=slots))
    arch = build_model("qwen2.5-1.5b")
    for model in (toy, arch):
        assert model.num_slots == model.config.num_slots
        assert model.dummy_slot == model.config.num_slots  # the padding slot after them
    assert toy.num_slots == slots and isinstance(toy, RunnerModel)
