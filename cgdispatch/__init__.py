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
from .core.modes import AttentionCGSupport, CUDAGraphMode
from .core.v1.dispatcher import CudagraphDispatcher
from .core.v2.cudagraph_manager import BatchExecutionDescriptor, CudaGraphManager

__version__ = "0.1.0"

# names computed from the generation registry on every access (a release registered later
# changes them), never cached here
_LIVE = frozenset({"NEWEST", "VLLM_VERSIONS"})

# The public API, one screen: name -> module that defines it (imported lazily: these
# modules import torch or pandas). Everything else is importable from its subpackage; the
# names public before this list was cut (core/compat_names.py) still resolve as
# ``cgdispatch.<name>``, so older snippets keep working, but are not listed here.
_LAZY: dict[str, str] = {
    # dispatch exactly as vLLM (both generations)
    "make_graph_dispatcher": "core.generation",
    "dispatch_step": "core.generation",
    "capture_keys": "core.generation",
    "GENERATIONS": "core.generation",
    "NEWEST": "core.generation",
    "VLLM_VERSIONS": "core.generation",
    "generation_for": "core.generation",
    # capture and replay (CUDA, or the CPU replay backend)
    "GraphRunner": "capture.runner",
    "build_model": "models.registry",
    "build_toy_model": "models.toy",
    "set_forward_context": "capture.context",
    "check_replay": "measure.replay_check",
    # traffic and vLLM's scheduler
    "synthetic_requests": "workload.synthetic",
    "workload_trace": "workload.sources",
    "split_holdout": "workload.sources",
    "make_trace": "workload.trace",
    "SchedulerLimits": "workload.limits",
    "scheduler_limits": "workload.limits",
    "replay_scheduler": "workload.replay",
    "simulate_steps": "workload.trace",
    "simulate_latencies": "workload.latency",
    "latency_summary": "workload.latency",
    # costs
    "device_cost_model": "estimate.device_model",
    "price_step": "estimate.step_cost",
    "estimate_startup": "estimate.startup",
    "estimate_graph_memory": "estimate.graph_memory",
    "AffineCostModel": "plan.costs",
    # planning and the verdict
    "plan_capture_sizes": "plan.planner",
    "plan_gen2_capture_sizes": "plan.planner_v2",
    "export_plan": "plan.ladder_compare",
    "compare": "plan.ladder_compare",
    "evaluate": "plan.whatif",
    "tune": "plan.tune",
    # sweeps, reports and dashboards
    "SweepSpec": "sweep.spec",
    "run_sweep": "sweep.run",
    "load_results": "sweep.store",
    "write_report": "views.report",
    "tune_dashboard": "views.tune_dashboard",
    "whatif_dashboard": "views.whatif_widgets",
    "dispatch_explorer": "views.widgets",
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
        from .core.compat_names import COMPAT_NAMES

        module = COMPAT_NAMES.get(name)
    if module is None:
        raise AttributeError(f"module 'cgdispatch' has no attribute {name!r}")
    # no public name equals a submodule's name: importing a submodule binds the package
    # attribute of that name to the module (tests/test_lazy_names.py checks)
    value = getattr(importlib.import_module(f".{module}", __name__), name)
    if name not in _LIVE:
        globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))
