"""Small modules whose costs are easy to compute by hand (memory and device-model tests)."""

import torch
from torch import nn


class MLP(nn.Module):
    """x -> Linear(h, 4h) -> GELU -> Linear(4h, h)."""

    def __init__(self, hidden: int) -> None:
        super().__init__()
        self.fc1, self.fc2 = nn.Linear(hidden, 4 * hidden), nn.Linear(4 * hidden, hidden)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc2(nn.functional.gelu(self.fc1(x)))
