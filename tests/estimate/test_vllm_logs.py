"""The one vLLM start-up log parser (cgdispatch.estimate.vllm_logs): on the committed log
excerpts it gives what the reference CSVs (built by hand and by the extraction script from
the full logs) record, on generated logs with random numbers it gives those numbers back,
and it refuses text that is no start-up log."""

from __future__ import annotations

import random
import re
from pathlib import Path

import pandas as pd
import pytest

from cgdispatch.estimate.vllm_logs import gpu_preset, parse_startup_log, read_startup_log

LOGS = Path(__file__).resolve().parents[1] / "data" / "vllm_logs"
DATA = Path(__file__).resolve().parents[2] / "cgdispatch" / "data"


def _reference_rows() -> pd.DataFrame:
    frames = [pd.read_csv(p) for p in sorted(DATA.glob("reference_vllm_startups*.csv"))]
    return pd.concat(frames, ignore_index=True)


def _source_url(path: Path) -> str:
    return re.match(r"# excerpt of (\S+)", path.read_text().splitlines()[0]).group(1)


def _row_for(url: str, rows: pd.DataFrame) -> pd.Series:
    """The reference row whose source names the same file at the same commit."""
    commit, file = re.search(r"/blob/([0-9a-f]{40})/(.+)$", url).groups()
    hit = rows[[commit[:12] in s and s.endswith(file) for s in rows["source"].astype(str)]]
    assert len(hit) == 1, url
    return hit.iloc[0]


@pytest.mark.parametrize("path", sorted(LOGS.glob("*.log")), ids=lambda p: p.name)
def test_excerpts_give_what_the_reference_csvs_record(path):
    row = _row_for(_source_url(path), _reference_rows())
    log = read_startup_log(path)
    assert log.vllm_version == str(row["vllm_version"])
    assert log.tensor_parallel_size == int(row["tensor_parallel_size"])
    assert log.capture_sizes == tuple(int(s) for s in str(row["cudagraph_capture_sizes"]).split())
    assert log.cudagraph_mode == row["cudagraph_mode"]
    assert log.piecewise_graphs == int(row["piecewise_graphs"])
    assert log.full_graphs == int(row["full_graphs"])
    for field in ("capture_s", "graph_memory_gib", "kv_cache_gib", "weights_gib", "compile_s"):
        assert getattr(log, field) == pytest.approx(float(row[field])), field
    for field in ("kv_cache_tokens", "num_gpu_blocks", "max_num_batched_tokens"):
        assert getattr(log, field) == int(row[field]), field
    if pd.notna(row["max_num_seqs"]):
        assert log.max_num_seqs == int(row["max_num_seqs"])
    assert log.gpu_memory_utilization == pytest.approx(float(row["gpu_memory_utilization"]))


def _generated_log(rng: random.Random) -> tuple[str, dict]:
    """A start-up log in vLLM 0.19's line formats (vllm/v1/worker/gpu_worker.py,
    gpu_model_runner.py, core/kv_cache_utils.py) with random figures; TP ranks log their
    own pool and KV memory."""
    tp = rng.choice([1, 2, 4])
    sizes = sorted(rng.sample(range(1, 600), rng.randint(1, 12)))
    pools = [round(rng.uniform(0.1, 3), 2) for _ in range(tp)]
    kv = [round(rng.uniform(1, 70), 2) for _ in range(tp)]
    truth = {
        "model": f"org/Model-{rng.randint(1, 99)}B", "tp": tp, "sizes": tuple(sizes),
        "capture_s": rng.randint(1, 90), "pool": max(pools), "estimate": round(rng.uniform(0.1, 3), 2),
        "kv_gib": min(kv), "tokens": rng.randint(1000, 5_000_000), "weights": round(rng.uniform(1, 70), 2),
        "util": round(rng.uniform(0.3, 0.95), 2), "seqs": rng.randint(1, 1024),
        "mbt": rng.choice([2048, 8192, 16384]),
    }  # fmt: skip
    lines = [
        "INFO 04-22 00:03:35 [entrypoints/utils.py:233] non-default args: {'model': "
        f"'{truth['model']}', 'gpu_memory_utilization': {truth['util']}, 'max_num_seqs': {truth['seqs']}}}",
        f"INFO [config/scheduler.py:238] Chunked prefill is enabled with max_num_batched_tokens={truth['mbt']}.",
        f"INFO [v1/engine/core.py:105] Initializing a V1 LLM engine (v0.19.0) with config: model='{truth['model']}', "
        f"dtype=torch.bfloat16, max_seq_len=8192, tensor_parallel_size={tp}, pipeline_parallel_size=1, "
        "quantization=None, kv_cache_dtype=auto, compilation_config={'cudagraph_mode': "
        f"<CUDAGraphMode.FULL_AND_PIECEWISE: (2, 1)>, 'cudagraph_capture_sizes': {sizes}}}",
        f"INFO [v1/worker/gpu_model_runner.py:4820] Model loading took {truth['weights']} GiB memory and 14.4 seconds",
    ]  # fmt: skip
    for rank in range(tp):
        lines.append(f"(Worker_TP{rank}) INFO Available KV cache memory: {kv[rank]} GiB")
    lines.append(f"INFO GPU KV cache size: {truth['tokens']:,} tokens")
    for rank in range(tp):
        lines += [
            f"(Worker_TP{rank}) INFO Graph capturing finished in {truth['capture_s']} secs, took {pools[rank]} GiB",
            f"(Worker_TP{rank}) INFO CUDA graph pool memory: {pools[rank]} GiB (actual), "
            f"{truth['estimate']} GiB (estimated), difference: 0.07 GiB (7.7%).",
        ]  # fmt: skip
    return "\n".join(lines), truth


