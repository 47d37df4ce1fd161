"""Real-browser tests: the what-if dashboard of notebook 04 in JupyterLab and in the Voila app.

Each test starts its own server on a copy of the notebook (so the committed one is never
rewritten), drives Debian's Chromium through Playwright, moves the num_tokens slider with the
keyboard and checks every decision shown against the dispatcher of the notebook's vLLM
generation (``vllm_version``: ``CudaGraphManager`` for 0.34, ``CudagraphDispatcher`` for 0.33,
asked through ``cgdispatch.core.generation.dispatch_step``), then types new capture sizes (for 0.34
the prefill token sizes) and checks the what-if metrics shown against ``evaluate`` on the same
trace, all computed here from the notebook's parameters cell. Screenshots go to
build/screenshots/.
"""

from __future__ import annotations

import ast
import json
import random
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from browser_support import (
    REPO_ROOT,
    block_other_hosts,
    browser_skip_reason,
    free_port,
    jupyterlab_argv,
    running_server,
    screenshot,
    voila_argv,
)

from cgdispatch import GraphConfig
from cgdispatch.core.generation import GraphDispatcher, dispatch_step, make_graph_dispatcher
from cgdispatch.views.explorer_handlers import largest_size, slider_max

_SKIP = browser_skip_reason()
pytestmark = [pytest.mark.browser, pytest.mark.skipif(_SKIP is not None, reason=_SKIP or "")]

NOTEBOOK = REPO_ROOT / "notebooks" / "04_what_if.ipynb"
TIMEOUT_MS = 90_000  # kernel start + running every cell on a loaded 2-core machine


def notebook_parameters(path: Path) -> dict[str, Any]:
    """The values assigned in the notebook's cell tagged ``parameters`` (literals only)."""
    cells = json.loads(path.read_text())["cells"]
    cell = next(c for c in cells if "parameters" in c.get("metadata", {}).get("tags", []))
    tree = ast.parse("".join(cell["source"]))
    return {
        node.targets[0].id: ast.literal_eval(node.value)
        for node in tree.body
        if isinstance(node, ast.Assign) and isinstance(node.targets[0], ast.Name)
    }


class Expected:
    """The notebook's trace, config and starting ladder, rebuilt here from its parameters."""

    def __init__(self, params: dict[str, Any]) -> None:
        from cgdispatch import (
            engine_ladders,
            ladder_config,
            plan_ladder,
            scheduler_limits,
            workload_trace,
        )
        from cgdispatch.plan.planner import largest_token_size

        self.params = params
        self.config = GraphConfig(
            vllm_version=str(params["vllm_version"]),
            cudagraph_mode=params["mode"],
            max_num_seqs=params["max_num_seqs"],
            max_num_batched_tokens=params["max_num_batched_tokens"],
            num_speculative_tokens=params["num_speculative_tokens"],
        ).resolve()
        self.gen2 = self.config.vllm_version == "0.34"
        self.trace, _ = workload_trace(
            params["workload"],
            num_requests=params["num_requests"],
            rate_per_s=params["rate_per_s"],
            seed=params["seed"],
            limits=scheduler_limits(self.config),  # as the notebook builds them
        )
        planned = plan_ladder(
            self.trace,
            params["max_graphs"],
            config=self.config,
            max_size=largest_token_size(engine_ladders(self.config)["vllm"]),
        )
        # the dashboard's starting config; the sizes box holds V1's capture sizes or, for
        # vLLM 0.34, the prefill token sizes (the decode request sizes stay as started)
        self.start_config = ladder_config(self.config, params["capture_sizes"] or planned)
        self.start_sizes = list(
            self.start_config.prefill_cudagraph_capture_token_sizes
            if self.gen2
            else self.start_config.cudagraph_capture_sizes
        )

    def sized(self, sizes: list[int]) -> GraphConfig:
        field = "prefill_cudagraph_capture_token_sizes" if self.gen2 else "cudagraph_capture_sizes"
        return self.start_config.replace(**{field: sizes}).resolve()

    def dispatcher(self, sizes: list[int]) -> GraphDispatcher:
        return make_graph_dispatcher(self.sized(sizes), record_stats=False)

    def summary(self, sizes: list[int]) -> dict[str, Any]:
        from cgdispatch import evaluate

        return evaluate(self.sized(sizes), self.trace).summary


