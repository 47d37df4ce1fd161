"""Flat step inputs (`StepBatch`) and seeded random decode / mixed batches for a model.

A batch is what a scheduler would hand the runner for one step: each token's id, position
and request slot, requests contiguous, decodes first. The builders only need the model's
shapes (``vocab_size``, ``num_slots``, ``max_seq_len``); they never touch a KV cache.
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from typing import Any

import torch

from ..core.arith import cdiv
from ..core.validate import check_int

__all__ = ["StepBatch", "make_decode_batch", "make_mixed_batch"]


@dataclass(frozen=True, eq=False)
class StepBatch:
    """One step's flat inputs, packed: ``tokens`` is int64 [3, num_tokens] on the CPU.

    Rows are ``input_ids``, ``positions`` and ``slots`` (views); the packed form lets the
    runner fill its buffers with one copy (``GraphRunner.execute_packed``).
    """

    tokens: torch.Tensor  # [3, num_tokens]: input ids, positions, slots
    uniform_decode: bool
    query_lens: tuple[int, ...]  # tokens per request, in order

    @property
    def input_ids(self) -> torch.Tensor:
        return self.tokens[0]

    @property
    def positions(self) -> torch.Tensor:
        return self.tokens[1]

    @property
    def slots(self) -> torch.Tensor:
        return self.tokens[2]

    @property
    def num_tokens(self) -> int:
        return int(self.tokens.shape[1])

    @property
    def num_reqs(self) -> int:
        return len(self.query_lens)


def _build(
    model_cfg: Any, lens: list[int], rng: random.Random, gen: torch.Generator, uniform: bool
) -> StepBatch:
    slots = rng.sample(range(model_cfg.num_slots), len(lens))
    ids, pos, slot_ids = [], [], []
    for slot, length in zip(slots, lens):
        start = rng.randint(0, model_cfg.max_seq_len - length)
        pos.extend(range(start, start + length))
        slot_ids.extend([slot] * length)
    n = sum(lens)
    ids = torch.randint(0, model_cfg.vocab_size, (n,), generator=gen)
    tokens = torch.stack(
        (ids, torch.tensor(pos, dtype=torch.long), torch.tensor(slot_ids, dtype=torch.long))
    )
    return StepBatch(tokens, uniform, tuple(lens))


def make_decode_batch(
    model_cfg: Any, num_tokens: int, query_len: int = 1, *, seed: int = 0
) -> StepBatch:
    """A uniform-decode batch: ``num_tokens // query_len`` requests of ``query_len`` tokens.

    Requests get distinct random slots and random positions; token ids are random.
    """
    check_int("num_tokens", num_tokens, 1)
    check_int("query_len", query_len, 1)
    if num_tokens % query_len:
        raise ValueError(
            f"num_tokens={num_tokens} is invalid for a uniform decode batch: it must be a "
            f"multiple of the query length q={query_len}"
        )
    num_reqs = num_tokens // query_len
    if num_reqs > model_cfg.num_slots or query_len > model_cfg.max_seq_len:
        raise ValueError(
            f"a decode batch of {num_reqs} requests x {query_len} tokens does not fit the model's "
            f"{model_cfg.num_slots} KV slots of {model_cfg.max_seq_len} positions: use fewer "
            "tokens or a model preset with more slots"
        )
    rng, gen = random.Random(seed), torch.Generator().manual_seed(seed)
    return _build(model_cfg, [query_len] * num_reqs, rng, gen, uniform=True)


def make_mixed_batch(
    model_cfg: Any, num_tokens: int, *, seed: int = 0, max_num_reqs: int | None = None
) -> StepBatch:
    """A batch of single-token decodes followed by prefill chunks (at least one when
    ``num_tokens`` >= 2), requests in distinct random slots at random positions."""
    check_int("num_tokens", num_tokens, 1)
    max_reqs = min(model_cfg.num_slots, max_num_reqs or model_cfg.num_slots, num_tokens)
    seq = model_cfg.max_seq_len
    min_reqs = cdiv(num_tokens, seq)
    if min_reqs > max_reqs:
        raise ValueError(
            f"num_tokens={num_tokens} does not fit {max_reqs} requests of at most {seq} tokens: "
            "use fewer tokens or a model preset with more slots or a longer max_seq_len"
        )
    rng, gen = random.Random(seed), torch.Generator().manual_seed(seed)
    num_reqs = rng.randint(
        min_reqs, max(min_reqs, min(max_reqs, num_tokens - 1) if num_tokens > 1 else 1)
    )
    # chunked requests: enough to hold the extra tokens, at least one
    extra = num_tokens - num_reqs
    num_chunks = max(1 if extra else 0, cdiv(extra, seq - 1) if seq > 1 else 0)
    num_chunks = rng.randint(num_chunks, num_reqs) if extra else 0
    lens = [1] * num_reqs
    chunk_idx = list(range(num_reqs - num_chunks, num_reqs))
    while extra:
        i = rng.choice(chunk_idx)
        room = seq - lens[i]
        if room:
            add = min(extra, room, rng.randint(1, max(1, extra // len(chunk_idx) + 1)))
            lens[i] += add
            extra -= add
    return _build(model_cfg, lens, rng, gen, uniform=False)
