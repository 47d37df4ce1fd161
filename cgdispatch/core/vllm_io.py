"""vLLM's own formats for a config: the ``--compilation-config`` JSON and ``vllm serve``
flags, read and written. ``GraphConfig.from_vllm``, ``to_vllm`` and ``to_vllm_args`` call
these; each generation contributes its own size keys (``Generation.compilation_keys`` and
``compilation_sizes``).
"""

from __future__ import annotations

import json
import shlex
from collections.abc import Iterable
from typing import Any

from .generation import GENERATIONS, check_version
from .validate import check_nesting
from .warn import warn_user

__all__ = ["config_fields", "compilation_json", "serve_args"]

# GraphConfig fields that live in vLLM's --compilation-config JSON in every release; the
# rest are scheduler / parallel / LoRA / speculative settings passed as separate engine args
COMPILATION_KEYS = (
    "cudagraph_mode",
    "cudagraph_capture_sizes",
    "max_cudagraph_capture_size",
    "splitting_ops",
    "compile_sizes",
    "cudagraph_num_of_warmups",
    "cudagraph_specialize_lora",
)
# vLLM compilation-config keys that do not affect graph dispatch: accepted and ignored.
IGNORED_VLLM_KEYS = frozenset(
    {
        "level",
        "mode",
        "backend",
        "custom_ops",
        "use_inductor",
        "inductor_compile_config",
        "pass_config",
        "debug_dump_path",
        "cache_dir",
        "compile_cache_save_format",
        "use_inductor_graph_partition",
        "cudagraph_copy_inputs",
        "full_cuda_graph",
        "cudagraph_num_of_warmups_for_full",
        "local_cache_dir",
        "dynamic_shapes_config",
    }
)


def _parsed(compilation_config: dict[str, Any] | str | None) -> dict[str, Any]:
    if compilation_config is None:
        return {}
    if isinstance(compilation_config, str):
        try:
            compilation_config = json.loads(compilation_config)
        except json.JSONDecodeError as err:
            raise ValueError(
                f"compilation_config is not valid JSON ({err}): pass a dict or a JSON "
                'object such as \'{"cudagraph_mode": "FULL"}\''
            ) from None
        except RecursionError:
            raise ValueError(
                "compilation_config nests deeper than a JSON reader can follow: vLLM's "
                "compilation config is a few levels deep; check it for a runaway structure"
            ) from None
    check_nesting("compilation_config", compilation_config)
    if not isinstance(compilation_config, dict):
        raise ValueError(
            f"compilation_config={compilation_config!r} is invalid: it must be a dict or a "
            "JSON object"
        )
    return compilation_config


def config_fields(
    compilation_config: dict[str, Any] | str | None,
    scheduler_fields: dict[str, Any],
    field_names: Iterable[str],
) -> dict[str, Any]:
    """GraphConfig keyword arguments from vLLM's ``--compilation-config`` (dict or JSON)
    plus engine fields under GraphConfig's names.

    Keys that only some releases have pick the oldest of them as ``vllm_version`` when
    none is given; a given release without those keys is refused.
    """
    cc = _parsed(compilation_config)
    scheduler_fields = dict(scheduler_fields)
    release_keys = {k for g in GENERATIONS.values() for k in g.compilation_keys}
    own = [k for k in cc if k in release_keys]
    if own:
        owners = [g for g in GENERATIONS.values() if set(own) <= set(g.compilation_keys)]
        if "vllm_version" in scheduler_fields:
            asked = check_version(scheduler_fields["vllm_version"])
            if all(g.release != asked for g in owners):
                names = ", ".join(g.release for g in owners) or "no single release"
                raise ValueError(
                    f"compilation-config keys {own} exist only in vLLM {names} but "
                    f"vllm_version={scheduler_fields['vllm_version']!r}: pass one of those "
                    "releases or drop them"
                )
        elif owners:
            scheduler_fields["vllm_version"] = owners[0].release
    kwargs: dict[str, Any] = {}
    for key, value in cc.items():
        if key in release_keys:
            kwargs[key] = value
        elif key == "compile_sizes":
            if not isinstance(value, list):
                raise ValueError(
                    f"compile_sizes={value!r} is invalid: vLLM takes a list of sizes "
                    'such as [1, 8] or ["cudagraph_capture_sizes"]'
                )
            kwargs[key] = tuple(value)
        elif key in COMPILATION_KEYS:
            kwargs[key] = value
        elif key not in IGNORED_VLLM_KEYS:
            warn_user(f"vLLM compilation-config key {key!r} is not used by cgdispatch")
    known = set(field_names)
    unknown = set(scheduler_fields) - known
    if unknown:
        raise ValueError(f"unknown field(s) {sorted(unknown)}: GraphConfig takes {sorted(known)}")
    kwargs.update(scheduler_fields)
    return kwargs


def compilation_json(config: Any) -> str:
    """vLLM's ``--compilation-config`` JSON for ``config``: the mode, the generation's size
    keys, then the settings every release reads."""
    cc: dict[str, Any] = {"cudagraph_mode": str(config.cudagraph_mode)}
    cc.update(config.generation.rules.compilation_sizes(config))
    if config.splitting_ops is not None:
        cc["splitting_ops"] = list(config.splitting_ops)
    if config.compile_sizes:
        cc["compile_sizes"] = list(config.compile_sizes)
    if config.cudagraph_num_of_warmups != 1:
        cc["cudagraph_num_of_warmups"] = config.cudagraph_num_of_warmups
    if config.lora_enabled and not config.cudagraph_specialize_lora:
        cc["cudagraph_specialize_lora"] = False
    return json.dumps(cc, separators=(",", ":"))


def serve_args(config: Any) -> str:
    """A ``vllm serve`` argument string: compilation config plus scheduler settings."""
    args = [
        "--compilation-config",
        compilation_json(config),
        "--max-num-seqs",
        str(config.max_num_seqs),
        "--max-num-batched-tokens",
        str(config.max_num_batched_tokens),
    ]
    if config.tensor_parallel_size > 1:
        args += ["--tensor-parallel-size", str(config.tensor_parallel_size)]
    if config.num_speculative_tokens:
        spec_cfg: dict[str, Any] = {"num_speculative_tokens": config.num_speculative_tokens}
        if config.speculative_method is not None:
            spec_cfg["method"] = config.speculative_method
        if config.enable_adaptive_verification:
            spec_cfg["enable_adaptive_verification"] = True
        args += ["--speculative-config", json.dumps(spec_cfg)]
    if config.performance_mode != "balanced":
        args += ["--performance-mode", config.performance_mode]
    if config.data_parallel_size > 1:
        args += ["--data-parallel-size", str(config.data_parallel_size)]
    if config.enable_dbo:
        args += ["--enable-dbo", "--dbo-decode-token-threshold"]
        args += [str(config.dbo_decode_token_threshold)]
    elif config.ubatch_size > 1:
        args += ["--ubatch-size", str(config.ubatch_size)]
    if config.lora_enabled:
        args += ["--enable-lora", "--max-loras", str(config.max_loras)]
    return " ".join(shlex.quote(a) for a in args)
