"""The one cache of cgdispatch: memory in front of one disk folder, one switch, content keys.

Every result worth keeping between calls goes through this module, and through it once:

* :func:`cached` keeps an expensive result (a device cost model, a stage profile, a
  simulated trace, one ladder's latency summary) in memory and on disk. A key is a SHA-256
  of everything the result depends on (:func:`digest`): the inputs' bytes, the settings'
  reprs and :func:`code_fingerprint` (the package's sources and data files and the versions
  of the libraries that compute), never a file or folder name alone. A file the result
  depends on enters by :func:`source_digest`: its resolved path and the SHA-256 of its
  bytes, so an edited ``config.json`` or the same relative path under another working
  folder gets its own entry.
* :func:`memo` is ``functools.lru_cache`` for cheap lookups (table reads, small pure
  functions) that obeys the same switch.

The folder is ``$CGDISPATCH_CACHE_DIR``, else ``$XDG_CACHE_HOME/cgdispatch``, else
``~/.cache/cgdispatch``; with no home folder (HOME unset, a uid with no passwd entry) a
private folder under the system's temporary folder, said once. ``CGDISPATCH_CACHE=0``
(or ``off``, ``false``, ``no``) turns every cache off, memory and disk: each answer is then
computed afresh, and is the same. Two older spellings are still read, with one warning
each: ``CGDISPATCH_CACHE=<folder>`` (the folder, before this variable became the switch)
and ``CGDISPATCH_RESULT_CACHE=0`` (read as ``CGDISPATCH_CACHE=0``).

A disk entry is one file ``<kind>-<key prefix>.<suffix>`` holding its full key and the
SHA-256 of its payload; a file that does not verify is reported with a warning and
rebuilt. It is written to a temporary file in the folder and renamed into place (a
concurrent reader sees the whole file or none); on any write error (a full disk, a
read-only folder) the temporary file is removed, the result is returned uncached, and the
failure is said once per process. Payloads are the caller's bytes (JSON data files,
``.npz`` without pickles): reading one cannot run code.

The folder is kept to a size (:func:`prune`): ``$CGDISPATCH_CACHE_MAX_MB`` megabytes, 1024
by default. After its first write a process removes the files older releases of the package
wrote (names no release reads any more) and, when the entries exceed the budget, the least
recently used ones (a hit marks an entry used) until they fill at most 80% of it. Only
files named as cache entries are touched: calibration profiles and anything else put in the
folder stay.

Standard library only at import (core's rule); numpy is imported by the array helpers.
"""

from __future__ import annotations

import collections
import contextlib
import functools
import hashlib
import importlib.metadata
import io
import os
import re
import stat
import tempfile
import threading
import time
from collections.abc import Callable, Hashable, Mapping
from pathlib import Path
from typing import Any, TypeVar

from .warn import warn_user

__all__ = [
    "ENV_SWITCH",
    "ENV_DIR",
    "ENV_MAX_MB",
    "DEFAULT_MAX_MB",
    "enabled",
    "cache_dir",
    "profiles_dir",
    "code_fingerprint",
    "digest",
    "source_digest",
    "frame_parts",
    "cached",
    "cached_arrays",
    "memo",
    "local_memo",
    "clear_memory",
    "max_bytes",
    "prune",
]

T = TypeVar("T")

ENV_SWITCH = "CGDISPATCH_CACHE"
ENV_DIR = "CGDISPATCH_CACHE_DIR"
ENV_MAX_MB = "CGDISPATCH_CACHE_MAX_MB"
DEFAULT_MAX_MB = 1024
_LEGACY_SWITCH = "CGDISPATCH_RESULT_CACHE"
_OFF = frozenset({"0", "off", "false", "no"})
_ON = frozenset({"", "1", "on", "true", "yes"})

_PACKAGE = Path(__file__).resolve().parents[1]
_MAGIC = b"cgdispatch-cache/1\n"
_lock = threading.Lock()
_said: set[str] = set()


def _say_once(tag: str, message: str) -> None:
    """Warn ``message`` the first time ``tag`` comes up in this process."""
    with _lock:
        if tag in _said:
            return
        _said.add(tag)
    warn_user(message)


