"""The toy model's attention as registered custom ops over a static, slot-indexed KV cache.

Two ops, each opaque to ``torch.compile`` (one node in a dynamo graph, so piecewise
splitting can cut there; see ``GraphConfig.splitting_ops``):

* ``cgdispatch::attention`` - any batch (decodes and prefill chunks mixed). Its shapes
  depend only on ``num_tokens`` (it masks over the whole cache row of each token's
  request), so it can sit inside a FULL graph for every batch: AttentionCGSupport.ALWAYS.
* ``cgdispatch::attention_uniform`` - a decode-specialised kernel that gathers the cache
  once per request instead of once per token. It is chosen from the forward context's
  descriptor at trace/capture time, so a graph captured for a uniform batch is only valid
  for uniform batches: AttentionCGSupport.UNIFORM_BATCH. On other batches (and with no
  context) it runs the general kernel.

Both write the step's K/V into the cache first (``kv_cache[0|1, slot, position]``), then
attend: token t of request r sees cache positions <= positions[t] of slot r. Neither op
validates indices (the runner does, in debug mode).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch

from ..capture import context as _context
from ..capture.graph_key import is_uniform_key

__all__ = ["attention", "attention_uniform", "attention_reference"]

_LIB = "cgdispatch"


def _write_kv(
    k: torch.Tensor,
    v: torch.Tensor,
    kv_cache: torch.Tensor,
    positions: torch.Tensor,
    slots: torch.Tensor,
) -> None:
    # kv_cache: [2, num_slots + 1, max_seq_len, n_kv_heads, head_dim]; k, v: [T, n_kv, D]
    kv_cache[0].index_put_((slots, positions), k)
    kv_cache[1].index_put_((slots, positions), v)


def _attend(
    q: torch.Tensor, keys: torch.Tensor, values: torch.Tensor, visible: torch.Tensor, scale: float
) -> torch.Tensor:
    """q [..., Hkv, G, D], keys/values [..., L, Hkv, D], visible [..., L] -> [..., Hkv, G, D]."""
    scores = torch.einsum("...kgd,...lkd->...kgl", q.float(), keys.float()) * scale
    scores = scores.masked_fill(~visible[..., None, None, :], float("-inf"))
    probs = torch.softmax(scores, dim=-1)
    return torch.einsum("...kgl,...lkd->...kgd", probs, values.float()).to(q.dtype)


def _general(q, k, v, kv_cache, positions, slots, scale):  # noqa: ANN001, ANN202
    """Write K/V of the step, then causal attention over each token's slot. q: [T, H, D]."""
    num_tokens, num_heads, head_dim = q.shape
    n_kv = k.shape[1]
    _write_kv(k, v, kv_cache, positions, slots)
    keys, values = kv_cache[0, slots], kv_cache[1, slots]  # [T, L, Hkv, D]
    cache_pos = torch.arange(kv_cache.shape[2], device=q.device)
    visible = cache_pos[None, :] <= positions[:, None]  # [T, L]
    out = _attend(
        q.view(num_tokens, n_kv, num_heads // n_kv, head_dim), keys, values, visible, scale
    )
    return out.reshape(num_tokens, num_heads, head_dim)


def _uniform(q, k, v, kv_cache, positions, slots, scale, num_reqs):  # noqa: ANN001, ANN202
    num_tokens, num_heads, head_dim = q.shape
    n_kv, q_len = k.shape[1], num_tokens // num_reqs
    _write_kv(k, v, kv_cache, positions, slots)
    req_slots = slots.view(num_reqs, q_len)[:, 0]
    keys, values = kv_cache[0, req_slots], kv_cache[1, req_slots]  # [R, L, Hkv, D]
    cache_pos = torch.arange(kv_cache.shape[2], device=q.device)
    visible = cache_pos[None, None, :] <= positions.view(num_reqs, q_len, 1)  # [R, q, L]
    qr = q.view(num_reqs, q_len, n_kv, num_heads // n_kv, head_dim).transpose(0, 1)  # [q, R, ...]
    out = _attend(qr, keys, values, visible.transpose(0, 1), scale)  # [q, R, Hkv, G, D]
    return out.transpose(0, 1).reshape(num_tokens, num_heads, head_dim)


# One schema for both ops (their Python signature is ``attention_reference``'s): the cache
# is written in place, ``Tensor(a!)``, so the compiler keeps the write and its order.
_SCHEMA = (
    "(Tensor q, Tensor k, Tensor v, Tensor(a!) kv_cache, Tensor positions, Tensor slots, "
    "float scale) -> Tensor"
)


def _register(name: str, kernel: Callable[..., torch.Tensor]) -> Any:
    """``kernel`` as the custom op ``cgdispatch::<name>``, with a shape-only fake (tracing,
    fake tensors: the output is shaped like q)."""
    op = torch.library.custom_op(
        f"{_LIB}::{name}", kernel, mutates_args=("kv_cache",), schema=_SCHEMA
    )
    op.register_fake(lambda q, *_: torch.empty_like(q))
    return op


def _uniform_or_general(q, k, v, kv_cache, positions, slots, scale):  # noqa: ANN001, ANN202
    """Like ``attention``; uses the per-request kernel when the context's key is uniform."""
    ctx = _context.get_forward_context()
    desc = None if ctx is None else ctx.batch_descriptor
    num_tokens = q.shape[0]
    # either generation's key (V1 BatchDescriptor, vLLM 0.34 BatchExecutionDescriptor)
    uniform = desc is not None and is_uniform_key(desc) and bool(desc.num_reqs)
    if uniform and desc.num_tokens == num_tokens and num_tokens % desc.num_reqs == 0:
        return _uniform(q, k, v, kv_cache, positions, slots, scale, desc.num_reqs)
    return _general(q, k, v, kv_cache, positions, slots, scale)


attention = _register("attention", _general)
attention_uniform = _register("attention_uniform", _uniform_or_general)


def attention_reference(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    kv_cache: torch.Tensor,
    positions: torch.Tensor,
    slots: torch.Tensor,
    scale: float,
) -> torch.Tensor:
    """Token-by-token loop with the same semantics (tests compare the ops against it)."""
    _write_kv(k, v, kv_cache, positions, slots)
    num_tokens, num_heads, head_dim = q.shape
    group = num_heads // k.shape[1]
    out = torch.empty_like(q)
    for t in range(num_tokens):
        p, s = int(positions[t]), int(slots[t])
        keys = kv_cache[0, s, : p + 1].repeat_interleave(group, dim=1).float()  # [p+1, H, D]
        values = kv_cache[1, s, : p + 1].repeat_interleave(group, dim=1).float()
        scores = torch.einsum("hd,lhd->hl", q[t].float(), keys) * scale
        out[t] = torch.einsum("hl,lhd->hd", torch.softmax(scores, -1), values).to(q.dtype)
    return out
