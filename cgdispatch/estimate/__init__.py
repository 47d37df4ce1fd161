"""Estimate without a GPU: fake-tensor tracking, kernel profiles, device model, graph memory."""