def _legacy_folder() -> str | None:
    """``CGDISPATCH_CACHE`` when it holds a folder (its meaning before it became the switch)."""
    value = os.environ.get(ENV_SWITCH)
    if value is None or value.strip().lower() in _OFF | _ON:
        return None
    return value


def enabled() -> bool:
    """False when ``CGDISPATCH_CACHE`` (or the older ``CGDISPATCH_RESULT_CACHE``) is ``0``,
    ``off``, ``false`` or ``no``: then nothing is kept, in memory or on disk."""
    if os.environ.get(ENV_SWITCH, "1").strip().lower() in _OFF:
        return False
    legacy = os.environ.get(_LEGACY_SWITCH)
    if legacy is not None:
        off = legacy.strip().lower() in _OFF
        _say_once(
            _LEGACY_SWITCH,
            f"{_LEGACY_SWITCH}={legacy} is no longer a setting of its own: one switch, "
            f"{ENV_SWITCH}=0, turns every cache off"
            + (f"; read as {ENV_SWITCH}=0" if off else "; ignored"),
        )
        return not off
    return True


def _private_temp_folder() -> Path | None:
    """A folder under the temporary folder that only this uid owns and can enter, or None."""
    if not hasattr(os, "getuid"):  # no uids to check ownership by: no shared folder
        return None
    folder = Path(tempfile.gettempdir()) / f"cgdispatch-cache-{os.getuid()}"
    try:
        folder.mkdir(mode=0o700, exist_ok=True)
        info = folder.lstat()
    except OSError:
        return None
    if not stat.S_ISDIR(info.st_mode) or info.st_uid != os.getuid() or info.st_mode & 0o077:
        return None  # another user's, a link or open to others: not a cache to trust
    return folder


def cache_dir() -> Path | None:
    """The cache folder (also where ``calibrate`` keeps profiles), or None when none can
    be found; it does not say whether caching is on (:func:`enabled` does).

    ``$CGDISPATCH_CACHE_DIR``, else ``$XDG_CACHE_HOME/cgdispatch``, else
    ``~/.cache/cgdispatch``; with no home folder a private folder under the temporary one
    (said once), or no disk cache at all when that cannot be made either (said once)."""
    chosen = os.environ.get(ENV_DIR)
    if not chosen:
        chosen = _legacy_folder()
        if chosen is not None:
            _say_once(
                "legacy-dir",
                f"{ENV_SWITCH}={chosen!r} names a folder, as in older releases: use "
                f"{ENV_DIR}={chosen!r} ({ENV_SWITCH} is now the switch: 0 turns caching off)",
            )
    if chosen:
        return Path(chosen)
    xdg = os.environ.get("XDG_CACHE_HOME")
    if xdg and Path(xdg).is_absolute():
        return Path(xdg) / "cgdispatch"
    try:
        home = Path.home()
        if home.is_absolute():  # HOME="" would make it the working folder
            return home / ".cache" / "cgdispatch"
    except (RuntimeError, KeyError, OSError):  # HOME unset and no passwd entry for this uid
        pass
    folder = _private_temp_folder()
    if folder is None:
        _say_once("no-home", "no home folder: results are not cached on disk (memory only)")
    else:
        _say_once(
            "no-home",
            f"no home folder: caching results in {folder} (set {ENV_DIR} to choose a folder)",
        )
    return folder


def profiles_dir() -> Path:
    """Where ``calibrate`` saves profiles by name: ``profiles`` in the cache folder. Kept
    whether caching is on or off (a profile is a result the user asked for, not a cache).
    ValueError when there is no folder at all (no home, no private temporary folder)."""
    folder = cache_dir()
    if folder is None:
        raise ValueError(
            f"no folder for calibration profiles (no home folder): set {ENV_DIR}=FOLDER, or "
            "give a profile's path"
        )
    return folder / "profiles"


_fingerprint: str | None = None


