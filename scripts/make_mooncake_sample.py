"""Write cgdispatch/data/mooncake_sample.jsonl: a small synthetic trace in the mooncake_trace
format (made up here, not taken from any service): 40 single requests over 20 s that open
with one of two 1,024-token system prompts (block ids 0-1 and 2-3), and 4 chat sessions of
3 turns whose later turns come `delay` ms after the previous answer. Run from the repository
root: python scripts/make_mooncake_sample.py
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np

BLOCK = 512
OUT = Path(__file__).resolve().parents[1] / "cgdispatch" / "data" / "mooncake_sample.jsonl"


def main() -> None:
    rng = np.random.default_rng(2026)
    lines = []
    fresh = 100
    for k, t in enumerate(np.sort(rng.uniform(0, 20_000, 40)).round()):
        user = int(rng.integers(20, 1500))
        prompt = 1024 + user
        ids = [0, 1] if k % 3 else [2, 3]
        more = -(-prompt // BLOCK) - 2
        ids += list(range(fresh, fresh + more))
        fresh += more
        out = int(rng.integers(10, 400))
        lines.append({"timestamp": int(t), "input_length": prompt, "output_length": out,
                      "hash_ids": ids})  # fmt: skip
    for s in range(4):
        start = int(rng.integers(0, 15_000))
        for turn in range(3):
            text = int(rng.integers(30, 900))
            n = -(-text // BLOCK)
            row = {"session_id": f"chat-{s}", "input_length": text,
                   "output_length": int(rng.integers(20, 300)),
                   "hash_ids": list(range(fresh, fresh + n))}  # fmt: skip
            fresh += n
            if turn == 0:
                row["timestamp"] = start
            else:
                row["delay"] = int(rng.integers(500, 4000))
            lines.append(row)
    OUT.write_text("".join(json.dumps(r) + "\n" for r in lines))


if __name__ == "__main__":
    main()
