"""Sweep specs: what a sweep measures (model, dtype, device, modes, ladders, shapes, repeats),
and the named presets ``smoke``, ``gpu-small`` and ``gpu-full``. A spec runs nothing
(see :func:`cgdispatch.sweep.run.run_sweep`).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..core import validate as _bounds
from ..core.generation import check_version, default_release
from ..core.ladders import ENGINE_LADDERS
from ..core.modes import CUDAGraphMode
from ..core.validate import MAX_STEP_TOKENS, check_device, check_int

__all__ = ["SweepSpec", "SWEEP_PRESETS", "BATCH_KINDS", "load_spec"]

BATCH_KINDS = ("decode", "mixed")
DTYPES = ("float32", "bfloat16", "float16")
MAX_REPEATS = _bounds.MAX_REPEATS
# the upper bound of each count in a spec (cgdispatch.core.validate.BOUNDS)
_COUNT_BOUNDS = {
    "max_capture_size": _bounds.MAX_CAPTURE_SIZE,
    "max_num_seqs": _bounds.MAX_NUM_SEQS,
    "repeats": _bounds.MAX_REPEATS,
    "input_sets": _bounds.MAX_INPUT_SETS,
    "cpu_threads": _bounds.MAX_PARALLEL,
}


@dataclass(frozen=True)
class SweepSpec:
    """What to sweep. ``ladders`` maps a name to sizes, or to None for the engine ladder
    of that name (``vllm``, ``sglang``, ``trtllm``, ``tgi``, ``pow2``, ``every``) up to
    ``max_capture_size``. Shapes are ``num_tokens`` x ``batch_kinds`` (decode = uniform
    decode with one token per request; mixed = decodes plus prefill chunks)."""

    name: str = "custom"
    model: str = "toy-tiny"  # a registry name (cgdispatch.models.registry.model_names())
    dtype: str = "float32"
    device: str = "cpu"
    modes: tuple[str, ...] = ("FULL",)
    ladders: Mapping[str, Sequence[int] | None] = field(default_factory=lambda: {"pow2": None})
    max_capture_size: int = 16
    num_tokens: tuple[int, ...] = (1, 4, 16)
    batch_kinds: tuple[str, ...] = BATCH_KINDS
    max_num_seqs: int = 16
    repeats: int = 10
    warmup: int = 2
    input_sets: int = 3  # random batches rotated through the timed runs
    cpu_threads: int = 1  # intra-op threads on CPU: 1 keeps timings steady on shared machines
    # vLLM release whose graph dispatch the runner follows (VLLM_VERSIONS). With a release
    # that splits ladders (generation 2) each ladder gives the prefill token sizes and, up to
    # max_num_seqs, the decode request sizes: decode batches have one token per request.
    # Default: the newest release, as every tool's (stored rows without one read as V1).
    vllm_version: str = field(default_factory=default_release)  # None: the same, the newest

    def __post_init__(self) -> None:
        set_ = object.__setattr__
        from ..models.registry import model_names  # no torch import: names only

        if self.model not in model_names():
            raise ValueError(
                f"model={self.model!r} is unknown: use a registry name, one of {model_names()}"
            )
        if not isinstance(self.name, str) or not self.name.strip():
            raise ValueError(f"name={self.name!r} is invalid: give the sweep a non-empty name")
        if isinstance(self.modes, str) or not self.modes:
            raise ValueError(
                f"modes={self.modes!r} is invalid: give a list of one or more modes, e.g. "
                "['FULL', 'PIECEWISE']"
            )
        # parsed once, here at the spec's edge (ValueError names the valid modes); the spec
        # keeps their names, the form its rows and files store
        set_(self, "modes", tuple(str(CUDAGraphMode.parse(m)) for m in self.modes))
        check_device("device", self.device)
        # YAML's unquoted 0.34 is a float, as GraphConfig takes it; unknown: ValueError
        set_(self, "vllm_version", check_version(self.vllm_version) or default_release())
        if self.dtype not in DTYPES:
            raise ValueError(f"dtype={self.dtype!r} is invalid: use one of {list(DTYPES)}")
        set_(self, "warmup", check_int("warmup", self.warmup, 0, _bounds.MAX_WARMUPS))
        for name, bound in _COUNT_BOUNDS.items():
            set_(self, name, check_int(name, getattr(self, name), 1, bound))
        bad = [k for k in self.batch_kinds if k not in BATCH_KINDS]
        if bad:
            raise ValueError(f"batch_kinds {bad} are unknown: use {list(BATCH_KINDS)}")
        if isinstance(self.num_tokens, (str, bytes, int)) or not self.num_tokens:
            raise ValueError(f"num_tokens={self.num_tokens!r} is invalid: give integers >= 1")
        if len(self.num_tokens) > _bounds.MAX_CAPTURE_SIZES:
            raise ValueError(
                f"num_tokens has {len(self.num_tokens):_} shapes: at most "
                f"{_bounds.MAX_CAPTURE_SIZES:_} (cgdispatch.core.validate.BOUNDS); sample them"
            )
        set_(
            self,
            "num_tokens",
            tuple(check_int("num_tokens entry", n, 1, MAX_STEP_TOKENS) for n in self.num_tokens),
        )
        set_(self, "batch_kinds", tuple(self.batch_kinds))
        ladders = {
            name: None if sizes is None else tuple(sizes)
            for name, sizes in dict(self.ladders).items()
        }
        set_(self, "ladders", ladders)
        if not ladders:
            raise ValueError("ladders is empty: give at least one, e.g. {'vllm': None}")
        for name in ladders:
            self.ladder_sizes(name)  # validates

    def ladder_sizes(self, name: str) -> tuple[int, ...]:
        """The sizes of ladder ``name``: as given, or the engine ladder up to the max."""
        sizes = self.ladders[name]
        if sizes is None:
            if name not in ENGINE_LADDERS:
                raise ValueError(
                    f"ladder {name!r} has no sizes and is not an engine ladder: give a list of "
                    f"sizes or use one of {sorted(ENGINE_LADDERS)}"
                )
            return tuple(ENGINE_LADDERS[name](self.max_capture_size))
        if not sizes or len(sizes) > _bounds.MAX_CAPTURE_SIZES:
            raise ValueError(
                f"ladder {name!r} has {len(sizes):_} sizes: give 1 to "
                f"{_bounds.MAX_CAPTURE_SIZES:_} integers >= 1"
            )
        for s in sizes:
            if _bounds.as_index(s) is None or s < 1:
                raise ValueError(
                    f"ladder {name!r} entry {s!r} is invalid: give a list of integers >= 1"
                )
            check_int(f"ladder {name!r} entry", s, 1, _bounds.MAX_CAPTURE_SIZE)
        return tuple(sorted({int(s) for s in sizes}))

    @property
    def shapes(self) -> list[tuple[int, bool]]:
        """(num_tokens, uniform_decode) of every shape, in sweep order."""
        return [(n, kind == "decode") for kind in self.batch_kinds for n in self.num_tokens]

    def units(self) -> list[tuple[str, str]]:
        """(mode, ladder name) of every unit: one runner and one capture each."""
        return [(mode, ladder) for mode in self.modes for ladder in self.ladders]

    def to_dict(self) -> dict[str, Any]:
        out = dataclasses.asdict(self)
        out["ladders"] = {k: None if v is None else list(v) for k, v in self.ladders.items()}
        return out

    def replace(self, **changes: Any) -> SweepSpec:
        """A new spec with ``changes``; engine ladders are re-derived (e.g. for a new max)."""
        kwargs = self.to_dict()
        kwargs.update(changes)
        return SweepSpec(**kwargs)


_GPU_MODES = ("FULL", "PIECEWISE", "FULL_AND_PIECEWISE", "FULL_DECODE_ONLY")


def _gpu_preset(
    name: str, model: str, ladders: Mapping[str, None], num_tokens: tuple[int, ...]
) -> SweepSpec:
    """A GPU preset: bf16 on ``cuda``, every graph mode, ladders up to vLLM's 512, 256
    sequences, 20 timed runs after 3 warm-ups."""
    return SweepSpec(
        name=name,
        model=model,
        dtype="bfloat16",
        device="cuda",
        modes=_GPU_MODES,
        ladders=ladders,
        max_capture_size=512,
        num_tokens=num_tokens,
        max_num_seqs=256,
        repeats=20,
        warmup=3,
    )


SWEEP_PRESETS: dict[str, SweepSpec] = {
    # CPU, under a minute: toy-tiny, two ladders, piecewise recorded as failed until it lands
    "smoke": SweepSpec(
        name="smoke",
        model="toy-tiny",
        modes=("FULL", "FULL_DECODE_ONLY", "FULL_AND_PIECEWISE"),
        ladders={"pow2": None, "coarse": [4, 16]},
        max_capture_size=16,
        num_tokens=(1, 3, 8, 13),
        max_num_seqs=16,
        repeats=5,
        warmup=2,
    ),
    # one H200, a few minutes (about 1 by the device model; not yet run on a GPU):
    # toy-small in bf16, vLLM's ladder against powers of two
    "gpu-small": _gpu_preset(
        "gpu-small",
        "toy-small",
        {"vllm": None, "pow2": None},
        (1, 2, 4, 8, 16, 32, 64, 128, 256, 512),
    ),
    # one H200, under 8 minutes: Llama-3.2-1B shapes, three engine ladders, odd sizes too.
    # Not yet run on a GPU; the device model puts it near 3 minutes (model), to which
    # piecewise compilation adds its compile time per PIECEWISE / FULL_AND_PIECEWISE unit.
    "gpu-full": _gpu_preset(
        "gpu-full",
        "toy-1b",
        {"vllm": None, "sglang": None, "trtllm": None},
        (1, 3, 8, 17, 32, 64, 100, 128, 200, 256, 384, 512),
    ),
}


def load_spec(path: str | Path) -> SweepSpec:
    """A spec from a YAML or JSON file holding :class:`SweepSpec` fields, e.g.
    ``{name: mine, model: toy-small, modes: [FULL], ladders: {vllm: null, few: [1, 8, 64]}}``."""
    import yaml

    path = Path(path)
    if not path.is_file():
        raise ValueError(
            f"spec file {path} {'is a directory' if path.is_dir() else 'does not exist'}: give "
            "a YAML or JSON file of SweepSpec fields"
        )
    try:
        fields = yaml.safe_load(path.read_text())  # JSON is YAML
    except (yaml.YAMLError, UnicodeDecodeError) as err:
        raise ValueError(
            f"spec file {path} is not valid YAML or JSON ({' '.join(str(err).split())})"
        ) from None
    except RecursionError:
        raise ValueError(
            f"spec file {path} nests deeper than a YAML reader can follow: a spec is a few "
            "levels deep; check the file for a runaway structure"
        ) from None
    _bounds.check_nesting(f"spec file {path}", fields)
    known = {f.name for f in dataclasses.fields(SweepSpec)}
    if not isinstance(fields, dict):
        raise ValueError(
            f"spec file {path} holds {type(fields).__name__} {str(fields)[:40]!r}, expected a "
            f"mapping of SweepSpec fields such as 'name: mine' and 'modes: [FULL]'"
        )
    if set(fields) - known:
        unknown = sorted(map(str, set(fields) - known))
        raise ValueError(f"spec file {path} has unknown fields {unknown}: use {sorted(known)}")
    for name in ("modes", "num_tokens", "batch_kinds"):
        if name in fields:
            if not isinstance(fields[name], list):
                raise ValueError(
                    f"spec file {path}: {name} is {fields[name]!r}, expected a list such as [1, 8]"
                )
            fields[name] = tuple(fields[name])
    if "ladders" in fields and not isinstance(fields["ladders"], dict):
        raise ValueError(
            f"spec file {path}: ladders is {fields['ladders']!r}, expected a mapping such as "
            "{vllm: null, few: [1, 8]}"
        )
    try:
        return SweepSpec(**fields)
    except (TypeError, ValueError) as err:
        raise ValueError(f"spec file {path}: {err}") from None
