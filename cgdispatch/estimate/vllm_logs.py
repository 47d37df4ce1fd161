"""Reading a vLLM server's start-up log: what it captured, what that cost, what was left.

The one parser of vLLM start-up logs in cgdispatch: ``scripts/extract_vllm_startups.py``
(which built ``cgdispatch/data/reference_vllm_startups.csv``) and ``python -m cgdispatch
calibrate`` both call :func:`parse_startup_log`. It reads the lines vLLM's V1 engine prints
from 0.10 on (checked on 0.10.2 and 0.19.0 logs, ``tests/data/vllm_logs/``):

- ``non-default args: {...}`` and ``Initializing a V1 LLM engine (vX) with config: ...``:
  model, version, TP/PP, dtype, quantization, KV dtype, max_model_len, the compilation
  config (``cudagraph_mode`` and ``cudagraph_capture_sizes``, as a Python repr in 0.19 or
  as JSON in 0.10-0.11), ``max_num_seqs`` / ``max_num_batched_tokens``;
- ``Model loading took X GiB (memory) and T seconds``;
- ``Profiling CUDA graph memory: PIECEWISE=n (largest=s), FULL=...`` and the capture
  progress bars (``Capturing CUDA graphs (decode, FULL): 100%| 51/51``): graphs per mode;
- ``Graph capturing finished in N secs, took X GiB`` and, from 0.19,
  ``CUDA graph pool memory: X GiB (actual), Y GiB (estimated)``;
- ``Available KV cache memory: X GiB``, ``GPU KV cache size: N tokens``, the profile run's
  ``torch peak memory increase`` / ``non-torch forward increase memory``,
  ``num_gpu_blocks is: N`` and the device's memory (``total_memory=``, ``Free memory on
  device (free/total GiB)``).

Multi-rank runs log one line per worker: the log keeps the largest graph pool and capture
time and the smallest KV memory (the rank that bounds the KV cache). Nothing here models
anything: every field is what the log printed, or None.
"""

from __future__ import annotations

import re
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

__all__ = ["VllmStartupLog", "parse_startup_log", "read_startup_log", "gpu_preset"]

_NUM = r"([0-9][0-9.,]*)"
_ANSI = re.compile(r"\x1b\[[0-9;]*m")
# vLLM's CUDAGraphMode values as its JSON config prints them (vllm/config/compilation.py)
_MODE_CODES = {"0": "NONE", "1": "PIECEWISE", "2": "FULL", "[2, 0]": "FULL_DECODE_ONLY",
               "[2,0]": "FULL_DECODE_ONLY", "[2, 1]": "FULL_AND_PIECEWISE",
               "[2,1]": "FULL_AND_PIECEWISE"}  # fmt: skip
# a GPU name as nvidia-smi, torch or a fused-MoE config file name prints it -> device preset
# (cgdispatch/data/device_specs.csv); more specific names first
_GPU_NAMES = (
    (r"H200", "H200"), (r"H100[ _-]*PCIe", "H100-PCIe"), (r"H100", "H100"),
    (r"A100[^\n]{0,20}?40\s?GB", "A100-40GB"), (r"A100", "A100-80GB"), (r"B200", "B200"),
    (r"L40S", "L40S"), (r"A10G", "A10G"), (r"\bL4\b", "L4"), (r"RTX[ _]?4090", "RTX-4090"),
    (r"RTX[ _]?3090", "RTX-3090"), (r"RTX[ _]?A5000", "RTX-A5000"), (r"MI300X", "MI300X"),
    (r"A800", "A800"), (r"H800", "H800"), (r"(?<![A-Za-z0-9])H20(?![0-9])", "H20"),
    (r"(?<![A-Za-z0-9])L20(?![0-9])", "L20"), (r"(?<![A-Za-z0-9])L40(?![0-9S])", "L40"),
    (r"RTX[ _]?6000[ _]?Ada", "RTX-6000-Ada"), (r"RTX[ _]?A6000", "RTX-A6000"),
    (r"(?<![A-Za-z0-9])A40(?![0-9])", "A40"), (r"V100", "V100"),
)  # fmt: skip


