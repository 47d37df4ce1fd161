"""CUDA-graph modes and attention-backend support levels, with vLLM V1's names and semantics.

A mode is either a single runtime mode (NONE, PIECEWISE, FULL) or a pair
(decode mode, mixed mode) for configs that treat uniform-decode batches separately.
This module only describes modes; choosing one per batch is the dispatcher's job.
"""

from __future__ import annotations

import enum

__all__ = [
    "CUDAGraphMode",
    "AttentionCGSupport",
    "lower_for_attention_support",
    "lower_without_splitting",
    "DEFAULT_SPLITTING_OPS",
]


class CUDAGraphMode(enum.Enum):
    """How (and whether) a step runs as a CUDA graph.

    ``FULL_DECODE_ONLY`` and ``FULL_AND_PIECEWISE`` are config-level modes: a tuple
    ``(decode_mode, mixed_mode)``. Only NONE, PIECEWISE and FULL are valid at runtime.
    """

    NONE = 0
    PIECEWISE = 1
    FULL = 2
    FULL_DECODE_ONLY = (2, 0)  # (FULL, NONE)
    FULL_AND_PIECEWISE = (2, 1)  # (FULL, PIECEWISE)

    def separate_routine(self) -> bool:
        """True when uniform-decode and mixed batches have different modes."""
        return isinstance(self.value, tuple)

    def decode_mode(self) -> CUDAGraphMode:
        """Runtime mode used for uniform-decode batches."""
        return CUDAGraphMode(self.value[0]) if self.separate_routine() else self

    def mixed_mode(self) -> CUDAGraphMode:
        """Runtime mode used for mixed (prefill + decode) batches."""
        return CUDAGraphMode(self.value[1]) if self.separate_routine() else self

    def has_mode(self, mode: CUDAGraphMode) -> bool:
        """Whether runtime mode ``mode`` is used for some batches under this mode."""
        if mode.separate_routine():
            raise ValueError(
                f"has_mode({mode}) is invalid: the argument must be a runtime mode "
                "(NONE, PIECEWISE or FULL); compare config modes with == instead"
            )
        if self.separate_routine():
            return mode.value in self.value
        return self is mode

    def requires_piecewise_compilation(self) -> bool:
        """Whether the model must be split at the attention ops (piecewise compilation)."""
        return CUDAGraphMode.PIECEWISE in (self.decode_mode(), self.mixed_mode())

    def max_cudagraph_mode(self) -> CUDAGraphMode:
        """The 'largest' runtime mode this mode uses (FULL > PIECEWISE > NONE)."""
        return CUDAGraphMode(max(self.value)) if self.separate_routine() else self

    def has_full_cudagraphs(self) -> bool:
        return self.max_cudagraph_mode() is CUDAGraphMode.FULL

    def has_piecewise_cudagraphs(self) -> bool:
        return self.requires_piecewise_compilation()

    def without_piecewise(self) -> CUDAGraphMode:
        """The mode with its PIECEWISE part dropped: PIECEWISE -> NONE,
        FULL_AND_PIECEWISE -> FULL_DECODE_ONLY (vLLM 0.33 ``without_piecewise``)."""
        if self is CUDAGraphMode.PIECEWISE:
            return CUDAGraphMode.NONE
        if self is CUDAGraphMode.FULL_AND_PIECEWISE:
            return CUDAGraphMode.FULL_DECODE_ONLY
        return self

    @classmethod
    def valid_runtime_modes(cls) -> frozenset[CUDAGraphMode]:
        """The modes a wrapper or the forward context may carry: NONE, PIECEWISE, FULL."""
        return frozenset({cls.NONE, cls.PIECEWISE, cls.FULL})

    def is_valid_runtime_mode(self) -> bool:
        """True for NONE, PIECEWISE and FULL (vLLM 0.33's name; ``valid_runtime_modes``
        is the set, as in vLLM)."""
        return self in CUDAGraphMode.valid_runtime_modes()

    @classmethod
    def parse(cls, value: CUDAGraphMode | str) -> CUDAGraphMode:
        """A mode from itself or its name, case-insensitive (``"full_and_piecewise"``)."""
        if isinstance(value, cls):
            return value
        if isinstance(value, str):
            key = value.strip().upper()
            if key in cls.__members__:
                return cls.__members__[key]
        names = ", ".join(cls.__members__)
        raise ValueError(f"cudagraph mode {value!r} is unknown: use one of {names}")

    def __str__(self) -> str:
        return self.name