def _version(name: str) -> str:
    """An installed distribution's version from its metadata (importing torch costs 1.6 s)."""
    try:
        return importlib.metadata.version(name)
    except importlib.metadata.PackageNotFoundError:
        return "absent"


def code_fingerprint() -> str:
    """SHA-256 of every ``.py`` file of the package, its shipped data files and the
    versions of torch, numpy and pandas: an edit to any of them makes fresh results."""
    global _fingerprint
    if _fingerprint is None:
        h = hashlib.sha256(
            " ".join(f"{n} {_version(n)}" for n in ("torch", "numpy", "pandas")).encode()
        )
        files = [
            *_PACKAGE.rglob("*.py"),
            *(p for p in (_PACKAGE / "data").rglob("*") if p.is_file()),
        ]
        for path in sorted(files):
            h.update(path.relative_to(_PACKAGE).as_posix().encode())
            h.update(hashlib.sha256(path.read_bytes()).digest())
        _fingerprint = h.hexdigest()
    return _fingerprint


def digest(*parts: str | bytes | Any) -> str:
    """SHA-256 of ``parts``: strings and bytes as they are (length-prefixed, so no two
    sequences of parts collide), an array (anything with ``dtype``, ``shape`` and
    ``tobytes``) by its dtype, shape and bytes, anything else by its ``repr``."""
    h = hashlib.sha256()
    for part in parts:
        if hasattr(part, "tobytes") and hasattr(part, "dtype") and hasattr(part, "shape"):
            import numpy as np

            part = np.ascontiguousarray(part)
            h.update(f"array {part.dtype.str} {part.shape}".encode())
            if part.dtype.hasobject:  # cells such as lists of hash ids: by value, not address
                h.update(digest(*(repr(v) for v in part.ravel().tolist())).encode())
            else:
                h.update(part.tobytes())
            continue
        if not isinstance(part, (str, bytes)):
            part = repr(part)
        raw = part.encode() if isinstance(part, str) else part
        h.update(f"{len(raw)}:".encode())
        h.update(raw)
    return h.hexdigest()


def source_digest(source: object, *, inside: str = "config.json") -> str:
    """What ``source`` is, for a cache key: a path (str or Path naming an existing file or
    folder) by its resolved absolute path and the SHA-256 of its bytes (a folder by its
    ``inside`` file's); anything else (a registry name, a spec value) by its ``repr``."""
    if isinstance(source, (str, Path)):
        path = Path(source)
        try:
            if path.is_dir():
                path = path / inside
            if path.is_file():
                resolved = path.resolve()
                return f"file {resolved} sha256 {hashlib.sha256(resolved.read_bytes()).hexdigest()}"
        except OSError:
            pass  # unreadable: named by repr, and the reader raises its own error
    return f"value {source!r}"


def frame_parts(table: Any) -> list[Any]:
    """A table (pandas DataFrame) as :func:`digest` parts: every column's name and values,
    and its ``attrs`` (a client's concurrency limit rides there: workload.closed_loop)."""
    attrs = [f"{k}={v!r}" for k, v in sorted(table.attrs.items(), key=lambda kv: str(kv[0]))]
    return [*(table[c].to_numpy() for c in table.columns), *map(str, table.columns), *attrs]


# ----------------------------------------------------------------------------- memory


class _Memory:
    """A least-recently-used map bounded by entries and, given ``weigh``, by bytes (an entry
    heavier than the whole budget is not held); safe across threads."""

    def __init__(
        self, size: int, max_bytes: int | None = None, weigh: Callable[[Any], int] | None = None
    ) -> None:
        self.size, self.max_bytes, self.weigh = size, max_bytes, weigh
        self.items: collections.OrderedDict[Hashable, tuple[Any, int]] = collections.OrderedDict()
        self.bytes = 0
        self.lock = threading.Lock()

    def get(self, key: Hashable) -> tuple[bool, Any]:
        with self.lock:
            if key not in self.items:
                return False, None
            self.items.move_to_end(key)
            return True, self.items[key][0]

    def put(self, key: Hashable, value: Any) -> None:
        weight = self.weigh(value) if self.weigh is not None else 0
        if self.max_bytes is not None and weight > self.max_bytes:
            return
        with self.lock:
            if key in self.items:
                self.bytes -= self.items.pop(key)[1]
            self.items[key] = (value, weight)
            self.bytes += weight
            while len(self.items) > self.size or (
                self.max_bytes is not None and self.bytes > self.max_bytes
            ):
                self.bytes -= self.items.popitem(last=False)[1][1]

    def clear(self) -> None:
        with self.lock:
            self.items.clear()
            self.bytes = 0


