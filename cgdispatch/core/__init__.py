"""The dispatcher layer: modes, configs, the generation registry and one package per vLLM
release. Importing it registers the releases cgdispatch models (oldest first)."""

from . import v1, v2  # noqa: F401  (each registers its Generation)
