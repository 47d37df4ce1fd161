"""A trace on which vLLM's own scheduler fails an assertion is refused with the cause and the
fix, not replayed as if vLLM ran it: vLLM 0.33.0 and 0.34.0 pad a decode admitted from the
waiting queue (here a one-token prompt arriving while another request decodes) to
``1 + num_speculative_tokens`` tokens, cut it to a smaller ``long_prefill_token_threshold``
and assert (``vllm/v1/core/sched/scheduler.py``). With an oracle virtualenv
(``CGDISPATCH_ORACLE_VENV``) the same inputs go through vLLM itself: it stops where the replay
refuses, and where the replay runs, vLLM runs the same steps."""

from __future__ import annotations

import json
import os
import random
import subprocess
from pathlib import Path
from typing import Any

import pytest

from tests.workload.test_scheduler_oracle import VERSIONS, expected, replay, simulator

# settings below 1 + num_speculative_tokens here are vLLM's own recorded runs, which did not
# stop, or cases refused on purpose: the warning SchedulerLimits gives on them is expected
pytestmark = pytest.mark.filterwarnings(
    "ignore:long_prefill_token_threshold=.* is below:UserWarning"
)

ROOT = Path(__file__).resolve().parents[2]


def case_for(k: int, lpt: int, asynchronous: bool, rng: random.Random) -> dict[str, Any]:
    """Request 0 decodes (drafts on) when request 1, of one prompt token, arrives: alone,
    request 0 prefills in one call (the threshold applies only with two requests or more,
    in vLLM as in the replay) and decodes for at least 200 / (1 + k) >= 40 calls."""
    prompt = rng.randint(20, 200)
    arrives = rng.randint(2, 8)  # in calls: the oracle's clock is one per call
    engine_args = {
        "max_num_seqs": 8,
        "max_num_batched_tokens": 256,
        "max_model_len": 1024,
        "block_size": 16,
        "enable_chunked_prefill": True,
        "async_scheduling": asynchronous,
        "num_speculative_tokens": k,
        "long_prefill_token_threshold": lpt,
    }
    requests = [[0, prompt, rng.randint(200, 400), 0], [arrives, 1, rng.randint(2, 20), 0]]
    config = {**engine_args, "max_loras": None}
    inputs = {
        "engine_args": engine_args,
        "requests": requests,
        "num_gpu_blocks": None,
        "accept_mod": rng.randint(2, 5),
    }
    return {"inputs": inputs, "config": config}


def settings(version: str) -> list[bool]:
    # vLLM 0.33 refuses async scheduling with ngram drafts (its config check)
    return [False] if version == "0.33.0" else [False, True]


@pytest.mark.parametrize("version", VERSIONS)
def test_a_padded_decode_cut_by_the_threshold_is_refused_with_the_fix(version: str) -> None:
    rng = random.Random()
    for asynchronous in settings(version):
        k = rng.randint(1, 4)
        lpt = rng.randint(1, k)  # below 1 + k: vLLM cuts the padded decode
        with pytest.raises(ValueError, match=rf"long_prefill_token_threshold={lpt}") as err:
            simulator(case_for(k, lpt, asynchronous, rng), version, record_calls=True).run()
        assert f"to 0 or to at least {1 + k}" in str(err.value)
        # the fix: a threshold of 1 + k (or off) runs both requests to the end
        for fixed in (1 + k, 0):
            frame = simulator(case_for(k, fixed, asynchronous, rng), version, True).run()
            assert frame["num_tokens"].sum() > 0


def _vllm_runs(venv: Path, case: dict[str, Any]) -> dict[str, Any]:
    code = (
        "import json, sys; sys.path.insert(0, sys.argv[1]); import vllm_oracle as base; "
        "import vllm_sched_oracle as o; base.bootstrap(); "
        "print(json.dumps(o.run_case(json.loads(sys.argv[2]))))"
    )
    cmd = [str(venv / "bin" / "python"), "-c", code, str(ROOT / "scripts")]
    out = subprocess.run(
        [*cmd, json.dumps(case["inputs"])], check=True, capture_output=True, text=True, timeout=600
    )
    return json.loads(out.stdout.strip().splitlines()[-1])


@pytest.mark.skipif(
    not os.environ.get("CGDISPATCH_ORACLE_VENV"),
    reason="no oracle virtualenv: set CGDISPATCH_ORACLE_VENV to run vLLM live",
)
@pytest.mark.parametrize("version", VERSIONS)
def test_vllm_itself_stops_where_the_replay_refuses(version: str) -> None:
    venv = Path(os.environ["CGDISPATCH_ORACLE_VENV"]) / f"vllm-{version}"
    if not (venv / "bin" / "python").exists():
        pytest.skip(f"{venv} holds no virtualenv")
    rng = random.Random()
    for asynchronous in settings(version):
        k = rng.randint(1, 4)
        for lpt in (rng.randint(1, k), 1 + k):
            case = case_for(k, lpt, asynchronous, rng)
            got = _vllm_runs(venv, case)
            if lpt <= k:
                assert got["crash"]["where"].startswith("vllm/v1/core/sched/scheduler.py:")
                with pytest.raises(ValueError, match="long_prefill_token_threshold"):
                    simulator(case, version, record_calls=True).run()
            else:
                assert "crash" not in got and "refusal" not in got
                assert replay({**case, **got}, version) == expected({**case, **got})


def test_settings_vllm_can_stop_on_are_warned_of_when_made() -> None:
    """The limits warn on construction, naming both values and the fix, exactly when a
    one-token admission padded to 1 + k would be cut (drafts on, 0 < threshold < 1 + k)."""
    import warnings

    from cgdispatch import SchedulerLimits

    rng = random.Random()
    for _ in range(40):
        k = rng.randint(1, 8)
        lpt = rng.randint(1, k)  # below 1 + k
        with pytest.warns(UserWarning) as caught:
            SchedulerLimits(num_speculative_tokens=k, long_prefill_token_threshold=lpt)
        text = str(caught[0].message)
        assert f"long_prefill_token_threshold={lpt}" in text and f"= {1 + k}" in text
        assert f"to 0 or to at least {1 + k}" in text
        safe = [(k, 0, True, "0.34"), (k, 1 + k + rng.randint(0, 50), True, "0.34")]
        safe += [(0, lpt, True, "0.34"), (k, lpt, False, "0.34")]  # 0.34: chunked only
        for drafts, threshold, chunked, version in safe:
            with warnings.catch_warnings():
                warnings.simplefilter("error")
                SchedulerLimits(
                    num_speculative_tokens=drafts,
                    long_prefill_token_threshold=threshold,
                    enable_chunked_prefill=chunked,
                    vllm_version=version,
                )
        with pytest.warns(UserWarning):  # 0.33 applies the threshold without chunking too
            SchedulerLimits(
                num_speculative_tokens=k,
                long_prefill_token_threshold=lpt,
                enable_chunked_prefill=False,
                vllm_version="0.33",
            )
