"""The vLLM start-up reference data (cgdispatch/data/reference_vllm_startups.csv, issue 18):
what the extraction script reads from a start-up log, and what the shipped CSV holds."""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import pytest

from tests.load_script import load_script

ROOT = Path(__file__).resolve().parents[2]
CSV = ROOT / "cgdispatch" / "data" / "reference_vllm_startups.csv"

# lines of one vLLM 0.19.0 start-up, as its log prints them (abridged)
LOG = """\
(APIServer pid=1) INFO 04-22 15:12:00 [entrypoints/utils.py:233] non-default args: {'model_tag': 'codellama/CodeLlama-7b-hf', 'model': 'codellama/CodeLlama-7b-hf', 'max_model_len': 8192, 'gpu_memory_utilization': 0.95, 'enable_prefix_caching': False}
(EngineCore pid=283) INFO 04-22 15:12:23 [v1/engine/core.py:105] Initializing a V1 LLM engine (v0.19.0) with config: model='codellama/CodeLlama-7b-hf', dtype=torch.bfloat16, max_seq_len=8192, tensor_parallel_size=2, pipeline_parallel_size=1, quantization=None, kv_cache_dtype=auto, compilation_config={'cudagraph_mode': <CUDAGraphMode.FULL_AND_PIECEWISE: (2, 1)>, 'cudagraph_capture_sizes': [1, 2, 4, 8, 512]}
(EngineCore pid=283) INFO 04-22 15:13:03 [v1/worker/gpu_model_runner.py:4820] Model loading took 12.56 GiB memory and 38.074301 seconds
(EngineCore pid=283) INFO 04-22 15:13:13 [compilation/monitor.py:48] torch.compile took 10.16 s in total
(EngineCore pid=283) INFO 04-22 15:13:19 [v1/worker/gpu_model_runner.py:5876] Profiling CUDA graph memory: PIECEWISE=51 (largest=512), FULL=35 (largest=256)
(APIServer pid=1) DEBUG 04-22 15:12:11 [engine/arg_utils.py:2242] Defaulting max_num_seqs to 1024 for OPENAI_API_SERVER usage context.
(APIServer pid=1) INFO 04-22 15:12:11 [config/scheduler.py:238] Chunked prefill is enabled with max_num_batched_tokens=8192.
(Worker_TP0 pid=300) DEBUG 04-22 15:12:24 [v1/worker/gpu_worker.py:284] worker init memory snapshot: torch_peak=0.0GiB, free_memory=78.68GiB, total_memory=79.19GiB, cuda_memory=0.51GiB
(Worker_TP0 pid=300) DEBUG 04-22 15:13:20 [v1/worker/gpu_worker.py:435] Memory profiling takes 17.55 seconds. Total non KV cache memory: 13.57GiB; torch peak memory increase: 0.77GiB; non-torch forward increase memory: 0.25GiB; weights memory: 12.56GiB.
(Worker_TP1 pid=301) DEBUG 04-22 15:13:20 [v1/worker/gpu_worker.py:435] Memory profiling takes 17.60 seconds. Total non KV cache memory: 13.61GiB; torch peak memory increase: 0.79GiB; non-torch forward increase memory: 0.26GiB; weights memory: 12.56GiB.
(Worker_TP0 pid=300) INFO 04-22 15:13:20 [v1/worker/gpu_worker.py:436] Available KV cache memory: 61.66 GiB
(Worker_TP1 pid=301) INFO 04-22 15:13:20 [v1/worker/gpu_worker.py:436] Available KV cache memory: 61.62 GiB
(EngineCore pid=283) INFO 04-22 15:13:20 [v1/core/kv_cache_utils.py:1319] GPU KV cache size: 126,256 tokens
(Worker_TP0 pid=300) INFO 04-22 15:13:24 [v1/worker/gpu_model_runner.py:6046] Graph capturing finished in 4 secs, took 0.89 GiB
(Worker_TP1 pid=301) INFO 04-22 15:13:24 [v1/worker/gpu_model_runner.py:6046] Graph capturing finished in 5 secs, took 0.91 GiB
(Worker_TP0 pid=300) INFO 04-22 15:13:24 [v1/worker/gpu_worker.py:597] CUDA graph pool memory: 0.89 GiB (actual), 0.84 GiB (estimated), difference: 0.05 GiB (5.5%).
(Worker_TP1 pid=301) INFO 04-22 15:13:24 [v1/worker/gpu_worker.py:597] CUDA graph pool memory: 0.91 GiB (actual), 0.85 GiB (estimated), difference: 0.06 GiB (6.6%).
(APIServer pid=1) DEBUG 04-22 15:13:25 [v1/metrics/loggers.py:273] Engine 000: vllm cache_config_info with initialization after num_gpu_blocks is: 7891
"""


