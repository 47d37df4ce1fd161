"""Real-browser test of the tune dashboard (``make dashboard``: notebooks/dashboard.ipynb in
Voila): its first render, and a control change that updates the verdict, which must equal
``tune`` run here on the same settings; a busy line before each new verdict, no recompute
while the traffic box is typed in, a bad entry's message with no broken image, and the
`vllm serve` line wrapped, not clipped. The first render's time is recorded in
build/screenshots/dashboard_first_render.txt (``benchmarks/bench_dashboard.py`` holds the
speed target; this test only bounds it loosely)."""

from __future__ import annotations

import shutil
import time
from pathlib import Path
from typing import Any

import pytest
from browser_support import (
    REPO_ROOT,
    SCREENSHOTS,
    block_other_hosts,
    browser_skip_reason,
    free_port,
    running_server,
    screenshot,
    voila_argv,
)

_SKIP = browser_skip_reason()
pytestmark = [pytest.mark.browser, pytest.mark.skipif(_SKIP is not None, reason=_SKIP or "")]

NOTEBOOK = REPO_ROOT / "notebooks" / "dashboard.ipynb"
TIMEOUT_MS = 90_000


def expected_verdict(max_num_seqs: int) -> Any:
    """``tune`` with the dashboard's defaults and ``max_num_seqs``, computed in this process."""
    from cgdispatch import GraphConfig, SchedulerLimits, tune
    from cgdispatch.estimate.device_model import device_cost_model
    from cgdispatch.estimate.kv_bytes import kv_bytes_per_token
    from cgdispatch.estimate.startup import startup_for
    from cgdispatch.workload.sources import workload_requests, workload_trace

    config = GraphConfig(
        vllm_version="0.34", max_num_seqs=max_num_seqs, max_num_batched_tokens=8192
    ).resolve()
    # the dashboard plans on vLLM's scheduler with the default ladder's KV cache (whole
    # 16-token blocks plus the null block) from the start-up estimate
    startup = startup_for("llama-3.1-8b", "H200")
    limits = SchedulerLimits(
        vllm_version="0.34", max_num_seqs=max_num_seqs, max_num_batched_tokens=8192,
        num_gpu_blocks=int(startup(config).kv_cache_tokens // 16) + 1,
    )  # fmt: skip
    trace, label = workload_trace("sharegpt", num_requests=1000, rate_per_s=8.0, limits=limits)
    return tune(
        trace,
        config=config,
        cost_model=device_cost_model("llama-3.1-8b", "H200"),
        kv_bytes_per_token=kv_bytes_per_token("llama-3.1-8b"),
        trace_label=label,
        requests=workload_requests("sharegpt", num_requests=1000, rate_per_s=8.0),
        startup=startup,
    )


def test_the_tune_dashboard_renders_and_follows_a_control(browser: Any, tmp_path: Path) -> None:
    (tmp_path / "notebooks").mkdir()
    notebook = tmp_path / "notebooks" / NOTEBOOK.name
    shutil.copy(NOTEBOOK, notebook)
    context = browser.new_context(viewport={"width": 1400, "height": 1100})
    blocked: list[str] = []
    block_other_hosts(context, blocked)
    page = context.new_page()
    page.set_default_timeout(TIMEOUT_MS)
    port = free_port()
    try:
        with running_server(voila_argv(port, notebook), None, port, tmp_path) as url:
            start = time.perf_counter()
            page.goto(url)
            verdict = page.locator("[data-testid=tune-verdict]")
            verdict.wait_for(state="attached")
            first_render_s = time.perf_counter() - start
            SCREENSHOTS.mkdir(parents=True, exist_ok=True)
            (SCREENSHOTS / "dashboard_first_render.txt").write_text(f"{first_render_s:.2f} s\n")
            assert first_render_s < 60  # loose: the target (10 s) is the benchmark's
            want = expected_verdict(256)
            assert verdict.get_attribute("data-recommendation") == want.recommendation
            assert float(verdict.get_attribute("data-mean-step-pct")) == pytest.approx(
                want.deltas["mean_step_pct"]
            )
            assert "vllm serve meta-llama/Llama-3.1-8B" in verdict.inner_text()
            screenshot(page, "voila_tune_dashboard")

            seqs = (
                page.locator(".widget-inline-hbox").filter(has_text="max_num_seqs").locator("input")
            )
            seqs.fill("64")
            seqs.press("Enter")
            changed = page.locator("[data-testid=tune-verdict][data-max-num-seqs='64']")
            changed.wait_for(state="attached")
            want = expected_verdict(64)
            assert changed.get_attribute("data-recommendation") == want.recommendation
            assert float(changed.get_attribute("data-mean-step-pct")) == pytest.approx(
                want.deltas["mean_step_pct"]
            )
            assert changed.get_attribute("data-flags") == want.flags
            screenshot(page, "voila_tune_dashboard_64")
    finally:
        context.close()


# Records, in order, each recompute's busy line, verdict and message as they enter the DOM
# (``busy:3``, ``verdict:3``, ``message:4``: the dashboard's run counter). A MutationObserver
# sees a node even when the next widget update removes it before anyone polls for it.
_RECORD_RUNS = """() => {
  window.cgRuns = [];
  const kinds = {busy: '[data-testid=tune-busy]', verdict: '[data-testid=tune-verdict]',
                 message: '[data-run] > [data-testid=dispatch-message]'};
  const note = (root) => {
    for (const [kind, sel] of Object.entries(kinds)) {
      const found = root.matches && root.matches(sel) ? [root] : [];
      for (const el of [...found, ...(root.querySelectorAll ? root.querySelectorAll(sel) : [])]) {
        const run = kind === 'message' ? el.parentElement.dataset.run : el.dataset.run;
        const key = kind + ':' + run;
        if (!window.cgRuns.includes(key)) window.cgRuns.push(key);
      }
    }
  };
  note(document.body);
  new MutationObserver((records) => {
    for (const r of records) r.addedNodes.forEach(note);
  }).observe(document.body, {subtree: true, childList: true});
}"""


def box(page: Any, label: str) -> Any:
    return page.locator(".widget-inline-hbox").filter(has_text=label).locator("input")


def current_run(page: Any) -> int:
    shown = page.locator("[data-testid=tune-verdict], [data-run] > [data-testid=dispatch-message]")
    element = shown.first
    run = element.get_attribute("data-run") or element.evaluate("e => e.parentElement.dataset.run")
    return int(run)


def runs_after(page: Any, run: int) -> list[str]:
    return [e for e in page.evaluate("window.cgRuns") if int(e.split(":")[1]) > run]


SERVED_REQUESTS = 100  # the interaction tests' dashboard: its traffic's request count


@pytest.fixture(scope="module")
def dashboard(browser: Any, tmp_path_factory: pytest.TempPathFactory) -> Any:
    """One served dashboard for the interaction tests, its recomputes recorded (_RECORD_RUNS)."""
    home = tmp_path_factory.mktemp("dashboard")
    (home / "notebooks").mkdir()
    notebook = home / "notebooks" / NOTEBOOK.name
    # the committed dashboard at a tenth of the README's requests: every control, recompute
    # and message is the same code, each verdict a fifth of the time (the README's own
    # default is served whole by test_the_tune_dashboard_renders_and_follows_a_control)
    text = NOTEBOOK.read_text()
    assert text.count("cg.tune_dashboard()") == 1
    notebook.write_text(
        text.replace("cg.tune_dashboard()", f"cg.tune_dashboard(num_requests={SERVED_REQUESTS})")
    )
    context = browser.new_context(viewport={"width": 1400, "height": 1100})
    block_other_hosts(context, [])
    page = context.new_page()
    page.set_default_timeout(TIMEOUT_MS)
    port = free_port()
    try:
        with running_server(voila_argv(port, notebook), None, port, home) as url:
            page.goto(url)
            verdict = page.locator("[data-testid=tune-verdict]")
            verdict.wait_for(state="attached")
            assert f"--num-requests {SERVED_REQUESTS}" in verdict.get_attribute("data-command")
            page.evaluate(_RECORD_RUNS)
            yield page
    finally:
        context.close()


def test_a_busy_line_shows_before_each_new_verdict(dashboard: Any) -> None:
    page, run = dashboard, current_run(dashboard)
    seqs = box(page, "max_num_seqs")
    seqs.fill("48" if seqs.input_value() != "48" else "40")
    seqs.press("Enter")
    page.locator(f"[data-testid=tune-verdict][data-run='{run + 1}']").wait_for(state="attached")
    assert runs_after(page, run) == [f"busy:{run + 1}", f"verdict:{run + 1}"]
    # the verdict and the busy line are two widget messages: the clearing one may land a
    # moment after the verdict is drawn, so wait for it (up to the page timeout)
    page.locator("[data-testid=tune-busy]").wait_for(state="detached")
    assert page.locator("[data-testid=tune-busy]").count() == 0  # cleared when done


def test_typing_in_the_traffic_box_recomputes_once_on_enter(dashboard: Any) -> None:
    page, run = dashboard, current_run(dashboard)
    traffic = box(page, "traffic")
    traffic.fill("")
    traffic.press_sequentially("alpaca", delay=60)
    traffic.press("Enter")
    verdict = page.locator("[data-testid=tune-verdict]").filter(has_text="alpaca preset")
    verdict.wait_for(state="attached")
    # one recompute for six keystrokes and Enter: a recompute per keystroke would show up
    # here, as the kernel handles the updates in order before the one that draws this verdict
    assert verdict.get_attribute("data-run") == str(run + 1)
    assert runs_after(page, run) == [f"busy:{run + 1}", f"verdict:{run + 1}"]


def broken_images(page: Any) -> int:
    """Shown <img> elements that failed to load (the browser's broken-image icon)."""
    return page.evaluate(
        "() => [...document.images].filter(i => i.getClientRects().length > 0"
        " && (!i.complete || i.naturalWidth === 0)).length"
    )


@pytest.mark.parametrize(
    ("entry", "box_label", "wanted"),
    [
        ("/no/such/trace.csv", "traffic", "does not exist"),
        ("/tmp/" + "x" * 5000 + ".csv", "traffic", "File name too long"),
        ("0", "max_num_seqs", "max_num_seqs=0 is invalid: it must be an integer >= 1"),
    ],
    ids=["missing-file", "over-long-path", "zero-max-num-seqs"],
)
def test_a_bad_entry_shows_its_message_in_place_of_the_verdict(
    dashboard: Any, entry: str, box_label: str, wanted: str
) -> None:
    page, run = dashboard, current_run(dashboard)
    field = box(page, box_label)
    good = field.input_value()
    field.fill(entry)
    field.press("Enter")
    message = page.locator(f"[data-run='{run + 1}'] > [data-testid=dispatch-message]")
    message.wait_for(state="visible")
    assert wanted in message.inner_text()
    assert field.input_value() == entry  # kept as typed, not clamped
    assert page.locator("[data-testid=tune-verdict]").count() == 0  # no stale verdict
    assert broken_images(page) == 0
    screenshot(page, f"voila_tune_dashboard_error_{box_label}")
    field.fill(good)
    field.press("Enter")
    page.locator(f"[data-testid=tune-verdict][data-run='{run + 2}']").wait_for(state="attached")
    assert page.locator("[data-testid=dispatch-message]").count() == 0


def test_the_vllm_serve_line_wraps_instead_of_being_clipped(dashboard: Any) -> None:
    verdict = dashboard.locator("[data-testid=tune-verdict]")
    verdict.wait_for(state="visible")
    flags = verdict.get_attribute("data-flags")
    assert "vllm serve" in verdict.inner_text() and flags in verdict.inner_text()  # soft wraps
    fits = verdict.evaluate(
        """pre => {
          const view = document.documentElement.clientWidth;
          const boxes = [pre, pre.parentElement, pre.closest('.widget-html')];
          return boxes.every(b => b.scrollWidth <= b.clientWidth + 1)
              && pre.getBoundingClientRect().right <= view;
        }"""
    )
    assert fits
    assert broken_images(dashboard) == 0


def test_the_verdict_is_single_spaced_and_never_breaks_a_word(dashboard: Any) -> None:
    """Issue 37: the widget's 28 px line height no longer double-spaces the verdict, and its
    lines break at spaces (and after the JSON's commas), not mid-word."""
    verdict = dashboard.locator("[data-testid=tune-verdict]")
    verdict.wait_for(state="visible")
    style = verdict.evaluate(
        """pre => { const s = getComputedStyle(pre);
          return [parseFloat(s.lineHeight), parseFloat(s.fontSize), s.wordBreak, s.overflowWrap]; }"""
    )
    line_px, font_px, word_break, overflow_wrap = style
    assert line_px < 1.6 * font_px, style
    assert word_break != "break-all" and overflow_wrap != "anywhere"
    lines = verdict.inner_text().splitlines()
    shown = verdict.evaluate("pre => pre.getClientRects().length")
    assert shown >= 1 and len(lines) >= 6


def test_every_notebooks_conclusion_shows_in_a_browser(browser: Any, tmp_path: Path) -> None:
    """The committed notebooks rendered to HTML (nbconvert, as the offline report does) show
    their question first and their conclusion last, non-empty, in Chromium."""
    from nbconvert import HTMLExporter

    exporter = HTMLExporter()
    context = browser.new_context()
    block_other_hosts(context, [])
    page = context.new_page()
    try:
        for path in sorted((REPO_ROOT / "notebooks").glob("0*.ipynb")):
            body, _ = exporter.from_filename(str(path))
            page.set_content(body, wait_until="domcontentloaded")  # offline: CDNs are blocked
            assert page.get_by_text("The question:").first.is_visible(), path.stem
            outputs = page.locator(".jp-OutputArea-output")
            last = outputs.nth(outputs.count() - 1).inner_text().strip()
            assert last.startswith(("Conclusion:", "recommendation:")), (path.stem, last[:200])
            assert len(last) > 80
    finally:
        context.close()


def test_a_config_json_path_and_a_device_spec_file_in_the_browser(
    dashboard: Any, tmp_path: Path
) -> None:
    """Issue 37: the dashboard takes what `tune --model PATH --device-spec FILE` takes."""
    import dataclasses
    import json

    from cgdispatch.estimate.devices import DEVICE_PRESETS

    page = dashboard
    config = REPO_ROOT / "tests" / "data" / "configs" / "qwen2-7b.json"
    spec = tmp_path / "gpu.json"
    spec.write_text(json.dumps(dataclasses.asdict(DEVICE_PRESETS["L40S"].replace(name="my-gpu"))))
    for label, entry, needle in (
        ("config.json", str(config), f"stands for the model: {config.name} has no _name_or_path"),
        ("device spec", str(spec), "on my-gpu"),
        ("device spec", "", "on H200"),
        ("config.json", "", "vllm serve meta-llama/Llama-3.1-8B"),
    ):
        run = current_run(page)
        field = box(page, label)
        field.fill(entry)
        field.press("Enter")
        verdict = page.locator(f"[data-testid=tune-verdict][data-run='{run + 1}']")
        verdict.wait_for(state="attached")
        assert needle in verdict.inner_text().replace("\u200b", ""), (label, entry)


# --- issue 37: a browser test per control. The controls are the form's own (one per
# TuneSettings field, as the CLI parses its flags); each is changed in Chromium as a person
# would, and the verdict that follows must have been computed from the new value: its
# `tune` command (data-command) holds the flag as the same form, set in this process, reads
# it. Only the value each control is changed to is chosen here; a new setting without one
# fails below, naming it.
_NEW_VALUES = {  # two each: the first the control does not show already is typed
    "model": ("qwen2.5-7b", "llama-3.1-8b"),
    "device": ("H100", "H200"),
    "tensor_parallel_size": ("2", "1"),
    "trace": ("alpaca", "sharegpt"),
    "num_requests": ("400", "1000"),  # the served dashboard shows SERVED_REQUESTS
    "rate_per_s": ("4.5", "8"),
    "seed": ("3", "0"),
    "vllm_version": ("0.33", "0.34"),
    "cudagraph_mode": ("PIECEWISE", "FULL_AND_PIECEWISE"),
    "max_num_seqs": ("128", "256"),
    "max_num_batched_tokens": ("4096", "8192"),
    "holdout": ("0.4", "0.5"),
    "max_graphs": ("16", "32"),
    "memory_budget_bytes": ("512", "1024"),
    "capture_budget_s": ("2.5", "3"),
    "context_len": ("1024", "512"),
    "gpu_memory_utilization": ("0.8", "0.9"),
    "objective": ("step", "p99-ttft"),
    # a profile is fitted per GPU: its message names it
    "calibration": ("no-such-profile", "no-such-profile-2"),
    "max_model_len": ("4096", "8192"),
    "max_concurrency": ("16", "32"),
    "hash_block_size": ("256", "512"),
    "replicas": ("2", "1"),
    "balance": ("least-outstanding", "round-robin"),
    "enable_prefix_caching": ("toggle", "toggle"),
}


def _setting_names() -> list[str]:
    import dataclasses

    from cgdispatch.plan.tune_run import TuneSettings

    return [f.name for f in dataclasses.fields(TuneSettings)]


@pytest.fixture(scope="module")
def form() -> Any:
    """The same form in this process (no recompute is run on its changes here)."""
    from cgdispatch import tune_dashboard

    return tune_dashboard(num_requests=20, draw=False)


def _flags(command: str) -> dict[str, str]:
    """``python -m cgdispatch tune --a 1 --b ...`` as {flag: value} ("" for a switch)."""
    import shlex

    words = shlex.split(command)[4:]
    flags: dict[str, str] = {}
    for i, word in enumerate(words):
        if word.startswith("--"):
            following = words[i + 1] if i + 1 < len(words) else "--"
            flags[word] = "" if following.startswith("--") else following
    return flags


def _control(page: Any, label: str) -> Any:
    """The widget whose label is exactly ``label``."""
    import re as _re

    exact = page.locator("label", has_text=_re.compile(rf"^\s*{_re.escape(label)}\s*$"))
    return page.locator(".widget-inline-hbox").filter(has=exact)


def _set_in_browser(page: Any, widget: Any, label: str, value: str) -> None:
    """Change the control labelled ``label`` (of ``widget``'s kind) to ``value``."""
    import ipywidgets as w

    found = _control(page, label)
    if isinstance(widget, w.Checkbox):
        found.locator("input[type=checkbox]").click()
    elif isinstance(widget, w.Dropdown):
        found.locator("select").select_option(label=value)
    else:
        field = found.locator("input")
        field.fill(value)
        field.press("Enter")


def _in_process(widget: Any, value: str, shown: str) -> Any:
    """The value the same control holds in this process for ``value`` typed or chosen (a
    checkbox: ticked as ``shown``, "true" or "false", or the other way for "toggle")."""
    import ipywidgets as w

    if isinstance(widget, w.Checkbox):
        return (shown == "true") != (value == "toggle")
    if isinstance(widget, w.IntText):
        return int(value)
    if isinstance(widget, w.FloatText):
        return float(value)
    if isinstance(widget, w.Dropdown):
        pairs = [o if isinstance(o, tuple) else (o, o) for o in widget.options]
        return next(v for label, v in pairs if label == value)
    return value


@pytest.mark.parametrize("name", _setting_names())
def test_each_control_changes_the_verdicts_inputs(dashboard: Any, form: Any, name: str) -> None:
    from cgdispatch.views.tune_headline import tune_command

    assert name in _NEW_VALUES, f"setting {name!r} has a control: give it a value to test"
    page, widget = dashboard, form.controls[name]
    label = widget.description
    assert _control(page, label).count() == 1, f"no single control labelled {label!r}"
    shown_before = _shown(_control(page, label))
    value = next(v for v in _NEW_VALUES[name] if v != shown_before)  # a change, always
    # what the values mean, read by the same form in this process (quiet: no recompute)
    original = widget.value
    form._quiet = True
    try:
        widget.value = _in_process(widget, shown_before, shown_before)
        base = _flags(tune_command(form.settings()))
        widget.value = _in_process(widget, value, shown_before)
        wanted = _flags(tune_command(form.settings()))
    finally:
        widget.value = original
        form._quiet = False
    # the flags this change adds, alters or (None) takes away
    changed = {k: wanted.get(k) for k in {*wanted, *base} if wanted.get(k) != base.get(k)}
    assert changed, f"{name}={value!r} changes no flag of tune's command"
    run = current_run(page)
    _set_in_browser(page, widget, label, value)
    after = page.locator(
        f"[data-testid=tune-verdict][data-run='{run + 1}'], "
        f"[data-run='{run + 1}'] > [data-testid=dispatch-message]"
    )
    after.wait_for(state="attached")
    if after.get_attribute("data-testid") == "tune-verdict":
        got = _flags(after.get_attribute("data-command"))
        assert {k: got.get(k) for k in changed} == changed, (name, got)
    else:  # refused by tune: its message names what was given
        assert value in after.inner_text(), (name, after.inner_text())
    # back to where it was, for the next control's test
    _set_in_browser(page, widget, label, shown_before)  # a checkbox: a second click
    page.locator(f"[data-testid=tune-verdict][data-run='{run + 2}']").wait_for(state="attached")


def _shown(control: Any) -> str:
    """What a control shows: a text box's text, a dropdown's selected label, a checkbox's
    state."""
    field = control.locator("input, select").first
    return field.evaluate(
        "e => e.tagName === 'SELECT' ? e.options[e.selectedIndex].text"
        " : e.type === 'checkbox' ? String(e.checked) : e.value"
    )
