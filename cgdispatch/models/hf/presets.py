"""Tiny random-weight Hugging Face models by name (``hf-llama-tiny``, ``hf-gpt2-tiny``).

Each preset is a transformers config built in place (no download), seeded, wrapped in an
:class:`~cgdispatch.models.hf.adapter.HFDecodeLM`. They are test and measurement vehicles, not
trained models.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch

from .adapter import _DTYPES, HFDecodeLM
from .support import require_transformers

__all__ = ["HFPreset", "HF_PRESETS", "build_hf_model"]


@dataclass(frozen=True)
class HFPreset:
    """A tiny random-weight HF model: its family and config fields, plus the adapter's slots."""

    family: str  # "llama" or "gpt2"
    config: tuple[tuple[str, Any], ...]  # config keyword arguments
    num_slots: int = 16


HF_PRESETS: dict[str, HFPreset] = {
    # Llama shapes in miniature: 2 layers, 4 query / 2 KV heads (GQA), head_dim 8, RoPE
    "hf-llama-tiny": HFPreset(
        "llama",
        (
            ("vocab_size", 128),
            ("hidden_size", 32),
            ("intermediate_size", 64),
            ("num_hidden_layers", 2),
            ("num_attention_heads", 4),
            ("num_key_value_heads", 2),
            ("max_position_embeddings", 64),
        ),
    ),
    # GPT-2 shapes in miniature: learned positions, LayerNorm, GELU MLP, fused QKV
    "hf-gpt2-tiny": HFPreset(
        "gpt2",
        (
            ("vocab_size", 128),
            ("n_embd", 32),
            ("n_layer", 2),
            ("n_head", 4),
            ("n_positions", 64),
            ("bos_token_id", 0),  # GPT-2's 50256 lies outside the tiny vocabulary
            ("eos_token_id", 0),
        ),
    ),
}


def build_hf_model(
    preset: str = "hf-llama-tiny",
    *,
    device: torch.device | str | None = None,
    dtype: str | None = None,
    seed: int = 0,
    max_num_tokens: int | None = None,
    attention: str = "general",
) -> HFDecodeLM:
    """A seeded random-weight HF causal LM from a preset name, in an ``HFDecodeLM``.

    Built from a config (no download). ``dtype`` defaults to float32. ``max_num_tokens``
    (the largest padded step, i.e. the largest capture size) sizes the adapter's work
    buffers; default: ``HFDecodeLM``'s. ``attention`` must be "general" (the registry's
    toy option; the HF attention is SDPA).
    """
    if preset not in HF_PRESETS:
        raise ValueError(f"model preset {preset!r} is unknown: use one of {sorted(HF_PRESETS)}")
    if attention != "general":
        raise ValueError(
            f"attention={attention!r} is invalid for {preset}: the adapter runs the model's own SDPA "
            "attention (full graphs for single-token decode only); 'uniform' applies to toy models"
        )
    dtype = dtype or "float32"
    if dtype not in _DTYPES:
        raise ValueError(f"dtype={dtype!r} is unknown: use one of {sorted(_DTYPES)}")
    transformers = require_transformers()
    spec = HF_PRESETS[preset]
    config_cls, model_cls = {
        "llama": (transformers.LlamaConfig, transformers.LlamaForCausalLM),
        "gpt2": (transformers.GPT2Config, transformers.GPT2LMHeadModel),
    }[spec.family]
    cfg = config_cls(**dict(spec.config))
    cfg._attn_implementation = "sdpa"
    torch.manual_seed(seed)
    device = torch.device("cpu" if device is None else device)
    with torch.device(device):
        hf_model = model_cls(cfg)
    hf_model = hf_model.to(_DTYPES[dtype])
    # at least every slot: a step of all requests above the largest capture size runs eagerly
    rows = None if max_num_tokens is None else max(max_num_tokens, spec.num_slots)
    return HFDecodeLM(hf_model, num_slots=spec.num_slots, max_batch_size=rows)
