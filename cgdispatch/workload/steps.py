"""The step row both schedulers emit (the simulator's output, one row per engine step)."""

from __future__ import annotations

from dataclasses import dataclass, fields

__all__ = ["Step", "STEP_FIELDS", "LORA_COLUMN"]

# optional request column: LoRA adapter id, -1 for none (counted into has_lora / num_active_loras)
LORA_COLUMN = "lora_id"


@dataclass(frozen=True, slots=True)
class Step:
    """One simulated engine step (a row of the step trace)."""

    num_tokens: int  # scheduled tokens, unpadded
    num_reqs: int
    uniform_decode: bool  # every scheduled query is exactly q tokens long
    has_lora: bool
    num_active_loras: int  # distinct adapters scheduled
    num_prefill_tokens: int
    time_s: float  # step start on the model clock
    num_preempted: int = 0  # requests preempted while scheduling this step
    max_query_len: int = 0  # most tokens of one request
    num_decode_reqs: int = 0  # requests with only their newest token (and drafts) to run
    kv_blocks_used: int = 0  # KV blocks held after scheduling (0 without vllm_version)


STEP_FIELDS = tuple(f.name for f in fields(Step))
