"""Kernel times measured by NVIDIA's aiconfigurator, read from its package data.

`aiconfigurator-core <https://pypi.org/project/aiconfigurator-core/>`_ 0.12.0 (NVIDIA,
Apache-2.0) ships per-kernel times measured on the GPU inside vLLM, as parquet tables under
``aiconfigurator_core/systems/data/<gpu>/<op>/<framework>/<version>/``;
:mod:`~cgdispatch.estimate.aic_data` finds them and reads the newest version folder of each.
This module interpolates each table with :class:`~cgdispatch.estimate.log_grid.LogGrid`:
log-log multilinear inside the grid; outside it (and in its holes) proportional growth in
the sizes work grows with (GEMM m, n, k; batch; heads; message size; MoE tokens), the last
measured segment's log-log slope in sequence length; never NaN.
:class:`AicTables` answers per-kernel questions; ``aic_steps`` sums them into a step.

Columns (all tables: ``framework``, ``version``, ``device`` (the GPU's CUDA name), ``op_name``,
``kernel_source`` (the kernel or vLLM class timed) and ``latency``: the kernel's time in
milliseconds):

- ``gemm/vllm/*/gemm_perf.parquet``: ``m`` (tokens), ``n`` (output features), ``k`` (input
  features) of ``[m, k] @ [k, n]``; ``gemm_dtype`` (``bfloat16``; ``fp8`` per-tensor and
  ``fp8_block`` on Hopper). Several kernels timing one fp8 shape: the fastest is taken.
- ``attention/vllm/*/context_attention_perf.parquet``: prefill attention of ``batch_size``
  prompts of ``isl`` tokens each, with no cached prefix (``step`` is 0 in every row);
  ``num_heads`` query and ``num_key_value_heads`` KV heads per GPU, ``head_dim``,
  ``attn_dtype``/``kv_cache_dtype``, ``beam_width`` (1), ``window_size`` (0: full attention;
  absent on A100). ``kernel_source`` names the backend (FA3 on Hopper, FA2 on A100); where
  a table has several, the one with most rows for the shape is used.
- ``attention/vllm/*/generation_attention_perf.parquet``: one decode token for each of
  ``batch_size`` requests whose KV cache holds ``isl + step`` tokens (``isl`` is 1, ``step``
  is ``2**j - 1``: KV lengths 2 .. 131072); other columns as above.
- ``comm/vllm/*/custom_allreduce_perf.parquet``: vLLM's custom all-reduce of
  ``message_size`` **elements** of ``allreduce_dtype`` (bf16) across ``num_gpus``;
  ``backend`` ``vllm_graph`` (inside a CUDA graph, used here) or ``vllm_eager``. Elements,
  not bytes: aiconfigurator's Llama model queries it with the hidden size per token
  (``sdk/models/llama.py``), and 2**28 elements at 1.7 ms on 2 H100s is 315 GB/s of bus
  bandwidth, which bytes would halve below what NVLink reaches.
- ``comm/nccl/*/nccl_perf.parquet``: NCCL collectives (``op_name`` all_reduce, all_gather,
  reduce_scatter, alltoall) of ``message_size`` elements of ``nccl_dtype`` (half) across
  ``num_gpus``.
- ``moe/vllm/*/moe_perf.parquet``: a fused MoE layer on ``num_tokens`` tokens with
  ``hidden_size``, expert ``inter_size``, ``topk`` of ``num_experts``, sharded
  ``moe_tp_size`` x ``moe_ep_size``, ``moe_dtype``, and a routing ``distribution``
  (``balanced``, ``power_law_1.01``, ``power_law_1.2``: how unevenly tokens pick experts).

``collection_meta.yaml`` beside each table records the framework and version it was timed
with (vLLM 0.24.0 on H100/H200, 0.14.0 on A100 for these tables).
"""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from ..core import cache
from .aic_data import TableSource, aic_data_dir, gpu_folder, load_table
from .log_grid import LogGrid

__all__ = ["AicTables", "aic_tables"]


def _pick(frame: pd.DataFrame, what: str, **match: object) -> pd.DataFrame:
    """Rows of ``frame`` equal to ``match`` (columns the table lacks are skipped), or a
    ValueError naming what is measured instead."""
    rows = frame
    for column, value in match.items():
        if column not in rows.columns:
            continue
        kept = rows[rows[column] == value]
        if kept.empty:
            have = sorted(rows[column].unique().tolist())
            raise ValueError(f"{what}: {column}={value!r} is not measured; the table has {have}")
        rows = kept
    return rows


def _densest(rows: pd.DataFrame) -> pd.DataFrame:
    counts = rows["kernel_source"].value_counts()
    return rows[rows["kernel_source"] == counts.index[0]]


