"""Fit the kernel-time formulas of ``cgdispatch.estimate.kernel_model`` on the per-kernel
measurements NVIDIA ships in ``aiconfigurator-core`` 0.12.0 (Apache-2.0), and write the
coefficients to ``cgdispatch/data/kernel_model.json`` (the tables themselves are not shipped).

    pip download --no-deps aiconfigurator-core==0.12.0 -d /tmp/aic && unzip -q /tmp/aic/*.whl -d /tmp/aic/x
    python scripts/fit_kernel_model.py --data /tmp/aic/x/aiconfigurator_core/systems/data

(or ``pip install cgdispatch[aic]`` and no ``--data``). Hopper is fitted on the H100 SXM
tables, Ampere on the A100 SXM ones; the H200 SXM tables are never fitted: the script prints
each op class's error there (held out) beside the in-sample error. Needs scipy (a dependency
of aiconfigurator-core).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numpy as np
import pandas as pd
from scipy.optimize import least_squares

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from cgdispatch.estimate.aic_data import aic_data_dir  # noqa: E402
from cgdispatch.estimate.devices import DEVICE_PRESETS  # noqa: E402
from cgdispatch.estimate.kernel_model import (  # noqa: E402
    KernelCoefficients,
    allreduce_us,
    decode_attention_us,
    gemm_us,
    prefill_attention_us,
)

# architecture -> (GPU folder, vLLM release of its tables, our preset)
FITTED = {"Hopper": ("h100_sxm", "0.24.0", "H100"), "Ampere": ("a100_sxm", "0.14.0", "A100")}
HELD_OUT = {"H200": ("h200_sxm", "0.24.0", "Hopper")}
# split-KV decode (FlashAttention): the kernel's constants, not fitted. SMs and L2 from the
# H100 SXM and A100 datasheets (H200 is the same die); CTAs per SM and the 4-tile floor of
# a split from flash-attention's FA3 (hopper/heuristics.h) and FA2 (csrc/flash_attn/
# flash_api.cpp: the heuristic counts 2 CTAs per SM); 128 KV tokens per tile (hdim 128)
SPLIT_KV = {
    "Hopper": {
        "sms": 132,
        "ctas_per_sm": 1,
        "block_n": 128,
        "min_split_blocks": 4,
        "l2_bytes": 50 * 2**20,
    },
    "Ampere": {
        "sms": 108,
        "ctas_per_sm": 2,
        "block_n": 128,
        "min_split_blocks": 0,
        "l2_bytes": 40 * 2**20,
    },
}
DECODE_FORM = {"Hopper": "split_kv", "Ampere": "linear"}
OUT = ROOT / "cgdispatch" / "data" / "kernel_model.json"
WEIGHT_US = 500.0  # kernels shorter than this weigh sqrt(t / WEIGHT_US) in the fit


def load(root: Path, folder: str, version: str) -> dict[str, pd.DataFrame]:
    base = root / folder
    gemm = pd.read_parquet(base / "gemm/vllm" / version / "gemm_perf.parquet")
    gemm = gemm[(gemm.n >= 256) & (gemm.k >= 256)]
    tables = {"gemm": gemm[gemm.gemm_dtype == "bfloat16"]}
    fp8 = gemm[
        (gemm.gemm_dtype == "fp8") & (gemm.kernel_source == "CutlassFP8ScaledMMLinearKernel")
    ]
    if len(fp8):  # per-tensor scaled W8A8 (vLLM's fp8 checkpoints), Hopper only
        tables["gemm_fp8"] = fp8
    for kind in ("context", "generation"):
        att = pd.read_parquet(base / "attention/vllm" / version / f"{kind}_attention_perf.parquet")
        keep = (att.kv_cache_dtype == "bfloat16") & att.head_dim.isin([64, 128])
        if "window_size" in att:
            keep &= att.window_size == 0
        if "vllm_flash_attn_fa3" in set(att.kernel_source):
            keep &= att.kernel_source == "vllm_flash_attn_fa3"
        tables[kind] = att[keep]
    comm = pd.read_parquet(base / "comm/vllm" / version / "custom_allreduce_perf.parquet")
    # message_size counts bf16 elements (aiconfigurator's CustomAllReduce of tokens x hidden)
    tables["allreduce"] = comm[(comm.backend == "vllm_graph") & (comm.message_size <= 1 << 26)]
    return tables


def default_coeffs(arch: str) -> dict[str, dict[str, float]]:
    if DECODE_FORM[arch] == "split_kv":
        decode = {"eb": 0.8, "t0_us": 10.0, "cta_us": 1.0, "l2_factor": 0.8, "combine_us": 3.0}
        decode.update(SPLIT_KV[arch])
    else:
        decode = {"eb": 0.8, "t0_us": 10.0, "per_head_req_us": 0.1, "per_req_us": 0.1}
    return {
        "gemm": {"ef": 0.8, "eb": 0.8, "t0_us": 4.0, "m_half": 16.0},
        "gemm_fp8": {"ef": 0.8, "eb": 0.8, "t0_us": 4.0, "m_half": 16.0},
        "decode": decode,
        "prefill": {"ef": 0.6, "eb": 0.5, "t0_us": 10.0, "n_half": 500.0},
        "allreduce": {"eff": 0.6, "t0_us_tp2": 4.0, "t0_us_tp4": 5.0, "t0_us_tp8": 5.5},
    }


def coeffs_of(values: dict[str, dict[str, float]]) -> KernelCoefficients:
    return KernelCoefficients("", "", **values)


def predict(op: str, t: pd.DataFrame, spec, values) -> np.ndarray:
    """Each row's modelled time (us) of one op class."""
    c = coeffs_of(values)
    if op == "gemm":
        m, n, k = (t[x].to_numpy(np.float64) for x in ("m", "n", "k"))
        return gemm_us(2 * m * n * k, 2 * (m * k + n * k + m * n), m, spec, c)
    if op == "gemm_fp8":  # 1-byte inputs and weights, 2-byte output
        m, n, k = (t[x].to_numpy(np.float64) for x in ("m", "n", "k"))
        return gemm_us(2 * m * n * k, m * k + n * k + 2 * m * n, m, spec, c, fp8=True)
    if op == "generation":
        b, ctx = t.batch_size.to_numpy(np.float64), t.step.to_numpy(np.float64) + 1
        kv_heads = t.num_key_value_heads.to_numpy(np.float64)
        per_token = kv_heads * t.head_dim.to_numpy(np.float64) * 2 * 2  # K and V, bf16
        heads = t.num_heads.to_numpy(np.float64)
        work = decode_attention_us(  # the table's repeated kernel keeps a small KV in L2
            b * ctx * per_token, b, heads, kv_heads, per_token, spec, c, l2_warm=True
        )
        return c.decode["t0_us"] + work
    if op == "context":
        b, s = t.batch_size.to_numpy(np.float64), t.isl.to_numpy(np.float64)
        heads, kv, hd = (
            t[x].to_numpy(np.float64) for x in ("num_heads", "num_key_value_heads", "head_dim")
        )
        per = prefill_attention_us(np.zeros_like(s), s, heads, kv, hd, 2, spec, c)
        return c.prefill["t0_us"] + b * per
    if op == "allreduce":
        msg = t.message_size.to_numpy(np.float64) * 2
        out = np.zeros(len(t))
        for g in np.unique(t.num_gpus):
            sel = t.num_gpus.to_numpy() == g
            out[sel] = allreduce_us(msg[sel], int(g), spec, c)
        return out
    raise ValueError(op)


