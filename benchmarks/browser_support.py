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
import threading
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
_BIND_PAUSE_S = 0.05  # between connection attempts once the server has printed its URL


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


class _ServerOutput:
    """Copies a server's output to its log file and tells when the server says it listens.

    Jupyter Server and Voila print their URL (``http://127.0.0.1:<port>/...``) when their
    start-up is done (Voila after binding, Jupyter Server just before), so the long part
    of the wait is a wait on that line, not a timed poll; the copy also keeps the pipe
    drained for the server's whole life.
    """

    def __init__(self, proc: subprocess.Popen, log: Path, port: int) -> None:
        self._changed = threading.Condition()
        self.listening = False  # a line named 127.0.0.1:<port>/ or localhost:<port>/
        self.ended = False  # the output closed: the server exited
        self._thread = threading.Thread(
            target=self._copy, args=(proc.stdout, log, port), daemon=True
        )
        self._thread.start()

    def _copy(self, stream: Any, log: Path, port: int) -> None:
        marks = (f"127.0.0.1:{port}/", f"localhost:{port}/")
        with log.open("w") as out:
            for line in stream:
                out.write(line)
                out.flush()
                if not self.listening and any(mark in line for mark in marks):
                    with self._changed:
                        self.listening = True
                        self._changed.notify_all()
        with self._changed:
            self.ended = True
            self._changed.notify_all()

    def wait_listening(self, timeout_s: float) -> bool:
        """True once the server said it listens, False if it exited or timed out first."""
        with self._changed:
            self._changed.wait_for(lambda: self.listening or self.ended, timeout_s)
            return self.listening

    def join(self, timeout_s: float) -> None:
        self._thread.join(timeout_s)


def _wait_ready(
    port: int,
    path: str | None,
    proc: subprocess.Popen,
    output: _ServerOutput,
    log: Path,
    timeout_s: float,
) -> None:
    """Until the server says it listens on ``port`` and then accepts a connection; then one
    request to ``path`` must answer 200 (``path=None``: the connection is enough)."""
    deadline = time.monotonic() + timeout_s

    def failed(why: str) -> RuntimeError:
        return RuntimeError(f"server on port {port} {why}:\n{log.read_text()[-3000:]}")

    if not output.wait_listening(timeout_s):
        if output.ended or proc.poll() is not None:
            proc.wait(timeout=15)
            raise failed(f"exited with {proc.returncode}")
        raise failed(f"not listening after {timeout_s} s")
    # Jupyter Server prints its URL just before its event loop binds the port (a callback
    # of the loop's first turn), so a connection may be refused for a few milliseconds:
    # retry, pausing on the server process itself so that an exit ends the wait at once
    while True:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=10).close()
            break
        except ConnectionRefusedError:
            if time.monotonic() > deadline:
                raise failed(f"refuses connections {timeout_s} s after start") from None
            try:
                proc.wait(timeout=_BIND_PAUSE_S)
            except subprocess.TimeoutExpired:
                continue
            raise failed(f"exited with {proc.returncode}") from None
    if path is not None:
        left_s = max(deadline - time.monotonic(), 10.0)
        with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=left_s) as response:
            if response.status != 200:
                raise failed(f"answered {response.status} on {path}")


@contextmanager
def running_server(
    argv: list[str], ready_path: str | None, port: int, home: Path, timeout_s: float = 120
) -> Iterator[str]:
    """Start ``argv`` (a server on ``port``), wait until it is ready, yield its URL, stop it after.

    Ready: the server printed its URL with ``port``, accepts connections, and
    ``ready_path``, a cheap URL, answered 200; None only connects (Voila runs the notebook
    on every page request, so probing a page would run it twice). ``timeout_s`` is
    generous for a loaded 2-core machine; the wait ends as soon as the server is up or has
    exited.
    """
    log = home / f"server-{port}.log"
    proc = subprocess.Popen(
        argv,
        env=server_env(home),
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        errors="replace",
        cwd=home,
    )
    output = _ServerOutput(proc, log, port)
    try:
        _wait_ready(port, ready_path, proc, output, log, timeout_s)
        yield f"http://127.0.0.1:{port}"
    finally:
        proc.terminate()  # exactly the process started here
        try:
            proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=5)
        output.join(15)  # the pipe closes when the server (and its kernels) exit


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
