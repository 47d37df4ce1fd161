"""Adapter: a Hugging Face causal LM as a GraphRunner model, for lock-step decode steps.

``HFDecodeLM`` wraps a ``transformers`` causal LM (SDPA attention, static-cache capable)
behind the runner's flat interface ``model(input_ids[T], positions[T], slots[T]) ->
logits[T, vocab]``: token t of a decode step is batch row t of one HF forward with a
``StaticCache`` of T rows. The KV cache lives in the adapter, one row per request slot
plus a dummy slot for padding (as in the toy LM); each step gathers the batch's rows into
a fixed work buffer, runs the HF model on it, and scatters the rows back. Padding rows
use the dummy slot, so they never touch a real request's cache; their logits are dropped
by the runner.

What it does not do: prefill, mixed batches, speculative tokens (one token per request),
or requests at different positions: HF's static cache writes one position for the whole
batch, so every request of a step must be at the same position (lock-step decode). The
per-step gather/scatter copies each request's whole cache row twice, so it is a test and
measurement vehicle for graph capture, not a fast serving path. Written against
transformers 5.x (``cache=``, ``StaticCache.layers``); the 4.x names
(``past_key_values=``, ``cache_position``, ``key_cache`` lists) are handled where cheap
but untested. Presets by name: ``hf_presets.py``; the up-front model checks:
``hf_support.py``.
"""

from __future__ import annotations

import inspect
import random
from dataclasses import dataclass
from typing import Any

import torch
from torch import nn

from ...capture.model import SlotsFromConfig
from ...capture.stepbatch import StepBatch
from ...core.modes import AttentionCGSupport
from .support import check_supported, require_transformers

__all__ = ["HFAdapterConfig", "HFDecodeLM"]

_DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}


@dataclass(frozen=True)
class HFAdapterConfig:
    """Shapes the runner and the batch builders read (same names as ``ToyConfig``)."""

    vocab_size: int
    max_seq_len: int  # positions per slot (the static cache length)
    num_slots: int  # request slots; one dummy slot is added for padding
    max_batch_size: int  # largest padded batch (rows of the work buffer)
    dtype: str  # "float32", "bfloat16" or "float16"
    model_type: str  # the HF config's model_type, e.g. "llama"


class _StaticCacheBinding:
    """Points an HF ``StaticCache`` at the adapter's work buffers for a batch of ``s`` rows.

    The HF cache object keeps its own tensors; the adapter replaces them per call by leading-dim
    views of fixed work buffers, so every padded size reads and writes the same memory.
    """

    def __init__(self, transformers: Any, hf_config: Any, max_seq_len: int) -> None:
        cache_cls = transformers.StaticCache
        params = inspect.signature(cache_cls.__init__).parameters
        if "max_batch_size" in params or "batch_size" in params:  # transformers 4.x
            key = "max_batch_size" if "max_batch_size" in params else "batch_size"
            self.cache = cache_cls(config=hf_config, max_cache_len=max_seq_len, **{key: 1})
        else:
            self.cache = cache_cls(config=hf_config, max_cache_len=max_seq_len)
        self.layers = getattr(self.cache, "layers", None)

    def bind(
        self, keys: list[torch.Tensor], values: list[torch.Tensor], position: torch.Tensor
    ) -> None:
        """Use ``keys[i]`` / ``values[i]`` [s, kv_heads, L, head_dim] as layer i; write at
        ``position`` (a 1-element tensor) on the next update."""
        if self.layers is None:  # transformers 4.x: lists of tensors, position via cache_position
            self.cache.key_cache[:] = keys
            self.cache.value_cache[:] = values
            return
        for layer, k, v in zip(self.layers, keys, values):
            layer.keys, layer.values = k, v
            length = getattr(layer, "cumulative_length", None)
            if isinstance(length, torch.Tensor):
                # 5.x writes at cumulative_length, not at a given position: set it
                length.copy_(position.view(()))

    def initialize(self, keys: list[torch.Tensor], values: list[torch.Tensor]) -> None:
        """Initialise the layers once, eagerly, on the full work buffers: HF's lazy
        initialisation would allocate its own zeros at the first update (discarding the
        gathered rows) and flip state that ``torch.compile`` guards on."""
        if self.layers is None:
            self.cache.key_cache[:] = keys
            self.cache.value_cache[:] = values
            return
        for layer, k, v in zip(self.layers, keys, values):
            layer.keys, layer.values = k, v
            layer.device = k.device
            layer.batch_size, layer.num_heads = k.shape[0], k.shape[1]
            layer.k_head_dim, layer.v_head_dim = k.shape[-1], v.shape[-1]
            if isinstance(getattr(layer, "cumulative_length", None), torch.Tensor):
                layer.cumulative_length = layer.cumulative_length.to(k.device)
            layer.is_initialized = True


