"""Grids of measured step times and raw kernel samples from aiconfigurator, for fitting.

:func:`reference_steps` prices a grid of step shapes (decode batches over context lengths,
single and multi-prompt prefills with and without a cached prefix, decodes mixed with one
prompt chunk) with :func:`~cgdispatch.estimate.aic_steps.measured_step_breakdown`;
:func:`op_samples` returns the raw measured rows of one kernel class under common column
names. :func:`fixture_reference_steps` and :func:`fixture_op_samples` are the small subsets
``scripts/aic_reference.py`` writes to ``tests/data`` so that tests run without the package.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import asdict, dataclass

import numpy as np
import pandas as pd

from .aic_steps import aic_model, measured_step_breakdown
from .aic_tables import aic_tables

__all__ = [
    "BREAKDOWN_COLUMNS",
    "FIXTURE_CASES",
    "OP_COLUMNS",
    "STEP_COLUMNS",
    "StepGrid",
    "fixture_op_samples",
    "fixture_reference_steps",
    "op_samples",
    "reference_steps",
    "table_provenance",
]

BREAKDOWN_COLUMNS = [
    "gemm_ms",
    "attn_prefill_ms",
    "attn_decode_ms",
    "allreduce_ms",
    "moe_ms",
    "lm_head_ms",
    "elementwise_ms",
]
# one row per step: who, its shape (per-prompt tokens; all prompts alike), its time
STEP_COLUMNS = [
    "device",
    "model",
    "tp",
    "kind",  # decode, prefill or mixed
    "num_decode",
    "decode_context",  # KV tokens each decode reads
    "num_prompts",
    "prompt_tokens",  # new tokens of each prompt chunk
    "cached_tokens",  # cached prefix ahead of each prompt chunk
    "measured_ms",
    *BREAKDOWN_COLUMNS,
]
# the shape columns of each kernel class in op_samples (plus op, device, version,
# kernel_source, measured_ms)
OP_COLUMNS = {
    "gemm": ["dtype", "m", "n", "k"],
    "context_attention": ["dtype", "batch", "seq", "heads", "kv_heads", "head_dim"],
    "generation_attention": ["dtype", "batch", "seq", "heads", "kv_heads", "head_dim"],
    "custom_allreduce": ["dtype", "elements", "tp"],
    "nccl": ["dtype", "elements", "tp"],
    "moe": ["dtype", "tokens", "hidden", "inter", "topk", "experts", "tp", "distribution"],
}
_RENAMES = {
    "gemm_dtype": "dtype",
    "kv_cache_dtype": "dtype",
    "allreduce_dtype": "dtype",
    "nccl_dtype": "dtype",
    "moe_dtype": "dtype",
    "batch_size": "batch",
    "num_heads": "heads",
    "num_key_value_heads": "kv_heads",
    "message_size": "elements",
    "num_gpus": "tp",
    "num_tokens": "tokens",
    "hidden_size": "hidden",
    "inter_size": "inter",
    "num_experts": "experts",
    "moe_tp_size": "tp",
    "latency": "measured_ms",
}


@dataclass(frozen=True)
class StepGrid:
    """The step shapes :func:`reference_steps` prices: decodes alone (each batch size at each
    context), single prompts (each size behind each cached prefix), several prompts at once
    (``multi_prompts``: prompts, tokens each) and decodes mixed with one prompt chunk
    (``mixed_decodes``: decodes, context; with each ``mixed_chunks`` size)."""

    decode_batches: Sequence[int] = (1, 2, 4, 8, 16, 32, 64, 128, 256, 512)
    decode_contexts: Sequence[int] = (128, 512, 1024, 2048, 4096, 8192, 16384)
    prompt_tokens: Sequence[int] = (64, 128, 256, 512, 1024, 2048, 4096, 8192, 16384)
    cached_tokens: Sequence[int] = (0, 2048)
    multi_prompts: Sequence[tuple[int, int]] = ((2, 512), (4, 256), (4, 1024), (8, 512), (16, 128))
    mixed_decodes: Sequence[tuple[int, int]] = ((1, 1024), (16, 1024), (64, 2048), (128, 1024))
    mixed_chunks: Sequence[int] = (256, 512, 2048)

    def shapes(self) -> Iterator[tuple[str, int, int, int, int, int]]:
        """(kind, num_decode, decode_context, num_prompts, prompt_tokens, cached_tokens) rows."""
        for batch in self.decode_batches:
            for context in self.decode_contexts:
                yield "decode", batch, context, 0, 0, 0
        for tokens in self.prompt_tokens:
            for cached in self.cached_tokens:
                yield "prefill", 0, 0, 1, tokens, cached
        for prompts, tokens in self.multi_prompts:
            yield "prefill", 0, 0, prompts, tokens, 0
        for decodes, context in self.mixed_decodes:
            for chunk in self.mixed_chunks:
                yield "mixed", decodes, context, 1, chunk, 0


def reference_steps(
    device: str,
    model: object,
    *,
    tensor_parallel_sizes: Sequence[int] = (1,),
    grid: StepGrid = StepGrid(),
    data_dir: str | None = None,
) -> pd.DataFrame:
    """The measured time and breakdown (:data:`STEP_COLUMNS`) of every step shape of
    ``grid`` for ``model`` on ``device``, at each TP size (the custom all-reduce tables hold
    2, 4 and 8 GPUs)."""
    name = aic_model(model).model
    rows = []
    shapes = list(grid.shapes())
    for tp in tensor_parallel_sizes:
        for kind, decodes, context, prompts, tokens, cached in shapes:
            chunk = (cached, tokens) if cached else tokens
            step = measured_step_breakdown(
                model,
                device,
                decode_contexts=[context] * decodes,
                prompt_chunks=[chunk] * prompts,
                tensor_parallel_size=tp,
                data_dir=data_dir,
            )
            parts = asdict(step)
            rows.append(
                [device, name, tp, kind, decodes, context, prompts, tokens, cached, step.total_ms]
                + [parts[c] for c in BREAKDOWN_COLUMNS]
            )
    return pd.DataFrame(rows, columns=STEP_COLUMNS)


def op_samples(device: str, op: str, data_dir: str | None = None) -> pd.DataFrame:
    """The raw measured rows of kernel class ``op`` (a key of :data:`OP_COLUMNS`) on
    ``device``, newest vLLM/NCCL version, under common column names: ``op``, ``device``,
    ``version``, ``kernel_source``, the op's shape columns, ``measured_ms``. Attention rows
    are full-attention ones (no sliding window); ``seq`` is the KV length (decode: ``isl +
    step``); all-reduce rows are the CUDA-graph custom all-reduce / NCCL all_reduce ones."""
    if op not in OP_COLUMNS:
        raise ValueError(f"op={op!r} is unknown: use one of {sorted(OP_COLUMNS)}")
    source, frame = aic_tables(device, data_dir).table(op)
    frame = frame.copy()
    if "window_size" in frame:
        frame = frame[frame["window_size"] == 0]
    if op == "generation_attention":
        frame["isl"] = frame["isl"] + frame["step"]
    if op in ("context_attention", "generation_attention"):
        frame = frame.rename(columns={"isl": "seq"})
    if op == "custom_allreduce":
        frame = frame[frame["backend"] == "vllm_graph"]
    if op == "nccl":
        frame = frame[frame["op_name"] == "all_reduce"]
    if op == "moe":
        frame = frame[frame["moe_ep_size"] == 1].drop(columns=["moe_ep_size"])
    frame = frame.rename(columns=_RENAMES)
    frame = frame.assign(op=op, device=device, version=f"{source.framework} {source.version}")
    return frame[
        ["op", "device", "version", "kernel_source", *OP_COLUMNS[op], "measured_ms"]
    ].reset_index(drop=True)


def table_provenance(device: str, data_dir: str | None = None) -> dict[str, str]:
    """Each table's aiconfigurator folder and version for ``device``, e.g.
    ``{"gemm": "h100_sxm gemm/vllm/0.24.0"}``."""
    tables = aic_tables(device, data_dir)
    out = {}
    for op in OP_COLUMNS:
        source = tables.table(op)[0]
        out[op] = f"{source.gpu} {source.path.parent.relative_to(tables.data_dir / source.gpu)}"
    return out


# (device, model, TP sizes) of the fixture: the lead's calibration set
FIXTURE_DEVICES = ("H100", "H200", "A100")
FIXTURE_CASES = (
    ("llama-3.1-8b", (1, 2)),
    ("llama-3.1-70b", (4, 8)),
    ("qwen3-8b", (1,)),
    ("qwen3-30b-a3b", (1,)),
)
_FIXTURE_GRID = StepGrid(
    decode_batches=(1, 8, 64, 256, 512),
    decode_contexts=(128, 1024, 4096, 16384),
    prompt_tokens=(64, 512, 2048, 8192, 16384),
    cached_tokens=(0, 2048),
    multi_prompts=((4, 256), (8, 1024)),
    mixed_decodes=((16, 1024), (128, 2048)),
    mixed_chunks=(512, 2048),
)


def fixture_reference_steps(data_dir: str | None = None) -> pd.DataFrame:
    """The step grid ``tests/data/aic_reference_steps.csv`` holds (:data:`FIXTURE_CASES`
    on H100, H200 and A100, on a thinner grid than :func:`reference_steps`' default)."""
    frames = [
        reference_steps(
            device, model, tensor_parallel_sizes=tps, grid=_FIXTURE_GRID, data_dir=data_dir
        )
        for device in FIXTURE_DEVICES
        for model, tps in FIXTURE_CASES
    ]
    return pd.concat(frames, ignore_index=True)


def fixture_op_samples(
    per_op: int = 200, seed: int = 0, data_dir: str | None = None
) -> pd.DataFrame:
    """Up to ``per_op`` rows of each kernel class per device, drawn at random (``seed``),
    bf16 only: the subset ``tests/data/aic_op_samples.csv`` holds."""
    rng = np.random.default_rng(seed)
    frames = []
    for device in FIXTURE_DEVICES:
        for op in OP_COLUMNS:
            rows = op_samples(device, op, data_dir)
            rows = rows[rows["dtype"].isin(["bfloat16", "half"])]
            if len(rows) > per_op:
                rows = rows.iloc[np.sort(rng.choice(len(rows), per_op, replace=False))]
            frames.append(rows)
    shapes = list(dict.fromkeys(c for columns in OP_COLUMNS.values() for c in columns))
    return pd.concat(frames, ignore_index=True)[
        ["op", "device", "version", "kernel_source", *shapes, "measured_ms"]
    ]
