"""Small modules whose costs are easy to compute by hand (memory and device-model tests),
and small random decoders in a Hugging Face config.json layout."""

import json
from pathlib import Path

import numpy as np
import torch
from torch import nn

QWEN_CONFIG = Path(__file__).resolve().parent / "data" / "configs" / "qwen2-7b.json"


def small_config(rng: np.random.Generator) -> dict:
    """A small random decoder in Qwen2's config.json layout (built on meta in well under a
    second)."""
    cfg = json.loads(QWEN_CONFIG.read_text())
    heads = int(rng.choice([4, 8]))
    cfg.update(
        num_hidden_layers=int(rng.integers(2, 9)),
        num_attention_heads=heads,
        num_key_value_heads=int(rng.choice([1, 2, 4])),
        hidden_size=heads * 64,
        intermediate_size=int(rng.integers(2, 9)) * 128,
        vocab_size=int(rng.integers(1000, 4000)),
    )
    return cfg


class MLP(nn.Module):
    """x -> Linear(h, 4h) -> GELU -> Linear(4h, h)."""

    def __init__(self, hidden: int) -> None:
        super().__init__()
        self.fc1, self.fc2 = nn.Linear(hidden, 4 * hidden), nn.Linear(4 * hidden, hidden)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc2(nn.functional.gelu(self.fc1(x)))