class HFDecodeLM(SlotsFromConfig, nn.Module):
    """A transformers causal LM behind ``forward(input_ids[T], positions[T], slots[T])``.

    Serves uniform single-token decode steps in lock-step: T requests, one token each, all
    at the same position, in distinct slots; rows whose slot is ``dummy_slot`` are padding.
    ``attention_cg_support`` is UNIFORM_SINGLE_TOKEN_DECODE: FULL graphs are for these
    steps only, and mixed batches (prefill chunks) are not supported at all
    (``supports_mixed_batches`` is False). With ``validate=True`` eager calls check the
    inputs (raising ValueError); calls being captured or compiled are not checked.
    """

    supports_mixed_batches = False
    attention_cg_support = AttentionCGSupport.UNIFORM_SINGLE_TOKEN_DECODE

    def __init__(
        self,
        hf_model: nn.Module,
        *,
        num_slots: int = 16,
        max_seq_len: int | None = None,
        max_batch_size: int | None = None,
        validate: bool = True,
    ) -> None:
        super().__init__()
        transformers = require_transformers()
        check_supported(hf_model)
        hf_cfg = hf_model.config
        text_cfg = (
            hf_cfg.get_text_config(decoder=True) if hasattr(hf_cfg, "get_text_config") else hf_cfg
        )
        max_pos = getattr(text_cfg, "max_position_embeddings", None) or text_cfg.n_positions
        max_seq_len = max_pos if max_seq_len is None else max_seq_len
        # default: vLLM's default largest capture size for max_num_seqs = num_slots (2 x seqs)
        max_batch_size = 2 * num_slots if max_batch_size is None else max_batch_size
        for name, value in (
            ("num_slots", num_slots),
            ("max_seq_len", max_seq_len),
            ("max_batch_size", max_batch_size),
        ):
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(f"{name}={value!r} is invalid: it must be an integer >= 1")
        if max_seq_len > max_pos:
            raise ValueError(
                f"max_seq_len={max_seq_len} is invalid: the model has {max_pos} positions; use at most that"
            )
        weight = hf_model.get_output_embeddings().weight
        dtype = next((k for k, v in _DTYPES.items() if v == weight.dtype), None)
        if dtype is None:
            raise ValueError(
                f"model dtype {weight.dtype} is invalid: use one of {sorted(_DTYPES)} "
                "(model.to(torch.float32), for example)"
            )
        self.hf_model = hf_model.eval().requires_grad_(False)
        self.config = HFAdapterConfig(
            vocab_size=hf_model.get_output_embeddings().out_features,
            max_seq_len=max_seq_len,
            num_slots=num_slots,
            max_batch_size=max_batch_size,
            dtype=dtype,
            model_type=str(getattr(hf_cfg, "model_type", type(hf_model).__name__)),
        )
        self.validate = validate
        num_layers = text_cfg.num_hidden_layers
        kv_heads = getattr(text_cfg, "num_key_value_heads", None) or text_cfg.num_attention_heads
        head_dim = (
            getattr(text_cfg, "head_dim", None)
            or text_cfg.hidden_size // text_cfg.num_attention_heads
        )
        dev = weight.device
        # per layer: [K|V, slots + dummy, kv heads, positions, head_dim]; rows by slot
        for i in range(num_layers):
            shape = (2, num_slots + 1, kv_heads, max_seq_len, head_dim)
            self.register_buffer(
                f"kv_cache_{i}",
                torch.zeros(shape, dtype=weight.dtype, device=dev),
                persistent=False,
            )
            work = (max_batch_size, kv_heads, max_seq_len, head_dim)  # rows by batch position
            self.register_buffer(
                f"work_k_{i}", torch.zeros(work, dtype=weight.dtype, device=dev), persistent=False
            )
            self.register_buffer(
                f"work_v_{i}", torch.zeros(work, dtype=weight.dtype, device=dev), persistent=False
            )
        self.num_layers = num_layers
        self._binding = _StaticCacheBinding(transformers, hf_cfg, max_seq_len)
        self._binding.initialize(
            [getattr(self, f"work_k_{i}") for i in range(num_layers)],
            [getattr(self, f"work_v_{i}") for i in range(num_layers)],
        )
        params = inspect.signature(hf_model.forward).parameters
        self._cache_kw = "cache" if "cache" in params else "past_key_values"
        self._pass_cache_position = "cache_position" in params

    # ----- what the runner reads -------------------------------------------------------------
    @property
    def device(self) -> torch.device:
        return self.kv_cache_0.device

    def kv_caches(self) -> list[torch.Tensor]:
        """Each layer's cache [2, num_slots + 1, kv_heads, max_seq_len, head_dim] (dim 1: slot)."""
        return [getattr(self, f"kv_cache_{i}") for i in range(self.num_layers)]

    @torch.no_grad()
    def fill_kv_cache_(self, seed: int = 0) -> None:
        """Fill every cache with seeded random values (a stand-in for earlier steps' K/V)."""
        gen = torch.Generator().manual_seed(seed)
        for cache in self.kv_caches():
            cache.copy_(torch.randn(cache.shape, generator=gen, dtype=torch.float32))

    def make_decode_batch(self, num_tokens: int, query_len: int = 1, *, seed: int = 0) -> StepBatch:
        """A lock-step decode batch: ``num_tokens`` requests in distinct random slots, one
        token each, all at one random position; token ids random."""
        if query_len != 1:
            raise ValueError(
                f"query_len={query_len} is invalid for the Hugging Face adapter: it serves one "
                "token per request (no speculative tokens); use num_speculative_tokens=0"
            )
        if isinstance(num_tokens, bool) or not isinstance(num_tokens, int) or num_tokens < 1:
            raise ValueError(f"num_tokens={num_tokens!r} is invalid: it must be an integer >= 1")
        cfg = self.config
        if num_tokens > min(cfg.num_slots, cfg.max_batch_size):
            raise ValueError(
                f"a decode batch of {num_tokens} requests does not fit the adapter's {cfg.num_slots} "
                f"slots / max_batch_size {cfg.max_batch_size}: use fewer tokens or a larger adapter"
            )
        rng, gen = random.Random(seed), torch.Generator().manual_seed(seed)
        slots = torch.tensor(rng.sample(range(cfg.num_slots), num_tokens), dtype=torch.long)
        positions = torch.full((num_tokens,), rng.randrange(cfg.max_seq_len), dtype=torch.long)
        ids = torch.randint(0, cfg.vocab_size, (num_tokens,), generator=gen)
        return StepBatch(torch.stack((ids, positions, slots)), True, (1,) * num_tokens)

    # ----- checks ----------------------------------------------------------------------------
    def check_decode_inputs(
        self, input_ids: torch.Tensor, positions: torch.Tensor, slots: torch.Tensor
    ) -> None:
        """Raise ValueError unless the step is a lock-step single-token decode batch."""
        n = input_ids.shape[0]
        if input_ids.dim() != 1 or positions.shape != (n,) or slots.shape != (n,):
            raise ValueError(
                f"input_ids {tuple(input_ids.shape)}, positions {tuple(positions.shape)}, slots "
                f"{tuple(slots.shape)} are invalid: pass three 1-D tensors of equal length"
            )
        if n > self.config.max_batch_size:
            raise ValueError(
                f"a step of {n} rows is invalid: the adapter's max_batch_size is "
                f"{self.config.max_batch_size}; build HFDecodeLM with max_batch_size >= the "
                "largest capture size"
            )
        dummy = self.dummy_slot
        if n and (int(slots.min()) < 0 or int(slots.max()) > dummy):
            raise ValueError(
                f"slots range [{int(slots.min())}, {int(slots.max())}] is invalid: request slots "
                f"lie in [0, {dummy - 1}] and padding rows use dummy_slot={dummy}"
            )
        real = slots != dummy
        real_slots, real_pos = slots[real], positions[real]
        if real_slots.numel() != real_slots.unique().numel():
            raise ValueError(
                f"slots {real_slots.tolist()} are invalid for the Hugging Face adapter: it serves "
                "decode steps of one token per request (distinct slots); mixed batches with "
                "prefill chunks are not supported (use the toy model for mixed batches)"
            )
        if real_pos.numel() and bool(
            (real_pos != real_pos[0]).any() or real_pos[0] != positions[0]
        ):
            raise ValueError(
                f"positions {real_pos.tolist()} are invalid for the Hugging Face adapter: HF's static "
                "cache writes one position per step, so every request of a step must be at the same "
                "position (lock-step decode); group requests by position"
            )
        if n and not 0 <= int(positions[0]) < self.config.max_seq_len:
            raise ValueError(
                f"position {int(positions[0])} is invalid: it must lie in [0, {self.config.max_seq_len - 1}]"
            )

    # ----- the step --------------------------------------------------------------------------
    def forward(
        self, input_ids: torch.Tensor, positions: torch.Tensor, slots: torch.Tensor
    ) -> torch.Tensor:
        s = input_ids.shape[0]
        if self.validate and not _capturing_or_compiling():
            self.check_decode_inputs(input_ids, positions, slots)
        position = positions[:1]  # [1]: the step's shared position (row 0 is a real request)
        keys, values, caches = [], [], self.kv_caches()
        for i, cache in enumerate(caches):  # gather the batch's rows: row t <- slot of token t
            k, v = getattr(self, f"work_k_{i}")[:s], getattr(self, f"work_v_{i}")[:s]
            k.copy_(cache[0].index_select(0, slots))
            v.copy_(cache[1].index_select(0, slots))
            keys.append(k)
            values.append(v)
        self._binding.bind(keys, values, position)
        key_positions = torch.arange(self.config.max_seq_len, device=positions.device)
        mask = (key_positions <= position).to(torch.long).expand(s, -1)  # [s, L]: 1 = attend
        kwargs: dict[str, Any] = {
            "input_ids": input_ids.view(s, 1),
            "position_ids": position.expand(s).view(s, 1),
            "attention_mask": mask,
            self._cache_kw: self._binding.cache,
            "use_cache": True,
        }
        if self._pass_cache_position:
            kwargs["cache_position"] = position
        logits = self.hf_model(**kwargs).logits  # [s, 1, vocab]
        for cache, k, v in zip(caches, keys, values):  # scatter back; padding -> dummy row
            cache[0].index_copy_(0, slots, k)
            cache[1].index_copy_(0, slots, v)
        return logits.view(s, -1)


def _capturing_or_compiling() -> bool:
    compiler = getattr(torch, "compiler", None)
    if compiler is not None and hasattr(compiler, "is_compiling") and compiler.is_compiling():
        return True
    return torch.cuda.is_available() and torch.cuda.is_current_stream_capturing()
