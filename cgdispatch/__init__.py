"""cgdispatch: plan, capture, replay and measure CUDA graphs for LLM inference engines.

The dispatcher layer (modes, batch, config, dispatcher) is pure Python and is imported
eagerly; everything that needs torch is imported on first use, so that
``from cgdispatch import CudagraphDispatcher`` stays fast and torch-free.
"""

from __future__ import annotations

import importlib
from typing import Any

from .batch import BatchDescriptor
from .config import GraphConfig
from .cudagraph_manager import BatchExecutionDescriptor, CudaGraphManager
from .dispatcher import CudagraphDispatcher
from .modes import AttentionCGSupport, CUDAGraphMode

__version__ = "0.1.0"

# public name -> module that defines it (imported lazily: these modules import torch or pandas)
_LAZY: dict[str, str] = {
    "make_trace": "workload",
    "check_trace": "workload",
    "synthetic_requests": "synthetic",
    "simulate_steps": "workload",
    "step_histogram": "workload",
    "LENGTH_PRESETS": "synthetic",
    "load_requests": "tracefiles",
    "load_step_sizes": "tracefiles",
    "load_cudagraph_metrics": "tracefiles",
    "load_trace": "tracefiles",
    "plan_capture_sizes": "planner",
    "plan_cost": "planner",
    "engine_ladders": "ladder_compare",
    "compare": "ladder_compare",
    "export_plan": "ladder_compare",
    "evaluate": "whatif",
    "WhatIfResult": "whatif",
    "CostModel": "costs",
    "TableCostModel": "costs",
    "FunctionCostModel": "costs",
    "AffineCostModel": "costs",
    "as_cost_model": "costs",
    "ForwardContext": "context",
    "set_forward_context": "context",
    "get_forward_context": "context",
    "CapturedGraph": "backends",
    "GraphBackend": "backends",
    "CudaGraphBackend": "backends",
    "CpuReplayBackend": "backends",
    "get_backend": "backends",
    "CUDAGraphWrapper": "wrapper",
    "GraphEntry": "wrapper",
    "GraphRunner": "runner",
    "StepBatch": "stepbatch",
    "make_decode_batch": "stepbatch",
    "make_mixed_batch": "stepbatch",
    "ToyConfig": "models.toy",
    "ToyLM": "models.toy",
    "build_toy_model": "models.toy",
    # readable views of the dispatcher (pandas)
    "modes_table": "explain",
    "keys_table": "explain",
    "keys_summary": "explain",
    "explain_dispatch": "explain",
    "dispatch_table": "explain",
    "random_batches": "explain",
    "dispatch_stats": "explain",
    # figures (matplotlib) and dashboards (ipywidgets)
    "ladder_figure": "plots",
    "hit_rate_figure": "plots",
    "speedup_figure": "plots",
    "memory_figure": "plots",
    "capture_time_figure": "plots",
    "figure_source": "plots",
    "dispatch_explorer": "widgets",
    "whatif_dashboard": "whatif_widgets",
    "workload_trace": "whatif_plots",
    "step_histogram_figure": "whatif_plots",
    "ladder_comparison_figure": "whatif_plots",
    "whatif_figure": "whatif_plots",
    "capture_each_mode": "capture_tour",
    "step_time_table": "capture_tour",
    "HFDecodeLM": "models.hf",
    "HFAdapterConfig": "models.hf",
    "UnsupportedModelError": "models.hf_support",
    "check_supported": "models.hf_support",
    "support_report": "models.hf_support",
    "unsupported_examples": "models.hf_support",
    "build_hf_model": "models.hf_presets",
    "build_model": "models.registry",
    "model_names": "models.registry",
    "StepTiming": "measure",
    "CaptureMemory": "measure",
    "time_step": "measure",
    "time_call": "measure",
    "measure_capture_memory": "measure",
    "MemoryEstimate": "memory",
    "estimate_graph_memory": "memory",
    "DeviceSpec": "costmodel",
    "DEVICE_PRESETS": "costmodel",
    "StepProfile": "kernels",
    "profile_step": "kernels",
    "predict_step": "costmodel",
    "predict_frame": "costmodel",
    "calibrate": "costmodel",
    "toy_profiles": "kernels",
    "calibrate_rows": "costmodel",
    "predict_config": "costmodel",
    "SweepSpec": "sweepspec",
    "SWEEP_PRESETS": "sweepspec",
    "run_sweep": "sweep",
    "SWEEP_COLUMNS": "store",
    "ResultStore": "store",
    "load_results": "store",
    "load_captures": "store",
    "load_reference": "store",
    "write_report": "report",
    "sweep_spec": "sweepviews",
    "unit_table": "sweepviews",
    "graph_memory_table": "sweepviews",
    "modelled_speedup": "sweepviews",
    "step_time_figure": "sweepviews",
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