_memories: dict[str, _Memory] = {}
_memos: list[Callable[..., Any]] = []


def clear_memory() -> None:
    """Forget every result held in memory (disk entries stay)."""
    for memory in list(_memories.values()):
        memory.clear()
    for function in list(_memos):
        function.cache_clear()  # type: ignore[attr-defined]


def _memory(
    kind: str, size: int, max_bytes: int | None, weigh: Callable[[Any], int] | None
) -> _Memory:
    with _lock:
        if kind not in _memories:
            _memories[kind] = _Memory(size, max_bytes, weigh)
        return _memories[kind]


# ----------------------------------------------------------------------------- disk


def _check_kind(kind: str) -> None:
    if not kind or not all(c.isalnum() or c in "-_" for c in kind):
        raise ValueError(
            f"kind={kind!r} is invalid: a cache kind names files, so use letters, digits, "
            "'-' and '_'"
        )


def _read(path: Path, key: str) -> bytes | None:
    """The payload stored at ``path`` under ``key``; None when there is none; a file that
    does not verify is reported and treated as absent."""
    try:
        raw = path.read_bytes()
    except FileNotFoundError:
        return None
    except OSError as e:
        _say_once(f"read {path}", f"cache file {path} cannot be read ({e}): rebuilding it")
        return None
    head_len = len(_MAGIC)
    lines = raw[head_len:].split(b"\n", 2)
    if not raw.startswith(_MAGIC) or len(lines) != 3:
        warn_user(f"cache file {path} is damaged (not a cgdispatch cache file): rebuilding it")
        return None
    stored_key, stored_sum, payload = lines
    if stored_key.decode(errors="replace") != key:
        warn_user(f"cache file {path} is damaged (its key differs): rebuilding it")
        return None
    if hashlib.sha256(payload).hexdigest().encode() != stored_sum:
        warn_user(f"cache file {path} is damaged (its checksum does not match): rebuilding it")
        return None
    with contextlib.suppress(OSError):  # a hit marks the entry used, for prune's order
        os.utime(path)
    return payload


def _write(path: Path, key: str, payload: bytes) -> None:
    """``payload`` at ``path``, atomically; on any error no file is left behind and the
    failure is said once."""
    tmp: str | None = None
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
        with os.fdopen(fd, "wb") as f:
            f.write(_MAGIC + key.encode() + b"\n")
            f.write(hashlib.sha256(payload).hexdigest().encode() + b"\n")
            f.write(payload)
        os.replace(tmp, path)  # whole file or none: a concurrent reader never sees half
        tmp = None
        _prune_once(path.parent)
    except OSError as e:
        _say_once(
            f"write {path.parent}",
            f"cache folder {path.parent} cannot be written ({e}): continuing without "
            "storing results there",
        )
    finally:
        if tmp is not None:
            with contextlib.suppress(OSError):
                os.unlink(tmp)


# an entry this release writes: <kind>-<32 hex digits of its key>.<suffix>
_ENTRY = re.compile(r"[A-Za-z0-9_-]+-[0-9a-f]{32}\.(?:json|npz|bin)")
# files earlier releases wrote, which no release reads any more: a cost model or start-up
# named by model, device and a 16-digit fingerprint (views/model_cache.py and
# estimate/startup_pricing.py before the one cache); workload/result_cache.py named its
# results as entries are named now, so they leave by age
_LEGACY = re.compile(r"(?:cost-model-.+|startup-[0-9a-f]{24})-[0-9a-f]{16}\.json")
# a write cut off by a crash (_write removes its own; result_cache.py wrote tmp*.tmp)
_TEMP = re.compile(r"(?:\..+|tmp[A-Za-z0-9_]+)\.tmp")
_STALE_TEMP_S = 3600.0
_pruned: set[str] = set()


