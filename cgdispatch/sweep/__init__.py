"""Sweeps: specs, resumable runs on any executor, the result store."""
