"""A content-addressed disk cache of deterministic intermediate results (a simulated step
trace, one ladder's latency summary), so that switching a dashboard or ``tune`` back to a
trace it has seen does not rerun a scheduler for tens of seconds.

A key is a SHA-256 over everything the result depends on: the inputs' bytes, the settings'
reprs, and :func:`code_fingerprint` (every source file of the package plus numpy's and
pandas' versions), so an edit to any code builds fresh results. Files are ``.npz`` read with
``allow_pickle=False``, so a planted file cannot run code; each holds its key and a checksum
of its arrays, is written to a temporary file and renamed into place (a concurrent reader sees
the whole file or none), and is rebuilt with a warning when it does not verify. The folder is
``$CGDISPATCH_CACHE`` (else ``~/.cache/cgdispatch``), shared with the cost-model cache;
``CGDISPATCH_RESULT_CACHE=0`` turns this cache off. It stores; it computes nothing itself.
"""

from __future__ import annotations

import functools
import hashlib
import os
import tempfile
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

__all__ = ["cache_dir", "enabled", "code_fingerprint", "digest", "cached_arrays"]

_PACKAGE = Path(__file__).resolve().parents[1]
_KEY = "__key__"
_CHECKSUM = "__checksum__"

Arrays = dict[str, np.ndarray]


def cache_dir() -> Path:
    """``$CGDISPATCH_CACHE`` when set, else ``~/.cache/cgdispatch``."""
    env = os.environ.get("CGDISPATCH_CACHE")
    return Path(env) if env else Path.home() / ".cache" / "cgdispatch"


def enabled() -> bool:
    """False when ``CGDISPATCH_RESULT_CACHE`` is ``0``, ``off`` or ``false``."""
    return os.environ.get("CGDISPATCH_RESULT_CACHE", "1").lower() not in ("0", "off", "false")


@functools.lru_cache(maxsize=1)
def code_fingerprint() -> str:
    """Every ``.py`` file of the package and the numpy and pandas versions, hashed."""
    import pandas as pd

    h = hashlib.sha256(f"numpy {np.__version__} pandas {pd.__version__}".encode())
    for path in sorted(_PACKAGE.rglob("*.py")):
        h.update(path.relative_to(_PACKAGE).as_posix().encode())
        h.update(path.read_bytes())
    return h.hexdigest()


def digest(*parts: str | bytes | np.ndarray) -> str:
    """SHA-256 of ``parts``; an array contributes its dtype, shape and bytes."""
    h = hashlib.sha256()
    for part in parts:
        if isinstance(part, np.ndarray):
            part = np.ascontiguousarray(part)
            h.update(f"array {part.dtype.str} {part.shape}".encode())
            h.update(part.tobytes())
        else:
            raw = part.encode() if isinstance(part, str) else part
            h.update(f"{len(raw)}:".encode())
            h.update(raw)
    return h.hexdigest()


def request_key(kind: str, table: Any, *parts: str | bytes | np.ndarray) -> str:
    """The key of a result that is a pure function of a checked request table (every column,
    by name and values), ``parts`` and this package's code."""
    columns = [table[c].to_numpy() for c in table.columns]
    # a client's concurrency limit changes every arrival (workload.closed_loop)
    limit = (
        [f"max_concurrency={table.attrs['max_concurrency']}"]
        if "max_concurrency" in table.attrs
        else []
    )
    return digest(kind, code_fingerprint(), *parts, *columns, *map(str, table.columns), *limit)


def _checksum(arrays: Arrays) -> str:
    return digest(*(p for name in sorted(arrays) for p in (name, np.asarray(arrays[name]))))


def cached_arrays(kind: str, key: str, build: Callable[[], Arrays]) -> Arrays:
    """The arrays stored under ``key``, else ``build()`` (stored when the folder is writable).

    ``kind`` names the file (``steps``, ``latency``); arrays must not be of object dtype.
    A file that is there but does not load or verify is reported with a warning and rebuilt.
    """
    if not enabled():
        return build()
    path = cache_dir() / f"{kind}-{key[:32]}.npz"
    if path.exists():
        try:
            return _load(path, key)
        except Exception as err:  # noqa: BLE001 - any damage means rebuild
            warnings.warn(
                f"result cache file {path} is damaged ({err}): rebuilding it", stacklevel=2
            )
    built = build()
    _store(path, key, built)
    return built


def _load(path: Path, key: str) -> Arrays:
    with np.load(path, allow_pickle=False) as f:
        arrays = {name: f[name] for name in f.files}
    stored_key = str(arrays.pop(_KEY, ""))
    stored_sum = str(arrays.pop(_CHECKSUM, ""))
    if stored_key != key:
        raise ValueError("its key differs from the file name's")
    if stored_sum != _checksum(arrays):
        raise ValueError("its checksum does not match its arrays")
    return arrays


def _store(path: Path, key: str, arrays: Arrays) -> None:
    if any(np.asarray(a).dtype == object for a in arrays.values()):
        return  # would need pickle to store: keep it in memory only
    payload = {**arrays, _KEY: np.array(key), _CHECKSUM: np.array(_checksum(arrays))}
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        with tempfile.NamedTemporaryFile(dir=path.parent, delete=False, suffix=".tmp") as f:
            np.savez(f, **payload)
        os.replace(f.name, path)  # whole file or none: a concurrent reader never sees half
    except OSError:
        pass  # a read-only folder: the result is still returned
