"""One config object with vLLM's field names: capture sizes, mode, scheduler limits.

`GraphConfig` is a value. Construction checks the fields, then the config's generation
(``vllm_version``, looked up in :mod:`cgdispatch.core.generation`) derives what vLLM
derives (the default ladder, a cleaned user list, the largest capture size); the instance
is built once from the result. ``resolve()`` and ``replace()`` return new configs; nothing
writes into an existing one. vLLM's JSON and flags live in :mod:`cgdispatch.core.vllm_io`.
It knows nothing about tensors or GPUs.
"""

from __future__ import annotations

import dataclasses
import inspect
from dataclasses import dataclass, field
from typing import Any

from . import validate as _bounds
from . import vllm_io
from .generation import (
    GENERATIONS,
    Generation,
    check_version,
    default_release,
    full_release,
    generation_for,
)
from .modes import DEFAULT_SPLITTING_OPS, AttentionCGSupport, CUDAGraphMode
from .validate import as_index, check_bool, check_int

__all__ = ["GraphConfig", "DEFAULT_SPLITTING_OPS"]

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


class _BuiltFromRules(type):
    """``GraphConfig(...)`` checks and derives before the instance exists.

    The fields the user gives are checked, the generation derives the rest, and the
    instance is made once from the final values: no rule writes into a built config.
    """

    def __call__(cls, *args: Any, **kwargs: Any) -> Any:
        return cls._derive(_bind(cls, args, kwargs))


def _bind(cls: type, args: tuple[Any, ...], kwargs: dict[str, Any]) -> dict[str, Any]:
    """Every public field's value: positional, keyword or default (as a dataclass binds)."""
    public = [f for f in dataclasses.fields(cls) if not f.name.startswith("_")]
    if len(args) > len(public):
        raise TypeError(f"GraphConfig takes at most {len(public)} positional arguments")
    values = dict(zip((f.name for f in public), args))
    for name, value in kwargs.items():
        if name in values:
            raise TypeError(f"GraphConfig got multiple values for argument {name!r}")
        if name.startswith("_") or name not in {f.name for f in public}:
            raise TypeError(f"GraphConfig got an unexpected keyword argument {name!r}")
        values[name] = value
    for f in public:
        if f.name not in values:
            values[f.name] = f.default
    return values


def _checked(values: dict[str, Any]) -> dict[str, Any]:
    """The release-independent checks and normalisations of the user's fields."""
    out = dict(values)
    out["cudagraph_mode"] = CUDAGraphMode.parse(values["cudagraph_mode"])
    # first: every later rule reads the version as a registered release string (a float
    # from papermill or YAML becomes its string); None: the newest release, the default
    out["vllm_version"] = check_version(values["vllm_version"]) or default_release()
    for name in _LIST_FIELDS:  # a scalar or a mapping where a list belongs
        value = values[name]
        if value is not None and (
            isinstance(value, (str, bytes, dict)) or not hasattr(value, "__len__")
        ):
            raise ValueError(
                f"{name}={value!r} is invalid: give a list of integers (e.g. [1, 2, 4, 8]) or None"
            )
    for entry in values["compile_sizes"] or ():
        if entry != "cudagraph_capture_sizes" and as_index(entry) is None:
            raise ValueError(
                f"compile size {entry!r} in compile_sizes is invalid: give sizes as "
                "integers, or the string 'cudagraph_capture_sizes' for all of them"
            )
    for name, minimum, bound in _COUNTS:  # numpy ints become ints; each has its bound
        out[name] = check_int(name, values[name], minimum, bound)
    for flag in ("sequence_parallel", "cudagraph_specialize_lora", "specialize_active_lora"):
        out[flag] = check_bool(flag, values[flag])  # "no" is not False
    ops = values["splitting_ops"]
    if ops is not None:
        if isinstance(ops, str) or not all(isinstance(op, str) for op in ops):
            raise ValueError(
                f"splitting_ops={ops!r} is invalid: give a list of op names such as "
                "['cgdispatch::attention'], [] for no splitting, or None"
            )
        out["splitting_ops"] = list(ops)
    if values["device_capability"] is not None:
        cap = tuple(values["device_capability"])
        if len(cap) != 2 or not all(isinstance(v, int) for v in cap):
            raise ValueError(
                f"device_capability={values['device_capability']!r} is invalid: give "
                "(major, minor), e.g. (9, 0) for H100/H200 or (10, 0) for B200"
            )
        out["device_capability"] = cap
    return out


