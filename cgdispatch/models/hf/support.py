"""What the Hugging Face adapter needs from a model, checked up front with errors that say the fix.

``check_supported`` raises :class:`UnsupportedModelError` (a ValueError) naming what is
missing (a causal-LM head, static-cache support, SDPA attention, full-attention layers)
and what to do; ``require_transformers`` imports transformers or says how to install it.
It checks class-level capabilities only; whether a step's inputs fit is checked by
``HFDecodeLM`` itself.
"""

from __future__ import annotations

from typing import Any

__all__ = [
    "UnsupportedModelError",
    "check_supported",
    "require_transformers",
    "support_report",
    "unsupported_examples",
]


class UnsupportedModelError(ValueError):
    """The model lacks something the decode adapter needs; the message says what to do."""


def require_transformers() -> Any:
    """Import transformers, or raise ImportError saying how to install it."""
    try:
        import transformers
    except ImportError:  # pragma: no cover - depends on the environment
        raise ImportError(
            "the Hugging Face adapter needs the 'transformers' package, which is not installed: "
            "pip install 'cgdispatch[hf]' (or pip install 'transformers>=4.40')"
        ) from None
    return transformers


def check_supported(model: Any) -> None:
    """Raise UnsupportedModelError naming what the adapter cannot handle and the fix."""
    name = type(model).__name__
    cfg = getattr(model, "config", None)
    if cfg is None or not callable(getattr(model, "get_output_embeddings", None)):
        raise UnsupportedModelError(
            f"{name} is not a transformers PreTrainedModel: pass a causal LM such as "
            "AutoModelForCausalLM.from_config(config)"
        )
    if model.get_output_embeddings() is None:
        raise UnsupportedModelError(
            f"{name} has no causal-LM head (get_output_embeddings() is None): the adapter needs "
            "logits; load the model with AutoModelForCausalLM instead of AutoModel"
        )
    if getattr(cfg, "is_encoder_decoder", False):
        raise UnsupportedModelError(
            f"{name} is an encoder-decoder model: the adapter serves decoder-only causal LMs "
            "(Llama, GPT-2, Mistral, Qwen2 ...)"
        )
    static = getattr(model, "_can_compile_fullgraph", None)
    static = getattr(model, "_supports_static_cache", static)
    if not static:
        raise UnsupportedModelError(
            f"{name} does not support a static KV cache (_can_compile_fullgraph / "
            "_supports_static_cache is False): graphs need fixed cache addresses; use a model "
            "class that supports StaticCache (e.g. LlamaForCausalLM)"
        )
    impl = getattr(cfg, "_attn_implementation", None)
    if impl != "sdpa":
        raise UnsupportedModelError(
            f"{name} uses attn_implementation={impl!r}: the adapter needs 'sdpa' (piecewise "
            "graphs split at scaled_dot_product_attention, and its mask handling is the one "
            "tested); build or load the model with attn_implementation='sdpa'"
        )
    text_cfg = cfg.get_text_config(decoder=True) if hasattr(cfg, "get_text_config") else cfg
    layer_types = set(getattr(text_cfg, "layer_types", None) or ["full_attention"])
    if layer_types != {"full_attention"} or getattr(text_cfg, "sliding_window", None):
        raise UnsupportedModelError(
            f"{name} has layer types {sorted(layer_types)} / a sliding window: the adapter "
            "handles full-attention layers only (one static cache row per request); use a "
            "model without sliding-window or linear-attention layers"
        )


def support_report(models: dict[str, Any]) -> Any:
    """One row per labelled model: whether the adapter accepts it, else the refusal message.

    Returns a pandas DataFrame with columns ``model``, ``class``, ``supported``, ``reason``.
    """
    import pandas as pd

    rows = []
    for label, model in models.items():
        try:
            check_supported(model)
            supported, reason = True, ""
        except UnsupportedModelError as err:
            supported, reason = False, str(err)
        rows.append(
            {
                "model": label,
                "class": type(model).__name__,
                "supported": supported,
                "reason": reason,
            }
        )
    return pd.DataFrame(rows, columns=["model", "class", "supported", "reason"])


def unsupported_examples(seed: int = 0) -> dict[str, Any]:
    """Tiny random-weight models the adapter refuses, one per reason (for docs and tests).

    A Llama with eager attention (no SDPA to split at), a Llama base model (no LM head),
    BERT (a masked LM, no static cache) and T5 (encoder-decoder).
    """
    import torch

    transformers = require_transformers()
    torch.manual_seed(seed)
    small = dict(vocab_size=128, hidden_size=32, num_attention_heads=4, intermediate_size=64)
    llama = transformers.LlamaConfig(
        **small, num_hidden_layers=1, num_key_value_heads=2, attn_implementation="sdpa"
    )
    eager = transformers.LlamaConfig(
        **small, num_hidden_layers=1, num_key_value_heads=2, attn_implementation="eager"
    )
    bert = transformers.BertConfig(**small, num_hidden_layers=1)
    t5 = transformers.T5Config(
        vocab_size=128, d_model=32, d_kv=8, d_ff=64, num_layers=1, num_heads=4
    )
    return {
        "Llama without SDPA (eager attention)": transformers.LlamaForCausalLM(eager),
        "Llama base model (no causal-LM head)": transformers.LlamaModel(llama),
        "BERT (bidirectional masked LM)": transformers.BertForMaskedLM(bert),
        "T5 (encoder-decoder)": transformers.T5ForConditionalGeneration(t5),
    }