@dataclass(frozen=True)
class VllmStartupLog:
    """What one vLLM start-up log printed (None where it printed nothing); GiB, seconds."""

    model: str | None  # as served: a Hugging Face id or a local path
    vllm_version: str | None
    gpu_name: str | None  # as printed (nvidia-smi, a MoE config name); vLLM rarely prints it
    device: str | None  # the device preset that name maps to (gpu_preset)
    tensor_parallel_size: int
    pipeline_parallel_size: int
    dtype: str | None
    quantization: str | None
    kv_cache_dtype: str | None
    max_model_len: int | None
    gpu_memory_utilization: float  # vLLM's default 0.9 unless the args name another
    cudagraph_mode: str | None
    capture_sizes: tuple[int, ...]
    max_num_seqs: int | None
    max_num_batched_tokens: int | None
    piecewise_graphs: int  # keys captured per mode (0 when none or not printed)
    piecewise_largest: int
    full_graphs: int
    full_largest: int
    weights_gib: float | None  # "Model loading took X GiB"
    load_s: float | None
    capture_s: float | None  # "Graph capturing finished in N secs"
    graph_memory_gib: (
        float | None
    )  # the pool: "CUDA graph pool memory ... (actual)", else "took X GiB"
    graph_memory_estimated_gib: float | None  # vLLM's own estimate (0.19 and later)
    kv_cache_gib: float | None
    kv_cache_tokens: int | None
    compile_s: float | None
    total_memory_gib: float | None
    activation_peak_gib: float | None  # the profile run's torch peak increase
    non_torch_increase_gib: float | None
    num_gpu_blocks: int | None

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)

    def reference_row(self, run: str) -> dict[str, Any]:
        """The columns of ``cgdispatch/data/reference_vllm_startups.csv`` for this log as
        run ``run`` (what :mod:`~cgdispatch.estimate.startup_data` and
        :func:`~cgdispatch.estimate.pool_factors.predict_run` read)."""
        sizes = " ".join(str(s) for s in self.capture_sizes)
        return {
            "run": run,
            "model": self.model,
            "device": self.device,
            "vllm_version": self.vllm_version,
            "tensor_parallel_size": self.tensor_parallel_size,
            "pipeline_parallel_size": self.pipeline_parallel_size,
            "dtype": self.dtype,
            "quantization": self.quantization,
            "kv_cache_dtype": self.kv_cache_dtype,
            "max_model_len": self.max_model_len,
            "gpu_memory_utilization": self.gpu_memory_utilization,
            "cudagraph_mode": self.cudagraph_mode,
            "piecewise_graphs": self.piecewise_graphs,
            "piecewise_largest": self.piecewise_largest,
            "full_graphs": self.full_graphs,
            "full_largest": self.full_largest,
            "cudagraph_capture_sizes": sizes,
            "capture_s": self.capture_s,
            "graph_memory_gib": self.graph_memory_gib,
            "graph_memory_gib_vllm_estimate": self.graph_memory_estimated_gib,
            "weights_gib": self.weights_gib,
            "kv_cache_gib": self.kv_cache_gib,
            "kv_cache_tokens": self.kv_cache_tokens,
            "compile_s": self.compile_s,
            "total_memory_gib": self.total_memory_gib,
            "activation_peak_gib": self.activation_peak_gib,
            "non_torch_increase_gib": self.non_torch_increase_gib,
            "max_num_batched_tokens": self.max_num_batched_tokens,
            "max_num_seqs": self.max_num_seqs,
            "num_gpu_blocks": self.num_gpu_blocks,
        }


def _first(pattern: str, text: str) -> str | None:
    match = re.search(pattern, text)
    return match.group(1) if match else None


def _all(pattern: str, text: str) -> list[float]:
    return [float(m.replace(",", "")) for m in re.findall(pattern, text)]


def _num(pattern: str, text: str) -> float | None:
    value = _first(pattern, text)
    return float(value.replace(",", "").rstrip(".")) if value is not None else None


def _int(value: float | None) -> int | None:
    return None if value is None else int(value)


def gpu_preset(text: str) -> tuple[str | None, str | None]:
    """(the GPU name printed in ``text``, the device preset it maps to): the first
    ``NVIDIA ...``/``AMD ...``/``Tesla ...`` (torch's V100) name that maps to a preset, else the first printed with
    None, else (None, None) (most vLLM logs print none)."""
    names = [
        m.group(0).strip()
        for m in re.finditer(
            r"(?:NVIDIA|AMD|Tesla)[ _](?:GeForce[ _])?(?:Instinct[ _])?[A-Za-z0-9][A-Za-z0-9 _-]{1,30}",
            text,
        )
    ]
    for name in names:
        for pattern, preset in _GPU_NAMES:
            if re.search(pattern, name):
                return name, preset
    return (names[0], None) if names else (None, None)


def _graphs(text: str) -> tuple[int, int, int, int]:
    """(piecewise keys, largest, full keys, largest) from the profiling line, else the
    capture progress bars (sizes then unknown: 0)."""
    profile = re.search(
        r"Profiling CUDA graph memory: (?:PIECEWISE=(\d+) \(largest=(\d+)\))?(?:, )?"
        r"(?:FULL=(\d+) \(largest=(\d+)\))?",
        text,
    )
    if profile and any(profile.groups()):
        return tuple(int(g) if g else 0 for g in profile.groups())  # type: ignore[return-value]
    piecewise = _first(
        r"Capturing CUDA graphs \([^)]*PIECEWISE\):\s*100%[^|]*\|[^|]*\|\s*(\d+)/", text
    )
    full = _first(r"Capturing CUDA graphs \([^)]*FULL\):\s*100%[^|]*\|[^|]*\|\s*(\d+)/", text)
    return int(piecewise or 0), 0, int(full or 0), 0