PARAMS = {
    "gemm": [("ef", 0.05, 1.0), ("eb", 0.05, 1.5), ("t0_us", 0.0, 50.0), ("m_half", 0.0, 4096)],
    "gemm_fp8": [
        ("ef", 0.05, 1.0),
        ("eb", 0.05, 1.5),
        ("t0_us", 0.0, 50.0),
        ("m_half", 0.0, 4096),
    ],
    "generation": [
        ("eb", 0.05, 1.5),
        ("t0_us", 0.0, 100.0),
        ("per_head_req_us", 0.0, 50.0),
        ("per_req_us", 0.0, 50.0),
    ],
    "generation_split_kv": [
        ("eb", 0.05, 1.5),
        ("t0_us", 0.0, 100.0),
        ("cta_us", 0.0, 50.0),
        ("l2_factor", 0.05, 1.5),
        ("combine_us", 0.0, 100.0),
    ],
    "context": [("ef", 0.05, 1.0), ("eb", 0.05, 1.5), ("t0_us", 0.0, 100.0), ("n_half", 0.0, 1e5)],
    "allreduce": [
        ("eff", 0.01, 3.0),
        ("t0_us_tp2", 0.0, 100.0),
        ("t0_us_tp4", 0.0, 100.0),
        ("t0_us_tp8", 0.0, 100.0),
    ],
}
GROUP = {
    "gemm": "gemm",
    "gemm_fp8": "gemm_fp8",
    "generation": "decode",
    "context": "prefill",
    "allreduce": "allreduce",
}


