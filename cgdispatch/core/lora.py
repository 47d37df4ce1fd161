"""The active-LoRA counts vLLM captures graphs for (the same rule in every release)."""

from __future__ import annotations

__all__ = ["captured_lora_counts"]


def captured_lora_counts(max_loras: int, specialize_active_lora: bool) -> list[int]:
    """Active-LoRA counts that get their own graphs when LoRA is on.

    ``vllm/lora/utils.py get_captured_lora_counts``: counts run up to ``max_loras + 1``
    (the no-adapter slot counted). Unspecialised: ``[max_loras + 1]``; specialised: the
    powers of two up to ``max_loras + 1`` plus ``max_loras + 1`` itself
    (max_loras=4: 1, 2, 4, 5). Computed in O(log max_loras). LoRA off: ``[]``.
    """
    if max_loras <= 0:
        return []
    top = max_loras + 1
    if not specialize_active_lora:
        return [top]
    return [1 << k for k in range(top.bit_length()) if 1 << k < top] + [top]