def _script():
    return load_script("scripts/extract_vllm_startups.py")


def test_a_startup_log_gives_its_settings_and_capture_figures() -> None:
    row = _script().parse_log("codellama-7b--h100-80gb--tp2pp1dp1--8192", LOG)
    assert row["model"] == "codellama/CodeLlama-7b-hf" and row["vllm_version"] == "0.19.0"
    assert (row["device"], row["device_name"]) == ("H100", "H100 80GB")
    assert (row["tensor_parallel_size"], row["pipeline_parallel_size"]) == (2, 1)
    assert (row["dtype"], row["quantization"], row["kv_cache_dtype"]) == (
        "bfloat16",
        "None",
        "auto",
    )
    assert row["max_model_len"] == 8192 and row["gpu_memory_utilization"] == 0.95
    assert row["cudagraph_mode"] == "FULL_AND_PIECEWISE"
    assert (row["piecewise_graphs"], row["piecewise_largest"]) == (51, 512)
    assert (row["full_graphs"], row["full_largest"]) == (35, 256)
    assert row["cudagraph_capture_sizes"] == "1 2 4 8 512"
    # two ranks: the larger pool and the longer capture bound the KV cache
    assert row["graph_memory_gib"] == 0.91 and row["graph_memory_gib_vllm_estimate"] == 0.85
    assert row["capture_s"] == 5
    # the KV cache is sized for the rank with the least room: its memory, and the profile
    # figures of the rank with the most non-KV memory
    assert row["weights_gib"] == 12.56 and row["kv_cache_gib"] == 61.62
    assert row["kv_cache_tokens"] == 126_256 and row["compile_s"] == 10.16
    assert (row["activation_peak_gib"], row["non_torch_increase_gib"]) == (0.79, 0.26)
    assert row["total_memory_gib"] == 79.19 and row["num_gpu_blocks"] == 7891
    assert (row["max_num_batched_tokens"], row["max_num_seqs"]) == (8192, 1024)


def test_a_log_without_optional_lines_leaves_them_empty() -> None:
    lines = [line for line in LOG.splitlines() if "KV cache" not in line and "compile" not in line]
    row = _script().parse_log("x--h100-80gb--tp1", "\n".join(lines))
    assert row["kv_cache_tokens"] is None and row["kv_cache_gib"] is None
    assert row["compile_s"] is None and row["graph_memory_gib"] == 0.91
    lines = [line for line in LOG.splitlines() if "Memory profiling" not in line]
    row = _script().parse_log("x--h100-80gb--tp1", "\n".join(lines))
    assert row["activation_peak_gib"] is None and row["non_torch_increase_gib"] is None


def test_the_shipped_csv_holds_every_successful_run_with_provenance() -> None:
    frame = pd.read_csv(CSV)
    assert len(frame) == 59 and frame["run"].is_unique
    assert not frame["run"].str.endswith(".FAILED").any()
    assert frame["source"].str.startswith("llm-d-incubation/llm-d-planner@d3121e059da8:").all()
    assert (frame["device"] == "H100").all() and (frame["vllm_version"] == "0.19.0").all()
    for column in (
        "graph_memory_gib",
        "graph_memory_gib_vllm_estimate",
        "capture_s",
        "activation_peak_gib",
        "non_torch_increase_gib",
        "kv_cache_tokens",
        "max_num_seqs",
    ):
        assert frame[column].notna().all() and (frame[column] > 0).all(), column
    assert frame["graph_memory_gib"].between(0.05, 20).all()
    codellama = frame.set_index("run").loc["codellama-codellama-7b-h--h100-80gb--tp1pp1dp1--8192"]
    assert codellama["graph_memory_gib"] == 0.89 and codellama["kv_cache_tokens"] == 126_256
    assert (
        set(frame["tensor_parallel_size"]) >= {1, 2, 4}
        and frame["pipeline_parallel_size"].max() == 4
    )


def test_the_sweep_reference_loader_leaves_startup_data_alone(tmp_path: Path) -> None:
    from cgdispatch.sweep.store import load_reference

    (tmp_path / "reference_vllm_startups.csv").write_text(CSV.read_text())
    assert load_reference(data_dir=tmp_path) is None  # not sweep rows: not shown as such
    with pytest.raises(ValueError, match="reference_date"):
        (tmp_path / "reference_bad.csv").write_text("mode,num_tokens\nFULL,1\n")
        load_reference(data_dir=tmp_path)
