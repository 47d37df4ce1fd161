"""``cgdispatch.replay_scheduler``, the one entry point to the replay of vLLM's scheduler: the
same rows as the per-call replay (``ExactRun`` with every schedule call recorded) on fresh
random traces, a constant clock through its record callable, its refusals, and the one home
of scheduler limits (``scheduler_limits``; no other ``SchedulerLimits(`` in the package, no
second scheduler model)."""

from __future__ import annotations

import math
import re
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

import cgdispatch
from cgdispatch import GraphConfig, SchedulerLimits, StepContent, replay_scheduler
from cgdispatch.core.generation import VLLM_VERSIONS
from cgdispatch.workload.exact_run import ExactRun
from cgdispatch.workload.limits import kv_cache_blocks, scheduler_limits
from cgdispatch.workload.replay import default_step_time_ms
from cgdispatch.workload.request_table import check_requests
from cgdispatch.workload.scheduler import SchedulerSimulator
from cgdispatch.workload.steps import LORA_COLUMN, STEP_FIELDS
from cgdispatch.workload.trace import simulate_steps

PACKAGE = Path(cgdispatch.__file__).resolve().parent


def _random_case(rng: np.random.Generator) -> tuple[pd.DataFrame, SchedulerLimits]:
    n = int(rng.integers(1, 90))
    req = pd.DataFrame(
        {
            # bursts share an arrival time; idle gaps between them; unsorted on purpose
            "arrival_s": np.round(rng.exponential(0.05, n).cumsum(), 1),
            "prompt_tokens": rng.integers(1, 500, n),
            "output_tokens": rng.integers(1, 60, n),
        }
    ).sample(frac=1.0, random_state=int(rng.integers(1 << 30)))
    lora = bool(rng.random() < 0.3)
    if lora:
        req[LORA_COLUMN] = rng.integers(-1, 4, n)
    block = int(rng.choice([8, 16]))
    longest = int((req["prompt_tokens"] + req["output_tokens"]).max())
    limits = SchedulerLimits(
        vllm_version=str(rng.choice(list(VLLM_VERSIONS))),
        max_num_seqs=int(rng.integers(1, 40)),
        max_num_batched_tokens=int(rng.integers(16, 700)),
        num_speculative_tokens=int(rng.integers(0, 3)),
        spec_acceptance_rate=float(rng.choice([0.0, 0.6, 1.0])),
        max_loras=int(rng.integers(1, 3)) if lora else None,
        block_size=block,
        # sometimes a KV cache small enough to preempt: the longest request plus a little
        num_gpu_blocks=(
            None if rng.random() < 0.4 else -(-longest // block) + 1 + int(rng.integers(0, 60))
        ),
        async_scheduling=bool(rng.random() < 0.5),
    )
    return req, limits


def _reference(req: pd.DataFrame, limits: SchedulerLimits, seed: int) -> pd.DataFrame:
    """The existing exact path, built by hand: the checked table sorted by arrival, every
    schedule call recorded one by one (no steady-decode bulk path)."""
    table = check_requests(req)
    table = table.sort_values("arrival_s", kind="stable")
    return ExactRun(table, limits, default_step_time_ms, seed, None, record_calls=True).frame()


@pytest.mark.parametrize("case", range(8))
def test_rows_equal_the_per_call_replay_on_fresh_random_traces(case: int) -> None:
    entropy = np.random.SeedSequence().entropy  # fresh each run, printed on failure
    rng = np.random.default_rng(entropy)
    req, limits = _random_case(rng)
    seed = int(rng.integers(0, 1000))
    got = replay_scheduler(req, limits, seed=seed)
    want = _reference(req, limits, seed)
    assert list(got.columns) == list(STEP_FIELDS), entropy
    assert {"num_tokens", "num_reqs", "num_preempted"} <= set(got.columns)
    pd.testing.assert_frame_equal(got, want, check_exact=True, obj=f"entropy {entropy}")
    # the step-by-step view is the same run
    sim = SchedulerSimulator(req, limits, seed=seed)
    steps = []
    while (step := sim.step()) is not None:
        steps.append(step)
    assert [tuple(getattr(s, f) for f in STEP_FIELDS) for s in steps] == list(
        want.itertuples(index=False, name=None)
    ), entropy
    # every prompt and output token is scheduled (drafts aside, preemption recomputes)
    if not limits.num_speculative_tokens and not got["num_preempted"].any():
        total = int(req["prompt_tokens"].sum() + (req["output_tokens"] - 1).sum())
        assert int(got["num_tokens"].sum()) == total, entropy


@pytest.mark.parametrize("version", VLLM_VERSIONS)
def test_a_constant_clock_sees_each_steps_record_and_sets_its_time(version: str) -> None:
    rng = np.random.default_rng()
    n = int(rng.integers(5, 60))
    req = pd.DataFrame(
        {
            "arrival_s": np.sort(rng.uniform(0, 2.0, n)),
            "prompt_tokens": rng.integers(1, 400, n),
            "output_tokens": rng.integers(1, 40, n),
        }
    )
    ms = float(rng.choice([2.5, 10.0, 40.0]))
    seen: list[StepContent] = []

    def clock(record: StepContent) -> float:
        seen.append(record)
        return ms

    limits = SchedulerLimits(vllm_version=version, max_num_batched_tokens=512, max_num_seqs=16)
    got = replay_scheduler(req, limits, step_time_ms=clock)
    # the same run as the replay's own two-argument clock at the same constant
    want = SchedulerSimulator(req, limits, step_time_ms=lambda t, r: ms if t else 0.0).run()
    pd.testing.assert_frame_equal(got, want, check_exact=True)
    # one record per step that ran, in order, holding that step's tokens and requests
    assert [(c.num_tokens, c.num_reqs) for c in seen] == list(
        zip(got["num_tokens"].tolist(), got["num_reqs"].tolist())
    )
    # each step starts one constant step after the previous, or at an arrival (idle)
    t = got["time_s"].to_numpy()
    arrivals = set(req["arrival_s"].tolist())
    for before, after in zip(t[:-1], t[1:]):
        assert math.isclose(after - before, ms / 1e3, abs_tol=1e-9) or after in arrivals


def test_no_release_means_the_newest_decided_once() -> None:
    newest = max(VLLM_VERSIONS, key=lambda v: tuple(int(p) for p in v.split(".")))
    assert SchedulerLimits().vllm_version == newest
    assert scheduler_limits().vllm_version == newest
    rng = np.random.default_rng()
    req = pd.DataFrame(
        {"arrival_s": np.sort(rng.uniform(0, 1, 30)), "prompt_tokens": rng.integers(1, 300, 30),
         "output_tokens": rng.integers(1, 30, 30)}
    )  # fmt: skip
    pd.testing.assert_frame_equal(
        replay_scheduler(req), replay_scheduler(req, SchedulerLimits(vllm_version=newest))
    )


def test_scheduler_limits_take_the_config_then_the_settings() -> None:
    rng = np.random.default_rng()
    version = str(rng.choice(list(VLLM_VERSIONS)))
    seqs, spec = int(rng.integers(1, 64)), int(rng.integers(0, 3))
    config = GraphConfig(
        vllm_version=version,
        max_num_seqs=seqs,
        # at least one step of every sequence with its drafts (vLLM's rule: resolve refuses less)
        max_num_batched_tokens=int(rng.integers(seqs * (1 + spec) + 8, 4096)),
        num_speculative_tokens=spec,
        max_loras=int(rng.integers(0, 3)),
    ).resolve()
    blocks = int(rng.integers(2, 5000))
    got = scheduler_limits(config, num_gpu_blocks=blocks, max_model_len=None)
    assert got == SchedulerLimits(
        vllm_version=version,
        max_num_seqs=config.max_num_seqs,
        max_num_batched_tokens=config.max_num_batched_tokens,
        num_speculative_tokens=config.num_speculative_tokens,
        max_loras=config.max_loras if config.max_loras else None,
        num_gpu_blocks=blocks,
    )
    assert scheduler_limits(config, max_num_seqs=1).max_num_seqs == 1  # a setting wins


def test_kv_cache_blocks_are_whole_blocks_plus_the_null_block() -> None:
    rng = np.random.default_rng()
    for _ in range(50):
        tokens, size = int(rng.integers(0, 10**6)), int(rng.choice([8, 16, 32]))
        assert kv_cache_blocks(tokens, size) == max(2, tokens // size + 1)
    with pytest.raises(ValueError, match=r"kv_cache_tokens=nan is invalid: give a finite"):
        kv_cache_blocks(float("nan"))


def _one_request() -> pd.DataFrame:
    return pd.DataFrame({"arrival_s": [0.0], "prompt_tokens": [5], "output_tokens": [3]})


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"limits": {"max_num_seqs": 4}}, r"limits=\{'max_num_seqs': 4\} is not a SchedulerLimits"),
        ({"step_time_ms": 5.0}, r"step_time_ms=5.0 is not callable: give a function"),
        ({"step_time_ms": lambda rec: -1.0}, r"step_time_ms returned -1.0 .* finite number"),
        ({"step_time_ms": lambda rec: float("nan")}, r"returned nan .* fix the callable"),
        ({"step_time_ms": lambda rec: "fast"}, r"returned 'fast' .* >= 0"),
        ({"seed": -1}, r"seed=-1 is invalid: give a whole number >= 0"),
        ({"progress": "yes"}, r"progress='yes' is invalid: give True or False"),
    ],
)
def test_bad_inputs_name_the_value_the_rule_and_the_fix(kwargs: dict, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        replay_scheduler(_one_request(), **kwargs)


def test_bad_requests_and_settings_are_refused() -> None:
    with pytest.raises(ValueError, match=r"lacks columns \['output_tokens'\]"):
        replay_scheduler(_one_request().drop(columns="output_tokens"))
    with pytest.raises(ValueError, match=r"without chunked prefill: enable it or raise"):
        replay_scheduler(
            _one_request().assign(prompt_tokens=600),
            SchedulerLimits(enable_chunked_prefill=False, max_num_batched_tokens=512),
        )
    with pytest.raises(ValueError, match=r"\['max_seqs'\] are unknown: SchedulerLimits has"):
        scheduler_limits(max_seqs=4)
    with pytest.raises(ValueError, match=r"vllm_version='9.9' is unknown"):
        scheduler_limits(vllm_version="9.9")


def test_simulate_steps_is_the_replay_under_its_limits() -> None:
    rng = np.random.default_rng()
    req, limits = _random_case(rng)
    got = simulate_steps(req, limits)
    want = replay_scheduler(req, limits)
    pd.testing.assert_frame_equal(got, want[list(got.columns)], check_exact=True)


def _sources() -> list[tuple[str, str]]:
    return [(p.relative_to(PACKAGE).as_posix(), p.read_text()) for p in PACKAGE.rglob("*.py")]


def test_one_home_for_limits_and_one_scheduler() -> None:
    """The package builds ``SchedulerLimits`` only in workload/limits.py (``scheduler_limits``)
    and steps a request table only through the replay: no other scheduler model, and
    ``SchedulerSimulator`` (the step-by-step view) has no caller inside the package."""
    built = [p for p, text in _sources() if "SchedulerLimits(" in _code(text)]
    assert built == ["workload/limits.py"]
    stepped = [p for p, text in _sources() if re.search(r"SchedulerSimulator\(", _code(text))]
    assert stepped == []


def _code(text: str) -> str:
    """``text`` without comments and docstrings' double-backquoted names."""
    text = re.sub(r"#.*", "", text)
    return re.sub(r"``[^`]*``", "", text)


def test_workload_trace_replays_the_configs_release() -> None:
    """What notebook 04, ``plan`` and ``tune`` read: a preset's requests through the replay of
    the config's release (0.33 here and there), one ``scheduler_limits`` value."""
    from cgdispatch import synthetic_requests, workload_trace

    rng = np.random.default_rng()
    version = str(rng.choice(list(VLLM_VERSIONS)))
    config = GraphConfig(vllm_version=version, max_num_seqs=int(rng.integers(4, 64))).resolve()
    seed = int(rng.integers(1 << 20))
    trace, label = workload_trace("sharegpt", num_requests=80, rate_per_s=30.0, seed=seed,
                                  limits=scheduler_limits(config, num_gpu_blocks=400))  # fmt: skip
    requests = synthetic_requests(80, "sharegpt", rate_per_s=30.0, seed=seed)
    limits = SchedulerLimits(vllm_version=version, max_num_seqs=config.max_num_seqs,
                             max_num_batched_tokens=config.max_num_batched_tokens,
                             num_gpu_blocks=400)  # fmt: skip
    want = replay_scheduler(requests, limits)
    pd.testing.assert_frame_equal(trace, want[list(trace.columns)], check_exact=True)
    assert "vLLM's scheduler replayed" in label
