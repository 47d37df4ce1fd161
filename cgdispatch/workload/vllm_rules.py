"""Per-release scheduler rules: the one place where vLLM 0.33 and 0.34 schedule differently.

Read from vLLM's own ``vllm/v1/core/sched/scheduler.py`` and ``vllm/config/scheduler.py`` of
each release and checked against both on the scheduler oracle's fixtures
(``tests/data/vllm_oracle/scheduler-*.json``). A new release adds a row here (the generation
registry routes ``vllm_version`` to it).
"""

from __future__ import annotations

from dataclasses import dataclass

from ..core.config_v2 import check_version

__all__ = ["SchedulerRules", "scheduler_rules"]


@dataclass(frozen=True, slots=True)
class SchedulerRules:
    """What one vLLM release's ``Scheduler`` does where releases differ."""

    async_by_default: bool  # SchedulerConfig.async_scheduling when the user leaves it unset
    # 0.34 applies long_prefill_token_threshold only with chunked prefill on; 0.33 always
    long_prefill_needs_chunked: bool


_RULES = {
    "0.33": SchedulerRules(async_by_default=False, long_prefill_needs_chunked=False),
    "0.34": SchedulerRules(async_by_default=True, long_prefill_needs_chunked=True),
}


def scheduler_rules(vllm_version: str) -> SchedulerRules:
    """The rules of ``vllm_version`` ('0.33' or '0.34'; a float or '0.34.0' is accepted)."""
    if isinstance(vllm_version, str) and vllm_version.count(".") == 2:
        vllm_version = vllm_version.rsplit(".", 1)[0]
    version = check_version(vllm_version)
    if version is None:
        raise ValueError("vllm_version=None has no scheduler rules: name a release, e.g. '0.34'")
    return _RULES[version]
