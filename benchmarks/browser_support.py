"""Helpers for the real-browser tests: local servers (JupyterLab, Voila) and a locked-down Chromium.

Servers are started with ``subprocess.Popen`` on a free port of 127.0.0.1, in a private
Jupyter config/data/runtime directory, with the repository root on PYTHONPATH so that the
kernel imports this checkout's cgdispatch; ``stop`` terminates exactly the process started.
Chromium is Debian's (/usr/bin/chromium) driven by pip's Playwright; every request to a host
other than 127.0.0.1/localhost is aborted (Voila asks CDNs for fonts and MathJax).
"""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

REPO_ROOT = Path(__file__).resolve().parent.parent
CHROMIUM = Path("/usr/bin/chromium")
SCREENSHOTS = REPO_ROOT / "build" / "screenshots"
CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]
LOCAL_HOSTS = {"127.0.0.1", "localhost"}


def browser_skip_reason() -> str | None:
    """Why the browser tests cannot run here, or None when they can."""
    if not CHROMIUM.exists():
        return f"{CHROMIUM} is missing: apt-get install -y chromium chromium-driver"
    try:
        import playwright.sync_api  # noqa: F401
    except ImportError:
        return "playwright is not installed: pip install playwright (never `playwright install`)"
    if shutil.which("jupyter-lab", path=str(Path(sys.executable).parent)) is None:
        return "jupyter-lab is not installed next to this Python"
    return None


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def server_env(home: Path) -> dict[str, str]:
    """Environment for a server: private Jupyter dirs, this checkout first on PYTHONPATH."""
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO_ROOT), env.get("PYTHONPATH")]))
    for name in (
        "JUPYTER_CONFIG_DIR",
        "JUPYTER_DATA_DIR",
        "JUPYTER_RUNTIME_DIR",
        "JUPYTERLAB_SETTINGS_DIR",
        "JUPYTERLAB_WORKSPACES_DIR",
    ):
        path = home / name.lower()
        path.mkdir(parents=True, exist_ok=True)
        env[name] = str(path)
    # no news pop-up over the notebook (lab reads page_config.json from the config dir)
    labconfig = Path(env["JUPYTER_CONFIG_DIR"]) / "labconfig"
    labconfig.mkdir(exist_ok=True)
    disabled = {"@jupyterlab/apputils-extension:announcements": True}
    (labconfig / "page_config.json").write_text(json.dumps({"disabledExtensions": disabled}))
    # start the notebook's kernel without asking (JupyterLab >= 4.1 shows a dialog otherwise)
    tracker = Path(env["JUPYTERLAB_SETTINGS_DIR"]) / "@jupyterlab" / "notebook-extension"
    tracker.mkdir(parents=True, exist_ok=True)
    (tracker / "tracker.jupyterlab-settings").write_text(
        json.dumps({"autoStartDefaultKernel": True, "windowingMode": "none"})
    )
    env["MPLBACKEND"] = "agg"
    return env


def _wait_ready(
    port: int, path: str | None, proc: subprocess.Popen, log: Path, timeout_s: float
) -> None:
    """Until ``path`` answers 200 (or, with ``path=None``, the port accepts connections)."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"server exited with {proc.returncode}:\n{log.read_text()[-3000:]}")
        try:
            if path is None:
                socket.create_connection(("127.0.0.1", port), timeout=2).close()
                return
            with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=2) as response:
                if response.status == 200:
                    return
        except OSError:
            time.sleep(0.25)
    raise RuntimeError(
        f"server on port {port} not ready after {timeout_s} s:\n{log.read_text()[-3000:]}"
    )


@contextmanager
def running_server(
    argv: list[str], ready_path: str | None, port: int, home: Path, timeout_s: float = 60
) -> Iterator[str]:
    """Start ``argv`` (a server on ``port``), wait until it is ready, yield its URL, stop it after.

    ``ready_path`` is a cheap URL that answers 200 once the server is up; None waits for the
    port (Voila runs the notebook on every page request, so probing a page would run it twice).
    """
    log = home / f"server-{port}.log"
    with log.open("w") as out:
        proc = subprocess.Popen(
            argv, env=server_env(home), stdout=out, stderr=subprocess.STDOUT, cwd=home
        )
    try:
        _wait_ready(port, ready_path, proc, log, timeout_s)
        yield f"http://127.0.0.1:{port}"
    finally:
        proc.terminate()  # exactly the process started here
        try:
            proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=5)


def jupyterlab_argv(port: int, root_dir: Path) -> list[str]:
    exe = str(Path(sys.executable).parent / "jupyter-lab")
    return [
        exe,
        "--no-browser",
        "--allow-root",
        "--ip",
        "127.0.0.1",
        "--port",
        str(port),
        "--IdentityProvider.token=",
        "--ServerApp.password=",
        f"--ServerApp.root_dir={root_dir}",
        "--ServerApp.disable_check_xsrf=True",
    ]


def voila_argv(port: int, notebook: Path) -> list[str]:
    exe = str(Path(sys.executable).parent / "voila")
    return [exe, str(notebook), "--no-browser", "--port", str(port), "--Voila.ip=127.0.0.1"]


def block_other_hosts(context: Any, blocked: list[str]) -> None:
    """Abort every request whose host is not local; record the URLs aborted."""

    def handle(route: Any) -> None:
        host = urlsplit(route.request.url).hostname
        if host in LOCAL_HOSTS or route.request.url.startswith(("data:", "blob:")):
            route.continue_()
        else:
            blocked.append(route.request.url)
            route.abort()

    context.route("**/*", handle)


def screenshot(page: Any, name: str) -> Path:
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    path = SCREENSHOTS / f"{name}.png"
    page.screenshot(path=str(path), full_page=True)
    return path
