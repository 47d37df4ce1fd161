"""What the device model times: the kernels of a step, as counted on fake tensors by
:mod:`cgdispatch.estimate.kernels` (:class:`StepProfile` at one size, :class:`LinearProfile`
at any size). Plain arrays, no torch: a cost model read back from the disk cache
(:mod:`cgdispatch.core.cache`) holds them without importing torch (about 1.6 s of
``python -m cgdispatch tune`` on two cores; ``tests/cli/test_tune_imports.py``).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

__all__ = ["StepProfile", "LinearProfile", "AttentionShape"]


@dataclass(frozen=True)
class StepProfile:
    """The kernels of one step, in launch order: name, FLOPs, bytes moved, 16-bit or not,
    and whether it is a splitting op (eager in piecewise modes)."""

    num_tokens: int
    names: tuple[str, ...]
    flops: np.ndarray
    bytes: np.ndarray
    half: np.ndarray
    splitting: np.ndarray

    @property
    def num_kernels(self) -> int:
        return len(self.names)


@dataclass(frozen=True)
class LinearProfile:
    """The kernels of a step at any ``num_tokens``: each kernel's FLOPs and bytes as a line.

    For a decoder whose every activation has ``num_tokens`` rows (and attention over a fixed
    context), each kernel's FLOPs and bytes are exactly affine in ``num_tokens``; two
    profiles give the line and :func:`~cgdispatch.estimate.kernels.linear_profile` checks the kernel lists agree. Lets the
    device model time 8192 sizes from two fake-tensor runs instead of 8192.
    """

    names: tuple[str, ...]
    half: np.ndarray  # [kernels] bool
    splitting: np.ndarray  # [kernels] bool
    flops_at_zero: np.ndarray  # [kernels]
    flops_per_token: np.ndarray  # [kernels]
    bytes_at_zero: np.ndarray  # [kernels]
    bytes_per_token: np.ndarray  # [kernels]

    @property
    def num_kernels(self) -> int:
        return len(self.names)

    def at(self, num_tokens: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """``(flops, bytes)``, each ``[len(num_tokens), kernels]``."""
        n = np.asarray(num_tokens, dtype=np.float64)[:, None]
        return (
            self.flops_at_zero + n * self.flops_per_token,
            self.bytes_at_zero + n * self.bytes_per_token,
        )

    def profile(self, num_tokens: int) -> StepProfile:
        """The :class:`StepProfile` at one size (what :func:`profile_step` would count)."""
        flops, nbytes = self.at(np.array([num_tokens]))
        return StepProfile(
            int(num_tokens), self.names, flops[0], nbytes[0], self.half, self.splitting
        )


@dataclass(frozen=True)
class AttentionShape:
    """What one GPU's attention reads and computes per token, for pricing it per request
    (:mod:`cgdispatch.estimate.step_cost`): the model's heads on one tensor-parallel rank and
    the KV bytes one token of context holds in one layer."""

    heads: int  # query heads on one GPU
    kv_heads: int  # KV heads on one GPU (replicated when fewer than ranks)
    head_dim: int
    kv_bytes_per_token: float  # K and V of one token in one layer on one GPU
    kv_dtype_bytes: float = 2.0  # bytes of one KV element (bf16: 2, fp8: 1)
    tensor_parallel_size: int = 1  # all-reduces cross this many GPUs
