"""Hugging Face causal LMs: the decode adapter, support checks, presets."""
