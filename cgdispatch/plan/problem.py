"""What the capture-size DP optimises: candidate sizes, step classes and their costs.

A :class:`PlanProblem` says, for each candidate size ``s_i`` (ascending) and each step class
``c`` (uniform decode, mixed), what a step of that class costs when it is padded to ``s_i``:
``graph_cost[c, i]`` per step when it replays a graph, or its own eager cost (summed into
``eager[c]``) when ``eager_flag[c, i]`` is set. Steps above the largest chosen size run
eagerly (``tail``). ``memory_bytes[i]`` and ``capture_s[i]`` are what capturing ``s_i``
costs. The DP (:mod:`cgdispatch.plan.dp`) solves any such problem; this module builds them
by vLLM V1's dispatch rules (:func:`v1_problem`). A generation-2 planner (decode request
counts per query length, a prefill token grid) builds one problem per ladder, as these.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd

from ..core.modes import CUDAGraphMode
from .costs import CostModel

__all__ = ["PlanProblem", "V1Rules", "v1_problem"]

NONE, FULL, PIECEWISE = CUDAGraphMode.NONE, CUDAGraphMode.FULL, CUDAGraphMode.PIECEWISE


@dataclass(frozen=True)
class PlanProblem:
    """Candidates and per-class costs (see module doc); arrays are over candidates ``[m]``
    or ``[classes, m]``. ``fixed_top``: the largest candidate must be captured."""

    sizes: np.ndarray  # [m] int64 ascending candidate sizes
    counts: np.ndarray  # [C, m] steps of each class whose smallest candidate >= n is s_i
    eager: np.ndarray  # [C, m] summed eager cost of those steps
    graph_cost: np.ndarray  # [C, m] cost per step padded to s_i (0 where eager_flag)
    eager_flag: np.ndarray  # [C, m] 1.0 where such a step runs eagerly at its own size
    tail_cost: np.ndarray  # [m] cost of the steps above s_i, eager (if s_i were the largest)
    capture_s: np.ndarray  # [m] modelled capture seconds of s_i (0 without a model)
    # [m] graph pool s_i needs alone, or (a model that prices each graph) what its graphs
    # add to the pool; 0 without a model
    memory_bytes: np.ndarray
    fixed_top: bool

    @property
    def monge(self) -> bool:
        """Whether the segment costs are Monge (every per-step cost non-decreasing in the
        size): then the DP's split points are monotone (divide and conquer is exact)."""
        return bool(np.all(np.diff(self.graph_cost, axis=1) >= 0)) and bool(
            np.all(np.diff(self.eager_flag, axis=1) >= 0)
        )


