"""Real-browser tests: the dispatch explorer in JupyterLab and in the Voila app.

Each test starts its own server on a copy of the notebook (so the committed one is never
rewritten), drives Debian's Chromium through Playwright, moves the num_tokens slider with the
keyboard and checks every decision shown against ``CudagraphDispatcher.dispatch`` computed
here from the notebook's parameters cell. Screenshots go to build/screenshots/.
"""

from __future__ import annotations

import ast
import json
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from browser_support import (
    CHROMIUM,
    CHROMIUM_ARGS,
    REPO_ROOT,
    block_other_hosts,
    browser_skip_reason,
    free_port,
    jupyterlab_argv,
    running_server,
    screenshot,
    voila_argv,
)

from cgdispatch import CudagraphDispatcher, GraphConfig

_SKIP = browser_skip_reason()
pytestmark = [pytest.mark.browser, pytest.mark.skipif(_SKIP is not None, reason=_SKIP or "")]

NOTEBOOK = REPO_ROOT / "notebooks" / "01_dispatch_tour.ipynb"
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


def expected_dispatcher(params: dict[str, Any]) -> CudagraphDispatcher:
    """The dispatcher for the config the notebook builds from its parameters."""
    config = GraphConfig(
        cudagraph_mode=params["mode"],
        cudagraph_capture_sizes=params["capture_sizes"],
        max_num_seqs=params["max_num_seqs"],
        max_num_batched_tokens=params["max_num_batched_tokens"],
        num_speculative_tokens=params["num_speculative_tokens"],
    ).resolve()
    dispatcher = CudagraphDispatcher(config, record_stats=False)
    dispatcher.initialize_cudagraph_keys()
    return dispatcher


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        chromium = p.chromium.launch(executable_path=str(CHROMIUM), args=CHROMIUM_ARGS)
        yield chromium
        chromium.close()


@pytest.fixture
def page(browser: Any) -> Iterator[Any]:
    context = browser.new_context(viewport={"width": 1400, "height": 1000})
    blocked: list[str] = []
    block_other_hosts(context, blocked)
    page = context.new_page()
    page.set_default_timeout(TIMEOUT_MS)
    yield page
    context.close()


@pytest.fixture
def workdir(tmp_path: Path) -> Path:
    notebooks = tmp_path / "notebooks"
    notebooks.mkdir()
    shutil.copy(NOTEBOOK, notebooks / NOTEBOOK.name)
    return tmp_path


def shown_decision(page: Any) -> tuple[int, str, int]:
    """(num_tokens, runtime mode, padded size) as the page shows them."""
    box = page.locator("[data-testid=dispatch-decision]")
    mode_text = box.locator("[data-testid=decision-mode]").inner_text().strip()
    padded_text = box.locator("[data-testid=decision-padded]").inner_text().strip()
    assert box.get_attribute("data-runtime-mode") == mode_text
    assert box.get_attribute("data-padded-size") == padded_text
    return int(box.get_attribute("data-num-tokens")), mode_text, int(padded_text)


def slide_and_check(page: Any, dispatcher: CudagraphDispatcher, start: int, keys: list[str]) -> set:
    """Press each key on the slider handle; after each, the decision must be the dispatcher's."""
    from playwright.sync_api import expect

    box = page.locator("[data-testid=dispatch-decision]")
    box.wait_for(state="attached")
    assert shown_decision(page)[0] == start
    handle = page.locator(".noUi-handle").last
    handle.scroll_into_view_if_needed()
    handle.focus()
    n, seen = start, set()
    for key in keys:
        page.keyboard.press(key)
        n += 1 if key == "ArrowRight" else -1
        expect(box).to_have_attribute("data-num-tokens", str(n))
        expect(page.locator(".widget-readout").last).to_have_text(str(n))
        mode, desc = dispatcher.dispatch(n)
        assert shown_decision(page) == (n, mode.name, desc.num_tokens), f"num_tokens={n}"
        seen.add((mode.name, desc.num_tokens))
    return seen


def _keys(dispatcher: CudagraphDispatcher, start: int) -> list[str]:
    """Key presses from ``start`` down across a capture size, then up past the largest one."""
    sizes = dispatcher.config.cudagraph_capture_sizes
    below = max((s for s in sizes if s < start), default=1)
    down = start - max(below - 1, 1)
    up = (dispatcher.max_capture_size + 2) - (start - down)
    return ["ArrowLeft"] * down + ["ArrowRight"] * up


def test_dispatch_explorer_in_jupyterlab(page: Any, workdir: Path) -> None:
    params = notebook_parameters(NOTEBOOK)
    dispatcher = expected_dispatcher(params)
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
        page.locator("[data-testid=dispatch-decision]").wait_for(state="attached")
        start = params["start_tokens"]
        seen = slide_and_check(page, dispatcher, start, _keys(dispatcher, start))
        assert len(seen) >= 3, f"the slider crossed too few decisions: {seen}"
        assert any(mode == "NONE" for mode, _ in seen) and any(mode != "NONE" for mode, _ in seen)
        screenshot(page, "jupyterlab_dispatch_explorer")

        # uniform decode: the same num_tokens now dispatches as a uniform batch
        n = shown_decision(page)[0]
        page.locator(".widget-checkbox").filter(has_text="uniform decode").locator("input").click()
        page.locator("[data-testid=dispatch-decision][data-uniform=true]").wait_for(
            state="attached"
        )
        mode, desc = dispatcher.dispatch(n, uniform_decode=True)
        assert shown_decision(page) == (n, mode.name, desc.num_tokens)

        # a bad sizes entry shows a message, not a traceback
        sizes_box = page.locator(".widget-text input").first
        sizes_box.fill("1, 2, x")
        sizes_box.press("Enter")
        message = page.locator("[data-testid=dispatch-message]")
        message.wait_for()
        assert "not integers" in message.inner_text()
        assert (
            page.locator(
                ".jp-OutputArea-output[data-mime-type='application/vnd.jupyter.stderr']"
            ).count()
            == 0
        )
        screenshot(page, "jupyterlab_bad_sizes")


def test_dispatch_explorer_in_voila(page: Any, workdir: Path) -> None:
    params = notebook_parameters(NOTEBOOK)
    dispatcher = expected_dispatcher(params)
    port = free_port()
    notebook = workdir / "notebooks" / NOTEBOOK.name
    with running_server(voila_argv(port, notebook), None, port, workdir) as url:
        page.goto(url)
        page.locator("[data-testid=dispatch-decision]").wait_for(state="attached")
        start = params["start_tokens"]
        seen = slide_and_check(page, dispatcher, start, _keys(dispatcher, start))
        assert len(seen) >= 3, f"the slider crossed too few decisions: {seen}"
        screenshot(page, "voila_dispatch_explorer")
