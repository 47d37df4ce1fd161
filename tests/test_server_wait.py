"""benchmarks/browser_support.py's ``running_server``: ready when the server says it listens
(no timed polling), fast failure when it exits first. Fake servers, no browser needed."""

from __future__ import annotations

import sys
import urllib.error
import urllib.request
from pathlib import Path

import pytest
from browser_support import free_port, running_server

# prints its URL after binding (as Voila does) or before (as Jupyter Server does), serves /ready
SERVER = """\
import http.server, sys
port = int(sys.argv[1])
class Handler(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        self.send_response(200 if self.path == "/ready" else 404)
        self.end_headers()
        self.wfile.write(b"up")
    def log_message(self, *args):
        pass
print("starting up", flush=True)
if "--bind-late" in sys.argv:  # Jupyter Server's order: the URL, then the bind
    import time

    print(f"running at:\\nhttp://127.0.0.1:{port}/", flush=True)
    time.sleep(0.5)  # the fake server's own start-up work, not a wait of the test
    server = http.server.HTTPServer(("127.0.0.1", port), Handler)
else:  # Voila's order: the bind, then the URL
    server = http.server.HTTPServer(("127.0.0.1", port), Handler)
    print(f"running at:\\nhttp://127.0.0.1:{port}/", flush=True)
server.serve_forever()
"""


@pytest.mark.parametrize("order", ["bind, then URL", "URL, then bind"])
def test_ready_once_the_server_says_it_listens_and_accepts(tmp_path: Path, order: str) -> None:
    script = tmp_path / "server.py"
    script.write_text(SERVER)
    port = free_port()
    argv = [sys.executable, str(script), str(port)]
    argv += ["--bind-late"] if order.startswith("URL") else []
    for path in ("/ready", None):
        with running_server(argv, path, port, tmp_path) as url:
            assert url == f"http://127.0.0.1:{port}"
            with urllib.request.urlopen(f"{url}/ready", timeout=30) as response:
                assert response.read() == b"up"
    assert "running at" in (tmp_path / f"server-{port}.log").read_text()


def test_a_server_that_exits_fails_at_once_with_its_output(tmp_path: Path) -> None:
    port = free_port()
    argv = [sys.executable, "-c", "import sys; print('bad flag --nope'); sys.exit(2)"]
    with (
        pytest.raises(RuntimeError, match="exited with 2(.|\\n)*bad flag --nope"),
        running_server(argv, None, port, tmp_path, timeout_s=600),
    ):
        pass


def test_a_ready_path_that_is_not_200_is_refused(tmp_path: Path) -> None:
    script = tmp_path / "server.py"
    script.write_text(SERVER)
    port = free_port()
    with (
        pytest.raises(urllib.error.HTTPError, match="404"),
        running_server([sys.executable, str(script), str(port)], "/missing", port, tmp_path),
    ):
        pass
