"""What the Hugging Face adapter needs from a model, checked up front with errors that say the fix.

``check_supported`` raises :class:`UnsupportedModelError` (a ValueError) naming what is
missing (a causal-LM head, static-cache support, SDPA attention, full-attention layers)
and what to do; ``require_transformers`` imports transformers or says how to install it.
It checks class-level capabilities only; whether a step's inputs fit is checked by
``HFDecodeLM`` itself.
"""

from __future__ import annotations

from typing import Any

__all__ = ["UnsupportedModelError", "check_supported", "require_transformers"]


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
