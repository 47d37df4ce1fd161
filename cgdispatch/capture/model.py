"""`RunnerModel`: what :class:`~cgdispatch.capture.runner.GraphRunner` needs of a model.

A structural type (``typing.Protocol``): the toy LM and the Hugging Face adapter satisfy
it without inheriting from it, and so does any model that has these members. The runner
reads nothing else, except an optional ``make_decode_batch(num_tokens, q, seed=)`` that
builds the model's own decode batches.
"""

from __future__ import annotations

from typing import Protocol, runtime_checkable

import torch

from ..core.modes import AttentionCGSupport

__all__ = ["RunnerModel", "RunnerModelConfig"]


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
