"""KV-cache bytes per token of a registry model: what one token of context costs in memory.

``2 (K and V) * layers * KV heads on one rank * head_dim * dtype bytes``, from the model's
published shapes (:class:`~cgdispatch.models.arch_spec.ArchSpec`) or the toy config.
Graph memory and KV cache share the device, so a plan that frees graph memory buys this
many more KV tokens per byte; this module turns bytes into tokens, nothing more.
"""

from __future__ import annotations

from ..core import cache

__all__ = ["kv_bytes_per_token"]


@cache.memo(
    maxsize=32,  # a config.json by its path and bytes: an edited one is read afresh
    key=lambda model, tensor_parallel_size=None: (cache.source_digest(model), tensor_parallel_size),
)
def kv_bytes_per_token(model: str, *, tensor_parallel_size: int | None = None) -> float | None:
    """KV bytes of one token of context on one GPU for registry model ``model`` (one rank of
    its own TP size, or of ``tensor_parallel_size``), a published Hugging Face id or a
    ``config.json`` path (one rank of ``tensor_parallel_size``, default 1), or None for models whose KV layout is not known here (Hugging Face adapters)."""
    from ..models.arch_spec import ARCHITECTURES, DTYPE_BYTES
    from ..models.config_json import is_config_source
    from ..models.published import PUBLISHED_MODELS, published_model

    if model in PUBLISHED_MODELS or is_config_source(model):  # one GPU, the config's dtype
        return published_model(model).kv_bytes_per_token(
            tensor_parallel_size=tensor_parallel_size or 1
        )
    if tensor_parallel_size is not None and model in ARCHITECTURES:
        spec = ARCHITECTURES[model]
        if spec.published and tensor_parallel_size != spec.tensor_parallel_size:
            return published_model(spec.published).kv_bytes_per_token(
                tensor_parallel_size=tensor_parallel_size
            )
    if model in ARCHITECTURES:
        spec = ARCHITECTURES[model]
        heads, head_dim, layers = spec.shard("num_kv_heads"), spec.head_dim, spec.num_layers
        dtype = spec.dtype
    else:
        from ..models.toy import PRESETS  # torch, for a toy model only

        if model not in PRESETS:
            return None
        cfg = PRESETS[model]
        heads, head_dim, layers, dtype = cfg.num_kv_heads, cfg.head_dim, cfg.num_layers, cfg.dtype
    return float(2 * layers * heads * head_dim * DTYPE_BYTES[dtype])