@dataclass(frozen=True)
class V1Rules:
    """The dispatch facts the planner needs (docs/semantics.md): the mode, the uniform
    decode query length ``q`` and ``max_num_seqs`` (FULL decode keys exist for sizes
    ``q <= s <= q * max_num_seqs`` when the mode has a separate decode routine)."""

    mode: CUDAGraphMode
    q: int = 1
    max_num_seqs: int = 256

    def runtime_modes(self, sizes: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Runtime mode codes (0 NONE, 1 PIECEWISE, 2 FULL) of decode and mixed steps
        padded to each size."""
        dec_mode, mix_mode = self.mode.decode_mode(), self.mode.mixed_mode()
        mix = np.full(len(sizes), mix_mode.value, dtype=np.int64)
        if dec_mode is FULL and self.mode.separate_routine():
            # the exact uniform key needs a padded size that is a multiple of q
            has_key = (sizes >= self.q) & (sizes <= self.q * self.max_num_seqs)
            has_key &= sizes % self.q == 0
            dec = np.where(has_key, FULL.value, mix_mode.value)  # else the relaxed key
        else:
            dec = np.full(len(sizes), dec_mode.value, dtype=np.int64)
        return dec, mix


def _graphs_per_size(rules: V1Rules, sizes: np.ndarray) -> list[tuple[CUDAGraphMode, np.ndarray]]:
    """(mode, mask of sizes that capture a graph of that mode): what capturing costs."""
    mix_mode = rules.mode.mixed_mode()
    out = []
    if mix_mode is not NONE:
        out.append((mix_mode, np.ones(len(sizes), dtype=bool)))
    if rules.mode.separate_routine() and rules.mode.decode_mode() is FULL:
        out.append((FULL, (sizes >= rules.q) & (sizes <= rules.q * rules.max_num_seqs)))
    return out


def v1_problem(
    hist: pd.DataFrame,
    rules: V1Rules,
    sizes: np.ndarray,
    cost_model: CostModel | None,
    *,
    objective: str,
    fixed_top: bool,
    budgets: bool = False,
) -> PlanProblem:
    """The problem of choosing among candidate ``sizes`` for the steps of ``hist``.

    ``objective="padding"``: cost = padded size per graph-replayed step (the constant real
    tokens are left out), eager steps cost 0. ``"time"``: the cost model's step time at the
    runtime mode the dispatcher would pick for the padded size, eager steps at their own
    size. ``hist`` rows above ``sizes[-1]`` are the tail. ``budgets``: fill ``capture_s``
    and ``memory_bytes`` from the cost model (it needs ``capture_time_s`` and
    ``graph_memory_bytes`` then).
    """
    n = hist.index.to_numpy(dtype=np.int64)
    per_class = [hist["uniform_decode"].to_numpy(np.float64), hist["mixed"].to_numpy(np.float64)]
    m = len(sizes)
    modes = rules.runtime_modes(sizes)
    own_modes = rules.runtime_modes(n)  # NONE here: eager whatever the sizes
    bucket = np.searchsorted(sizes, n)  # smallest candidate >= n (m: above every candidate)
    inside = bucket < m
    eager_ms = _eager_cost(cost_model, objective, n)
    counts, eager = np.zeros((2, m)), np.zeros((2, m))
    graph_cost, flag = np.zeros((2, m)), np.zeros((2, m))
    constant = 0.0  # steps no plan changes: eager anyway, or above every candidate
    for c, (count, mode_of_size, own) in enumerate(zip(per_class, modes, own_modes)):
        use = inside & (own != NONE.value)
        constant += float(np.sum(count[~use] * eager_ms[~use]))
        counts[c] = np.bincount(bucket[use], count[use], m)
        eager[c] = np.bincount(bucket[use], count[use] * eager_ms[use], m)
        flag[c] = mode_of_size == NONE.value
        for code in (FULL.value, PIECEWISE.value):
            sel = mode_of_size == code
            if sel.any():
                graph_cost[c, sel] = _graph_cost(cost_model, objective, code, sizes[sel])
    # if s_i is the largest size, the steps of every later bucket run eagerly
    later = np.concatenate([np.cumsum(eager.sum(axis=0)[::-1])[::-1][1:], [0.0]])
    capture, memory = np.zeros(m), np.zeros(m)
    additive = bool(getattr(cost_model, "graph_memory_additive", False))
    if budgets and cost_model is not None:
        for mode, mask in _graphs_per_size(rules, sizes):
            if mask.any() and callable(getattr(cost_model, "capture_time_s", None)):
                capture[mask] += cost_model.capture_time_s(mode, sizes[mask])
            if mask.any() and callable(getattr(cost_model, "graph_memory_bytes", None)):
                graph = cost_model.graph_memory_bytes(mode, sizes[mask])
                # priced per graph: a size's graphs add up; else one pool, the largest
                memory[mask] = memory[mask] + graph if additive else np.maximum(memory[mask], graph)
    return PlanProblem(
        sizes, counts, eager, graph_cost, flag, later + constant, capture, memory, fixed_top
    )


def _eager_cost(cost_model: CostModel | None, objective: str, n: np.ndarray) -> np.ndarray:
    if objective == "padding":
        return np.zeros(len(n))
    return np.asarray(cost_model.step_time_ms(NONE, n), dtype=np.float64)


def _graph_cost(
    cost_model: CostModel | None, objective: str, code: int, sizes: np.ndarray
) -> np.ndarray:
    if objective == "padding":
        return sizes.astype(np.float64)
    mode = FULL if code == FULL.value else PIECEWISE
    return np.asarray(cost_model.step_time_ms(mode, sizes), dtype=np.float64)