def _owned_elsewhere(generation: Generation, values: dict[str, Any]) -> None:
    """ValueError when a field only other releases read is set away from its default."""
    for other in GENERATIONS.values():
        changed = [
            f
            for f, default in other.own_fields.items()
            if f not in generation.own_fields and values[f] != default
        ]
        if changed:
            raise ValueError(
                f"{', '.join(changed)} exist only in vLLM {other.describe()} but "
                f"vllm_version={values['vllm_version']!r}: pass "
                f"vllm_version={other.release!r} or drop them"
            )


@dataclass(frozen=True)
class GraphConfig(metaclass=_BuiltFromRules):
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
    # which vLLM release to model (cgdispatch.core.generation.GENERATIONS); None: the newest
    # (NEWEST), stored as its release string
    vllm_version: str | None = None
    # generation 2 only (its own fields; cgdispatch/core/v2/config.py)
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
    # what the user asked for the legacy sizes and max, and for the fields the generation
    # owns, so that replace() re-derives defaults (set by construction, not by callers)
    _asked: tuple[Any, Any] = field(default=(None, None), repr=False, compare=False)
    _asked_own: dict[str, Any] = field(default_factory=dict, repr=False, compare=False)
    # the whole release the user named ("0.11.0"), of which vllm_version keeps only the
    # dispatch generation: the release's own defaults (async scheduling, KV budget) read it
    _release: str | None = field(default=None, repr=False, compare=False)

    @classmethod
    def _derive(cls, values: dict[str, Any]) -> GraphConfig:
        """The config as its generation derives it from the user's ``values``."""
        release = full_release(values["vllm_version"])  # before it becomes the generation
        values = _checked(values)
        draft = cls._exactly(values)  # as asked: the rules read it
        draft._check_scheduler()
        generation = draft.generation
        _owned_elsewhere(generation, values)
        asked = (
            None
            if values["cudagraph_capture_sizes"] is None
            else list(values["cudagraph_capture_sizes"]),
            values["max_cudagraph_capture_size"],
        )
        draft = draft._with(**generation.rules.check_fields(draft))
        asked_own = {f: getattr(draft, f) for f in generation.own_fields}
        return draft._with(
            _asked=asked,
            _asked_own=asked_own,
            _release=release,
            **generation.rules.derive_sizes(draft),
        )

    @classmethod
    def _exactly(cls, values: dict[str, Any]) -> GraphConfig:
        """An instance holding ``values`` as they are (no checks, no derivation)."""
        return type.__call__(cls, **values)

    def _with(self, **changes: Any) -> GraphConfig:
        """A new instance with ``changes`` set as given (no re-derivation)."""
        values = {f.name: getattr(self, f.name) for f in dataclasses.fields(self)}
        values.update(changes)
        return type(self)._exactly(values)

    @property
    def generation(self) -> Generation:
        """The vLLM release whose rules this config follows."""
        return generation_for(self.vllm_version)

    @property
    def release(self) -> str:
        """The whole vLLM release this config models, as named (``"0.11.0"``;
        ``vllm_version`` holds its dispatch generation): the release whose own
        defaults apply where they differ within a generation (async scheduling by default,
        the KV budget; :func:`~cgdispatch.core.release_table.release_defaults`)."""
        return self._release or self.vllm_version

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
        """Active-LoRA counts that have graphs; 0 is the no-LoRA case (the generation's
        rule: V1 ``CudagraphDispatcher._get_lora_cases``, generation 2
        ``get_lora_capture_cases``)."""
        return self.generation.rules.lora_cases(self)

    def replace(self, **changes: Any) -> GraphConfig:
        """A new config with ``changes`` applied and everything re-derived."""
        kwargs = self._user_fields()
        kwargs["cudagraph_capture_sizes"], kwargs["max_cudagraph_capture_size"] = self._asked
        if "cudagraph_capture_sizes" in changes and "max_cudagraph_capture_size" not in changes:
            kwargs["max_cudagraph_capture_size"] = None
        kwargs.update(self._asked_own)
        kwargs["vllm_version"] = self.release  # the whole release, not only its generation
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

        The generation's rule. V1 (vLLM 0.33
        ``CompilationConfig.resolve_cudagraph_mode_and_sizes``, which the V1 model
        runner's ``_check_and_update_cudagraph_mode`` calls with the least support of the
        attention backends):

        - FULL on mixed batches needs ALWAYS; with NEVER it is refused (ValueError),
          otherwise lowered to FULL_AND_PIECEWISE when every attention op is a split
          point, else to FULL_DECODE_ONLY;
        - FULL decode with NEVER: PIECEWISE when attention is split out, else NONE;
        - FULL decode with q > 1 needs UNIFORM_BATCH: else PIECEWISE or NONE likewise;
        - with q > 1 and a FULL decode mode, sizes are rounded up to multiples of q and
          those above the max dropped; nothing left: ``[q]`` if q <= max, else ValueError.

        Sizes are never re-derived here (a mode lowered to NONE keeps them).

        Generation 2 (``cgdispatch.core.v2.config.resolve_mode``): sizes are not touched,
        FULL on mixed batches with NEVER is refused, and
        ``piecewise_capture_available=False`` drops piecewise.
        """
        support = AttentionCGSupport(attention_support)
        changes = self.generation.rules.resolve(self, support, piecewise_capture_available)
        if not changes:
            return self
        if "cudagraph_capture_sizes" in changes:  # a resolved config asks for what it has
            changes["_asked"] = (
                list(changes["cudagraph_capture_sizes"]),
                changes["max_cudagraph_capture_size"],
            )
        return self._with(**changes)

    # ----- vLLM import / export (cgdispatch.core.vllm_io) ------------------------------------
    @classmethod
    def from_vllm(
        cls, compilation_config: dict[str, Any] | str | None = None, **scheduler_fields: Any
    ) -> GraphConfig:
        """A config from vLLM's ``--compilation-config`` (dict or JSON) plus engine fields.

        ``scheduler_fields`` take GraphConfig names (``max_num_seqs=128``,
        ``num_speculative_tokens=3``, ``max_loras=4`` ...). A JSON holding keys only one
        release has names that release when ``vllm_version`` is not given.
        """
        return cls(
            **vllm_io.config_fields(compilation_config, scheduler_fields, cls._field_names())
        )

    @classmethod
    def _field_names(cls) -> list[str]:
        return [f.name for f in dataclasses.fields(cls) if not f.name.startswith("_")]

    def to_vllm(self) -> str:
        """vLLM's ``--compilation-config`` JSON for this config (the generation's own size
        keys: generation 2 writes the prefill and decode lists, not the deprecated
        ``cudagraph_capture_sizes``)."""
        return vllm_io.compilation_json(self)

    def to_vllm_args(self) -> str:
        """A ``vllm serve`` argument string: compilation config plus scheduler settings."""
        return vllm_io.serve_args(self)


# help() and IDEs show the public fields, not the metaclass's (*args, **kwargs)
GraphConfig.__signature__ = inspect.Signature(  # type: ignore[attr-defined]
    [
        p
        for name, p in inspect.signature(GraphConfig.__init__).parameters.items()
        if name != "self" and not name.startswith("_")
    ]
)
