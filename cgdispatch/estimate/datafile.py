"""Dataclasses of numbers and arrays as a JSON file that cannot run code when read.

The caches of cgdispatch (the device cost model, start-up estimates, simulated traces)
used to be pickles: a damaged file failed every run until deleted by hand, and a crafted
one ran code on load. :func:`dump_data` writes plain JSON (numbers, strings, lists) with a
SHA-256 of its payload; :func:`load_data` checks the digest, and rebuilds dataclasses only
of the classes its caller names, from their fields, so a file can at worst fail to load.

Encoded: None, bool, int, float (NaN and infinities too), str, list, tuple, dict (any
keys of those types), numpy arrays of bool, integer or float dtype, numpy scalars, and
dataclasses whose class is in ``classes``.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import tempfile
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import numpy as np

__all__ = ["dump_data", "load_data", "data_bytes", "data_from_bytes", "DataFileError", "FORMAT"]

FORMAT = "cgdispatch-data/1"
_ARRAY_KINDS = "biuf"  # bool, signed, unsigned, float


class DataFileError(ValueError):
    """A data file that is not one :func:`dump_data` wrote, or was changed since."""


def _name(cls: type) -> str:
    return f"{cls.__module__}:{cls.__qualname__}"


def _encode(value: Any) -> Any:
    if value is None or isinstance(value, (bool, str)):
        return value
    if isinstance(value, (int, float)):
        return value
    if isinstance(value, np.generic):
        return _encode(value.item())
    if isinstance(value, np.ndarray):
        if value.dtype.kind not in _ARRAY_KINDS:
            raise TypeError(f"cannot store an array of dtype {value.dtype}")
        return {"ndarray": value.dtype.str, "shape": list(value.shape),
                "data": value.ravel().tolist()}  # fmt: skip
    if isinstance(value, (list, tuple)):
        items = [_encode(v) for v in value]
        return {"tuple": items} if isinstance(value, tuple) else items
    if isinstance(value, dict):
        return {"dict": [[_encode(k), _encode(v)] for k, v in value.items()]}
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        fields = {f.name: _encode(getattr(value, f.name)) for f in dataclasses.fields(value)}
        return {"dataclass": _name(type(value)), "fields": fields}
    raise TypeError(f"cannot store a {type(value).__name__}")


def _decode(value: Any, classes: dict[str, type]) -> Any:
    if isinstance(value, list):
        return [_decode(v, classes) for v in value]
    if not isinstance(value, dict):
        return value
    if "ndarray" in value:
        dtype = np.dtype(value["ndarray"])
        if dtype.kind not in _ARRAY_KINDS:
            raise DataFileError(f"array of dtype {dtype} is not allowed")
        return np.array(value["data"], dtype=dtype).reshape(value["shape"])
    if "tuple" in value:
        return tuple(_decode(v, classes) for v in value["tuple"])
    if "dict" in value:
        return {_decode(k, classes): _decode(v, classes) for k, v in value["dict"]}
    if "dataclass" in value:
        cls = classes.get(value["dataclass"])
        if cls is None:
            raise DataFileError(f"class {value['dataclass']!r} is not one this file may hold")
        fields = {k: _decode(v, classes) for k, v in value["fields"].items()}
        init = {f.name for f in dataclasses.fields(cls) if f.init}
        made = cls(**{k: v for k, v in fields.items() if k in init})
        for k, v in fields.items():  # fields computed after __init__ must agree with the file
            if k not in init and not _same(getattr(made, k), v):
                raise DataFileError(f"{cls.__name__}.{k} does not match its stored value")
        return made
    raise DataFileError(f"unknown entry with keys {sorted(value)}")


def _same(a: Any, b: Any) -> bool:
    try:
        return bool(np.array_equal(a, b, equal_nan=True))
    except TypeError:
        return bool(a == b)


def _all_dataclasses(classes: Iterable[type]) -> dict[str, type]:
    """``classes`` and the dataclasses their fields' values may be, by name."""
    return {_name(cls): cls for cls in classes}


def data_bytes(value: Any, *, kind: str) -> bytes:
    """``value`` as the bytes of a data file (JSON with a digest); ``kind`` names what it
    holds, and :func:`data_from_bytes` refuses bytes of another kind."""
    payload = json.dumps(_encode(value), separators=(",", ":"))
    digest = hashlib.sha256(payload.encode()).hexdigest()
    text = json.dumps({"format": FORMAT, "kind": kind, "sha256": digest})
    return (text + "\n" + payload + "\n").encode("utf-8")


def dump_data(value: Any, path: Path, *, kind: str) -> None:
    """``value`` as ``path`` (:func:`data_bytes`), replaced atomically; no temporary file
    is left behind on an error."""
    raw = data_bytes(value, kind=kind)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(raw)
        os.replace(tmp, path)  # whole file or none: a concurrent reader never sees half
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def load_data(path: Path, *, kind: str, classes: Iterable[type]) -> Any:
    """What :func:`dump_data` stored at ``path``, its dataclasses rebuilt only from
    ``classes``. Raises FileNotFoundError when there is no file and DataFileError when it is
    damaged, of another kind, or holds anything else."""
    return data_from_bytes(path.read_bytes(), kind=kind, classes=classes)


def data_from_bytes(raw: bytes, *, kind: str, classes: Iterable[type]) -> Any:
    """What :func:`data_bytes` made, its dataclasses rebuilt only from ``classes``; raises
    DataFileError for bytes that are damaged, of another kind, or hold anything else."""
    try:
        head, _, payload = raw.decode("utf-8").partition("\n")
        meta = json.loads(head)
        if not isinstance(meta, dict) or meta.get("format") != FORMAT:
            raise DataFileError(f"not a {FORMAT} file")
        if meta.get("kind") != kind:
            raise DataFileError(f"holds {meta.get('kind')!r}, not {kind!r}")
        payload = payload.rstrip("\n")
        if hashlib.sha256(payload.encode()).hexdigest() != meta.get("sha256"):
            raise DataFileError("its digest does not match its contents (truncated or edited)")
        return _decode(json.loads(payload), _all_dataclasses(classes))
    except DataFileError:
        raise
    except (ValueError, TypeError, KeyError, AttributeError) as e:
        raise DataFileError(f"cannot be read back ({type(e).__name__}: {e})") from None
