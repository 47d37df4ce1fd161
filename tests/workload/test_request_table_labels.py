"""A bad cell of a request table is named by the frame's own index label, as the person who
built the frame counts rows, for every column: the numbers, the session columns and the
lists of ids (hash ids, prompt token ids)."""

from __future__ import annotations

import re

import numpy as np
import pandas as pd
import pytest

from cgdispatch.workload.request_table import check_requests


def _frame(rng: np.random.Generator, n: int) -> pd.DataFrame:
    labels = rng.choice(np.arange(1000, 100_000), size=n, replace=False)  # not positions
    return pd.DataFrame(
        {
            "arrival_s": np.sort(rng.uniform(0, 10, n)),
            "prompt_tokens": rng.integers(1, 50, n),
            "output_tokens": rng.integers(1, 50, n),
        },
        index=pd.Index(labels, name="request"),
    )


def _bad_row(frame: pd.DataFrame, rng: np.random.Generator) -> tuple[int, object]:
    pos = int(rng.integers(0, len(frame)))
    return pos, frame.index[pos]


@pytest.mark.parametrize("column", ["session_id", "turn", "delay_s"])
def test_a_bad_session_cell_is_named_by_its_label(column):
    rng = np.random.default_rng()
    frame = _frame(rng, int(rng.integers(3, 40)))
    frame["session_id"] = np.arange(len(frame))
    frame["turn"] = 0
    frame["delay_s"] = np.nan
    check_requests(frame)  # valid as built
    pos, label = _bad_row(frame, rng)
    bad = {"session_id": 0.5, "turn": -3, "delay_s": -1.0}[column]
    frame[column] = frame[column].astype(float)
    frame.iloc[pos, frame.columns.get_loc(column)] = bad
    with pytest.raises(ValueError, match=rf"row {label}: {column}="):
        check_requests(frame)


@pytest.mark.parametrize("column", ["hash_ids", "prompt_token_ids"])
def test_a_bad_id_list_is_named_by_its_label(column):
    rng = np.random.default_rng()
    frame = _frame(rng, int(rng.integers(3, 40)))
    if column == "hash_ids":
        cells = [list(rng.integers(0, 9, max(1, p // 16))) for p in frame["prompt_tokens"]]
    else:
        cells = [list(rng.integers(0, 500, p)) for p in frame["prompt_tokens"]]
    frame[column] = cells
    check_requests(frame)
    pos, label = _bad_row(frame, rng)
    broken = list(cells)
    broken[pos] = ["x"]
    frame[column] = broken
    with pytest.raises(ValueError, match=rf"row {label}: {column}=\['x'\] is invalid"):
        check_requests(frame)
    if column == "prompt_token_ids":  # one id too many: the count rule, same label
        broken[pos] = cells[pos] + [7]
        frame[column] = broken
        with pytest.raises(
            ValueError, match=re.escape(f"row {label}: {column} holds {len(cells[pos]) + 1}")
        ):
            check_requests(frame)
