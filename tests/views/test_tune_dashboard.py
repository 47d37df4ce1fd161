"""The tune dashboard: its verdict is ``tune``'s for the controls' values, a control change
re-runs it, and a bad entry shows a message instead of a stale verdict."""

from __future__ import annotations

import html
import json
import re

import pytest

from cgdispatch import GraphConfig, SchedulerLimits, tune, tune_dashboard
from cgdispatch.estimate.device_model import device_cost_model
from cgdispatch.estimate.kv_bytes import kv_bytes_per_token
from cgdispatch.estimate.startup import startup_for
from cgdispatch.workload.sources import workload_requests, workload_trace


def shown(widget_html: str) -> dict[str, str]:
    head = widget_html.split(">", 1)[0]
    return {k: html.unescape(v) for k, v in re.findall(r'data-([a-z0-9-]+)="([^"]*)"', head)}


def plain(widget_html: str) -> str:
    """The verdict's text as one line: tags and the wrapping (line breaks, continuation
    backslashes, indents) taken out, so a phrase is found wherever the display breaks it."""
    text = html.unescape(re.sub(r"<[^>]+>", "", widget_html))
    return " ".join(text.replace(" \\\n", " ").split())


def direct(version: str, seqs: int, tokens: int, trace: str = "alpaca"):
    config = GraphConfig(vllm_version=version, max_num_seqs=seqs, max_num_batched_tokens=tokens)
    config = config.resolve()
    # the dashboard plans on vLLM's scheduler of the release with the default ladder's KV
    # cache (whole 16-token blocks plus the null block) from the start-up estimate
    startup = startup_for("qwen2.5-7b", "H100")
    blocks = int(startup(config).kv_cache_tokens // 16) + 1
    limits = SchedulerLimits(
        vllm_version=version, max_num_seqs=seqs, max_num_batched_tokens=tokens,
        num_gpu_blocks=blocks,
    )  # fmt: skip
    steps, label = workload_trace(trace, num_requests=200, rate_per_s=8.0, limits=limits)
    return tune(
        steps,
        config=config,
        cost_model=device_cost_model("qwen2.5-7b", "H100"),
        kv_bytes_per_token=kv_bytes_per_token("qwen2.5-7b"),
        trace_label=label,
        requests=workload_requests(trace, num_requests=200, rate_per_s=8.0),
        startup=startup,
    )


def test_the_verdict_is_tunes_and_follows_each_control() -> None:
    dash = tune_dashboard(
        model="qwen2.5-7b", device="H100", trace="alpaca", max_num_seqs=64,
        max_num_batched_tokens=2048, num_requests=200, draw=False,
    )  # fmt: skip
    for version, seqs in (("0.34", 64), ("0.34", 32), ("0.33", 32)):
        dash.version_box.value = version
        dash.seqs_box.value = seqs
        want = direct(version, seqs, 2048)
        got = shown(dash.verdict.value)
        assert got["recommendation"] == want.recommendation
        assert got["vllm-version"] == version and got["max-num-seqs"] == str(seqs)
        assert float(got["mean-step-pct"]) == pytest.approx(want.deltas["mean_step_pct"])
        assert got["flags"] == want.flags
        assert dash.result is not None and dash.result.planned == want.planned


def test_a_bad_entry_shows_a_message_and_clears_the_verdict() -> None:
    dash = tune_dashboard(
        num_requests=100, draw=False, max_num_seqs=32, max_num_batched_tokens=1024
    )
    assert "tune-verdict" in dash.verdict.value
    dash.trace_box.value = "no-such-trace.csv"
    assert dash.verdict.value == "" and dash.result is None
    assert "does not exist" in dash.message.value
    dash.trace_box.value = "sharegpt"
    assert "tune-verdict" in dash.verdict.value and dash.message.value == ""


@pytest.fixture(scope="module")
def dash():
    """One small dashboard shared by the bad-entry tests (each ends on a good entry). It
    opens with its figure drawn, then draws only in :func:`recovers` (0.2 s a figure): the
    traffic tests that follow each shows an error on a figure that was showing, so they
    prove an error clears it (one code path, ``_show_error``, for every control)."""
    board = tune_dashboard(
        num_requests=100, draw=True, max_num_seqs=32, max_num_batched_tokens=1024
    )
    assert board.plot.value and board.plot.layout.display is None
    board.draw = False
    return board


def assert_shows_error(dash, *needles: str) -> None:
    assert dash.result is None and dash.verdict.value == ""
    assert dash.plot.value == b"" and dash.plot.layout.display == "none"
    assert 'data-testid="dispatch-message"' in dash.message.value
    for needle in needles:
        assert needle in html.unescape(dash.message.value), dash.message.value
    assert dash.busy.value == "" and "cg-stale" not in dash.verdict._dom_classes


def recovers(dash) -> None:
    """A good traffic entry brings the verdict and its figure back (left showing)."""
    dash.draw = True
    try:
        dash.trace_box.value = "alpaca"
    finally:
        dash.draw = False
    assert "tune-verdict" in dash.verdict.value and dash.message.value == ""
    assert dash.plot.value and dash.plot.layout.display is None


def test_an_over_long_traffic_path_shows_a_message_not_an_exception(dash) -> None:
    path = "/tmp/" + "/".join(["d" * 200] * 30) + ".csv"  # longer than PATH_MAX (4096)
    dash.trace_box.value = path
    assert_shows_error(dash, "cannot be read", "File name too long", f"{len(path)} characters")
    recovers(dash)


def test_an_unreadable_traffic_file_shows_a_message(dash, monkeypatch) -> None:
    def refuse(path, **_):
        raise PermissionError(13, "Permission denied", path)

    for reader in ("read_workload",):  # tune_for reads the file once, through it
        monkeypatch.setattr(f"cgdispatch.workload.sources.{reader}", refuse)  # tune_for reads
    dash.trace_box.value = "/srv/locked.csv"
    assert_shows_error(dash, "'/srv/locked.csv' cannot be read (Permission denied)")
    monkeypatch.undo()
    recovers(dash)


def test_a_directory_or_a_file_that_is_no_trace_shows_its_message(dash, tmp_path) -> None:
    dash.trace_box.value = str(tmp_path)
    assert_shows_error(dash, "is a directory")
    recovers(dash)
    (tmp_path / "notes.csv").write_text("hello,world\n1,2\n")
    dash.trace_box.value = str(tmp_path / "notes.csv")
    assert_shows_error(dash, "holds neither requests")
    recovers(dash)


def test_max_num_seqs_below_one_is_named_not_clamped(dash) -> None:
    for bad in (0, -4):
        dash.seqs_box.value = bad
        assert dash.seqs_box.value == bad  # the box keeps what was typed
        assert_shows_error(dash, f"max_num_seqs={bad} is invalid", ">= 1")
    dash.tokens_box.value = 0
    dash.seqs_box.value = 32
    assert_shows_error(dash, "max_num_batched_tokens=0", ">= 1")
    dash.tokens_box.value = 1024
    assert "tune-verdict" in dash.verdict.value


def test_a_recompute_is_announced_while_it_runs_and_cleared_after(dash, monkeypatch) -> None:
    seen = []
    real = dash._tune

    def watched():
        seen.append((dash.busy.value, list(dash.verdict._dom_classes), dash.verdict.value))
        return real()

    monkeypatch.setattr(dash, "_tune", watched)
    runs = dash.runs
    dash.seqs_box.value = 16
    busy, classes, verdict_then = seen[0]
    assert 'class="cg-busy"' in busy and "computing" in busy and f'data-run="{runs + 1}"' in busy
    assert "cg-stale" in classes and 'data-max-num-seqs="32"' in verdict_then  # old, dimmed
    assert dash.runs == runs + 1 and dash.busy.value == ""
    assert "cg-stale" not in dash.verdict._dom_classes
    assert f'data-run="{runs + 1}"' in dash.verdict.value
    assert 'data-max-num-seqs="16"' in dash.verdict.value


def test_the_traffic_box_waits_for_enter_and_the_verdict_lines_wrap(dash) -> None:
    assert dash.trace_box.continuous_update is False
    assert "white-space:pre-wrap" in dash.verdict.value  # the long `vllm serve` line wraps


def test_a_config_json_and_a_listed_gpu_are_choices(tmp_path, monkeypatch) -> None:
    """Issue 28: the dashboard takes a config.json path and any preset or DeviceSpec."""
    from pathlib import Path

    from cgdispatch.estimate.devices import DEVICE_PRESETS

    monkeypatch.setenv("CGDISPATCH_CACHE_DIR", str(tmp_path))
    path = str(Path(__file__).resolve().parents[1] / "data" / "configs" / "qwen2-7b.json")
    dash = tune_dashboard(model=path, device="L40S", num_requests=100, draw=False)
    assert (
        dash.result is not None and "calibrated on 59 vLLM startups on H100" in dash.result.source
    )
    spec = DEVICE_PRESETS["L40S"].replace(name="my-gpu")
    dash = tune_dashboard(model=path, device=spec, num_requests=100, draw=False)
    assert dash.result is not None and dash.result.source.startswith("model (my-gpu,")


LLAMA_70B = "meta-llama/Llama-3.1-70B-Instruct"


def test_a_model_refused_on_one_gpu_gets_the_clis_verdict_at_tp4(capsys) -> None:
    """The TP control is tune's --tensor-parallel-size: refused at 1 (the message names the
    control), at 4 the CLI's --json figures and a serve line carrying the flag."""
    from cgdispatch.__main__ import main

    dash = tune_dashboard(
        model=LLAMA_70B, device="H100", num_requests=120, max_num_seqs=64, draw=False
    )
    assert dash.tp_box.value == 1  # a Hugging Face id's own size
    assert_shows_error(dash, "does not fit on H100 (TP1 PP1)", "tensor_parallel_size control")
    dash.tp_box.value = 4
    got = shown(dash.verdict.value)
    assert got["tensor-parallel-size"] == "4" and dash.message.value == ""
    text = plain(dash.verdict.value)
    assert "on H100 x4 (TP 4, figures per GPU)" in text
    # the serve line carries the flag (wherever the plan's other flags put it)
    serve = re.search(rf"vllm serve {re.escape(LLAMA_70B)} (.*?)the same from a shell", text)
    assert serve is not None and " --tensor-parallel-size 4 " in f" {serve.group(1)} "
    argv = ["tune", "--model", LLAMA_70B, "--device", "H100", "--num-requests", "120",
            "--max-num-seqs", "64", "--tensor-parallel-size", "4", "--json"]  # fmt: skip
    assert main(argv) == 0
    cli = json.loads(capsys.readouterr().out)
    mine = dash.result.as_dict()
    for key in ("recommendation", "flags", "sizes", "source", "trace", "objective", "reason"):
        assert mine[key] == cli[key], key
    assert got["flags"] == cli["flags"]
    for ladder in ("planned", "vllm default"):
        for figure in ("mean_step_ms", "p99_ttft_ms", "kv_cache_tokens", "graph_memory_bytes"):
            want = cli["held_out"][ladder][figure]
            assert mine["held_out"][ladder][figure] == pytest.approx(want), (ladder, figure)
    assert mine["gain"] == pytest.approx(cli["gain"])


@pytest.mark.parametrize(
    ("bad", "needles"),
    [
        (0, ("tensor_parallel_size=0 is invalid", ">= 1")),
        (-2, ("tensor_parallel_size=-2 is invalid", ">= 1")),
        (3, ("tensor_parallel_size=3 does not divide", "32 attention heads")),
    ],
)
def test_a_tp_size_the_model_cannot_take_is_named(dash, bad, needles) -> None:
    dash.tp_box.value = bad
    assert dash.tp_box.value == bad  # kept as typed, not clamped
    assert_shows_error(dash, *needles)
    dash.tp_box.value = 1
    assert "tune-verdict" in dash.verdict.value and dash.message.value == ""


def test_tp_on_a_toy_model_is_refused_and_a_model_change_resets_tp() -> None:
    dash = tune_dashboard(
        model="toy-tiny", device="H100", tensor_parallel_size=2, num_requests=100,
        max_num_seqs=32, max_num_batched_tokens=1024, draw=False,
    )  # fmt: skip
    assert_shows_error(dash, "tensor_parallel_size=2 is invalid for 'toy-tiny'")
    runs = dash.runs
    dash.model_box.value = "llama-3.1-70b-tp8"  # a registry TP preset runs at its own size
    assert dash.tp_box.value == 8 and dash.runs == runs + 1  # one recompute, not two
    assert shown(dash.verdict.value)["tensor-parallel-size"] == "8"
    assert "--tensor-parallel-size 8" in shown(dash.verdict.value)["flags"]


def test_the_calibration_control_is_tunes_calibration_flag(tmp_path, monkeypatch) -> None:
    """A profile fitted by ``calibrate`` on real log excerpts, typed into the box: the verdict
    says "calibrated on your logs"; an unknown profile shows its message, and emptying the
    box brings the shipped model back."""
    from pathlib import Path

    from cgdispatch.__main__ import main

    monkeypatch.setenv("CGDISPATCH_CACHE_DIR", str(tmp_path / "cache"))
    logs = Path(__file__).resolve().parents[1] / "data" / "vllm_logs"
    llama = sorted(str(p) for p in logs.glob("llama-3.1-8b-h100-tp1-*.log"))
    profile = tmp_path / "mine.json"
    assert main(["calibrate", *llama, "--device", "H100", "--out", str(profile)]) == 0
    dash = tune_dashboard(
        model="llama-3.1-8b", device="H100", trace="alpaca", num_requests=120, draw=False
    )
    assert "calibrated on your logs" not in dash.verdict.value
    dash.calibration_box.value = str(profile)
    assert dash.result is not None, dash.message.value
    assert f"calibrated on your logs ({len(llama)} runs)" in html.unescape(dash.verdict.value)
    dash.calibration_box.value = str(tmp_path / "nothing.json")
    assert dash.result is None and "nothing.json" in dash.message.value
    dash.calibration_box.value = ""
    assert dash.result is not None and "calibrated on your logs" not in dash.verdict.value


def test_the_replicas_and_balance_controls_are_tunes_flags() -> None:
    """The replicas box and the balance dropdown are ``tune --replicas/--balance``: the
    verdict is tune's for the busiest replica's share; 0 replicas is named, not clamped."""
    from cgdispatch.plan.tune_run import TuneSettings, tune_for

    dash = tune_dashboard(
        model="qwen2.5-7b", device="H100", trace="alpaca", max_num_seqs=32,
        max_num_batched_tokens=1024, num_requests=200, draw=False,
    )  # fmt: skip
    for replicas, balance in ((2, "round-robin"), (3, "prefix"), (2, "least-outstanding")):
        dash.replicas_box.value = replicas
        dash.balance_box.value = balance
        got = shown(dash.verdict.value)
        assert got["replicas"] == str(replicas) and got["balance"] == balance
        assert f"(per replica, of {replicas})" in plain(dash.verdict.value)
        assert dash.result is not None and dash.result.replicas == replicas
        # the CLI's path with the same settings (it plans on vLLM's scheduler with the
        # start-up's KV cache, as the dashboard does)
        want = tune_for(TuneSettings(model="qwen2.5-7b", device="H100", trace="alpaca",
                                     num_requests=200, max_num_seqs=32,
                                     max_num_batched_tokens=1024, replicas=replicas,
                                     balance=balance))  # fmt: skip
        assert float(got["mean-step-pct"]) == pytest.approx(want.deltas["mean_step_pct"])
        assert dash.result.trace_label.endswith(want.trace_label.split("; per replica: ")[1])
    dash.replicas_box.value = 0
    assert dash.replicas_box.value == 0 and dash.result is None
    assert "replicas=0 is invalid" in html.unescape(dash.message.value)
    dash.replicas_box.value = 1
    assert "tune-verdict" in dash.verdict.value and shown(dash.verdict.value)["replicas"] == "1"


# --- issue 37: every tune flag has a control; each drives the same tune_for as the CLI


_WANTED: dict[str, object] = {}  # tune_for's answer per settings (deterministic), computed once


def _same_as_tune_for(dash, **changes) -> None:
    """The dashboard's result is tune_for's for the dashboard's settings with ``changes``
    (tune_for is run once per distinct settings in this file; the dashboard each time)."""
    import dataclasses

    from cgdispatch.plan.tune_run import TuneSettings, tune_for

    assert dash.result is not None, dash.message.value
    base = dict(  # the other controls as the shared dashboard holds them now
        model=dash.model_box.value, device=dash.device_box.value, num_requests=100,
        tensor_parallel_size=int(dash.tp_box.value), trace=dash.trace_box.value,
        max_num_seqs=int(dash.seqs_box.value), max_num_batched_tokens=int(dash.tokens_box.value),
        vllm_version=dash.version_box.value,
    )  # fmt: skip
    settings = TuneSettings(**{**base, **changes})
    if repr(settings) not in _WANTED:
        _WANTED[repr(settings)] = tune_for(settings)
    want = _WANTED[repr(settings)]
    got = dash.result
    assert (got.recommendation, got.flags, got.objective) == (
        want.recommendation, want.flags, want.objective,
    )  # fmt: skip
    assert got.gain == pytest.approx(want.gain) and got.holdout == want.holdout
    assert dataclasses.asdict(got.config) == dataclasses.asdict(want.config)


def test_rate_requests_objective_max_graphs_and_holdout_are_tunes_flags(dash) -> None:
    import random

    rng = random.Random()
    rate = round(rng.uniform(2.0, 12.0), 1)
    dash.rate_box.value = rate
    _same_as_tune_for(dash, rate_per_s=rate)
    count = rng.randint(60, 140)
    dash.requests_box.value = count
    _same_as_tune_for(dash, rate_per_s=rate, num_requests=count)
    objective = rng.choice(["step", "throughput"])
    dash.objective_box.value = objective
    graphs = rng.randint(2, 8)
    dash.graphs_box.value = graphs
    holdout = round(rng.uniform(0.3, 0.7), 2)
    dash.holdout_box.value = holdout
    changes = dict(rate_per_s=rate, num_requests=count, objective=objective, max_graphs=graphs,
                   holdout=holdout)  # fmt: skip
    _same_as_tune_for(dash, **changes)
    assert dash.result.objective == objective and dash.result.holdout == holdout
    for box, bad, needle in (
        (dash.rate_box, 0.0, "rate=0 is invalid"),
        (dash.requests_box, 0, "requests=0 is invalid"),
        (dash.graphs_box, 0, "max graphs=0 is invalid"),
        (dash.holdout_box, 1.0, "holdout=1 is invalid"),
    ):
        good = box.value
        box.value = bad
        assert_shows_error(dash, needle)
        box.value = good
        _same_as_tune_for(dash, **changes)
    dash.objective_box.value = "default"
    dash.rate_box.value, dash.requests_box.value, dash.holdout_box.value = 8.0, 100, 0.5
    from cgdispatch.plan.tune import DEFAULT_GRAPHS

    dash.graphs_box.value = DEFAULT_GRAPHS  # back to the start: the fixture is shared
    _same_as_tune_for(dash)


def test_a_config_json_path_or_folder_and_a_device_spec_file(dash, tmp_path) -> None:
    import dataclasses
    import shutil
    from pathlib import Path

    from cgdispatch.estimate.devices import DEVICE_PRESETS

    config = Path(__file__).resolve().parents[1] / "data" / "configs" / "qwen2-7b.json"
    dash.model_path_box.value = str(config)
    _same_as_tune_for(dash, model=str(config))
    # a config that is not its folder's config.json: the folder's name is a placeholder, said
    # so (issue 40 item 5), never the folder's path as if vLLM could load it
    shown = html.unescape(dash.verdict.value)
    assert f"vllm serve {config.parent.name} " in shown and "stands for the model" in shown
    folder = tmp_path / "qwen"
    folder.mkdir()
    shutil.copy(config, folder / "config.json")
    dash.model_path_box.value = str(folder)
    _same_as_tune_for(dash, model=str(folder))
    dash.model_path_box.value = str(tmp_path / "missing.json")
    assert_shows_error(dash, "missing.json", "no such file or folder")
    dash.model_path_box.value = ""
    _same_as_tune_for(dash)
    spec = DEVICE_PRESETS["L40S"].replace(name="my-gpu")
    path = tmp_path / "gpu.json"
    path.write_text(json.dumps(dataclasses.asdict(spec)))
    dash.device_spec_box.value = str(path)
    _same_as_tune_for(dash, device=spec)
    assert dash.result.source.startswith("model (my-gpu,") and "my-gpu" in dash.verdict.value
    dash.device_spec_box.value = str(tmp_path / "nothing.json")
    assert_shows_error(dash, "device spec", "nothing.json", "cannot be read")
    path.write_text('{"name": "x"}')
    dash.device_spec_box.value = str(tmp_path / "nothing.json") + " "  # a change: re-read
    dash.device_spec_box.value = str(path)
    assert_shows_error(dash, "device spec")
    dash.device_spec_box.value = ""
    _same_as_tune_for(dash)


def test_the_verdict_wraps_at_spaces_with_its_own_line_height(dash) -> None:
    """Issue 37: no mid-word breaks (JupyterLab), no 28 px widget line height (Voila)."""
    style = dash.verdict.value.split("style='", 1)[1].split("'", 1)[0]
    assert "overflow-wrap:anywhere" not in style and "word-break:break-all" not in style
    assert "white-space:pre-wrap" in style and "line-height:1.4" in style
    body = dash.verdict.value.split(">", 1)[1]
    assert "," in html.unescape(body) and body.count(",") == body.count(",<wbr>")


def test_the_dashboards_default_is_the_readmes_tune(capsys) -> None:
    """Issue 37: one verdict per setting: the dashboard as it opens runs the README's `tune`
    command and shows its recommendation, flags and gain."""
    import re as _re
    import shlex
    from pathlib import Path

    from cgdispatch.__main__ import main

    readme = (Path(__file__).resolve().parents[2] / "README.md").read_text()
    command = _re.search(r"```bash\n\.venv/bin/python -m cgdispatch (tune [^\n]*)\n```", readme)
    assert main([*shlex.split(command.group(1)), "--json"]) == 0
    cli = json.loads(capsys.readouterr().out)
    dash = tune_dashboard(draw=False)
    assert dash.result is not None, dash.message.value
    mine = dash.result.as_dict()
    for key in ("recommendation", "flags", "sizes", "objective", "reason", "trace"):
        assert mine[key] == cli[key], key
    assert mine["gain"] == pytest.approx(cli["gain"]) and mine["band"] == pytest.approx(cli["band"])
