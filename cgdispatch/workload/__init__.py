"""Workloads: step traces, the scheduler simulator, synthetic requests, trace-file loaders."""
