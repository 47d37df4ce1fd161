"""What a checkpoint's weights are made of, beyond its shapes: the parameters counted on the
model transformers builds (:class:`ParamCount`) and the quantization its ``config.json``
sets (:class:`QuantScheme`). Plain data, read by
:meth:`cgdispatch.models.published.PublishedModel.weight_bytes`."""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["ParamCount", "QuantScheme"]


@dataclass(frozen=True)
class ParamCount:
    """Parameters counted on the model ``transformers`` builds from a config on torch's meta
    device (:mod:`cgdispatch.models.hf.meta_config`), one GPU, no tensor parallelism.

    ``layers`` holds per decoder layer (linear, expert, other): weights of the layer's linear
    projections (quantized with the checkpoint), routed experts' weights, and the rest
    (norms, biases, routers). ``embedding`` is the token (and position) embeddings on the
    first stage, ``head`` the untied LM head (0 when tied), ``final`` everything else
    outside the layers (the final norm) on the last stage."""

    layers: tuple[tuple[int, int, int], ...]
    embedding: int
    head: int
    final: int

    @property
    def total(self) -> int:
        return sum(map(sum, self.layers)) + self.embedding + self.head + self.final


@dataclass(frozen=True)
class QuantScheme:
    """A checkpoint's quantization as its ``config.json`` ``quantization_config`` sets it
    (:func:`~cgdispatch.models.config_json.config_fields`): what one quantized weight costs,
    scales and zero points included, and which modules stay 16-bit."""

    method: str  # vLLM's name of the scheme, a key of QUANT_WEIGHT_BYTES
    bytes_per_weight: float  # one quantized linear (or expert) weight with its scales
    head: bool = False  # the LM head is quantized too (GPTQ's ``lm_head``)
    # (layer, part) left 16-bit: part "attn" (q, k, v, o), "mlp" (dense MLP or shared
    # experts) or "experts" (routed experts)
    unquantized: tuple[tuple[int, str], ...] = ()
    rule: str = ""  # how the bytes follow from the config (for the model's source)
