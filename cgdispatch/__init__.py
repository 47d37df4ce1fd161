"""cgdispatch: plan, capture, replay and measure CUDA graphs for LLM inference engines.

The dispatcher layer (modes, batch, config, dispatcher) is pure Python and is imported
eagerly; everything that needs torch is imported on first use, so that
``from cgdispatch import CudagraphDispatcher`` stays fast and torch-free.
"""

from __future__ import annotations

import importlib
from typing import Any

from .core.batch import BatchDescriptor
from .core.config import GraphConfig
from .core.cudagraph_manager import BatchExecutionDescriptor, CudaGraphManager
from .core.dispatcher import CudagraphDispatcher
from .core.modes import AttentionCGSupport, CUDAGraphMode

__version__ = "0.1.0"

# public name -> module that defines it (imported lazily: these modules import torch or pandas)
_LAZY: dict[str, str] = {
    "ready_dispatcher": "core.dispatcher",
    "DispatchResult": "core.dispatcher",
    # either generation through one facade (pure Python)
    "make_graph_dispatcher": "core.engine",
    "dispatch_step": "core.engine",
    "capture_keys": "core.engine",
    "padded_token_table": "core.engine",
    "for_generation": "core.engine",
    "StepDispatch": "core.engine",
    "CaptureKey": "core.engine",
    "PaddingTable": "core.engine",
    "make_trace": "workload.trace",
    "check_trace": "workload.trace",
    "synthetic_requests": "workload.synthetic",
    "simulate_steps": "workload.trace",
    "SchedulerSimulator": "workload.scheduler",
    "SchedulerLimits": "workload.scheduler",
    "scheduler_rules": "workload.vllm_rules",
    "LatencyRun": "workload.latency",
    "request_latencies": "workload.latency",
    "latency_summary": "workload.latency",
    "simulate_latencies": "workload.latency",
    "dispatched_step_time": "workload.latency",
    "step_histogram": "workload.trace",
    "LENGTH_PRESETS": "workload.synthetic",
    "load_requests": "workload.files",
    "load_step_sizes": "workload.files",
    "load_cudagraph_metrics": "workload.files",
    "load_trace": "workload.files",
    "plan_capture_sizes": "plan.planner",
    "plan_gen2_capture_sizes": "plan.planner_v2",
    "Gen2Ladder": "plan.gen2_ladder",
    "vllm_gen2_ladder": "plan.gen2_ladder",
    "ladder_config": "plan.gen2_ladder",
    "plan_ladder": "plan.choose",
    "largest_token_size": "plan.choose",
    "plan_cost": "plan.planner",
    "engine_ladders": "plan.ladder_compare",
    "powers_of_two_ladder": "core.ladders",
    "compare": "plan.ladder_compare",
    "ladder_latency": "plan.ladder_latency",
    "export_plan": "plan.ladder_compare",
    "evaluate": "plan.whatif",
    "tune": "plan.tune",
    "StartupCosts": "plan.tune",
    "TuneResult": "plan.tune_result",
    "verdict_text": "views.tune_verdict",
    "verdict_lines": "views.tune_verdict",
    "cached_cost_model": "views.model_cache",
    "kv_bytes_per_token": "estimate.kv_bytes",
    "WhatIfResult": "plan.whatif",
    "CostModel": "plan.costs",
    "TableCostModel": "plan.costs",
    "FunctionCostModel": "plan.costs",
    "AffineCostModel": "plan.costs",
    "as_cost_model": "plan.costs",
    "ForwardContext": "capture.context",
    "set_forward_context": "capture.context",
    "get_forward_context": "capture.context",
    "CapturedGraph": "capture.graph",
    "GraphBackend": "capture.graph",
    "CudaGraphBackend": "capture.cuda_backend",
    "CpuReplayBackend": "capture.standin",
    "get_backend": "capture.backends",
    "CUDAGraphWrapper": "capture.wrapper",
    "GraphEntry": "capture.wrapper",
    "GraphRunner": "capture.runner",
    "RunnerModel": "capture.model",
    "OutputLifetime": "capture.pool",
    "PoolLedger": "capture.pool",
    "live_graph_count": "capture.graph",
    "stand_in_pool_bytes": "capture.standin",
    "StepBatch": "capture.stepbatch",
    "make_decode_batch": "capture.stepbatch",
    "make_mixed_batch": "capture.stepbatch",
    "ToyConfig": "models.toy",
    "ToyLM": "models.toy",
    "build_toy_model": "models.toy",
    # readable views of the dispatcher (pandas)
    "modes_table": "views.keys",
    "keys_table": "views.keys",
    "keys_summary": "views.keys",
    "check_notebook_parameters": "views.notebook_params",
    "latency_by_rate_figure": "views.latency_figures",
    "preemption_onset": "views.latency_figures",
    "latency_by_rate": "plan.latency_sweep",
    "kv_blocks_within": "plan.latency_sweep",
    "graph_memory_of": "plan.latency_sweep",
    "explain_dispatch": "views.explain",
    "dispatch_table": "views.explain",
    "random_batches": "views.explain",
    "dispatch_stats": "views.explain",
    # figures (matplotlib) and dashboards (ipywidgets)
    "ladder_figure": "views.plots",
    "hit_rate_figure": "views.plots",
    "speedup_figure": "views.plots",
    "memory_figure": "views.capture_figures",
    "capture_time_figure": "views.capture_figures",
    "figure_source": "views.sources",
    "label_source": "views.sources",
    "frame_source": "views.sources",
    "capture_per_key_figure": "views.capture_figures",
    "memory_per_key_figure": "views.capture_figures",
    "dispatch_explorer": "views.widgets",
    "generation_configs": "views.generations",
    "generations_table": "views.generations",
    "generations_figure": "views.generations",
    "whatif_dashboard": "views.whatif_widgets",
    "workload_trace": "workload.sources",
    "split_holdout": "workload.sources",
    "workload_requests": "workload.sources",
    "step_histogram_figure": "views.whatif_plots",
    "ladder_comparison_figure": "views.whatif_plots",
    "whatif_figure": "views.whatif_plots",
    "capture_each_mode": "measure.capture_tour",
    "check_replay": "measure.replay_check",
    "step_time_table": "measure.capture_tour",
    "tour_config": "measure.capture_tour",
    "output_lifetime_table": "measure.lifetime",
    "HFDecodeLM": "models.hf.adapter",
    "HFAdapterConfig": "models.hf.adapter",
    "UnsupportedModelError": "models.hf.support",
    "check_supported": "models.hf.support",
    "support_report": "models.hf.support",
    "unsupported_examples": "models.hf.support",
    "build_hf_model": "models.hf.presets",
    "build_model": "models.registry",
    "model_names": "models.registry",
    "StepTiming": "measure.timing",
    "CaptureMemory": "measure.timing",
    "time_step": "measure.timing",
    "time_call": "measure.timing",
    "measure_capture_memory": "measure.timing",
    "MemoryEstimate": "estimate.graph_memory",
    "estimate_graph_memory": "estimate.graph_memory",
    "DeviceSpec": "estimate.device_model",
    "DEVICE_PRESETS": "estimate.device_model",
    "StepProfile": "estimate.kernels",
    "profile_step": "estimate.kernels",
    "predict_step": "estimate.device_model",
    "predict_frame": "estimate.device_model",
    "calibrate": "estimate.calibration",
    "toy_profiles": "estimate.kernels",
    "calibrate_rows": "estimate.calibration",
    "predict_config": "estimate.calibration",
    "DeviceCostModel": "estimate.device_model",
    "device_cost_model": "estimate.device_model",
    "step_times_ms": "estimate.device_model",
    "LinearProfile": "estimate.kernels",
    "linear_profile": "estimate.kernels",
    "ArchSpec": "models.architectures",
    "ARCHITECTURES": "models.architectures",
    "build_arch_model": "models.architectures",
    "plan_multiple_of": "plan.planner",
    "smooth_histogram": "plan.histogram",
    "SweepSpec": "sweep.spec",
    "SWEEP_PRESETS": "sweep.spec",
    "run_sweep": "sweep.run",
    "SWEEP_COLUMNS": "sweep.store",
    "ResultStore": "sweep.store",
    "SweepRow": "sweep.rows",
    "CaptureRecord": "sweep.rows",
    "load_results": "sweep.store",
    "load_captures": "sweep.store",
    "load_reference": "sweep.store",
    "write_report": "views.report",
    "draw_report": "views.report",
    "ReportFigures": "views.report",
    "modelled_rows": "views.report",
    "sweep_spec": "views.sweepviews",
    "unit_table": "views.sweepviews",
    "graph_memory_table": "views.sweepviews",
    "modelled_speedup": "views.sweepviews",
    "memory_estimates": "views.sweepviews",
    "step_time_figure": "views.plots",
}

__all__ = [
    "AttentionCGSupport",
    "BatchDescriptor",
    "BatchExecutionDescriptor",
    "CUDAGraphMode",
    "CudaGraphManager",
    "CudagraphDispatcher",
    "GraphConfig",
    *_LAZY,
]


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'cgdispatch' has no attribute {name!r}")
    # no public name equals a submodule's name: importing a submodule binds the package
    # attribute of that name to the module (tests/test_lazy_names.py checks)
    value = getattr(importlib.import_module(f".{module}", __name__), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))
