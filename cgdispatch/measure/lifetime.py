"""What a caller may keep: a step's result held across a step of another size.

``output_lifetime_table`` runs the same two steps with weak outputs (vLLM's rule, the
default) and with strong ones (``GraphRunner(weak_outputs=False)``), and says whether the
held result and a copy of it still equal the model's own answer afterwards, next to the
graph pool each policy costs (the CPU stand-in's ledger, or the estimate). Notebook 02
shows it. It demonstrates; the tests in ``tests/capture/test_lifetime.py`` check.
"""

from __future__ import annotations

from collections.abc import Sequence

import pandas as pd
import torch

from ..capture.runner import GraphRunner
from ..core.config import GraphConfig
from ..core.v1 import RELEASE as V1_RELEASE
from ..estimate.graph_memory import estimate_graph_memory
from ..models.toy import build_toy_model

__all__ = ["output_lifetime_table"]


def output_lifetime_table(
    preset: str = "toy-tiny",
    mode: str = "FULL_AND_PIECEWISE",
    sizes: Sequence[int] = (1, 2, 4, 8),
    *,
    held_size: int = 4,
    other_size: int = 8,
    seed: int = 0,
) -> pd.DataFrame:
    """One row per output policy: is a held result (and its copy) still right after a step
    of ``other_size``? With the pool bytes of each policy (CPU stand-in ledger, estimate)."""
    if held_size == other_size or not {held_size, other_size} <= set(sizes):
        raise ValueError(
            f"held_size={held_size}, other_size={other_size} are invalid: pick two different "
            f"capture sizes from {list(sizes)}, so that the second step replays another graph"
        )
    rows = []
    for weak in (True, False):
        model = build_toy_model(preset, seed=seed)
        model.fill_kv_cache_(seed + 1)
        config = GraphConfig(  # one token ladder: V1's sizes
            vllm_version=V1_RELEASE,
            cudagraph_mode=mode,
            cudagraph_capture_sizes=list(sizes),
            max_num_seqs=model.num_slots,
        )
        with GraphRunner(model, config, weak_outputs=weak) as runner:
            runner.capture_all(progress=False)
            batch = runner.make_decode_batch(held_size, seed=seed + 2)
            with torch.no_grad():  # the model's own answer; the step below rewrites the same K/V
                expected = model(batch.input_ids, batch.positions, batch.slots)
            held = runner.execute_batch(batch)
            copy = held.clone()
            runner.execute_batch(runner.make_mixed_batch(other_size, seed=seed + 3))
            estimate = estimate_graph_memory(
                build_toy_model(preset, device="meta"), runner.config, keep_outputs=not weak
            )
            rows.append(
                {
                    "outputs": "weak (vLLM)" if weak else "strong",
                    "held_result_still_right": torch.allclose(held, expected, atol=1e-5),
                    "copy_still_right": torch.allclose(copy, expected, atol=1e-5),
                    "pool_bytes_stand_in": runner.backend.ledger.pool_bytes,
                    "pool_bytes_estimate": estimate.shared_pool_bytes,
                }
            )
    frame = pd.DataFrame(rows).set_index("outputs")
    frame.attrs["source"] = "measured (CPU stand-in ledger); estimate: model"
    return frame
