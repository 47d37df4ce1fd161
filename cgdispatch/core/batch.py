"""The graph key: a frozen description of a padded batch."""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["BatchDescriptor"]


@dataclass(frozen=True, slots=True)
class BatchDescriptor:
    """Identifies one captured graph (or the unpadded shape of an eager step).

    It carries no tensors and no mode: the dispatcher pairs it with a runtime mode.
    ``num_reqs=None`` means "any request count" (PIECEWISE keys); ``uniform`` marks a
    uniform-decode batch where every request has exactly q = 1 + spec tokens tokens.
    """

    num_tokens: int
    num_reqs: int | None = None
    uniform: bool = False
    has_lora: bool = False
    num_active_loras: int = 0

    def relax_for_mixed_batch_cudagraphs(self) -> BatchDescriptor:
        """The same batch as a key that fits any request count (num_reqs=None, uniform=False)."""
        return BatchDescriptor(self.num_tokens, None, False, self.has_lora, self.num_active_loras)

    @property
    def non_uniform(self) -> BatchDescriptor:
        """Alias of :meth:`relax_for_mixed_batch_cudagraphs` (the name in vLLM's first V1 dispatcher)."""
        return self.relax_for_mixed_batch_cudagraphs()
