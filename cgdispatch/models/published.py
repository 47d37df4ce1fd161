"""Published configs of the models vLLM start-ups were logged for, and what they weigh per GPU.

One row of ``cgdispatch/data/model_architectures.csv`` per Hugging Face id: the decoder's
shapes from its ``config.json`` (layers, hidden size, heads, KV heads, head size, MLP size,
vocabulary, tied embeddings, biases), mixture-of-experts fields (experts, experts per token,
expert and shared-expert MLP sizes, leading dense layers), multi-head latent attention fields
(KV LoRA rank, rotary and non-rotary head parts) and the parameters of a vision tower where
the model has one, each row with its source. Quantized checkpoints share their base model's
shapes; the quantization itself is a property of the run (vLLM's ``quantization``).

From these numbers alone :class:`PublishedModel` gives what vLLM holds on one GPU of a
``tensor_parallel_size`` x ``pipeline_parallel_size`` run: parameter bytes per rank
(:meth:`~PublishedModel.weight_bytes`), KV-cache bytes per token
(:meth:`~PublishedModel.kv_bytes_per_token`) and the per-rank decoder as an
:class:`~cgdispatch.models.arch_spec.ArchSpec` whose kernels can be traced
(:meth:`~PublishedModel.arch_spec`). vLLM pads the vocabulary to a multiple of 64 before
sharding it and keeps at least one KV head per rank; both are followed here.
"""

from __future__ import annotations

import math
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, fields
from importlib import resources

import pandas as pd

from ..core import cache
from ..core.arith import round_up
from .arch_spec import ArchSpec
from .weights import ParamCount, QuantScheme

__all__ = [
    "arch_spec",
    "PublishedModel",
    "PUBLISHED_MODELS",
    "published_model",
    "model_from_config",
    "QUANT_WEIGHT_BYTES",
    "ParamCount",
    "QuantScheme",
]

_DTYPE_BYTES = {"bfloat16": 2, "float16": 2, "float32": 4, "fp8": 1, "fp8_e4m3": 1, "fp8_e5m2": 1}
# bytes per weight of a quantized linear layer (vLLM's ``quantization`` of the run):
# 8-bit schemes keep one byte per weight (per-channel scales are negligible); GPTQ 4-bit keeps
# half a byte plus a 16-bit scale per group of 128; MXFP4 (gpt-oss experts only) half a byte
# plus an 8-bit scale per block of 32
# AWQ 4-bit (vLLM's awq_marlin, or awq) half a byte plus a 16-bit scale and a 4-bit zero
# point per group of 128; compressed-tensors with 4-bit weight groups (W4A16, pack-quantized)
# half a byte plus a 16-bit scale per group of 128
QUANT_WEIGHT_BYTES = {
    "fp8": 1.0,
    "compressed": 1.0,
    "compressed-tensors": 1.0,
    "compressed_w4a16": 0.5 + 2 / 128,
    "gptq_marlin": 0.5 + 2 / 128,
    "gptq": 0.5 + 2 / 128,
    "awq_marlin": 0.5 + 2.5 / 128,
    "awq": 0.5 + 2.5 / 128,
    "mxfp4": 0.5 + 1 / 32,
    # bitsandbytes 4-bit (nf4/fp4): half a byte plus an fp32 absmax per block of 64 (its
    # 8-bit, double-quantized form: quantization_config gives the exact bytes)
    "bitsandbytes": 0.5 + 4 / 64,
    # GGUF block types (llama.cpp ggml-common.h: bytes per block / weights per block); vLLM
    # keeps a GGUF file's embeddings and head quantized too; "gguf" alone: Q4_K
    "gguf": 144 / 256,
    "gguf_q4_0": 18 / 32,
    "gguf_q4_1": 20 / 32,
    "gguf_q5_0": 22 / 32,
    "gguf_q5_1": 24 / 32,
    "gguf_q8_0": 34 / 32,
    "gguf_q2_k": 84 / 256,
    "gguf_q3_k": 110 / 256,
    "gguf_q4_k": 144 / 256,
    "gguf_q5_k": 176 / 256,
    "gguf_q6_k": 210 / 256,
}
# vLLM's names of one scheme (a run logged as "gptq_marlin" loads a "gptq" checkpoint)
_SCHEME_FAMILY = {
    "gptq": "gptq",
    "gptq_marlin": "gptq",
    "awq": "awq",
    "awq_marlin": "awq",
    "compressed": "compressed-tensors",
    "compressed-tensors": "compressed-tensors",
    "compressed_w4a16": "compressed-tensors",
}
_VOCAB_PADDING = 64  # vLLM's DEFAULT_VOCAB_PADDING_SIZE


