"""What one step holds, as its cost depends on it: decodes (one token each plus drafts, each
reading its own context) and prompt chunks (tokens already computed, tokens new this step).

Plain data: the replay of vLLM's scheduler (:mod:`cgdispatch.workload`) fills it for each
step it forms, the cost model (:mod:`cgdispatch.estimate.step_cost`) prices it.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from numbers import Integral

__all__ = ["StepContent"]


@dataclass(frozen=True, slots=True)
class StepContent:
    """What one step holds: decodes (one token each, plus drafts) and prompt chunks."""

    decode_reqs: int = 0  # requests decoding this step
    decode_tokens: int = 0  # their tokens (1 + drafts each)
    decode_kv_tokens: int = 0  # context tokens their attention reads, summed
    chunks: tuple[tuple[int, int], ...] = ()  # (computed, new) of each prompt chunk

    @property
    def num_tokens(self) -> int:
        return self.decode_tokens + sum(new for _, new in self.chunks)

    @property
    def num_reqs(self) -> int:
        return self.decode_reqs + len(self.chunks)

    @property
    def sampled_tokens(self) -> int:
        """Rows the LM head computes: one per request plus each decode's drafts."""
        return self.decode_tokens + len(self.chunks)

    @classmethod
    def of(
        cls,
        decode_contexts: Iterable[int] = (),
        prompt_chunks: Iterable[tuple[int, int]] = (),
        *,
        query_len: int = 1,
    ) -> StepContent:
        """From each decode's context length and each chunk's ``(computed, new)``, checked."""
        contexts = [_whole("decode_contexts", c, 1) for c in decode_contexts]
        chunks = []
        for chunk in prompt_chunks:
            if not isinstance(chunk, (tuple, list)) or len(chunk) != 2:
                raise ValueError(
                    f"prompt chunk {chunk!r} is invalid: give (computed, new) token counts"
                )
            chunks.append((_whole("computed", chunk[0], 0), _whole("new", chunk[1], 1)))
        q = _whole("query_len", query_len, 1)
        if not contexts and not chunks:
            raise ValueError("the step holds nothing: give decode_contexts or prompt_chunks")
        return cls(len(contexts), q * len(contexts), sum(contexts), tuple(chunks))


def _whole(name: str, value: object, lo: int) -> int:
    if isinstance(value, bool) or not isinstance(value, Integral) or value < lo:
        raise ValueError(f"{name} holds {value!r}: give whole token counts >= {lo}")
    return int(value)
