"""Every public name of cgdispatch 0.1 (before the layout moved into subpackages) still
resolves as ``cgdispatch.<name>``, so README snippets, notebooks and users' code keep working;
the public API proper (``__all__``) is one screen, every other name is importable from its
subpackage (cgdispatch/core/compat_names.py says where)."""

from __future__ import annotations

import subprocess
import sys

import cgdispatch

# the public surface of cgdispatch 0.1 (the flat layout) and of every name public before
# the generation registry (issue 17); names may be added, never dropped
PUBLIC_NAMES = [
    "ARCHITECTURES",
    "AffineCostModel",
    "ArchSpec",
    "AttentionCGSupport",
    "BatchDescriptor",
    "BatchExecutionDescriptor",
    "CUDAGraphMode",
    "CUDAGraphWrapper",
    "CaptureKey",
    "CaptureMemory",
    "CaptureRecord",
    "CapturedGraph",
    "CostModel",
    "CpuReplayBackend",
    "CudaGraphBackend",
    "CudaGraphManager",
    "CudagraphDispatcher",
    "DEVICE_PRESETS",
    "DeviceCostModel",
    "DeviceSpec",
    "DispatchResult",
    "ForwardContext",
    "FunctionCostModel",
    "Gen2Ladder",
    "GraphBackend",
    "GraphConfig",
    "GraphEntry",
    "GraphPricing",
    "GraphRunner",
    "HFAdapterConfig",
    "HFDecodeLM",
    "LENGTH_PRESETS",
    "LatencyRun",
    "LinearProfile",
    "MemoryEstimate",
    "OutputLifetime",
    "PUBLISHED_MODELS",
    "PaddingTable",
    "PoolLedger",
    "PublishedModel",
    "ReportFigures",
    "ResultStore",
    "RunnerModel",
    "SWEEP_COLUMNS",
    "SWEEP_PRESETS",
    "SchedulerLimits",
    "SchedulerSimulator",
    "replay_scheduler",
    "scheduler_limits",
    "StartupCoefficients",
    "StartupCosts",
    "StartupEstimate",
    "StepBatch",
    "StepDispatch",
    "StepProfile",
    "StepTiming",
    "SweepRow",
    "SweepSpec",
    "TableCostModel",
    "ToyConfig",
    "ToyLM",
    "TuneDashboard",
    "TuneResult",
    "UnsupportedModelError",
    "WhatIfResult",
    "as_cost_model",
    "build_arch_model",
    "build_hf_model",
    "build_model",
    "build_toy_model",
    "byom_conclusion",
    "cached_cost_model",
    "calibrate",
    "calibrate_rows",
    "calibration_figure",
    "calibration_table",
    "capture_conclusion",
    "capture_each_mode",
    "capture_keys",
    "capture_per_key_figure",
    "capture_time_figure",
    "check_notebook_parameters",
    "check_replay",
    "check_supported",
    "check_trace",
    "compare",
    "device_cost_model",
    "dispatch_explorer",
    "dispatch_stats",
    "dispatch_step",
    "dispatch_table",
    "dispatch_tour_conclusion",
    "dispatched_step_time",
    "draw_report",
    "engine_ladders",
    "error_summary",
    "estimate_graph_memory",
    "estimate_startup",
    "evaluate",
    "explain_dispatch",
    "export_plan",
    "figure_source",
    "fit_startup_model",
    "for_generation",
    "frame_source",
    "generation_configs",
    "generation_line",
    "generations_figure",
    "generations_table",
    "get_backend",
    "get_forward_context",
    "graph_memory_of",
    "graph_memory_table",
    "graph_pricing",
    "hit_rate_figure",
    "keys_summary",
    "keys_table",
    "kv_blocks_within",
    "kv_bytes_per_token",
    "label_source",
    "ladder_comparison_figure",
    "ladder_config",
    "ladder_figure",
    "ladder_latency",
    "largest_token_size",
    "latency_by_rate",
    "latency_by_rate_figure",
    "latency_summary",
    "linear_profile",
    "live_graph_count",
    "load_captures",
    "load_cudagraph_metrics",
    "load_reference",
    "load_requests",
    "load_results",
    "load_step_sizes",
    "load_trace",
    "make_decode_batch",
    "make_graph_dispatcher",
    "make_mixed_batch",
    "make_trace",
    "measure_capture_memory",
    "memory_estimates",
    "memory_figure",
    "memory_per_key_figure",
    "mode_step_figure",
    "model_names",
    "modelled_rows",
    "modelled_speedup",
    "modes_table",
    "output_lifetime_table",
    "padded_token_table",
    "plan_capture_sizes",
    "plan_cost",
    "plan_gen2_capture_sizes",
    "plan_ladder",
    "plan_multiple_of",
    "powers_of_two_ladder",
    "predict_config",
    "predict_frame",
    "predict_step",
    "preemption_onset",
    "profile_step",
    "published_model",
    "published_step_comparison",
    "random_batches",
    "ready_dispatcher",
    "reference_config",
    "reference_startups",
    "request_latencies",
    "run_sweep",
    "scheduler_rules",
    "set_forward_context",
    "simulate_latencies",
    "simulate_steps",
    "smooth_histogram",
    "speedup_figure",
    "split_holdout",
    "stand_in_pool_bytes",
    "startup_for",
    "step_histogram",
    "step_histogram_figure",
    "step_ratio_figure",
    "step_time_figure",
    "step_time_table",
    "step_times_ms",
    "support_report",
    "sweep_conclusion",
    "sweep_spec",
    "synthetic_requests",
    "time_call",
    "time_step",
    "tour_config",
    "toy_profiles",
    "tradeoff_figure",
    "tune",
    "tune_dashboard",
    "unit_table",
    "unsupported_examples",
    "verdict_lines",
    "verdict_text",
    "vllm_gen2_ladder",
    "whatif_dashboard",
    "whatif_figure",
    "workload_requests",
    "workload_trace",
    "write_report",
]


def test_every_public_name_still_resolves():
    """One test, every name: the failure lists all that are missing at once."""
    unresolved = [n for n in PUBLIC_NAMES if getattr(cgdispatch, n, None) is None]
    assert unresolved == []


def test_the_api_is_one_screen_and_every_other_name_has_a_home():
    """``__all__`` is short (issue 38: one screen, at most 50 names); a name outside it
    resolves to the object of the module ``core.compat_names`` gives as its home."""
    import importlib

    from cgdispatch.core.compat_names import COMPAT_NAMES

    assert len(cgdispatch.__all__) <= 50
    assert not set(COMPAT_NAMES) & set(cgdispatch.__all__)
    for name in PUBLIC_NAMES:
        if name in cgdispatch.__all__:
            continue
        home = importlib.import_module(f"cgdispatch.{COMPAT_NAMES[name]}")
        assert getattr(cgdispatch, name) is getattr(home, name), name
        assert name in getattr(home, "__all__", [name]), f"{name} is not public in its home"


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
