"""Every public name of cgdispatch 0.1 (before the layout moved into subpackages) still
resolves as ``cgdispatch.<name>``, so README snippets, notebooks and users' code keep working."""

from __future__ import annotations

import subprocess
import sys

import pytest

import cgdispatch

# the public surface as it was in the flat layout; names may be added, never dropped
PUBLIC_NAMES_V01 = [
    "AffineCostModel",
    "AttentionCGSupport",
    "BatchDescriptor",
    "CUDAGraphMode",
    "CUDAGraphWrapper",
    "CaptureMemory",
    "CapturedGraph",
    "CostModel",
    "CpuReplayBackend",
    "CudaGraphBackend",
    "CudagraphDispatcher",
    "DEVICE_PRESETS",
    "DeviceSpec",
    "ForwardContext",
    "FunctionCostModel",
    "GraphBackend",
    "GraphConfig",
    "GraphEntry",
    "GraphRunner",
    "HFAdapterConfig",
    "HFDecodeLM",
    "LENGTH_PRESETS",
    "MemoryEstimate",
    "ResultStore",
    "SWEEP_COLUMNS",
    "SWEEP_PRESETS",
    "StepBatch",
    "StepProfile",
    "StepTiming",
    "SweepSpec",
    "TableCostModel",
    "ToyConfig",
    "ToyLM",
    "UnsupportedModelError",
    "WhatIfResult",
    "as_cost_model",
    "build_hf_model",
    "build_model",
    "build_toy_model",
    "calibrate",
    "calibrate_rows",
    "capture_each_mode",
    "capture_time_figure",
    "check_supported",
    "check_trace",
    "compare",
    "dispatch_explorer",
    "dispatch_stats",
    "dispatch_table",
    "engine_ladders",
    "estimate_graph_memory",
    "evaluate",
    "explain_dispatch",
    "export_plan",
    "figure_source",
    "get_backend",
    "get_forward_context",
    "graph_memory_table",
    "hit_rate_figure",
    "keys_summary",
    "keys_table",
    "ladder_comparison_figure",
    "ladder_figure",
    "load_captures",
    "load_cudagraph_metrics",
    "load_reference",
    "load_requests",
    "load_results",
    "load_step_sizes",
    "load_trace",
    "make_decode_batch",
    "make_mixed_batch",
    "make_trace",
    "measure_capture_memory",
    "memory_figure",
    "model_names",
    "modelled_speedup",
    "modes_table",
    "plan_capture_sizes",
    "plan_cost",
    "predict_config",
    "predict_frame",
    "predict_step",
    "profile_step",
    "random_batches",
    "run_sweep",
    "set_forward_context",
    "simulate_steps",
    "speedup_figure",
    "step_histogram",
    "step_histogram_figure",
    "step_time_figure",
    "step_time_table",
    "support_report",
    "sweep_spec",
    "synthetic_requests",
    "time_call",
    "time_step",
    "toy_profiles",
    "unit_table",
    "unsupported_examples",
    "whatif_dashboard",
    "whatif_figure",
    "workload_trace",
    "write_report",
]


@pytest.mark.parametrize("name", PUBLIC_NAMES_V01)
def test_name_of_the_flat_layout_still_resolves(name):
    assert name in cgdispatch.__all__
    assert getattr(cgdispatch, name) is not None


def test_all_lists_only_names_that_resolve():
    missing = [n for n in cgdispatch.__all__ if not hasattr(cgdispatch, n)]
    assert missing == []


def test_dispatcher_names_import_without_torch_or_pandas():
    code = (
        "import sys\n"
        "from cgdispatch import CudagraphDispatcher, GraphConfig, BatchDescriptor\n"
        "heavy = sorted(m for m in ('torch', 'pandas') if m in sys.modules)\n"
        "print(heavy)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"
