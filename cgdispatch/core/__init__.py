"""Decide: modes, batch descriptors, config, ladders and the dispatchers. No torch, no pandas."""
