"""One config object with vLLM's field names: capture sizes, mode, scheduler limits.

`GraphConfig` validates and derives on construction (the default ladder, a cleaned user
list, the largest capture size) and `resolve()` lowers the mode for what the attention
backend supports. It knows nothing about tensors or GPUs.
"""

from __future__ import annotations

import copy
import dataclasses
import json
import shlex
from dataclasses import dataclass, field
from typing import Any

from . import config_v2 as _v2
from . import validate as _bounds
from .arith import round_up
from .ladders import vllm_ladder
from .modes import (
    DEFAULT_SPLITTING_OPS,
    AttentionCGSupport,
    CUDAGraphMode,
    lower_for_attention_support,
)
from .validate import as_index, check_bool, check_int, check_nesting, check_size_list
from .warn import warn_user

__all__ = ["GraphConfig", "DEFAULT_SPLITTING_OPS", "captured_lora_counts"]

# Ops the model is split at for piecewise graphs when splitting_ops is None: the toy
# model's attention op and PyTorch's SDPA (as it appears in dynamo graphs).

# GraphConfig fields that live in vLLM's --compilation-config JSON; the rest are
# scheduler / parallel / LoRA / speculative settings passed as separate engine args.
_COMPILATION_KEYS = (
    "cudagraph_mode",
    "cudagraph_capture_sizes",
    "max_cudagraph_capture_size",
    "splitting_ops",
    "compile_sizes",
    "cudagraph_num_of_warmups",
    "cudagraph_specialize_lora",
)
# vLLM compilation-config keys that do not affect graph dispatch: accepted and ignored.
_IGNORED_VLLM_KEYS = frozenset(
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


# (field, minimum, upper bound) of GraphConfig's counts (cgdispatch.core.validate.BOUNDS)
_COUNTS = (
    ("max_num_seqs", 1, _bounds.MAX_NUM_SEQS),
    ("max_num_batched_tokens", 1, _bounds.MAX_STEP_TOKENS),
    ("num_speculative_tokens", 0, _bounds.MAX_SPECULATIVE_TOKENS),
    ("max_loras", 0, _bounds.MAX_LORAS),
    ("tensor_parallel_size", 1, _bounds.MAX_PARALLEL),
    ("cudagraph_num_of_warmups", 0, _bounds.MAX_WARMUPS),
)


# GraphConfig fields that hold a list (or None)
_LIST_FIELDS = (
    "cudagraph_capture_sizes",
    "splitting_ops",
    "compile_sizes",
    "device_capability",
    "prefill_cudagraph_capture_token_sizes",
    "decode_cudagraph_capture_request_sizes",
)


def captured_lora_counts(max_loras: int, specialize_active_lora: bool) -> list[int]:
    """Active-LoRA counts that get their own graphs when LoRA is on (vLLM 0.33).

    ``vllm/lora/utils.py get_captured_lora_counts``: counts run up to ``max_loras + 1``
    (the no-adapter slot counted). Unspecialised: ``[max_loras + 1]``; specialised: the
    powers of two up to ``max_loras + 1`` plus ``max_loras + 1`` itself
    (max_loras=4: 1, 2, 4, 5).
    """
    if max_loras <= 0:
        return []
    top = max_loras + 1
    if not specialize_active_lora:
        return [top]
    return [1 << k for k in range(top.bit_length()) if 1 << k < top] + [top]


@dataclass(frozen=True)
class GraphConfig:
    """CUDA-graph settings under vLLM's names; derived fields are filled on construction.

    Construction validates every field and raises ``ValueError`` naming the value, the
    rule and the fix. The object is immutable: use :meth:`replace` or :meth:`resolve`.
    """

    cudagraph_mode: CUDAGraphMode | str = CUDAGraphMode.FULL_AND_PIECEWISE
    cudagraph_capture_sizes: list[int] | None = None  # None = vLLM's default ladder
    max_cudagraph_capture_size: int | None = None  # None = from the list / the default
    max_num_seqs: int = 256  # scheduler: requests per step
    max_num_batched_tokens: int = 8192  # scheduler: tokens per step
    num_speculative_tokens: int = 0  # q = 1 + this tokens per request in a uniform decode
    splitting_ops: list[str] | None = None  # None = attention ops; [] = no splitting
    compile_sizes: tuple[int, ...] = ()  # sizes compiled specially; must be capture sizes
    max_loras: int = 0  # 0 = LoRA off
    cudagraph_specialize_lora: bool = True  # separate graphs with and without LoRA
    specialize_active_lora: bool = False  # separate graphs per active-LoRA count bucket
    tensor_parallel_size: int = 1
    sequence_parallel: bool = False  # sizes must then be multiples of the TP size
    cudagraph_num_of_warmups: int = 1  # eager runs before each capture
    # which vLLM release to model: "0.33" (V1), "0.34" (generation 2), None (the class's own)
    vllm_version: str | None = None
    # generation 2 (vllm_version="0.34") only; see cgdispatch/config_v2.py
    prefill_cudagraph_capture_token_sizes: list[int] | None = None  # tokens; None = default
    max_prefill_cudagraph_capture_tokens: int | None = None
    decode_cudagraph_capture_request_sizes: list[int] | None = None  # requests; None = default
    max_decode_cudagraph_capture_requests: int | None = None
    max_decode_cudagraph_capture_tokens: int | None = None
    performance_mode: str = "balanced"  # "interactivity": dense small sizes
    # the GPU's (major, minor); SM100 (10, x) raises vLLM's default max size to 1024
    device_capability: tuple[int, int] | None = None
    speculative_method: str | None = None  # "eagle", "eagle3", "mtp", "draft_model", ...
    enable_adaptive_verification: bool = False  # varlen decode graphs
    data_parallel_size: int = 1  # microbatching (DBO) needs > 1
    enable_dbo: bool = False
    ubatch_size: int = 0
    dbo_decode_token_threshold: int = 32
    # what the user asked for sizes and max, so that replace() re-derives defaults
    _asked: tuple[Any, Any] = field(default=(None, None), init=False, repr=False, compare=False)
    _asked_v2: dict[str, Any] = field(default_factory=dict, init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        set_ = object.__setattr__
        set_(self, "cudagraph_mode", CUDAGraphMode.parse(self.cudagraph_mode))
        # first: every later rule reads the version as a string ("0.34", not 0.34)
        set_(self, "vllm_version", _v2.check_version(self.vllm_version))
        for name in _LIST_FIELDS:  # a scalar or a mapping where a list belongs
            value = getattr(self, name)
            if value is not None and (
                isinstance(value, (str, bytes, dict)) or not hasattr(value, "__len__")
            ):
                raise ValueError(
                    f"{name}={value!r} is invalid: give a list of integers (e.g. [1, 2, 4, 8]) "
                    "or None"
                )
        for entry in self.compile_sizes or ():
            if entry != "cudagraph_capture_sizes" and as_index(entry) is None:
                raise ValueError(
                    f"compile size {entry!r} in compile_sizes is invalid: give sizes as "
                    "integers, or the string 'cudagraph_capture_sizes' for all of them"
                )
        for name, minimum, bound in _COUNTS:  # numpy ints become ints; each has its bound
            set_(self, name, check_int(name, getattr(self, name), minimum, bound))
        for flag in ("sequence_parallel", "cudagraph_specialize_lora", "specialize_active_lora"):
            set_(self, flag, check_bool(flag, getattr(self, flag)))  # "no" is not False
        if self.splitting_ops is not None:
            if isinstance(self.splitting_ops, str) or not all(
                isinstance(op, str) for op in self.splitting_ops
            ):
                raise ValueError(
                    f"splitting_ops={self.splitting_ops!r} is invalid: give a list of op "
                    "names such as ['cgdispatch::attention'], [] for no splitting, or None"
                )
            set_(self, "splitting_ops", list(self.splitting_ops))
        if self.device_capability is not None:
            cap = tuple(self.device_capability)
            if len(cap) != 2 or not all(isinstance(v, int) for v in cap):
                raise ValueError(
                    f"device_capability={self.device_capability!r} is invalid: give "
                    "(major, minor), e.g. (9, 0) for H100/H200 or (10, 0) for B200"
                )
            set_(self, "device_capability", cap)
        self._check_scheduler()
        asked_sizes = self.cudagraph_capture_sizes
        set_(
            self,
            "_asked",
            (None if asked_sizes is None else list(asked_sizes), self.max_cudagraph_capture_size),
        )
        _v2.validate_fields(self)
        if _v2.is_gen2(self):
            set_(self, "_asked_v2", {f: getattr(self, f) for f in _v2.GEN2_FIELDS})
            for name, value in _v2.derive_sizes(self).items():
                set_(self, name, value)
            return
        sizes, max_size = self._derive_sizes()
        set_(self, "cudagraph_capture_sizes", sizes)
        set_(self, "max_cudagraph_capture_size", max_size)
        self._expand_compile_sizes()
        if self.splitting_ops == []:
            # vLLM 0.33 CompilationConfig.set_splitting_ops_for_v1: nothing to split at, so
            # no piecewise graphs (sizes are kept as derived)
            M = CUDAGraphMode
            lowered = {M.PIECEWISE: M.NONE, M.FULL_AND_PIECEWISE: M.FULL}
            set_(self, "cudagraph_mode", lowered.get(self.cudagraph_mode, self.cudagraph_mode))

    def _check_scheduler(self) -> None:
        seqs, tokens, spec = (
            self.max_num_seqs,
            self.max_num_batched_tokens,
            self.num_speculative_tokens,
        )
        if tokens < seqs:  # vllm/config/scheduler.py SchedulerConfig.__post_init__
            raise ValueError(
                f"max_num_batched_tokens={tokens} is below max_num_seqs={seqs}: a step must "
                "fit one token per request; raise max_num_batched_tokens to at least "
                f"{seqs} or lower max_num_seqs"
            )
        q = 1 + spec
        if self.max_loras > 0 and spec > 0 and tokens < seqs * q:
            # vllm/engine/arg_utils.py EngineArgs.create_engine_config
            raise ValueError(
                f"max_num_batched_tokens={tokens} is below max_num_seqs * (1 + "
                f"num_speculative_tokens) = {seqs * q}, which LoRA with speculative decoding "
                f"needs: raise max_num_batched_tokens to {seqs * q} or lower "
                "num_speculative_tokens or max_num_seqs"
            )

    # ----- derivation -------------------------------------------------------------------
    def _derive_sizes(self) -> tuple[list[int], int]:
        """Capture sizes and max as vLLM 0.33 ``VllmConfig._set_cudagraph_sizes`` makes them."""
        mode, tokens = self.cudagraph_mode, self.max_num_batched_tokens
        user_sizes, user_max = self.cudagraph_capture_sizes, self.max_cudagraph_capture_size
        if user_max is not None:
            user_max = check_int(
                "max_cudagraph_capture_size", user_max, 0, _bounds.MAX_CAPTURE_SIZE
            )
        if user_sizes is not None:
            user_sizes = check_size_list("cudagraph_capture_sizes", user_sizes)
        if mode is CUDAGraphMode.NONE:
            return [], 0  # vLLM: no graphs, sizes [] and max 0 whatever was asked
        if user_max == 0:
            raise ValueError(
                f"max_cudagraph_capture_size=0 is invalid with cudagraph_mode={mode}: "
                "graphs need a size >= 1; set the mode to NONE or give a positive max"
            )
        if user_sizes is not None and not user_sizes:
            raise ValueError(
                f"cudagraph_capture_sizes=[] leaves no capture size for cudagraph_mode={mode}: "
                "give at least one size, None for the default ladder, or set "
                "cudagraph_mode='NONE'"
            )
        if user_sizes is None:
            sizes = vllm_ladder(
                user_max,
                max_num_seqs=self.max_num_seqs,
                max_num_batched_tokens=tokens,
                num_speculative_tokens=self.num_speculative_tokens,
                device_capability=self.device_capability,
            )
            if user_max is not None and sizes[-1] != user_max:
                warn_user(
                    f"max_cudagraph_capture_size={user_max} is not on vLLM's ladder within "
                    f"max_num_batched_tokens={tokens}: truncated to {sizes[-1]}"
                )
        else:
            sizes = sorted(set(user_sizes))
            dropped = [s for s in sizes if s > tokens]
            if dropped:
                warn_user(
                    f"capture sizes {dropped} exceed max_num_batched_tokens={tokens} "
                    "and are dropped"
                )
            sizes = [s for s in sizes if s <= tokens]
        if self.sequence_parallel and self.tensor_parallel_size > 1:
            # cgdispatch's own rule (not in vLLM 0.33): sequence parallelism splits tokens
            # evenly across ranks
            tp = self.tensor_parallel_size
            bad = [s for s in sizes if s % tp]
            if bad:
                warn_user(
                    f"capture sizes {bad} are not multiples of tensor_parallel_size={tp} and "
                    "are dropped (sequence parallelism splits tokens evenly across ranks)"
                )
            sizes = [s for s in sizes if s % tp == 0]
            if not sizes:
                raise ValueError(
                    f"no capture size is left for cudagraph_mode={mode} with sequence "
                    f"parallelism over tensor_parallel_size={tp}: give sizes that are "
                    f"multiples of {tp}, or set cudagraph_mode='NONE'"
                )
        largest = sizes[-1] if sizes else 0
        if user_max is not None and user_sizes is not None and user_max != largest:
            raise ValueError(
                f"max_cudagraph_capture_size={user_max} disagrees with the largest usable "
                f"capture size {largest} of cudagraph_capture_sizes (sizes above "
                f"max_num_batched_tokens={tokens} are dropped): drop one of the two, or "
                "make the max equal to the largest size"
            )
        if not sizes:
            warn_user(
                f"no capture size <= max_num_batched_tokens={tokens} is left: every batch "
                "runs eagerly (as in vLLM, the mode is kept)"
            )
        return sizes, largest

    def _expand_compile_sizes(self) -> None:
        """``compile_sizes`` as ints (vLLM's ``"cudagraph_capture_sizes"`` entry expanded)."""
        out: set[int] = set()
        for s in tuple(self.compile_sizes or ()):
            if s == "cudagraph_capture_sizes":
                out.update(self.cudagraph_capture_sizes)
                continue
            out.add(check_int(f"compile size {s!r}", s, 1, _bounds.MAX_STEP_TOKENS))
        object.__setattr__(self, "compile_sizes", tuple(sorted(out)))

    def check_compile_sizes(self, sizes: list[int] | None = None) -> None:
        """ValueError when padding would change a compile size (vLLM 0.33 dispatcher check).

        ``vllm/v1/cudagraph_dispatcher.py _compute_bs_to_padded_graph_size``: a compile
        size at most the max capture size must itself be a capture size.
        """
        sizes = self.cudagraph_capture_sizes if sizes is None else sizes
        if not sizes:
            return
        for s in self.compile_sizes:
            if s <= sizes[-1] and s not in sizes:
                padded = min(c for c in sizes if c >= s)
                raise ValueError(
                    f"compile size {s} would never run: batches of {s} tokens are padded to the "
                    f"capture size {padded}; add {s} to cudagraph_capture_sizes or remove it "
                    "from compile_sizes"
                )

    # ----- derived properties -------------------------------------------------------------
    @property
    def uniform_decode_query_len(self) -> int:
        """Tokens per request in a uniform decode step: 1 + speculative tokens."""
        return 1 + self.num_speculative_tokens

    @property
    def lora_enabled(self) -> bool:
        return self.max_loras > 0

    @property
    def effective_splitting_ops(self) -> list[str]:
        """``splitting_ops`` with None replaced by the default attention ops."""
        return list(DEFAULT_SPLITTING_OPS) if self.splitting_ops is None else self.splitting_ops

    def splitting_ops_contain_attention(self) -> bool:
        """Whether attention is split out: every attention op is a split point.

        vLLM 0.33 ``CompilationConfig.splitting_ops_contain_attention``: ALL of its
        attention ops must be in the list; a list naming only some of them does not count.
        Here the attention ops are ``DEFAULT_SPLITTING_OPS``: None (the default) and a list
        holding all of them count, a list holding some but not all does not, and a
        non-empty list holding none of them names a custom model's own split ops, which
        cgdispatch cannot check and takes as attention.
        """
        ops = self.splitting_ops
        if ops is None:
            return True
        known = [op in ops for op in DEFAULT_SPLITTING_OPS]
        return all(known) or (bool(ops) and not any(known))

    def lora_cases(self) -> list[int]:
        """Active-LoRA counts that have graphs; 0 is the no-LoRA case.

        vLLM 0.33 ``CudagraphDispatcher._get_lora_cases``: with
        ``cudagraph_specialize_lora`` 0 plus the captured counts, else only
        ``max_loras + 1`` (batches without LoRA then find no graph). Generation 2:
        vLLM 0.34 ``get_lora_capture_cases``.
        """
        if _v2.is_gen2(self):  # vLLM 0.34 counts the no-adapter slot: max_loras + 1
            return _v2.get_lora_capture_cases(
                self.max_loras, self.specialize_active_lora, self.cudagraph_specialize_lora
            )
        if not self.lora_enabled:
            return [0]
        if not self.cudagraph_specialize_lora:
            return [self.max_loras + 1]
        return [0, *captured_lora_counts(self.max_loras, self.specialize_active_lora)]

    def replace(self, **changes: Any) -> GraphConfig:
        """A new config with ``changes`` applied and everything re-derived."""
        kwargs = self._user_fields()
        kwargs["cudagraph_capture_sizes"], kwargs["max_cudagraph_capture_size"] = self._asked
        if "cudagraph_capture_sizes" in changes and "max_cudagraph_capture_size" not in changes:
            kwargs["max_cudagraph_capture_size"] = None
        kwargs.update(self._asked_v2)
        kwargs.update(changes)
        return GraphConfig(**kwargs)

    def _user_fields(self) -> dict[str, Any]:
        return {
            f.name: getattr(self, f.name)
            for f in dataclasses.fields(self)
            if not f.name.startswith("_")
        }

    # ----- mode resolution --------------------------------------------------------------
    def resolve(
        self,
        attention_support: AttentionCGSupport = AttentionCGSupport.ALWAYS,
        *,
        piecewise_capture_available: bool = True,
    ) -> GraphConfig:
        """The config with the mode lowered to what can run, and sizes fit for spec decode.

        vLLM 0.33 ``CompilationConfig.resolve_cudagraph_mode_and_sizes`` (the V1 model
        runner's ``_check_and_update_cudagraph_mode`` calls it with the least support of
        the attention backends):

        - FULL on mixed batches needs ALWAYS; with NEVER it is refused (ValueError),
          otherwise lowered to FULL_AND_PIECEWISE when every attention op is a split
          point, else to FULL_DECODE_ONLY;
        - FULL decode with NEVER: PIECEWISE when attention is split out, else NONE;
        - FULL decode with q > 1 needs UNIFORM_BATCH: else PIECEWISE or NONE likewise;
        - with q > 1 and a FULL decode mode, sizes are rounded up to multiples of q and
          those above the max dropped; nothing left: ``[q]`` if q <= max, else ValueError.

        Sizes are never re-derived here (a mode lowered to NONE keeps them).

        With ``vllm_version="0.34"`` the rules are generation 2's
        (``cgdispatch.core.config_v2.resolve_mode``): sizes are not touched, FULL on mixed batches
        with NEVER is refused, and ``piecewise_capture_available=False`` drops piecewise.
        """
        support = AttentionCGSupport(attention_support)
        if _v2.is_gen2(self):  # vLLM 0.34: only the mode changes; sizes were resolved
            mode = _v2.resolve_mode(self, support, piecewise_capture_available)
            if mode is self.cudagraph_mode:
                return self
            resolved = copy.copy(self)  # sizes stay as resolved at construction
            object.__setattr__(resolved, "cudagraph_mode", mode)
            return resolved
        if self.cudagraph_mode is CUDAGraphMode.NONE:
            return self
        q = self.uniform_decode_query_len
        mode = lower_for_attention_support(
            self.cudagraph_mode, support, self.splitting_ops_contain_attention(), q
        )
        sizes, largest = self.cudagraph_capture_sizes, self.max_cudagraph_capture_size
        if mode.decode_mode() is CUDAGraphMode.FULL and q > 1 and sizes:
            rounded = sorted({round_up(s, q) for s in sizes if round_up(s, q) <= largest})
            if not rounded and q <= largest:
                rounded = [q]
            if not rounded:
                raise ValueError(
                    f"no capture size is left after rounding {sizes} up to multiples of "
                    f"q={q} (1 + {self.num_speculative_tokens} speculative tokens) within the max "
                    f"{largest}: add a size >= {q}, or lower num_speculative_tokens"
                )
            sizes, largest = rounded, rounded[-1]
        if mode is self.cudagraph_mode and sizes == self.cudagraph_capture_sizes:
            return self
        out = copy.copy(self)
        object.__setattr__(out, "cudagraph_mode", mode)
        object.__setattr__(out, "cudagraph_capture_sizes", list(sizes))
        object.__setattr__(out, "max_cudagraph_capture_size", largest)
        object.__setattr__(out, "_asked", (list(sizes), largest))
        return out

    # ----- vLLM import / export -----------------------------------------------------------
    @classmethod
    def from_vllm(
        cls, compilation_config: dict[str, Any] | str | None = None, **scheduler_fields: Any
    ) -> GraphConfig:
        """A config from vLLM's ``--compilation-config`` (dict or JSON) plus engine fields.

        ``scheduler_fields`` take GraphConfig names (``max_num_seqs=128``,
        ``num_speculative_tokens=3``, ``max_loras=4`` ...).
        """
        if compilation_config is None:
            compilation_config = {}
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
                f"compilation_config={compilation_config!r} is invalid: it must be a dict or a JSON object"
            )
        kwargs: dict[str, Any] = {}
        gen2_keys = [k for k in compilation_config if k in _v2.GEN2_COMPILATION_KEYS]
        if gen2_keys:  # generation-2 JSON: vllm_version defaults to "0.34"
            if scheduler_fields.get("vllm_version", "0.34") != "0.34":
                raise ValueError(
                    f"compilation-config keys {gen2_keys} exist only in vLLM 0.34 but "
                    f"vllm_version={scheduler_fields['vllm_version']!r}: pass "
                    "vllm_version='0.34' or drop them"
                )
            scheduler_fields.setdefault("vllm_version", "0.34")
        for key, value in compilation_config.items():
            if key in _v2.GEN2_COMPILATION_KEYS:
                kwargs[key] = value
            elif key == "compile_sizes":
                if not isinstance(value, list):
                    raise ValueError(
                        f"compile_sizes={value!r} is invalid: vLLM takes a list of sizes "
                        'such as [1, 8] or ["cudagraph_capture_sizes"]'
                    )
                kwargs[key] = tuple(value)
            elif key in _COMPILATION_KEYS:
                kwargs[key] = value
            elif key not in _IGNORED_VLLM_KEYS:
                warn_user(f"vLLM compilation-config key {key!r} is not used by cgdispatch")
        known = {f.name for f in dataclasses.fields(cls) if not f.name.startswith("_")}
        unknown = set(scheduler_fields) - known
        if unknown:
            raise ValueError(
                f"unknown field(s) {sorted(unknown)}: GraphConfig takes {sorted(known)}"
            )
        kwargs.update(scheduler_fields)
        return cls(**kwargs)

    def to_vllm(self) -> str:
        """vLLM's ``--compilation-config`` JSON for this config (generation 2: the new size
        fields, not the deprecated ``cudagraph_capture_sizes``)."""
        if _v2.is_gen2(self):
            cc = {"cudagraph_mode": str(self.cudagraph_mode)}
            for key in _v2.GEN2_COMPILATION_KEYS:
                value = getattr(self, key)
                if value is not None:
                    cc[key] = list(value) if isinstance(value, list) else value
            return self._to_vllm_common(cc)
        cc: dict[str, Any] = {
            "cudagraph_mode": str(self.cudagraph_mode),
            "cudagraph_capture_sizes": list(self.cudagraph_capture_sizes),
            "max_cudagraph_capture_size": self.max_cudagraph_capture_size,
        }
        return self._to_vllm_common(cc)

    def _to_vllm_common(self, cc: dict[str, Any]) -> str:
        if self.splitting_ops is not None:
            cc["splitting_ops"] = list(self.splitting_ops)
        if self.compile_sizes:
            cc["compile_sizes"] = list(self.compile_sizes)
        if self.cudagraph_num_of_warmups != 1:
            cc["cudagraph_num_of_warmups"] = self.cudagraph_num_of_warmups
        if self.lora_enabled and not self.cudagraph_specialize_lora:
            cc["cudagraph_specialize_lora"] = False
        return json.dumps(cc, separators=(",", ":"))

    def to_vllm_args(self) -> str:
        """A ``vllm serve`` argument string: compilation config plus scheduler settings."""
        args = [
            "--compilation-config",
            self.to_vllm(),
            "--max-num-seqs",
            str(self.max_num_seqs),
            "--max-num-batched-tokens",
            str(self.max_num_batched_tokens),
        ]
        if self.tensor_parallel_size > 1:
            args += ["--tensor-parallel-size", str(self.tensor_parallel_size)]
        if self.num_speculative_tokens:
            spec_cfg: dict[str, Any] = {"num_speculative_tokens": self.num_speculative_tokens}
            if self.speculative_method is not None:
                spec_cfg["method"] = self.speculative_method
            if self.enable_adaptive_verification:
                spec_cfg["enable_adaptive_verification"] = True
            args += ["--speculative-config", json.dumps(spec_cfg)]
        if self.performance_mode != "balanced":
            args += ["--performance-mode", self.performance_mode]
        if self.data_parallel_size > 1:
            args += ["--data-parallel-size", str(self.data_parallel_size)]
        if self.enable_dbo:
            args += ["--enable-dbo", "--dbo-decode-token-threshold"]
            args += [str(self.dbo_decode_token_threshold)]
        elif self.ubatch_size > 1:
            args += ["--ubatch-size", str(self.ubatch_size)]
        if self.lora_enabled:
            args += ["--enable-lora", "--max-loras", str(self.max_loras)]
        return " ".join(shlex.quote(a) for a in args)
