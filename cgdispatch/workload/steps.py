"""The step row both schedulers emit (the simulator's output, one row per engine step)."""

from __future__ import annotations

from dataclasses import dataclass, fields

__all__ = ["Step", "STEP_FIELDS", "LORA_COLUMN", "HASH_IDS_COLUMN", "TOKEN_IDS_COLUMN"]

# optional request column: LoRA adapter id, -1 for none (counted into has_lora / num_active_loras)
LORA_COLUMN = "lora_id"
# optional request columns for prefix caching (one of them): a list of ints per request, one id
# per SchedulerLimits.hash_block_size prompt tokens (mooncake_trace's hash_ids: equal ids =
# equal tokens), or the prompt's token ids themselves. Without either every prompt is unique.
HASH_IDS_COLUMN = "hash_ids"
TOKEN_IDS_COLUMN = "prompt_token_ids"


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
    # prompt tokens the requests admitted by this step found in vLLM's prefix cache (a resumed
    # request's own cached output counts too); 0 without vllm_version or prefix caching
    num_cached_tokens: int = 0


STEP_FIELDS = tuple(f.name for f in fields(Step))
