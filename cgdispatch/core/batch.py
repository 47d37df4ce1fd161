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

    def __post_init__(self) -> None:
        # keys land in dict lookups and stats: a str or negative size would match nothing
        # and fail far from here. Plain ints pass in one comparison (the dispatcher's path).
        if not (
            type(self.num_tokens) is int
            and self.num_tokens >= 0
            and (self.num_reqs is None or (type(self.num_reqs) is int and self.num_reqs >= 0))
            and type(self.num_active_loras) is int
            and self.num_active_loras >= 0
        ):
            _check_fields(self)

    def relax_for_mixed_batch_cudagraphs(self) -> BatchDescriptor:
        """The same batch as a key that fits any request count (num_reqs=None, uniform=False)."""
        return BatchDescriptor(self.num_tokens, None, False, self.has_lora, self.num_active_loras)

    @property
    def non_uniform(self) -> BatchDescriptor:
        """Alias of :meth:`relax_for_mixed_batch_cudagraphs` (the name in vLLM's first V1 dispatcher)."""
        return self.relax_for_mixed_batch_cudagraphs()

    # ----- what every generation's key answers (capture layer, estimates, tables) -----
    def query_len(self, uniform_decode_query_len: int) -> int | None:
        """q of a uniform-decode key, None otherwise: a V1 key only says ``uniform``, and q
        is the config's ``1 + num_speculative_tokens`` (passed in)."""
        return uniform_decode_query_len if self.uniform else None

    @property
    def decode_graph(self) -> bool:
        """A graph for uniform decode batches."""
        return self.uniform

    @property
    def lora_active(self) -> bool:
        """The graph runs with LoRA adapters."""
        return self.has_lora


def _check_fields(desc: BatchDescriptor) -> None:
    """Convert integer-like sizes (numpy ints) to int; refuse negatives, bools and text."""
    for name in ("num_tokens", "num_reqs", "num_active_loras"):
        value = getattr(desc, name)
        if value is None and name == "num_reqs":
            continue
        if isinstance(value, bool) or not hasattr(value, "__index__") or value.__index__() < 0:
            raise ValueError(
                f"BatchDescriptor {name}={value!r} is invalid: it must be an integer >= 0"
                + (" or None (any request count)" if name == "num_reqs" else "")
            )
        object.__setattr__(desc, name, value.__index__())
