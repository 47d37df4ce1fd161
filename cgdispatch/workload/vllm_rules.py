"""Per-release scheduler rules: where vLLM's releases schedule differently.

Read from vLLM's own ``vllm/v1/core/sched/scheduler.py`` and ``vllm/config/scheduler.py`` of
each release and checked against both on the scheduler oracle's fixtures
(``tests/data/vllm_oracle/scheduler-*.json``). Each release's rules live in its
``Generation`` (``cgdispatch.core.v1``, ``cgdispatch.core.v2``); this module reads them
from the registry.
"""

from __future__ import annotations

from ..core.generation import GENERATIONS, SchedulerRules, check_version, default_release

__all__ = ["SchedulerRules", "scheduler_rules"]


def scheduler_rules(vllm_version: str) -> SchedulerRules:
    """The rules of ``vllm_version`` (a registered release; a float or patch release such
    as ``"0.34.0"`` is accepted)."""
    version = check_version(vllm_version)
    if version is None:
        raise ValueError(
            "vllm_version=None has no scheduler rules: name a release, e.g. "
            f"{default_release()!r} (known: {', '.join(GENERATIONS)})"
        )
    return GENERATIONS[version].scheduler