@pytest.mark.parametrize("seed", range(5))
def test_generated_logs_give_their_numbers_back(seed):
    text, t = _generated_log(random.Random(seed))
    log = parse_startup_log(text)
    assert (log.model, log.tensor_parallel_size, log.capture_sizes) == (
        t["model"],
        t["tp"],
        t["sizes"],
    )
    assert (log.capture_s, log.graph_memory_gib, log.graph_memory_estimated_gib) == (
        t["capture_s"], t["pool"], t["estimate"])  # fmt: skip
    assert (log.kv_cache_gib, log.kv_cache_tokens, log.weights_gib) == (
        t["kv_gib"],
        t["tokens"],
        t["weights"],
    )
    assert (log.gpu_memory_utilization, log.max_num_seqs, log.max_num_batched_tokens) == (
        t["util"], t["seqs"], t["mbt"])  # fmt: skip
    assert log.cudagraph_mode == "FULL_AND_PIECEWISE"


@pytest.mark.parametrize(
    ("printed", "mode"),
    [
        ("1", "PIECEWISE"),
        ("2", "FULL"),
        ("[2, 1]", "FULL_AND_PIECEWISE"),
        ("[2,0]", "FULL_DECODE_ONLY"),
    ],
)
def test_json_compilation_config_modes(printed, mode):
    # vLLM 0.10-0.11 print the compilation config as JSON, the mode as its enum value
    text = (
        "Initializing a V1 LLM engine (v0.10.2) with config: model='m', "
        f'compilation_config={{"cudagraph_mode":{printed},"cudagraph_capture_sizes":[4,2,1]}}'
    )
    log = parse_startup_log(text)
    assert log.cudagraph_mode == mode and log.capture_sizes == (1, 2, 4)


def test_a_file_that_is_no_startup_log_is_refused():
    with pytest.raises(ValueError, match="not a vLLM start-up log"):
        parse_startup_log("hello\nworld\n")


@pytest.mark.parametrize(
    ("text", "preset"),
    [("device_name=NVIDIA_H100_80GB_HBM3.json", "H100"), ("NVIDIA A100-SXM4-40GB", "A100-40GB"),
     ("| NVIDIA GeForce RTX 4090 |", "RTX-4090"), ("NVIDIA L40S", "L40S"), ("no gpu here", None),
     ("NVIDIA_TF32_OVERRIDE=0 ... NVIDIA H200 detected", "H200"),
     # issue 35: GPUs of published logs
     ("NVIDIA A800-SXM4-80GB", "A800"), ("NVIDIA H800", "H800"), ("NVIDIA H20", "H20"),
     ("device_name=NVIDIA_H20.json", "H20"), ("NVIDIA L20", "L20"), ("NVIDIA L40", "L40"),
     ("NVIDIA L40S", "L40S"), ("NVIDIA A40", "A40"), ("| NVIDIA RTX A6000 |", "RTX-A6000"),
     ("NVIDIA RTX 6000 Ada Generation", "RTX-6000-Ada"), ("Tesla V100-SXM2-32GB", "V100"),
     ("NVIDIA Tesla V100-SXM2-32GB", "V100"), ("NVIDIA RTX A4000", None)],
)  # fmt: skip
def test_printed_gpu_names_map_to_presets(text, preset):
    assert gpu_preset(text)[1] == preset
