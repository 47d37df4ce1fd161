"""`RunnerModel`: what :class:`~cgdispatch.capture.runner.GraphRunner` needs of a model.

A structural type (``typing.Protocol``): the toy LM and the Hugging Face adapter satisfy
it without inheriting from it, and so does any model that has these members. The runner
reads nothing else, except an optional ``make_decode_batch(num_tokens, q, seed=)`` that
builds the model's own decode batches. The helpers below derive what a runner checks and
builds from these members alone.
"""

from __future__ import annotations

from typing import Any, Protocol, runtime_checkable

import torch

from ..core.modes import AttentionCGSupport
from .stepbatch import StepBatch, make_decode_batch, make_mixed_batch

__all__ = [
    "RunnerModel",
    "RunnerModelConfig",
    "SlotsFromConfig",
    "check_token_ranges",
    "decode_batch",
    "mixed_batch",
]


@runtime_checkable
class RunnerModelConfig(Protocol):
    """The shapes the runner checks inputs against and builds random batches from."""

    @property
    def vocab_size(self) -> int: ...

    @property
    def max_seq_len(self) -> int: ...


@runtime_checkable
class RunnerModel(Protocol):
    """A model one step of which is ``model(input_ids, positions, slots) -> logits``.

    Inputs are flat int64 ``[num_tokens]`` tensors (vLLM's layout); logits are
    ``[num_tokens, vocab]``. ``dummy_slot`` is the KV-cache slot padding tokens write to,
    never a real request's; ``num_slots`` counts the real ones.
    """

    @property
    def config(self) -> RunnerModelConfig: ...

    @property
    def attention_cg_support(self) -> AttentionCGSupport:
        """What the attention op allows inside a FULL graph (feeds ``GraphConfig.resolve``)."""
        ...

    @property
    def supports_mixed_batches(self) -> bool:
        """False for decode-only models: mixed batches (prefill chunks) are refused."""
        ...

    @property
    def num_slots(self) -> int: ...

    @property
    def dummy_slot(self) -> int: ...

    @property
    def device(self) -> torch.device: ...

    def __call__(
        self, input_ids: torch.Tensor, positions: torch.Tensor, slots: torch.Tensor
    ) -> torch.Tensor: ...


class SlotsFromConfig:
    """``num_slots`` and ``dummy_slot`` of a model whose ``config.num_slots`` counts its
    request slots and whose cache holds one more, the padding slot, after them."""

    config: Any

    @property
    def num_slots(self) -> int:
        return self.config.num_slots

    @property
    def dummy_slot(self) -> int:
        """The KV-cache slot padding tokens read and write; never a real request's."""
        return self.config.num_slots


def check_token_ranges(
    model: RunnerModel, input_ids: torch.Tensor, positions: torch.Tensor, slots: torch.Tensor
) -> None:
    """Raise ValueError when a token id, position or slot is out of ``model``'s range."""
    cfg = model.config
    limits = (
        ("input_ids", input_ids, cfg.vocab_size),
        ("positions", positions, cfg.max_seq_len),
        ("slots", slots, model.num_slots),
    )
    for name, values, limit in limits:
        if values.numel() and (int(values.min()) < 0 or int(values.max()) >= limit):
            raise ValueError(
                f"{name} range [{int(values.min())}, {int(values.max())}] is invalid: "
                f"values must lie in [0, {limit - 1}]"
            )


def decode_batch(model: RunnerModel, num_tokens: int, q: int, seed: int) -> StepBatch:
    """A random uniform-decode batch of ``num_tokens // q`` requests of ``q`` tokens.

    A model with its own ``make_decode_batch(num_tokens, q, seed=)`` builds it (the Hugging
    Face adapter puts every request at one position)."""
    own = getattr(model, "make_decode_batch", None)
    if own is not None:
        return own(num_tokens, q, seed=seed)
    return make_decode_batch(model.config, num_tokens, q, seed=seed)


def mixed_batch(model: RunnerModel, num_tokens: int, max_num_seqs: int, seed: int) -> StepBatch:
    """A random batch mixing decodes and prefill chunks; ValueError for decode-only models."""
    if not model.supports_mixed_batches:
        raise ValueError(
            f"{type(model).__name__} does not support mixed batches (prefill chunks): "
            "it serves decode steps only; use make_decode_batch"
        )
    max_reqs = min(model.num_slots, max_num_seqs)
    return make_mixed_batch(model.config, num_tokens, seed=seed, max_num_reqs=max_reqs)