def fit(op: str, t: pd.DataFrame, spec, values) -> None:
    names = PARAMS[op]
    if op == "generation" and "cta_us" in values["decode"]:
        names = PARAMS["generation_split_kv"]
    group = GROUP[op]
    measured = t.latency.to_numpy(np.float64) * 1e3  # ms -> us
    # a whole step's error is made by its long kernels: kernels under WEIGHT_US count less
    weight = np.sqrt(np.minimum(1.0, measured / WEIGHT_US))

    def residual(x: np.ndarray) -> np.ndarray:
        values[group].update({n: float(v) for (n, _, _), v in zip(names, x)})
        return weight * np.log(predict(op, t, spec, values) / measured)

    x0 = [values[group][n] for n, _, _ in names]
    lo, hi = [b for _, b, _ in names], [b for _, _, b in names]
    result = least_squares(residual, x0, bounds=(lo, hi))
    residual(result.x)


def errors(op: str, t: pd.DataFrame, spec, values) -> tuple[float, float]:
    err = np.abs(predict(op, t, spec, values) / (t.latency.to_numpy() * 1e3) - 1)
    return float(np.median(err)), float(np.percentile(err, 90))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--data", help="aiconfigurator_core/systems/data (default: installed)")
    parser.add_argument("--out", default=str(OUT))
    parser.add_argument("--sample", type=int, default=6000, help="rows per op fitted (seeded)")
    args = parser.parse_args()
    root = aic_data_dir(args.data)  # --data, CGDISPATCH_AIC_DATA or the installed package
    table: dict = {
        "source": (
            "fitted by scripts/fit_kernel_model.py on aiconfigurator-core 0.12.0 (NVIDIA, "
            "Apache-2.0) per-kernel tables measured with vLLM"
        ),
        "architectures": {},
        "fallback": {"": "Hopper", "Ada": "Ampere", "Blackwell": "Hopper", "CDNA3": "Hopper"},
        "errors": {},
    }
    fitted: dict[str, dict] = {}
    for arch, (folder, version, preset) in FITTED.items():
        spec = DEVICE_PRESETS[preset]
        tables = load(root, folder, version)
        values = default_coeffs(arch)
        for op in ("gemm", "gemm_fp8", "generation", "context", "allreduce"):
            if op not in tables:
                del values[GROUP[op]]  # no table: the kernel model falls back (its doc)
                continue
            t = tables[op]
            if len(t) > args.sample:
                t = t.sample(args.sample, random_state=0)
            fit(op, t, spec, values)
            med, p90 = errors(op, tables[op], spec, values)
            table["errors"][f"{preset} {op} (fitted)"] = {"median": med, "p90": p90}
            print(f"{arch:7s} {preset:5s} {op:10s} fitted  median {med:6.1%}  p90 {p90:6.1%}")
        fitted[arch] = values
        table["architectures"][arch] = {
            "fitted_on": f"{spec.name}, vLLM {version} tables",
            **{g: {k: round(v, 6) for k, v in d.items()} for g, d in values.items()},
        }
    for preset, (folder, version, arch) in HELD_OUT.items():
        spec = DEVICE_PRESETS[preset]
        tables = load(root, folder, version)
        for op in ("gemm", "gemm_fp8", "generation", "context", "allreduce"):
            if op not in tables:
                continue
            med, p90 = errors(op, tables[op], spec, fitted[arch])
            table["errors"][f"{preset} {op} (held out)"] = {"median": med, "p90": p90}
            print(f"{arch:7s} {preset:5s} {op:10s} held out median {med:6.1%}  p90 {p90:6.1%}")
    for entry in table["errors"].values():
        entry.update({k: round(v, 4) for k, v in entry.items()})
    Path(args.out).write_text(json.dumps(table, indent=1) + "\n", encoding="utf-8")
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
