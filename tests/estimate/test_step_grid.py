"""``StepGrid.shapes``, the step shapes ``reference_steps`` prices, against a plain
enumeration of the same grid on fresh random grids (runs without aiconfigurator)."""

from __future__ import annotations

import itertools
import random

from cgdispatch.estimate.aic_reference import StepGrid

RNG = random.Random()


def _ints(most: int = 4) -> tuple[int, ...]:
    return tuple(RNG.randint(1, 9000) for _ in range(RNG.randint(0, most)))


def _pairs(most: int = 4) -> tuple[tuple[int, int], ...]:
    return tuple((RNG.randint(1, 64), RNG.randint(1, 9000)) for _ in range(RNG.randint(0, most)))


def test_shapes_enumerate_each_part_of_the_grid_in_order():
    for _ in range(200):
        grid = StepGrid(_ints(), _ints(), _ints(), _ints(), _pairs(), _pairs(), _ints())
        want = [
            ("decode", b, c, 0, 0, 0)
            for b, c in itertools.product(grid.decode_batches, grid.decode_contexts)
        ]
        want += [
            ("prefill", 0, 0, 1, t, c)
            for t, c in itertools.product(grid.prompt_tokens, grid.cached_tokens)
        ]
        want += [("prefill", 0, 0, p, t, 0) for p, t in grid.multi_prompts]
        want += [("mixed", d, c, 1, k, 0) for (d, c), k in itertools.product(grid.mixed_decodes, grid.mixed_chunks)]  # fmt: skip
        assert list(grid.shapes()) == want


def test_the_default_grid_has_every_kind():
    kinds = {shape[0] for shape in StepGrid().shapes()}
    assert kinds == {"decode", "prefill", "mixed"}