class AttentionCGSupport(enum.IntEnum):
    """How much of a step an attention backend can run inside a full CUDA graph.

    Ordered: ``NEVER < UNIFORM_SINGLE_TOKEN_DECODE < UNIFORM_BATCH < ALWAYS``.
    """

    NEVER = 0  # attention must stay outside graphs (piecewise at most)
    UNIFORM_SINGLE_TOKEN_DECODE = 1  # full graphs for pure decode with one token per request
    UNIFORM_BATCH = 2  # full graphs for uniform batches (spec decode: q tokens per request)
    ALWAYS = 3  # full graphs for any batch, mixed prefill/decode included

    def __str__(self) -> str:
        return self.name


def lower_for_attention_support(
    mode: CUDAGraphMode,
    support: AttentionCGSupport,
    attention_split: bool,
    uniform_decode_query_len: int,
) -> CUDAGraphMode:
    """The mode lowered to what the attention backend can run inside a graph.

    vLLM ``CompilationConfig.resolve_cudagraph_mode_and_sizes`` (the same three rules in
    0.33 and 0.34; docs/semantics.md): FULL on mixed batches needs ALWAYS (with NEVER it is
    refused, else it becomes FULL_AND_PIECEWISE when attention is split out, otherwise
    FULL_DECODE_ONLY); FULL decode with NEVER, or with ``q > 1`` below UNIFORM_BATCH,
    becomes PIECEWISE when attention is split out, otherwise NONE.
    """
    M, S = CUDAGraphMode, AttentionCGSupport
    if mode is M.NONE:
        return mode
    if mode.mixed_mode() is M.FULL and support != S.ALWAYS:
        if support == S.NEVER:
            raise ValueError(
                f"CUDAGraphMode.{mode.name} is not supported with an attention backend of "
                f"support {support} (vLLM refuses it): set cudagraph_mode='PIECEWISE' (with "
                "attention split out) or 'NONE'"
            )
        mode = M.FULL_AND_PIECEWISE if attention_split else M.FULL_DECODE_ONLY
    if mode.decode_mode() is M.FULL and support == S.NEVER:
        mode = M.PIECEWISE if attention_split else M.NONE
    if mode.decode_mode() is M.FULL and uniform_decode_query_len > 1 and support < S.UNIFORM_BATCH:
        mode = M.PIECEWISE if attention_split else M.NONE
    return mode


def lower_without_splitting(mode: CUDAGraphMode) -> CUDAGraphMode:
    """The mode when ``splitting_ops == []``: nothing to split at, so no piecewise graphs.

    vLLM ``CompilationConfig.set_splitting_ops_for_v1`` (0.33 and 0.34 alike): PIECEWISE
    becomes NONE, FULL_AND_PIECEWISE becomes FULL, the other modes stay.
    """
    M = CUDAGraphMode
    return {M.PIECEWISE: M.NONE, M.FULL_AND_PIECEWISE: M.FULL}.get(mode, mode)


# the attention ops cgdispatch's models split at (PIECEWISE pieces end there), standing for
# vLLM's attention ops in this package's models; GraphConfig.splitting_ops=None means these
DEFAULT_SPLITTING_OPS: tuple[str, ...] = (
    "cgdispatch::attention",
    "cgdispatch::attention_uniform",
    "aten::scaled_dot_product_attention",
)
