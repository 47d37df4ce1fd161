"""The repository conftest.py's nbval kernel retry, on a fake kernel whose first starts exit.

The fake kernel spec runs a launcher that exits with a message on stderr while a counter
file says it still has deaths left, then execs a real ipykernel. nbval's own kernel class
fails on it (the control); the class nbval instantiates in this run starts it again once,
with the cause in a warning, and gives up after two failed starts.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

nbval_kernel = pytest.importorskip("nbval.kernel")
nbval_plugin = pytest.importorskip("nbval.plugin")

KERNEL = "cgdispatch-dies-first"
START_S = 180  # kernel start-up limit: generous for a loaded 2-core machine
LAUNCHER = """\
import sys
from pathlib import Path

here = Path(__file__).parent
starts = here / "starts"
starts.write_text(str(int(starts.read_text() or 0) + 1) if starts.exists() else "1")
deaths = here / "deaths_left"
left = int(deaths.read_text())
if left > 0:
    deaths.write_text(str(left - 1))
    sys.stderr.write("simulated crash at start (%d left)\\n" % (left - 1))
    sys.exit(3)
from ipykernel.kernelapp import launch_new_instance

sys.argv = [sys.argv[0], "-f", sys.argv[1]]
launch_new_instance()
"""


@pytest.fixture
def fake_kernel(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A kernel spec named KERNEL on JUPYTER_PATH; returns its folder (write deaths_left)."""
    spec = tmp_path / "kernels" / KERNEL
    spec.mkdir(parents=True)
    (spec / "launcher.py").write_text(LAUNCHER)
    argv = [sys.executable, str(spec / "launcher.py"), "{connection_file}"]
    (spec / "kernel.json").write_text(
        json.dumps({"argv": argv, "display_name": "dies first", "language": "python"})
    )
    monkeypatch.setenv("JUPYTER_PATH", str(tmp_path))
    return spec


def starts(spec: Path) -> int:
    return int((spec / "starts").read_text())


def test_nbval_uses_the_retrying_kernel_with_a_generous_startup_timeout(pytestconfig):
    kernel_class = nbval_plugin.RunningKernel
    assert issubclass(kernel_class, nbval_kernel.RunningKernel)
    assert kernel_class.__name__ == "RetryingKernel"
    root_conftest = Path(__file__).resolve().parent.parent / "conftest.py"
    assert Path(kernel_class.__init__.__code__.co_filename) == root_conftest
    if not any("--nbval-kernel-startup-timeout" in a for a in pytestconfig.invocation_params.args):
        assert pytestconfig.option.nbval_kernel_startup_timeout >= 180


def test_kernel_that_dies_at_first_start_is_started_again(fake_kernel, caplog):
    (fake_kernel / "deaths_left").write_text("1")
    with pytest.raises(RuntimeError, match="died"):  # control: nbval alone fails
        nbval_kernel.RunningKernel(KERNEL, cwd=str(fake_kernel), startup_timeout=START_S)
    assert starts(fake_kernel) == 1

    (fake_kernel / "deaths_left").write_text("1")
    with pytest.warns(UserWarning, match="simulated crash at start") as record:
        kernel = nbval_plugin.RunningKernel(KERNEL, cwd=str(fake_kernel), startup_timeout=START_S)
    try:
        assert kernel.is_alive()
        msg_id = kernel.execute_cell_input("6 * 7")
        kernel.await_reply(msg_id, timeout=START_S)
    finally:
        kernel.stop()
    assert starts(fake_kernel) == 3  # the control's start, a failed one, a good one
    assert type(record[0].message).__name__ == "KernelRestartWarning"
    assert "died" in str(record[0].message)  # jupyter_client's error is named too
    assert any("simulated crash" in r.getMessage() for r in caplog.records)


def test_kernel_is_started_at_most_twice(fake_kernel):
    (fake_kernel / "deaths_left").write_text("5")
    with (
        pytest.warns(UserWarning, match="simulated crash"),
        pytest.raises(RuntimeError, match="died"),
    ):
        nbval_plugin.RunningKernel(KERNEL, cwd=str(fake_kernel), startup_timeout=START_S)
    assert starts(fake_kernel) == 2
