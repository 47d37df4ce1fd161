"""``--model``, ``--device`` and ``--device-spec`` as ``plan`` and ``tune`` read them.

A model is a registry name (``llama-3.1-8b``, ``toy-tiny``), a Hugging Face id with a
published config, or a path to any supported decoder's ``config.json`` (read offline); a
device is a preset of ``cgdispatch/data/device_specs.csv`` or, with ``--device-spec``, a
JSON file of :class:`~cgdispatch.estimate.devices.DeviceSpec` fields. This module checks
and resolves the flags; it estimates nothing.
"""

from __future__ import annotations

import argparse

from ..core.validate import check_text
from ..estimate.devices import DEVICE_PRESETS, DeviceSpec, load_device_spec

__all__ = ["DEVICES", "add_device_args", "check_model_flag", "device_from_args"]

DEVICES = tuple(DEVICE_PRESETS)


def add_device_args(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--device", choices=DEVICES, default="H200", metavar="DEVICE",
        help=f"device preset, one of {', '.join(DEVICES)} (default %(default)s)",
    )  # fmt: skip
    parser.add_argument(
        "--device-spec",
        default=None,
        metavar="FILE.json",
        help="a GPU not in the presets: JSON of DeviceSpec fields (name, peak_flops, "
        "peak_fp32_flops, bandwidth_bytes_per_s, memory_bytes; replaces --device)",
    )


def check_model_flag(
    model: str, usable: list[str], tensor_parallel_size: int | None = None
) -> None:
    """ValueError unless ``--model`` is a usable registry name, a published Hugging Face id
    or a readable ``config.json`` of a supported decoder (read here, so a bad field fails
    before any work) that vLLM can shard over ``--tensor-parallel-size`` GPUs."""
    from ..models.config_json import is_config_source
    from ..models.published import PUBLISHED_MODELS, published_model
    from ..models.registry import check_model_tensor_parallel

    check_text("--model", model)  # printed in the verdict's lines: one line of text
    if model in usable or model in PUBLISHED_MODELS:
        check_model_tensor_parallel(model, tensor_parallel_size)
        return
    if is_config_source(model):
        published_model(model)
        check_model_tensor_parallel(model, tensor_parallel_size)
        return
    raise ValueError(
        f"--model {model!r} is unknown here: use one of {usable}, a Hugging Face id of "
        "cgdispatch/data/model_architectures.csv, or a path to a decoder's config.json"
    )


def device_from_args(args: argparse.Namespace) -> str | DeviceSpec:
    """``--device-spec``'s spec when given, else the ``--device`` preset name."""
    if getattr(args, "device_spec", None):
        return load_device_spec(args.device_spec)
    return args.device
