"""Model names the command line accepts (``--model``), mapped to their builders.

One entry per family: the toy LM's presets (``toy-*``), the Hugging Face adapter's
(``hf-*``, needs ``transformers``) and published architectures (``llama-3.1-8b``, ...:
meta tensors only, for kernel profiles, modelled step times and graph-memory estimates). A builder returns a model the ``GraphRunner`` can run;
this module only resolves names, and imports a family's module when one of its names is
built (so listing names needs neither torch nor transformers).
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass
from typing import Any

__all__ = [
    "ModelFamily",
    "MODEL_FAMILIES",
    "model_names",
    "build_model",
    "tensor_parallel_size_for",
    "check_model_tensor_parallel",
]


@dataclass(frozen=True)
class ModelFamily:
    """Names of one family and where its builder lives (``module:function``)."""

    names: tuple[str, ...]
    builder: str  # "cgdispatch.models.toy:build_toy_model"
    options: tuple[str, ...]  # build options the builder understands besides device/dtype/seed
    description: str


MODEL_FAMILIES: tuple[ModelFamily, ...] = (
    ModelFamily(
        ("toy-tiny", "toy-small", "toy-1b"),
        "cgdispatch.models.toy:build_toy_model",
        ("attention",),
        "toy decoder LM, custom attention op, decode and mixed batches",
    ),
    ModelFamily(
        ("hf-llama-tiny", "hf-gpt2-tiny"),
        "cgdispatch.models.hf.presets:build_hf_model",
        ("attention",),  # only "general": the adapter's SDPA attention is not switchable
        "Hugging Face causal LM (random weights) through HFDecodeLM: lock-step decode only",
    ),
    ModelFamily(
        ("llama-3.1-8b", "qwen2.5-7b", "qwen2.5-1.5b", "llama-3.1-70b-tp8"),
        "cgdispatch.models.architectures:build_arch_model",
        (),
        "published architecture (config.json shapes, bf16, one TP rank) on meta tensors: "
        "estimates only, no weights",
    ),
)


def model_names() -> list[str]:
    """Every name ``build_model`` accepts, in registry order."""
    return [name for family in MODEL_FAMILIES for name in family.names]


def tensor_parallel_size_for(model: object, requested: int | None = None) -> int:
    """The TP size a run of ``model`` is priced at (``tune``'s flag, the dashboard's
    control): ``requested`` when given, else a registry preset's own (``llama-3.1-70b-tp8``
    runs at 8), else 1 (Hugging Face ids, config.json paths, toy models).

    It checks nothing: ``GraphConfig`` refuses a size below 1, the cost model and the
    start-up estimate one the model's heads or missing published config cannot take."""
    if requested is not None:
        return requested
    from .arch_spec import ARCHITECTURES

    spec = ARCHITECTURES.get(model) if isinstance(model, str) else None
    return spec.tensor_parallel_size if spec is not None else 1


def tensor_parallel_flag(model: object, requested: int | None) -> int | None:
    """``requested`` as ``tune``'s and ``plan``'s ``--tensor-parallel-size``: None when it is
    absent or the model's own size (the same figures, under the cache key a run without the
    flag uses), else the size."""
    if requested is None or requested == tensor_parallel_size_for(model):
        return None
    return requested


def check_model_tensor_parallel(model: object, tensor_parallel_size: int | None) -> None:
    """:func:`check_tensor_parallel` for ``model`` as ``tune`` and ``plan`` take it: a
    registry name with a published config (at its own TP size when ``tensor_parallel_size``
    is None), a Hugging Face id, a config.json or a PublishedModel. Models without a published
    config (toy models) are left to the cost model, which refuses to shard them."""
    from .arch_spec import ARCHITECTURES
    from .config_json import is_config_source
    from .published import PUBLISHED_MODELS, PublishedModel, published_model
    from .shape_rules import check_tensor_parallel

    tp = tensor_parallel_size
    if isinstance(model, str) and model in ARCHITECTURES:
        spec = ARCHITECTURES[model]
        if not spec.published:
            return  # its ArchSpec checked its own TP size when it was built
        model, tp = published_model(spec.published), tp or spec.tensor_parallel_size
    elif isinstance(model, PublishedModel) or model in PUBLISHED_MODELS or is_config_source(model):
        model = published_model(model)
    else:
        return
    check_tensor_parallel(model, tp or 1)


def build_model(
    name: str,
    *,
    device: Any = None,
    dtype: str | None = None,
    seed: int = 0,
    max_num_tokens: int | None = None,
    **options: Any,
) -> Any:
    """Build the model registered as ``name``; options a family does not take must be None.

    ``max_num_tokens`` is the largest padded step the runner will run (models with fixed
    work buffers, like the HF adapter, size them by it; the toy LM ignores it). Toy models
    take ``attention`` ("general" or "uniform"); HF models accept only "general". A non-None option the family does not
    understand raises ValueError naming it.
    """
    for family in MODEL_FAMILIES:
        if name in family.names:
            break
    else:
        raise ValueError(f"model {name!r} is unknown: use one of {model_names()}")
    extra = {k: v for k, v in options.items() if v is not None}
    unknown = sorted(set(extra) - set(family.options))
    if unknown:
        raise ValueError(
            f"option(s) {unknown} do not apply to model {name!r}: it takes {list(family.options)}"
        )
    module, function = family.builder.split(":")
    build = getattr(importlib.import_module(module), function)
    return build(
        name, device=device, dtype=dtype, seed=seed, max_num_tokens=max_num_tokens, **extra
    )