class AicTables:
    """Interpolated aiconfigurator kernel times (ms) of one device; grids built on first use.

    It prices one kernel per call and sums nothing; see ``aic_steps.measured_step_breakdown``."""

    def __init__(self, device: str, data_dir: str | Path | None = None) -> None:
        gpu_folder(device)
        self.device = device
        self.data_dir = aic_data_dir(data_dir)
        self._grids: dict[tuple, LogGrid] = {}

    def table(self, name: str) -> tuple[TableSource, pd.DataFrame]:
        return load_table(self.device, name, self.data_dir)

    def _grid(self, key: tuple, build) -> LogGrid:
        if key not in self._grids:
            self._grids[key] = build()
        return self._grids[key]

    def gemm_ms(self, m: int, n: int, k: int, dtype: str = "bfloat16") -> float:
        """``[m, k] @ [k, n]`` in ``dtype`` (bfloat16, fp8, fp8_block where measured)."""

        def build() -> LogGrid:
            rows = _pick(self.table("gemm")[1], f"{self.device} GEMM", gemm_dtype=dtype)
            fastest = rows.groupby(["m", "n", "k"], as_index=False)["latency"].min()
            # above the grid, time grows in proportion to each dimension (more tiles / a
            # longer reduction), not with the last segment's slope, which is noisy
            return LogGrid.from_frame(fastest, ("m", "n", "k"), "latency", (1.0, 1.0, 1.0))

        return self._grid(("gemm", dtype), build)(m, n, k)

    def _attention_grid(self, table: str, heads_kv: int, head_dim: int, kv_dtype: str) -> LogGrid:
        def build() -> LogGrid:
            what = f"{self.device} {table}"
            rows = _pick(
                self.table(table)[1],
                what,
                head_dim=head_dim,
                num_key_value_heads=heads_kv,
                kv_cache_dtype=kv_dtype,
                window_size=0,
                beam_width=1,
            )
            rows = _densest(rows).assign(
                seq=lambda f: f["isl"] + (f["step"] if table.startswith("gen") else 0)
            )
            # more requests or heads than measured: proportional (independent work); longer
            # sequences: the last measured segment's slope (about 1 decode, 2 prefill)
            return LogGrid.from_frame(
                rows, ("batch_size", "seq", "num_heads"), "latency", (1.0, None, 1.0)
            )

        return self._grid((table, heads_kv, head_dim, kv_dtype), build)

    def context_attention_ms(
        self,
        batch: int,
        isl: float,
        heads: int,
        kv_heads: int,
        head_dim: int,
        kv_dtype: str = "bfloat16",
    ) -> float:
        """Prefill attention of ``batch`` prompts of ``isl`` new tokens, no cached prefix;
        ``heads``/``kv_heads`` per GPU (interpolated in ``batch``, ``isl`` and ``heads``;
        ``kv_heads`` and ``head_dim`` must be measured ones)."""
        return self._attention_grid("context_attention", kv_heads, head_dim, kv_dtype)(
            batch, isl, heads
        )

    def generation_attention_ms(
        self,
        batch: int,
        kv_len: float,
        heads: int,
        kv_heads: int,
        head_dim: int,
        kv_dtype: str = "bfloat16",
    ) -> float:
        """One decode token for each of ``batch`` requests holding ``kv_len`` KV tokens."""
        return self._attention_grid("generation_attention", kv_heads, head_dim, kv_dtype)(
            batch, kv_len, heads
        )

    def allreduce_ms(self, elements: float, tp: int, kind: str = "custom") -> float:
        """All-reduce of ``elements`` bf16 values across ``tp`` GPUs: vLLM's custom
        all-reduce inside a CUDA graph (``kind="custom"``) or NCCL's (``"nccl"``)."""
        if tp == 1:
            return 0.0
        if kind not in ("custom", "nccl"):
            raise ValueError(f"kind={kind!r} is invalid: use 'custom' or 'nccl'")

        def build() -> LogGrid:
            if kind == "custom":
                rows = _pick(
                    self.table("custom_allreduce")[1],
                    "custom all-reduce",
                    backend="vllm_graph",
                    num_gpus=tp,
                )
            else:
                rows = _pick(
                    self.table("nccl")[1],
                    "NCCL",
                    op_name="all_reduce",
                    nccl_dtype="half",
                    num_gpus=tp,
                )
            return LogGrid.from_frame(rows, ("message_size",), "latency", (1.0,))

        return self._grid(("allreduce", kind, tp), build)(elements)

    def moe_ms(
        self,
        tokens: int,
        hidden: int,
        inter: int,
        topk: int,
        experts: int,
        tp: int = 1,
        dtype: str = "bfloat16",
        distribution: str = "power_law_1.2",
    ) -> float:
        """A fused MoE layer (router excluded) on ``tokens`` tokens, experts sharded ``tp``
        ways by their inner dimension (vLLM's default without expert parallelism).
        ``distribution``: the routing skew timed; aiconfigurator's MoE models default to a
        power law of exponent 1.2 (``sdk/models/moe.py``), the one measured on every GPU."""

        def build() -> LogGrid:
            rows = _pick(
                self.table("moe")[1],
                f"{self.device} MoE",
                moe_dtype=dtype,
                hidden_size=hidden,
                inter_size=inter,
                topk=topk,
                num_experts=experts,
                moe_tp_size=tp,
                moe_ep_size=1,
                distribution=distribution,
            )
            rows = _densest(rows)
            return LogGrid.from_frame(rows, ("num_tokens",), "latency", (1.0,))

        return self._grid(("moe", hidden, inter, topk, experts, tp, dtype, distribution), build)(
            tokens
        )


@cache.memo(maxsize=16)
def aic_tables(device: str, data_dir: str | None = None) -> AicTables:
    """The (cached) :class:`AicTables` of ``device``."""
    return AicTables(device, data_dir)