def answer(dispatcher: GraphDispatcher, n: int, uniform: bool = False) -> tuple[str, int]:
    """(runtime mode, padded tokens) of one step, asked of the generation's own class."""
    step = dispatch_step(dispatcher, n, None, uniform)
    return step.runtime_mode.name, step.padded_tokens


@pytest.fixture(scope="module")
def expected() -> Expected:
    return Expected(notebook_parameters(NOTEBOOK))


@pytest.fixture
def page(browser: Any) -> Iterator[Any]:
    context = browser.new_context(viewport={"width": 1400, "height": 1000})
    blocked: list[str] = []
    block_other_hosts(context, blocked)
    page = context.new_page()
    page.set_default_timeout(TIMEOUT_MS)
    yield page
    context.close()


def shown_decision(page: Any) -> tuple[int, str, int]:
    """(num_tokens, runtime mode, padded size) as the page shows them."""
    box = page.locator("[data-testid=dispatch-decision]")
    mode_text = box.locator("[data-testid=decision-mode]").inner_text().strip()
    padded_text = box.locator("[data-testid=decision-padded]").inner_text().strip()
    assert box.get_attribute("data-runtime-mode") == mode_text
    assert box.get_attribute("data-padded-size") == padded_text
    return int(box.get_attribute("data-num-tokens")), mode_text, int(padded_text)


def slide_and_check(page: Any, dispatcher: GraphDispatcher, start: int, keys: list[str]) -> set:
    """Press each key on the slider handle; after each, the decision must be the dispatcher's.

    ArrowRight/ArrowLeft move one token, End/Home jump to the slider's ends.
    """
    from playwright.sync_api import expect

    box = page.locator("[data-testid=dispatch-decision]")
    box.wait_for(state="attached")
    assert shown_decision(page)[0] == start
    handle = page.locator(".noUi-handle").last
    handle.scroll_into_view_if_needed()
    handle.focus()
    top = slider_max(dispatcher)
    n, seen = start, set()
    for key in keys:
        page.keyboard.press(key)
        n = {"ArrowRight": n + 1, "ArrowLeft": n - 1, "End": top, "Home": 1}[key]
        expect(box).to_have_attribute("data-num-tokens", str(n))
        expect(page.locator(".widget-readout").last).to_have_text(str(n))
        mode, padded = answer(dispatcher, n)
        assert shown_decision(page) == (n, mode, padded), f"num_tokens={n}"
        seen.add((mode, padded))
    return seen


def _keys(dispatcher: GraphDispatcher, sizes: list[int], start: int) -> list[str]:
    """From ``start`` down across a capture size, up past the largest one, then both ends."""
    below = max((s for s in sizes if s < start), default=1)
    down = start - max(below - 1, 1)
    up = (largest_size(dispatcher) + 2) - (start - down)
    return ["ArrowLeft"] * down + ["ArrowRight"] * up + ["End", "Home"]


def check_slider(page: Any, expected: Expected) -> None:
    dispatcher = expected.dispatcher(expected.start_sizes)
    start = expected.params["start_tokens"]
    keys = _keys(dispatcher, expected.start_sizes, start)
    seen = slide_and_check(page, dispatcher, start, keys)
    assert len(seen) >= 3, f"the slider crossed too few decisions: {seen}"
    assert any(mode == "NONE" for mode, _ in seen) and any(mode != "NONE" for mode, _ in seen)


def shown_metrics(page: Any) -> dict[str, str]:
    box = page.locator("[data-testid=whatif-metrics]")
    names = ("sizes", "eager-step-share", "padded-token-ratio", "eager-steps", "padding-tokens")
    shown = {name: box.get_attribute(f"data-{name}") for name in names}
    assert box.locator("[data-testid=whatif-eager]").inner_text().strip() == shown["eager-steps"]
    return shown