def parse_startup_log(text: str) -> VllmStartupLog:
    """The fields of one vLLM start-up log (see the module docstring for the lines read).
    ValueError when ``text`` holds none of them (not a vLLM start-up log)."""
    text = _ANSI.sub("", text)
    lines = text.splitlines()
    config = next((ln for ln in lines if "Initializing a V1 LLM engine" in ln), "")
    args = next((ln for ln in lines if "non-default args:" in ln), "")
    if not config and not args and "Graph capturing finished" not in text:
        raise ValueError(
            "not a vLLM start-up log: it has no 'non-default args', 'Initializing a V1 LLM "
            "engine' or 'Graph capturing finished' line; give the server's log from its start"
        )
    version = _first(r"Initializing a V1 LLM engine \(v([0-9][^)]*)\)", text) or _first(
        r"vLLM API server version ([0-9][^\s]*)", text
    )
    mode = _first(r"'cudagraph_mode': <CUDAGraphMode\.(\w+)", config)
    if mode is None:
        code = _first(r'"cudagraph_mode":\s*(\d|\[\d,\s*\d\])', config)
        mode = _MODE_CODES.get(code) if code else None
    sizes = _first(r"""['"]cudagraph_capture_sizes['"]:\s*\[([0-9, ]*)\]""", config)
    capture_sizes = tuple(sorted(int(s) for s in sizes.replace(",", " ").split())) if sizes else ()
    pools = re.findall(
        rf"CUDA graph pool memory: {_NUM} GiB \(actual\), {_NUM} GiB \(estimated\)", text
    )
    took_gib = _all(rf"Graph capturing finished in [0-9.]+ secs?, took {_NUM} GiB", text)
    capture = _all(rf"Graph capturing finished in {_NUM} secs?", text)
    kv_gib = _all(rf"Available KV cache memory: {_NUM} GiB", text)
    # per rank: keep the rank with the most non-KV memory (the one that bounds the KV cache)
    ranks = re.findall(
        rf"Total non KV cache memory: {_NUM}GiB; torch peak memory increase: {_NUM}GiB; "
        rf"non-torch forward increase memory: {_NUM}GiB",
        text,
    )
    binding = max(ranks, key=lambda r: float(r[0])) if ranks else None
    utilization = _first(r"'gpu_memory_utilization': ([0-9.]+)", args)
    seqs = _num(r"'max_num_seqs': (\d+)", args) or _num(r"Defaulting max_num_seqs to (\d+)", text)
    gpu_name, device = gpu_preset(text)
    piecewise, piecewise_largest, full, full_largest = _graphs(text)
    return VllmStartupLog(
        model=_first(r"'model': '([^']+)'", args) or _first(r"model='([^']+)'", config),
        vllm_version=version,
        gpu_name=gpu_name,
        device=device,
        tensor_parallel_size=_int(_num(r"tensor_parallel_size=(\d+)", config)) or 1,
        pipeline_parallel_size=_int(_num(r"pipeline_parallel_size=(\d+)", config)) or 1,
        dtype=_first(r"dtype=torch\.(\w+)", config),
        quantization=_first(r"quantization=(\w+)", config),
        kv_cache_dtype=_first(r"kv_cache_dtype=(\w+)", config),
        max_model_len=_int(_num(r"max_seq_len=(\d+)", config)),
        gpu_memory_utilization=float(utilization) if utilization else 0.9,  # vLLM's default
        cudagraph_mode=mode,
        capture_sizes=capture_sizes,
        max_num_seqs=_int(seqs),
        max_num_batched_tokens=_int(_num(r"max_num_batched_tokens=(\d+)", text)),
        piecewise_graphs=piecewise,
        piecewise_largest=piecewise_largest,
        full_graphs=full,
        full_largest=full_largest,
        weights_gib=_num(rf"Model loading took {_NUM} GiB", text),
        load_s=_num(rf"Model loading took [0-9.]+ GiB(?: memory)? and {_NUM} s", text),
        capture_s=max(capture) if capture else None,
        graph_memory_gib=max(float(a) for a, _ in pools)
        if pools
        else (max(took_gib) if took_gib else None),
        graph_memory_estimated_gib=max(float(e) for _, e in pools) if pools else None,
        kv_cache_gib=min(kv_gib) if kv_gib else None,
        kv_cache_tokens=_int(_num(rf"GPU KV cache size: {_NUM} tokens", text)),
        compile_s=_num(rf"torch\.compile t(?:ook|akes) {_NUM} s in total", text),
        total_memory_gib=_num(r"total_memory=([0-9.]+)GiB", text)
        or _num(r"Free memory on device \([0-9.]+/([0-9.]+) GiB\)", text),
        activation_peak_gib=float(binding[1]) if binding else None,
        non_torch_increase_gib=float(binding[2]) if binding else None,
        num_gpu_blocks=_int(_num(r"num_gpu_blocks is: (\d+)", text)),
    )


def read_startup_log(path: str | Path) -> VllmStartupLog:
    """:func:`parse_startup_log` of the file at ``path`` (UTF-8, undecodable bytes
    replaced)."""
    return parse_startup_log(Path(path).read_text(encoding="utf-8", errors="replace"))
