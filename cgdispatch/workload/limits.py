"""The scheduler settings a simulated run obeys (vLLM's names), checked on construction.

Below both the simulator (:mod:`~cgdispatch.workload.scheduler`) and the exact run
(:mod:`~cgdispatch.workload.exact_run`), which read them.
"""

from __future__ import annotations

from dataclasses import dataclass

from ..core.validate import (
    MAX_BLOCK_SIZE,
    MAX_LORAS,
    MAX_MODEL_LEN,
    MAX_NUM_SEQS,
    MAX_SPECULATIVE_TOKENS,
    MAX_STEP_TOKENS,
    check_bool,
    check_int,
)
from .vllm_rules import scheduler_rules

__all__ = ["SchedulerLimits"]

_OPTIONAL = frozenset({"max_loras", "max_model_len", "num_gpu_blocks"})


@dataclass(frozen=True)
class SchedulerLimits:
    """The scheduler settings the simulator obeys (vLLM's names)."""

    max_num_seqs: int = 256  # requests per step
    max_num_batched_tokens: int = 8192  # tokens per step
    num_speculative_tokens: int = 0  # a decode schedules q = 1 + this tokens
    spec_acceptance_rate: float = 0.7  # each draft token accepted with this probability
    enable_chunked_prefill: bool = True  # prompts split to fit the step's token budget
    max_loras: int | None = None  # adapters per step (None: no limit)
    # vLLM's own scheduler of this release (a registered one; its Generation holds what differs);
    # None: the older vLLM-like model, which takes none of the fields below
    vllm_version: str | None = None
    long_prefill_token_threshold: int = 0  # prompt tokens per request per step (0: no cap)
    max_model_len: int | None = None  # a request ends at this many tokens (None: no limit)
    block_size: int = 16  # tokens per KV-cache block
    num_gpu_blocks: int | None = (
        None  # vLLM's num_gpu_blocks, null block included (None: unlimited)
    )
    async_scheduling: bool | None = None  # None: the release's default (0.34: on)
    # vLLM's automatic prefix caching (on by default, as in vLLM V1); vLLM's own scheduler
    # only: the older model ignores it. Prefix identity comes from the request table's
    # hash_ids / prompt_token_ids column (steps.HASH_IDS_COLUMN), else every prompt is unique
    enable_prefix_caching: bool = True
    hash_block_size: int = 512  # prompt tokens per entry of a request's hash_ids

    def __post_init__(self) -> None:
        set_ = object.__setattr__
        for name, minimum, bound in (
            ("max_num_seqs", 1, MAX_NUM_SEQS),
            ("max_num_batched_tokens", 1, MAX_STEP_TOKENS),
            ("num_speculative_tokens", 0, MAX_SPECULATIVE_TOKENS),
            ("long_prefill_token_threshold", 0, MAX_STEP_TOKENS),
            ("block_size", 1, MAX_BLOCK_SIZE),
            ("max_loras", 1, MAX_LORAS),
            ("max_model_len", 2, MAX_MODEL_LEN),
            ("num_gpu_blocks", 2, MAX_STEP_TOKENS),
            ("hash_block_size", 1, MAX_STEP_TOKENS),
        ):
            value = getattr(self, name)
            if value is not None or name not in _OPTIONAL:
                set_(self, name, check_int(name, value, minimum, bound))
        if self.q > self.max_num_batched_tokens:
            raise ValueError(
                f"1 + num_speculative_tokens = {self.q} exceeds max_num_batched_tokens="
                f"{self.max_num_batched_tokens}"
            )
        if not 0.0 <= self.spec_acceptance_rate <= 1.0:
            raise ValueError(
                f"spec_acceptance_rate={self.spec_acceptance_rate} is invalid: it must be in [0, 1]"
            )
        set_(
            self,
            "enable_chunked_prefill",
            check_bool("enable_chunked_prefill", self.enable_chunked_prefill),
        )
        set_(
            self,
            "enable_prefix_caching",
            check_bool("enable_prefix_caching", self.enable_prefix_caching),
        )
        if self.async_scheduling is not None:
            set_(self, "async_scheduling", check_bool("async_scheduling", self.async_scheduling))
        if self.vllm_version is not None:
            scheduler_rules(self.vllm_version)  # ValueError naming the known releases
        elif self.exact_only_fields():
            raise ValueError(
                f"{', '.join(self.exact_only_fields())} need vLLM's own scheduler: set "
                "vllm_version (a release, e.g. cgdispatch.NEWEST.release) as well"
            )

    def exact_only_fields(self) -> list[str]:
        """The fields set away from their defaults that only vLLM's own scheduler obeys."""
        defaults = {"long_prefill_token_threshold": 0, "max_model_len": None, "block_size": 16,
                    "num_gpu_blocks": None, "async_scheduling": None}  # fmt: skip
        return [name for name, v in defaults.items() if getattr(self, name) != v]

    @property
    def q(self) -> int:
        return 1 + self.num_speculative_tokens

    @property
    def is_async(self) -> bool:
        """Whether the engine loop is async (the release's default when not set)."""
        if self.async_scheduling is not None:
            return self.async_scheduling
        return self.vllm_version is not None and scheduler_rules(self.vllm_version).async_by_default