def check_metrics(page: Any, expected: Expected, sizes: list[int]) -> None:
    """The metrics shown are ``evaluate``'s for these sizes on the notebook's trace."""
    want = expected.summary(sizes)
    got = shown_metrics(page)
    assert got["sizes"] == ",".join(map(str, sizes))
    assert float(got["eager-step-share"]) == want["eager_step_share"]
    assert float(got["padded-token-ratio"]) == want["padded_token_ratio"]
    assert int(got["eager-steps"]) == want["steps"] - want["graph_steps"]
    assert int(got["padding-tokens"]) == want["padding_tokens"]


def edit_sizes_and_check(page: Any, expected: Expected, seed: int) -> list[int]:
    """Type random capture sizes into the dashboard's box; the metrics must follow ``evaluate``."""
    check_metrics(page, expected, expected.start_sizes)
    rng = random.Random(seed)
    limit = min(expected.config.max_num_batched_tokens, 256)
    sizes = sorted(rng.sample(range(1, limit + 1), rng.randint(3, 8)))
    sizes_box = page.locator(".widget-text input").first
    sizes_box.fill(", ".join(map(str, reversed(sizes))))  # order does not matter
    sizes_box.press("Enter")
    page.locator(
        f"[data-testid=whatif-metrics][data-sizes='{','.join(map(str, sizes))}']"
    ).wait_for(state="attached")
    check_metrics(page, expected, sizes)
    return sizes


@pytest.fixture
def workdir(tmp_path: Path) -> Path:
    notebooks = tmp_path / "notebooks"
    notebooks.mkdir()
    shutil.copy(NOTEBOOK, notebooks / NOTEBOOK.name)
    return tmp_path


def test_whatif_dashboard_in_jupyterlab(page: Any, workdir: Path, expected: Expected) -> None:
    port = free_port()
    with running_server(
        jupyterlab_argv(port, workdir / "notebooks"), "/api/status", port, workdir
    ) as url:
        page.goto(f"{url}/lab/tree/{NOTEBOOK.name}")
        page.locator(".jp-Notebook").wait_for()
        # run only once the kernel is connected: earlier requests can be lost
        page.locator("#jp-main-statusbar").get_by_text("Idle").wait_for()
        page.get_by_role("menuitem", name="Run", exact=True).click()
        page.get_by_role("menuitem", name="Run All Cells", exact=True).click()
        page.locator("[data-testid=whatif-metrics]").wait_for(state="attached")
        check_slider(page, expected)
        screenshot(page, "jupyterlab_whatif_dashboard")

        # uniform decode: the same num_tokens now dispatches as a uniform batch
        n = shown_decision(page)[0]
        page.locator(".widget-checkbox").filter(has_text="uniform decode").locator("input").click()
        page.locator("[data-testid=dispatch-decision][data-uniform=true]").wait_for(
            state="attached"
        )
        mode, padded = answer(expected.dispatcher(expected.start_sizes), n, uniform=True)
        assert shown_decision(page) == (n, mode, padded)

        sizes = edit_sizes_and_check(page, expected, seed=401)
        mode, padded = answer(expected.dispatcher(sizes), n, uniform=True)
        page.locator(f"[data-testid=dispatch-decision][data-padded-size='{padded}']").wait_for(
            state="attached"
        )
        assert shown_decision(page) == (n, mode, padded)
        screenshot(page, "jupyterlab_whatif_edited")

        # a bad sizes entry shows a message, not a traceback
        sizes_box = page.locator(".widget-text input").first
        sizes_box.fill("1, 2, x")
        sizes_box.press("Enter")
        message = page.locator("[data-testid=dispatch-message]")
        message.wait_for()
        assert "not integers" in message.inner_text()
        assert page.locator("[data-testid=whatif-metrics]").count() == 0
        assert (
            page.locator(
                ".jp-OutputArea-output[data-mime-type='application/vnd.jupyter.stderr']"
            ).count()
            == 0
        )
        screenshot(page, "jupyterlab_bad_sizes")


def test_whatif_dashboard_in_voila(page: Any, workdir: Path, expected: Expected) -> None:
    port = free_port()
    notebook = workdir / "notebooks" / NOTEBOOK.name
    with running_server(voila_argv(port, notebook), None, port, workdir) as url:
        page.goto(url)
        page.locator("[data-testid=whatif-metrics]").wait_for(state="attached")
        check_slider(page, expected)
        edit_sizes_and_check(page, expected, seed=402)
        screenshot(page, "voila_whatif_dashboard")