def max_bytes() -> int:
    """The disk budget in bytes: ``$CGDISPATCH_CACHE_MAX_MB`` megabytes (1024 by default).
    ValueError when the variable is not a positive number."""
    raw = os.environ.get(ENV_MAX_MB)
    if raw is None or not raw.strip():
        return DEFAULT_MAX_MB << 20
    try:
        megabytes = float(raw)
    except ValueError:
        megabytes = float("nan")
    if not megabytes > 0 or megabytes == float("inf"):
        raise ValueError(
            f"{ENV_MAX_MB}={raw!r} is not a size: give the cache folder's budget in "
            f"megabytes, a positive number (default {DEFAULT_MAX_MB})"
        )
    return int(megabytes * (1 << 20))


def prune(folder: Path, budget: int | None = None) -> list[Path]:
    """Keep the cache ``folder`` to ``budget`` bytes (:func:`max_bytes` when None) and
    return the files removed: first the files older releases wrote and temporary files
    left by a crash over an hour ago, then, when this release's entries still exceed the
    budget, the least recently used (oldest modification time; a hit renews it) until they
    fill at most 80% of it. Files not named as cache entries are never touched."""
    budget = max_bytes() if budget is None else budget
    now = time.time()
    removed: list[Path] = []
    entries: list[tuple[float, int, Path]] = []
    try:
        listing = list(os.scandir(folder))
    except OSError:
        return removed
    for item in listing:
        try:
            if not item.is_file(follow_symlinks=False):
                continue
            info = item.stat(follow_symlinks=False)
        except OSError:
            continue
        name, path = item.name, Path(item.path)
        if _ENTRY.fullmatch(name):
            entries.append((info.st_mtime, info.st_size, path))
        elif _LEGACY.fullmatch(name) or (
            _TEMP.fullmatch(name) and now - info.st_mtime > _STALE_TEMP_S
        ):
            removed.append(path)
    total = sum(size for _, size, _ in entries)
    if total > budget:
        for _, size, path in sorted(entries, key=lambda e: (e[0], e[2].name)):
            if total <= budget * 0.8:
                break
            removed.append(path)
            total -= size
    for path in removed:
        with contextlib.suppress(OSError):  # another process may have removed it first
            path.unlink()
    return removed


def _prune_once(folder: Path) -> None:
    """:func:`prune` ``folder`` once per process (after its first write there)."""
    with _lock:
        if str(folder) in _pruned:
            return
        _pruned.add(str(folder))
    try:
        prune(folder)
    except ValueError as e:
        _say_once("max-mb", f"{e}; the cache folder is not pruned")


def cached(
    kind: str,
    key: str,
    build: Callable[[], T],
    *,
    encode: Callable[[T], bytes | None] | None = None,
    decode: Callable[[bytes], T] | None = None,
    suffix: str = "bin",
    memory: int = 16,
    memory_bytes: int | None = None,
    weigh: Callable[[T], int] | None = None,
) -> T:
    """``build()``'s result for ``key``: from memory, else from the disk folder, else built
    and kept in both. With caching off, ``build()`` every time.

    ``kind`` names the files and the memory (``cost-model``, ``steps``); ``key`` is a
    :func:`digest` of everything the result depends on (the code fingerprint is added
    here). ``encode``/``decode`` turn the result into bytes and back (memory only without
    them; ``encode`` returning None keeps that result in memory only). Memory holds up to
    ``memory`` results of this kind and, with ``weigh`` (a result's bytes), up to
    ``memory_bytes``. What memory holds is handed to every caller: give immutable results
    (frozen dataclasses, read-only arrays)."""
    _check_kind(kind)
    if not enabled():
        return build()
    key = digest(kind, key, code_fingerprint())
    folder = cache_dir()
    store = _memory(kind, memory, memory_bytes, weigh)
    found, value = store.get((str(folder), key))
    if found:
        return value
    path = None if folder is None or encode is None else folder / f"{kind}-{key[:32]}.{suffix}"
    if path is not None and decode is not None:
        payload = _read(path, key)
        if payload is not None:
            try:
                stored = decode(payload)
            except Exception as e:  # noqa: BLE001 - any damage means rebuild
                warn_user(f"cache file {path} is damaged ({e}): rebuilding it")
            else:
                store.put((str(folder), key), stored)
                return stored
    built = build()
    if path is not None and encode is not None:
        try:
            raw = encode(built)
        except (TypeError, ValueError):
            raw = None  # not storable: memory only
        if raw is not None:
            _write(path, key, raw)
    store.put((str(folder), key), built)
    return built


