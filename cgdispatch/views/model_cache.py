"""A disk cache of the device cost model, so that a dashboard or a CLI run does not trace an
8B model on fake tensors (about 10 s on two cores) each time it starts, and of the start-up
estimates (the stage profile behind them builds the model on the meta device: 2.4 s of the
dashboard's 4.8 s first ``tune`` on a quiet machine, bench_dashboard's target is 10 s).

:func:`cached_cost_model` returns :func:`~cgdispatch.estimate.device_model.device_cost_model`
for (model, device, context_len), stored under ``$CGDISPATCH_CACHE`` or
``~/.cache/cgdispatch`` as JSON with a digest (:mod:`~cgdispatch.estimate.datafile`: reading
one cannot run code, unlike a pickle, and rebuilds only the classes named here). The file
name carries a fingerprint of the code that builds the model (the sources of core,
capture, models and estimate, and torch's version), so an edit to that code builds a fresh
one; a damaged file is rebuilt with a warning.
:func:`cached_startup` is :func:`~cgdispatch.estimate.startup.startup_for` with each
config's estimate stored the same way (keyed by the config's repr and the shipped data
files the architectures come from). It caches; it computes nothing of its own.
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import importlib.metadata
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

from ..core.config import GraphConfig
from ..core.warn import warn_user
from ..estimate.datafile import DataFileError, dump_data, load_data
from ..estimate.device_model import DeviceCostModel, MemoryLine, device_cost_model
from ..estimate.devices import DeviceSpec
from ..estimate.profiles import AttentionShape, LinearProfile
from ..estimate.startup import StartupEstimate, startup_for
from ..estimate.startup_pricing import GraphPricing, StartupCoefficients

__all__ = ["cached_cost_model", "cached_startup", "cache_dir", "cache_path"]

T = TypeVar("T")

_PACKAGE = Path(__file__).resolve().parents[1]
_SOURCES = ("estimate", "models", "capture", "core")  # what device_cost_model's figures depend on


def cache_dir() -> Path:
    """``$CGDISPATCH_CACHE`` when set, else ``~/.cache/cgdispatch``."""
    env = os.environ.get("CGDISPATCH_CACHE")
    return Path(env) if env else Path.home() / ".cache" / "cgdispatch"


def _torch_version() -> str:
    """torch's version from its installed metadata: a cached cost model is read without
    importing torch (1.6 s of ``tune`` on two cores), which builds an uncached one."""
    try:
        return importlib.metadata.version("torch")
    except importlib.metadata.PackageNotFoundError:  # not installed by a package manager
        import torch

        return torch.__version__


@functools.lru_cache(maxsize=1)
def _fingerprint() -> str:
    digest = hashlib.sha256(_torch_version().encode())
    for folder in _SOURCES:
        for path in sorted((_PACKAGE / folder).rglob("*.py")):
            digest.update(path.relative_to(_PACKAGE).as_posix().encode())
            digest.update(path.read_bytes())
    return digest.hexdigest()[:16]


def _label(thing: object) -> str:
    """A model or device as a file-name part: names as they are; a config.json file or a
    DeviceSpec by a digest of its contents too, so an edited one is estimated afresh."""
    if isinstance(thing, str) and not Path(thing).is_file():
        return thing
    if isinstance(thing, (str, Path)):
        data, name = Path(thing).read_bytes(), Path(thing).stem
    else:
        data, name = repr(thing).encode(), str(getattr(thing, "name", type(thing).__name__))
    return f"{name}-{hashlib.sha256(data).hexdigest()[:12]}"


def cache_path(
    model: object, device: object, context_len: int = 512, tensor_parallel_size: int | None = None
) -> Path:
    """Where the cost model of these arguments is (or would be) stored."""
    tp = "" if tensor_parallel_size is None else f"-tp{tensor_parallel_size}"
    safe = "".join(
        c if c.isalnum() or c in "-._" else "_"
        for c in f"{_label(model)}-{_label(device)}-{context_len}{tp}"
    )
    return cache_dir() / f"cost-model-{safe}-{_fingerprint()}.json"


def cached_cost_model(
    model: str = "llama-3.1-8b",
    device: str | DeviceSpec = "H200",
    *,
    context_len: int = 512,
    tensor_parallel_size: int | None = None,
) -> DeviceCostModel:
    """:func:`device_cost_model` of these arguments, from the disk cache when it is there.

    Bad arguments raise ``device_cost_model``'s ValueError. A cache that cannot be written
    (read-only home) is skipped silently: the model is still returned.
    """
    path = cache_path(model, device, context_len, tensor_parallel_size)
    return _load_or_build(
        path,
        DeviceCostModel,
        lambda: device_cost_model(
            model, device, context_len=context_len, tensor_parallel_size=tensor_parallel_size
        ),
    )


@functools.lru_cache(maxsize=1)
def _data_fingerprint() -> str:
    """The shipped CSVs (architectures, calibration runs) the start-up estimate reads."""
    digest = hashlib.sha256()
    for path in sorted((_PACKAGE / "data").glob("*.csv")):
        digest.update(path.name.encode())
        digest.update(path.read_bytes())
    return digest.hexdigest()[:16]


def cached_startup(
    model: str,
    device: str | DeviceSpec,
    *,
    gpu_memory_utilization: float = 0.9,
    tensor_parallel_size: int | None = None,
    coefficients: StartupCoefficients | None = None,
    vllm_version: str | None = None,
) -> Callable[[GraphConfig], StartupEstimate] | None:
    """:func:`~cgdispatch.estimate.startup.startup_for` whose estimates come from the disk
    cache when they are there (None for a model with no published config, as it).
    ``tensor_parallel_size``: default the registry model's own, else 1; ``coefficients``:
    default the shipped calibration (a calibration profile's are keyed apart);
    ``vllm_version``: the release that starts (its KV budget; default the config's)."""
    extra: dict[str, Any] = {}
    if vllm_version is not None:
        extra["vllm_version"] = vllm_version
    if tensor_parallel_size is not None:
        extra["tensor_parallel_size"] = tensor_parallel_size
    if coefficients is not None:
        extra["coefficients"] = coefficients
    estimate = startup_for(model, device, gpu_memory_utilization=gpu_memory_utilization, **extra)
    if estimate is None:
        return None

    def startup(config: GraphConfig) -> StartupEstimate:
        key = f"{_label(model)}|{_label(device)}|{gpu_memory_utilization!r}|{config!r}|{_data_fingerprint()}"
        if tensor_parallel_size is not None:
            key += f"|tp{tensor_parallel_size}"
        if coefficients is not None:
            key += f"|{coefficients!r}"
        if vllm_version is not None:
            key += f"|vllm{vllm_version}"
        name = hashlib.sha256(key.encode()).hexdigest()[:24]
        path = cache_dir() / f"startup-{name}-{_fingerprint()}.json"
        return _load_or_build(path, StartupEstimate, lambda: estimate(config))

    return startup


# the classes a cache file may hold: nothing else is rebuilt from one
_CLASSES = (
    DeviceCostModel, DeviceSpec, LinearProfile, MemoryLine, GraphPricing, StartupCoefficients,
    StartupEstimate, AttentionShape,
)  # fmt: skip


def _load_or_build(path: Path, kind: type[T], build: Callable[[], Any]) -> T:
    """The ``kind`` stored at ``path``, else ``build()`` stored there (when it can be). A
    damaged file (truncated, edited, of another kind) warns and is rebuilt."""
    try:
        cached = load_data(path, kind=kind.__name__, classes=_CLASSES)
        if isinstance(cached, kind):
            return cached
        raise DataFileError(f"holds a {type(cached).__name__}, not a {kind.__name__}")
    except FileNotFoundError:
        pass
    except (OSError, DataFileError) as e:
        warn_user(f"cache file {path} is damaged ({e}); rebuilding it")
    built = build()
    with contextlib.suppress(OSError):  # a read-only cache folder: the value is still returned
        dump_data(built, path, kind=kind.__name__)
    return built
