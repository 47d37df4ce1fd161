"""Requests vLLM would reject: ``max_model_len`` as vLLM picks it, and the requests a server
started with it refuses.

vLLM (0.33 and 0.34) derives ``max_model_len`` from the model's config, the smallest of
``max_position_embeddings``, ``n_positions``, ``max_seq_len``, ``seq_length`` ... with
``model_max_length`` taking precedence (``derive_max_model_len_and_key``,
``vllm/transformers_utils/model_arch_config_convertor.py``), and refuses to start when one
request of that length does not fit its KV cache (``_check_enough_kv_cache_memory``,
``vllm/v1/core/kv_cache_planning.py``, which names the length that would fit);
``--max-model-len -1`` (auto-fit, ``_auto_fit_max_model_len`` there) starts with the
largest length that fits instead. :func:`vllm_max_model_len` is that length: the config's,
capped by the KV cache.

A server started with it rejects a request whose prompt reaches it (``The decoder prompt
(length N) is longer than the maximum model length``, or equal to it with no room for an
output token: ``InputProcessor``'s checks, ``vllm/v1/engine/input_processor.py``) and caps
the output of the others at ``max_model_len - prompt`` (``get_max_tokens``,
``vllm/entrypoints/serve/utils/api_utils.py``). :func:`served_requests` applies both.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

__all__ = ["config_max_model_len", "vllm_max_model_len", "served_requests"]

# vLLM's keys for a config's context length, in its order (model_arch_config_convertor.py)
_LENGTH_KEYS = ("max_position_embeddings", "n_positions", "max_seq_len", "seq_length",
                "model_max_length", "max_target_positions", "max_sequence_length",
                "max_seq_length", "seq_len")  # fmt: skip


def config_max_model_len(model: str | Path | Mapping[str, Any]) -> int | None:
    """The context length vLLM derives from a config.json (a path, a folder holding one, or
    its dict; a multimodal config's ``text_config``), or None when it states none or
    ``model`` is not a config (a registry name: its lengths are not recorded). RoPE
    scaling that lengthens the context is not applied."""
    if isinstance(model, Mapping):
        cfg: Any = model
    else:
        path = Path(model)
        path = path / "config.json" if path.is_dir() else path
        if path.suffix != ".json" or not path.is_file():
            return None
        try:
            cfg = json.loads(path.read_text(encoding="utf-8"))
        except (UnicodeDecodeError, json.JSONDecodeError):
            return None
    if not isinstance(cfg, Mapping):
        return None
    cfg = cfg.get("text_config") or cfg
    found = [
        int(cfg[k]) for k in _LENGTH_KEYS if isinstance(cfg.get(k), (int, float)) and cfg[k] > 0
    ]
    if isinstance(cfg.get("model_max_length"), int) and cfg["model_max_length"] > 0:
        return int(cfg["model_max_length"])
    return min(found) if found else None


def vllm_max_model_len(
    config_len: int | None, kv_cache_tokens: float | None, block_size: int = 16
) -> int | None:
    """``max_model_len`` as vLLM picks it: the config's length (``config_len``), capped at
    the KV cache's whole blocks (one request must fit); None when neither is known."""
    fits = None if kv_cache_tokens is None else int(kv_cache_tokens // block_size) * block_size
    known = [v for v in (config_len, fits) if v is not None]
    return min(known) if known else None


def served_requests(
    requests: pd.DataFrame, max_model_len: int | None, where: str = ""
) -> tuple[pd.DataFrame, int]:
    """``(the requests vLLM serves, how many it rejects)`` with ``max_model_len``: a prompt
    of ``max_model_len`` tokens or more is rejected, the others' outputs are capped at
    ``max_model_len - prompt``; the table's attributes are kept. ValueError, naming
    ``where`` (the model and device) and the longest prompt, when every request is
    rejected."""
    if max_model_len is None:
        return requests, 0
    prompt = requests["prompt_tokens"].to_numpy(np.int64)
    keep = prompt < max_model_len
    rejected = int((~keep).sum())
    if not keep.any():
        raise ValueError(
            f"every one of the {len(requests):,} requests has a prompt of max_model_len="
            f"{max_model_len:,} tokens or more{f' ({where})' if where else ''}: vLLM would "
            "reject them all, so nothing of this trace could be served; give a larger "
            "--max-model-len (vLLM's limit is the model's context, capped by the KV cache), "
            "model a larger device, or shorten the prompts"
        )
    attrs = dict(requests.attrs)
    out = requests[keep].reset_index(drop=True)
    cap = max_model_len - out["prompt_tokens"].to_numpy(np.int64)
    out["output_tokens"] = np.minimum(out["output_tokens"].to_numpy(np.int64), cap)
    out.attrs = attrs
    return out, rejected