@dataclass(frozen=True)
class PublishedModel:
    """A published decoder's shapes (``config.json``), as listed in ``model_architectures.csv``."""

    model: str
    family: str
    layers: int
    hidden_size: int
    num_heads: int
    num_kv_heads: int
    head_dim: int
    intermediate_size: int
    vocab_size: int
    tied_embeddings: bool
    qkv_bias: bool
    gated_mlp: bool
    norms_per_layer: int
    qk_norm: bool
    num_experts: int
    experts_per_token: int
    moe_intermediate_size: int
    shared_intermediate_size: int
    dense_layers: int
    kv_lora_rank: int
    qk_rope_head_dim: int
    qk_nope_head_dim: int
    v_head_dim: int
    full_attention_every: int  # 1: every layer full attention; k: one in k (others sliding)
    vision_params: int
    dtype: str
    quantization: str  # the checkpoint's scheme as vLLM names it ("" for none)
    source: str
    q_lora_rank: int = 0  # latent attention's query rank (DeepSeek-V3; 0: one q projection)
    max_position_embeddings: int = 0  # the context the config allows (0: not given)
    # counted on the meta-device model (a model_type outside config_json.MODEL_TYPES):
    # weight_bytes sums these instead of the shape formula (None: the formula)
    param_count: ParamCount | None = None
    # the checkpoint's quantization_config, where its config.json gave one (None: the
    # scheme's nominal bytes in QUANT_WEIGHT_BYTES)
    quant_scheme: QuantScheme | None = None

    def __post_init__(self) -> None:
        from .shape_rules import check_shapes

        values = {f.name: getattr(self, f.name) for f in fields(self)}
        values.pop("param_count")
        values.pop("quant_scheme")
        check_shapes(values, f"model {self.model!r}")
        count = self.param_count
        if count is not None and len(count.layers) != self.layers:
            raise ValueError(
                f"model {self.model!r}: param_count has {len(count.layers)} layers, the model "
                f"{self.layers}: count the same model the fields describe"
            )

    @property
    def is_moe(self) -> bool:
        return self.num_experts > 0

    @property
    def is_mla(self) -> bool:
        return self.kv_lora_rank > 0

    def check_parallel(self, tp: int, pp: int) -> None:
        """ValueError unless TP and PP are integers >= 1 that fit this model's layers and
        that vLLM can shard it over (heads, KV heads, MLP, experts, vocabulary:
        :func:`~cgdispatch.models.shape_rules.check_tensor_parallel`)."""
        for name, value in (("tensor_parallel_size", tp), ("pipeline_parallel_size", pp)):
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(f"{name}={value!r} is invalid: it must be an integer >= 1")
        from .shape_rules import check_tensor_parallel

        check_tensor_parallel(self, tp)
        if pp > self.layers:
            raise ValueError(
                f"pipeline_parallel_size={pp} exceeds {self.model}'s {self.layers} layers: "
                "use at most one stage per layer"
            )

    def layers_on_rank(self, pp: int, rank: int) -> int:
        """Decoder layers on pipeline stage ``rank`` (vLLM's even split, remainder last)."""
        base = self.layers // pp
        return base + (self.layers - base * pp if rank == pp - 1 else 0)

    def kv_heads_per_rank(self, tp: int) -> int:
        return max(1, self.num_kv_heads // tp)

    def padded_vocab(self, tp: int) -> int:
        """The vocabulary as vLLM shards it: padded to a multiple of 64 (``pad_vocab_size``,
        vllm/model_executor/layers/vocab_parallel_embedding.py), which ``tp`` must divide."""
        return math.ceil(self.vocab_size / _VOCAB_PADDING) * _VOCAB_PADDING

    def _layer_params(self, tp: int, dense: bool) -> tuple[float, float, float]:
        """(linear, expert, other) parameters of one decoder layer on one TP rank."""
        attn, mlp, experts, other = self._layer_parts(tp, dense)
        return attn + mlp, experts, other

    def _layer_parts(self, tp: int, dense: bool) -> tuple[float, float, float, float]:
        """(attention linear, MLP linear, expert, other) parameters of one decoder layer on
        one TP rank (MLP: the dense MLP or the shared experts)."""
        h = self.hidden_size
        if self.is_mla:
            heads = self.num_heads / tp
            q = heads * (self.qk_nope_head_dim + self.qk_rope_head_dim)
            if self.q_lora_rank:  # q_a (replicated), its norm, q_b
                q = h * self.q_lora_rank + self.q_lora_rank + self.q_lora_rank * q
            else:
                q = h * q
            kv_a = h * (self.kv_lora_rank + self.qk_rope_head_dim)  # replicated
            kv_b = self.kv_lora_rank * heads * (self.qk_nope_head_dim + self.v_head_dim)
            attn = q + kv_a + kv_b + heads * self.v_head_dim * h
            other = self.kv_lora_rank
        else:
            q = self.num_heads * self.head_dim / tp
            kv = self.kv_heads_per_rank(tp) * self.head_dim
            attn = h * (q + 2 * kv) + q * h
            other = (q + 2 * kv) if self.qkv_bias else 0.0
        other += self.norms_per_layer * h + (2 * self.head_dim if self.qk_norm else 0)
        experts = 0.0
        if self.is_moe and not dense:
            experts = self.num_experts * 3 * h * self.moe_intermediate_size / tp
            mlp = 3 * h * self.shared_intermediate_size / tp
            other += h * self.num_experts + (h if self.shared_intermediate_size else 0)
        else:
            mats = 3 if self.gated_mlp else 2
            mlp = mats * h * self.intermediate_size / tp
            if not self.gated_mlp:  # biased fc1/fc2 (phi-2)
                other += self.intermediate_size / tp + h
        return attn, mlp, experts, other

    def weight_bytes(
        self,
        *,
        tensor_parallel_size: int = 1,
        pipeline_parallel_size: int = 1,
        rank: int | None = None,
        dtype: str | None = None,
        quantization: str | None = None,
    ) -> float:
        """Parameter bytes vLLM loads on one GPU: pipeline stage ``rank`` (default: the
        largest stage), ``dtype`` (default the config's) and the run's ``quantization``
        (default the checkpoint's)."""
        tp, pp = tensor_parallel_size, pipeline_parallel_size
        self.check_parallel(tp, pp)
        if rank is None:
            return max(
                self.weight_bytes(
                    tensor_parallel_size=tp,
                    pipeline_parallel_size=pp,
                    rank=r,
                    dtype=dtype,
                    quantization=quantization,
                )
                for r in range(pp)
            )
        quant, elem, linear_bytes, expert_bytes, scheme = self._weight_prices(dtype, quantization)
        skipped = set(scheme.unquantized) if scheme is not None else set()
        first = self.layers // pp * rank
        total = other = 0.0
        count = self.param_count
        for layer in range(first, first + self.layers_on_rank(pp, rank)):
            dense = layer < self.dense_layers
            attn, mlp, experts, rest = self._layer_parts(tp, dense)
            if count is not None:  # the counted layer, split over TP as the formula splits
                a1, m1, e1, r1 = self._layer_parts(1, dense)
                linear, e_n, r_n = count.layers[layer]
                attn = linear * _share(a1, a1 + m1) * _share(attn, a1)
                mlp = linear * _share(m1, a1 + m1) * _share(mlp, m1)
                experts, rest = e_n * _share(experts, e1), r_n * _share(rest, r1)
            for part, n, quantized in (
                ("attn", attn, linear_bytes),
                ("mlp", mlp, linear_bytes),
                ("experts", experts, expert_bytes),
            ):
                total += n * (elem if (layer, part) in skipped else quantized)
            other += rest
        # embeddings and head stay 16-bit but in GGUF files (vLLM keeps them quantized) and
        # a GPTQ checkpoint with ``lm_head`` quantized
        table_bytes = QUANT_WEIGHT_BYTES[quant] if quant and quant.startswith("gguf") else elem
        head_bytes = linear_bytes if scheme is not None and scheme.head else table_bytes
        table = self.padded_vocab(tp) * self.hidden_size / tp
        pad = self.padded_vocab(tp) / self.vocab_size / tp  # vLLM's padded, sharded vocabulary
        if rank == 0:
            embedding = count.embedding * pad if count else table
            total += embedding * table_bytes + self.vision_params / tp * elem
        if rank == pp - 1:
            other += count.final if count else self.hidden_size  # final norm
            if count and count.head:
                total += count.head * pad * head_bytes
            elif not self.tied_embeddings or pp > 1:
                total += table * head_bytes
        return total + other * elem

    def _weight_prices(
        self, dtype: str | None, quantization: str | None
    ) -> tuple[str | None, float, float, float, QuantScheme | None]:
        """The run's quantization (None: 16-bit), the bytes of a 16-bit weight, of a linear
        weight and of an expert weight, and the checkpoint's own scheme where the run loads
        it (its exact bytes per weight and the modules it leaves unquantized). ValueError for
        an unknown dtype or quantization."""
        dtype = dtype or self.dtype
        if dtype not in _DTYPE_BYTES:
            raise ValueError(f"dtype={dtype!r} is unknown: use one of {sorted(_DTYPE_BYTES)}")
        if quantization is None:  # the checkpoint's own scheme
            quantization = self.quantization
        quant = None if quantization in ("", "None") or pd.isna(quantization) else quantization
        if quant is not None and quant not in QUANT_WEIGHT_BYTES:
            raise ValueError(
                f"quantization={quantization!r} is unknown: use None or one of "
                f"{sorted(QUANT_WEIGHT_BYTES)}"
            )
        elem = _DTYPE_BYTES[dtype]
        linear_bytes = QUANT_WEIGHT_BYTES[quant] if quant and quant != "mxfp4" else elem
        expert_bytes = QUANT_WEIGHT_BYTES[quant] if quant else linear_bytes
        scheme = self.quant_scheme
        if scheme is None or _SCHEME_FAMILY.get(quant, quant) != _SCHEME_FAMILY.get(
            self.quantization, self.quantization
        ):
            scheme = None
        if scheme is not None:
            linear_bytes = expert_bytes = scheme.bytes_per_weight
        return quant, elem, linear_bytes, expert_bytes, scheme

    def kv_layer_slots(self, layers: int) -> int:
        """Layers' worth of KV pages vLLM's hybrid allocator sets aside per token.

        With sliding-window and full-attention layers mixed (``full_attention_every`` > 1),
        vLLM groups layers of each kind in groups as large as the smaller kind and pads the
        last group of each kind: Gemma 3's 62 layers (10 full, 52 sliding) take 7 groups
        of 10, 70 slots. With one kind, the layer count itself.
        """
        every = self.full_attention_every
        if every <= 1:
            return layers
        full = layers // every
        sliding = layers - full
        group = min(full, sliding) or max(full, sliding)
        return sum(round_up(n, group) for n in (full, sliding) if n)

    def kv_bytes_per_token(
        self,
        *,
        tensor_parallel_size: int = 1,
        pipeline_parallel_size: int = 1,
        kv_cache_dtype: str | None = None,
        dtype: str | None = None,
        rank: int | None = None,
    ) -> float:
        """KV-cache bytes one token takes on pipeline stage ``rank`` (default the last, which
        has the most layers) (MLA: one latent
        vector of ``kv_lora_rank + qk_rope_head_dim`` per layer, not split by TP), with the
        hybrid allocator's padding (:meth:`kv_layer_slots`). ``kv_cache_dtype`` "auto" (or
        None) follows the run's ``dtype``."""
        tp, pp = tensor_parallel_size, pipeline_parallel_size
        self.check_parallel(tp, pp)
        kv = kv_cache_dtype if kv_cache_dtype not in (None, "auto") else (dtype or self.dtype)
        if kv not in _DTYPE_BYTES:
            raise ValueError(
                f"kv_cache_dtype={kv_cache_dtype!r} is unknown: use 'auto' or one of "
                f"{sorted(_DTYPE_BYTES)}"
            )
        layers = self.kv_layer_slots(self.layers_on_rank(pp, pp - 1 if rank is None else rank))
        if self.is_mla:
            per_layer = self.kv_lora_rank + self.qk_rope_head_dim
        else:
            per_layer = 2 * self.kv_heads_per_rank(tp) * self.head_dim
        return float(layers * per_layer * _DTYPE_BYTES[kv])


def _share(part: float, whole: float) -> float:
    """One TP rank's share of a layer's parameters (``part`` of ``whole``; 1 with none)."""
    return part / whole if whole else 1.0


def arch_spec(
    model: PublishedModel,
    *,
    tensor_parallel_size: int = 1,
    pipeline_parallel_size: int = 1,
    rank: int | None = None,
    layers: int | None = None,
    dtype: str | None = None,
) -> ArchSpec:
    """The decoder one GPU runs, as a traceable :class:`ArchSpec`: pipeline stage ``rank``
    (default the last, which holds the LM head), its layers (or the first ``layers`` of
    them), this TP rank's share of heads, MLP and vocabulary."""
    tp, pp = tensor_parallel_size, pipeline_parallel_size
    model.check_parallel(tp, pp)
    rank = pp - 1 if rank is None else rank
    on_rank = model.layers_on_rank(pp, rank)
    mla = model.is_mla
    head = model.qk_nope_head_dim + model.qk_rope_head_dim if mla else model.head_dim
    return ArchSpec(
        num_layers=on_rank if layers is None else min(layers, on_rank),
        hidden_size=model.hidden_size,
        num_heads=model.num_heads,
        num_kv_heads=model.num_heads if mla else model.num_kv_heads,
        intermediate_size=model.intermediate_size,
        vocab_size=model.padded_vocab(tp),
        source=model.source,
        tensor_parallel_size=tp,
        dtype=dtype or model.dtype,
        head_size=head,
        qkv_bias=model.qkv_bias,
        gated_mlp=model.gated_mlp,
        norms_per_layer=model.norms_per_layer,
        qk_norm=model.qk_norm,
        num_experts=model.num_experts,
        experts_per_token=model.experts_per_token,
        moe_intermediate_size=model.moe_intermediate_size,
        shared_intermediate_size=model.shared_intermediate_size,
        dense_layers=model.dense_layers,
        kv_lora_rank=model.kv_lora_rank,
        qk_rope_head_dim=model.qk_rope_head_dim,
        q_lora_rank=model.q_lora_rank,
        layer_offset=model.layers // pp * rank,
        has_embedding=rank == 0,
        has_head=rank == pp - 1,
        num_slots=8,
        max_seq_len=16,
    )


def _as_model(row: pd.Series) -> PublishedModel:
    values = {}
    for f in fields(PublishedModel):
        if f.name not in row:  # a column the CSV leaves out keeps its default
            continue
        value = row[f.name]
        if f.type in ("bool",):
            value = bool(int(value))
        elif f.type == "int":
            value = int(value)
        else:
            value = "" if pd.isna(value) else str(value)
        values[f.name] = value
    return PublishedModel(**values)


@cache.memo(maxsize=1)
def _load() -> dict[str, PublishedModel]:
    with resources.files("cgdispatch.data").joinpath("model_architectures.csv").open() as f:
        frame = pd.read_csv(f)
    return {row.model.lower(): _as_model(row) for _, row in frame.iterrows()}


class _Models(Mapping[str, PublishedModel]):
    """Read-only view of the registry, keyed by lower-case Hugging Face id (the CSV is read
    on first use; any casing of an id finds it)."""

    def __getitem__(self, key: str) -> PublishedModel:
        return _load()[key.lower()]

    def __contains__(self, key: object) -> bool:
        return isinstance(key, str) and key.lower() in _load()

    def __iter__(self) -> Iterator[str]:
        return iter(_load())

    def __len__(self) -> int:
        return len(_load())


PUBLISHED_MODELS: Mapping[str, PublishedModel] = _Models()


def model_from_config(source: object, *, name: str | None = None) -> PublishedModel:
    """The :class:`PublishedModel` of any supported decoder's ``config.json``: a path to it
    (or its folder), a dict or a ``transformers`` config, read offline
    (:func:`~cgdispatch.models.config_json.config_fields`); ``name`` overrides its name."""
    from .config_json import config_fields

    return PublishedModel(**config_fields(source, name=name))


def published_model(name: object) -> PublishedModel:
    """The published config of Hugging Face id ``name`` (case-insensitive), or of any
    decoder from its ``config.json``: a path to it (or its folder), a dict or a
    ``transformers`` config (:func:`~cgdispatch.models.config_json.model_from_config`);
    a :class:`PublishedModel` is returned as it is."""
    from .config_json import is_config_source

    if isinstance(name, PublishedModel):
        return name
    if isinstance(name, str) and name in PUBLISHED_MODELS:
        return PUBLISHED_MODELS[name]
    if is_config_source(name):
        return model_from_config(name)
    if not isinstance(name, str) or name not in PUBLISHED_MODELS:
        known = ", ".join(sorted(m.model for m in PUBLISHED_MODELS.values()))
        raise ValueError(
            f"model={name!r} has no published config in cgdispatch/data/"
            f"model_architectures.csv: use one of {known}, a path to its config.json, or add its config.json numbers there"
        )
    return PUBLISHED_MODELS[name]
