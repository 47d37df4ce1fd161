"""The tune dashboard's first render in a real browser (``make dashboard``: Voila on
notebooks/dashboard.ipynb), against the same ``tune`` computed in-process.

Target (issue 20): the dashboard renders its first verdict in <= 10 s on this machine. The
baseline measured in the same run is the in-process ``tune`` of the same settings (imports,
the cached device model, the trace and the held-out replay); the ratio is what Voila, the
kernel start and the browser add. Needs Debian's Chromium and Playwright (as the browser
tests); measured (CPU), this machine.

Run: ``PYTHONPATH=. python benchmarks/bench_dashboard.py`` (about half a minute).
"""

from __future__ import annotations

import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from browser_support import (  # beside this script
    CHROMIUM,
    CHROMIUM_ARGS,
    block_other_hosts,
    browser_skip_reason,
    free_port,
    running_server,
    voila_argv,
)

ROOT = Path(__file__).resolve().parents[1]

TARGET_S = 10.0
_IN_PROCESS = "import cgdispatch as cg; cg.tune_dashboard(draw=True)"


def main() -> None:
    reason = browser_skip_reason()
    if reason is not None:
        raise SystemExit(f"cannot run: {reason}")
    from playwright.sync_api import sync_playwright

    start = time.perf_counter()
    subprocess.run([sys.executable, "-c", _IN_PROCESS], check=True, cwd=ROOT)
    baseline_s = time.perf_counter() - start
    with tempfile.TemporaryDirectory() as tmp:
        home = Path(tmp)
        (home / "notebooks").mkdir()
        notebook = home / "notebooks" / "dashboard.ipynb"
        shutil.copy(ROOT / "notebooks" / "dashboard.ipynb", notebook)
        port = free_port()
        with (
            sync_playwright() as p,
            running_server(voila_argv(port, notebook), None, port, home) as url,
        ):
            browser = p.chromium.launch(executable_path=str(CHROMIUM), args=CHROMIUM_ARGS)
            context = browser.new_context()
            block_other_hosts(context, [])
            page = context.new_page()
            page.set_default_timeout(120_000)
            start = time.perf_counter()
            page.goto(url)
            page.locator("[data-testid=tune-verdict]").wait_for(state="attached")
            render_s = time.perf_counter() - start
            browser.close()
    verdict = "met" if render_s <= TARGET_S else "MISSED"
    print("figures: measured (CPU), this machine")
    print(f"in-process tune_dashboard() (python -c, imports included): {baseline_s:.2f} s")
    print(f"Voila first render of the verdict (page request to verdict shown): {render_s:.2f} s")
    print(
        f"ratio: {render_s / baseline_s:.2f}x the in-process build; target <= {TARGET_S:.0f} s: "
        f"{render_s / TARGET_S:.2f} of it ({verdict})"
    )


if __name__ == "__main__":
    main()
