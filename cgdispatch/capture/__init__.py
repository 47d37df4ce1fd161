"""Capture and replay: forward context, graph backends, wrappers, piecewise backend, runner."""
