"""What a ``--trace`` value names: a synthetic preset, a shipped production trace or a file.

:func:`resolve_trace` is the one place that decides it, for the CLI (``plan``, ``tune``), the
tune dashboard, the notebooks' parameters and :func:`~cgdispatch.workload.sources.workload_trace`;
an unknown name is refused there, naming the presets and the shipped traces. It reads no file:
which table a file holds (requests or steps) is told by its content when it is read
(:func:`~cgdispatch.workload.files.load_trace`).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from .files import STDIN
from .mooncake import HASH_BLOCK_SIZE
from .prefix_presets import PREFIX_PRESETS
from .synthetic import LENGTH_PRESETS

__all__ = [
    "TraceSource",
    "resolve_trace",
    "trace_path",
    "PRODUCTION_TRACES",
    "SYNTHETIC_NAMES",
    "TRACE_NAMES",
    "trace_text",
]

_DATA = Path(__file__).resolve().parents[1] / "data"
# production traces shipped in cgdispatch/data (CC-BY 4.0, see its README.md)
PRODUCTION_TRACES = {
    "azure-conv": "azure_llm_2023_conv.csv",  # Azure LLM inference 2023, conversation
    "azure-code": "azure_llm_2023_code.csv",  # the same, code completion
}
# every trace a name gives: the synthetic presets (lengths only, then with shared prefixes),
# then the shipped production traces
SYNTHETIC_NAMES = (*LENGTH_PRESETS, *PREFIX_PRESETS)
TRACE_NAMES = (*SYNTHETIC_NAMES, *PRODUCTION_TRACES)

TraceKind = Literal["preset", "production", "file"]
# "synthetic": drawn from a preset; "jsonl": a mooncake_trace of requests (by its suffix);
# "table": a CSV of requests or steps or a --cudagraph-metrics log, told apart when read
TraceFormat = Literal["synthetic", "jsonl", "table"]


@dataclass(frozen=True)
class TraceSource:
    """One resolved traffic source; it names where requests or steps come from and holds none.

    ``kind`` says which of the three it is, ``name`` the value as given (a preset's or a
    production trace's name, or the path), ``path`` the file to read (the shipped file of a
    production trace; None for a preset; ``-`` for standard input), ``format`` how the file is
    read, and ``hash_block_size`` the prompt tokens per hash id of a mooncake_trace or a
    ``hash_ids`` column (and of a prefix preset's draw).
    """

    kind: TraceKind
    name: str
    path: Path | None
    format: TraceFormat
    hash_block_size: int = HASH_BLOCK_SIZE

    @property
    def synthetic(self) -> bool:
        """True for a preset: its requests are drawn, not read."""
        return self.kind == "preset"


def trace_text(value: str | Path | TraceSource) -> str:
    """A trace as a person typed it: a resolved source by the name it was given (a preset's
    or shipped trace's name, or the path), anything else as its text."""
    return value.name if isinstance(value, TraceSource) else str(value)


def resolve_trace(
    value: str | Path | TraceSource,
    *,
    hash_block_size: int = HASH_BLOCK_SIZE,
    what: str = "trace",
) -> TraceSource:
    """The :class:`TraceSource` that ``value`` names: a synthetic preset
    (:data:`SYNTHETIC_NAMES`), a shipped production trace (:data:`PRODUCTION_TRACES`), ``-``
    (standard input) or a path that exists (a pipe such as ``/dev/stdin`` included).

    ``what``: how the caller names the value in an error (``"--trace"``, ``"workload"``).
    Raises ValueError for anything else (a misspelt name or a missing file), naming the
    presets and the shipped traces, and for a directory. A :class:`TraceSource` is returned
    as it is.
    """
    if isinstance(value, TraceSource):
        return value
    if isinstance(value, str) and value in SYNTHETIC_NAMES:
        return TraceSource("preset", value, None, "synthetic", hash_block_size)
    if isinstance(value, str) and value in PRODUCTION_TRACES:
        return TraceSource(
            "production", value, _DATA / PRODUCTION_TRACES[value], "table", hash_block_size
        )
    if not isinstance(value, (str, Path)) or not str(value).strip():
        raise ValueError(_unknown(value, what, "is not a trace"))
    path = Path(value)
    if path != STDIN and not path.exists():
        raise ValueError(_unknown(value, what, "does not exist as a file"))
    if path.is_dir():
        raise ValueError(
            f"{_named(value, what)} is a directory, not a file: give the CSV or log inside it"
        )
    shape: TraceFormat = "jsonl" if path.suffix.lower() == ".jsonl" else "table"
    return TraceSource("file", str(value), path, shape, hash_block_size)


def trace_path(workload: str | Path) -> str | Path:
    """The file behind a shipped production trace's name (``azure-conv``), else ``workload``."""
    if isinstance(workload, str) and workload in PRODUCTION_TRACES:
        return _DATA / PRODUCTION_TRACES[workload]
    return workload


def _named(value: object, what: str) -> str:
    """``--trace x`` for a flag, ``workload='x'`` for a parameter."""
    return f"{what} {value}" if what.startswith("--") else f"{what}={str(value)!r}"


def _unknown(value: object, what: str, problem: str) -> str:
    return (
        f"{_named(value, what)} {problem} and is neither a synthetic preset "
        f"({sorted(SYNTHETIC_NAMES)}) nor a shipped production trace ({sorted(PRODUCTION_TRACES)}): "
        "give one of those names or the path of a requests or steps CSV, a mooncake_trace "
        ".jsonl or a vLLM --cudagraph-metrics log"
    )