def _arrays_bytes(arrays: Mapping[str, Any]) -> bytes | None:
    import numpy as np

    if any(np.asarray(a).dtype == object for a in arrays.values()):
        return None  # would need pickle: memory only
    buffer = io.BytesIO()
    np.savez(buffer, **{name: np.asarray(a) for name, a in arrays.items()})
    return buffer.getvalue()


def _bytes_arrays(payload: bytes) -> dict[str, Any]:
    import numpy as np

    with np.load(io.BytesIO(payload), allow_pickle=False) as f:
        return _read_only({name: f[name] for name in f.files})


def _read_only(arrays: dict[str, Any]) -> dict[str, Any]:
    import numpy as np

    out = {}
    for name, a in arrays.items():
        a = np.asarray(a)
        a.flags.writeable = False  # shared by every caller that asks for this key
        out[name] = a
    return out


def _nbytes(arrays: dict[str, Any]) -> int:
    return sum(int(getattr(a, "nbytes", 0)) for a in arrays.values())


def cached_arrays(
    kind: str,
    key: str,
    build: Callable[[], dict[str, Any]],
    *,
    memory: int = 16,
    memory_bytes: int = 256 << 20,
) -> dict[str, Any]:
    """:func:`cached` for a dict of numpy arrays, stored as ``.npz`` read without pickles.
    The arrays are read-only (every caller gets the ones memory holds: copy to change
    them); memory holds at most ``memory_bytes`` of this kind."""
    return cached(
        kind,
        key,
        lambda: _read_only(build()),
        encode=_arrays_bytes,
        decode=_bytes_arrays,
        suffix="npz",
        memory=memory,
        memory_bytes=memory_bytes,
        weigh=_nbytes,
    )


def memo(
    maxsize: int | None = 128, *, key: Callable[..., Hashable] | None = None
) -> Callable[[Callable[..., T]], Callable[..., T]]:
    """``functools.lru_cache(maxsize)`` for a process-wide lookup, obeying the switch (off:
    every call computes). ``key`` maps the call's arguments to what is remembered by, for
    a function of a file (``key=lambda path: source_digest(path)``): an edited file is then
    read afresh."""

    def wrap(function: Callable[..., T]) -> Callable[..., T]:
        remembered = _Memory(maxsize if maxsize is not None else 1 << 62)
        by = key if key is not None else _call_key

        @functools.wraps(function)
        def call(*args: Any, **kwargs: Any) -> T:
            if not enabled():
                return function(*args, **kwargs)
            k = by(*args, **kwargs)
            found, value = remembered.get(k)
            if not found:
                value = function(*args, **kwargs)
                remembered.put(k, value)
            return value

        call.cache_clear = remembered.clear  # type: ignore[attr-defined]
        _memos.append(call)
        return call

    return wrap


def _call_key(*args: Any, **kwargs: Any) -> Hashable:
    return (args, tuple(sorted(kwargs.items()))) if kwargs else args


def local_memo(maxsize: int | None = 128) -> Callable[[Callable[..., T]], Callable[..., T]]:
    """A memo that lives and dies with one object (a step clock's prices within one
    simulation): ``functools.lru_cache(maxsize)`` when caching is on as the object is made,
    else the function itself. Checked once, not on every call of a hot loop."""
    if not enabled():
        return lambda function: function
    return functools.lru_cache(maxsize=maxsize)
