"""Repository-wide pytest hooks, loaded for tests/ and notebooks/ alike: long files first,
and notebook kernels that survive a failed start.

**Order.** ``make test`` runs ``--dist loadfile``: each file goes whole to one worker, in
the order of the queue. pytest-xdist's default queue puts files with many tests first, so the
files with a few long tests (browsers, notebooks, sweeps in subprocesses, calibration fits)
came last and one worker ran them alone at the end: in one run on 2 cores the last 12% of
the tests took 47% of the 468 s. Here the queue keeps collection order
(``--no-loadscope-reorder`` unless ``--loadscope-reorder`` is given) and collection puts
the long files first (``LONG_FILES``, then notebooks and files with a ``slow`` or
``browser`` test), so the short ones fill the gaps at the end.

**Kernels.**
nbval starts one Jupyter kernel per notebook (``RunningKernel`` in nbval 0.11's
``nbval/kernel.py``, built by ``IPyNbFile.setup`` in ``nbval/plugin.py``) with the kernel's
stderr sent to /dev/null and a 60 s start-up timeout. A kernel that dies while it starts
fails every cell of its notebook ("Kernel died before replying to kernel_info"): it
happened once under load in a fresh-clone ``make test`` (issue 38) and never alone.
Here nbval's kernel class is replaced by :class:`RetryingKernel`, which keeps the kernel's
stderr and, when a start fails, warns with the error and that stderr, then starts the
kernel once more. The start-up timeout becomes ``KERNEL_STARTUP_TIMEOUT_S`` unless
``--nbval-kernel-startup-timeout`` is given. tests/test_kernel_retry.py proves both with a
fake kernel whose first start exits.
"""

from __future__ import annotations

import gc
import logging
import tempfile
import warnings

import pytest

try:
    from nbval import plugin as nbval_plugin
    from nbval.kernel import RunningKernel, start_new_kernel
except ImportError:  # nbval missing: no notebook tests, nothing to patch
    nbval_plugin = None
    RunningKernel = object

# nbval's 60 s is tight when 2 cores run 2 test workers, browser servers and their kernels
KERNEL_STARTUP_TIMEOUT_S = 180.0
KERNEL_STARTS = 2  # a kernel that fails to start is started once more, never more
_STDERR_TAIL_CHARS = 2000

log = logging.getLogger("cgdispatch.tests.kernel")


class KernelRestartWarning(UserWarning):
    """A notebook kernel failed to start and was started again (the message says why)."""


class RetryingKernel(RunningKernel):
    """nbval's ``RunningKernel`` that starts a kernel again, once, when its start fails.

    A failed start is a kernel that dies before answering ``kernel_info``, does not answer
    within the start-up timeout, or never gets its IOPub channel up (all ``RuntimeError``
    in nbval and jupyter_client). The first failure is logged and warned about with the
    kernel's stderr; a second one is raised as nbval raises it.
    """

    def __init__(self, kernel_name: str, cwd: str | None = None, startup_timeout: float = 60):
        for attempt in range(1, KERNEL_STARTS + 1):
            # the kernel writes its stderr here (nbval: /dev/null); the file is unlinked
            # on close, and a running kernel keeps its own handle to it
            with tempfile.TemporaryFile("w+") as stderr:
                try:
                    self.km, self.kc = start_new_kernel(
                        startup_timeout=startup_timeout,
                        kernel_name=kernel_name,
                        stderr=stderr,
                        cwd=cwd,
                    )
                    self._ensure_iopub_up()
                    return
                except (RuntimeError, OSError) as exc:
                    self._discard()
                    if attempt == KERNEL_STARTS:
                        raise
                    stderr.seek(0)
                    tail = stderr.read()[-_STDERR_TAIL_CHARS:].strip() or "(empty)"
                    message = (
                        f"kernel {kernel_name!r} for {cwd} failed to start ({exc}); starting "
                        f"it once more. Its stderr:\n{tail}"
                    )
                    log.warning(message)
                    warnings.warn(message, KernelRestartWarning, stacklevel=2)

    def _discard(self) -> None:
        """Stop a half-started kernel (nbval's start_new_kernel stops one that died)."""
        if hasattr(self, "km"):
            try:
                self.stop()
            except Exception:  # already gone: nothing left to stop
                log.debug("stopping a failed kernel", exc_info=True)
            self.__dict__.pop("km", None)


# The longest files, longest first, by the summed seconds of their tests in
# ``pytest -n 2 --dist loadfile --durations=0 ... tests notebooks`` on 2 cores (2026-12-05,
# 15:05 UTC, 3,166 tests, 390 s; the other worker's load included). The browser files go
# first: their server, kernel and Chromium wait on each other, so they overlap best with
# the other worker's CPU-bound files. A file not listed keeps its place after them;
# remeasure when the list drifts.
LONG_FILES = (
    "tests/test_browser_dashboard.py",  # 199 s: a Voila server, a recompute per control
    "tests/test_browser_notebooks.py",  # 38 s: JupyterLab and Voila, a kernel each
    "tests/cli/test_capture_cli.py",  # 28 s
    "tests/views/test_figure_text.py",  # 23 s: every figure, the calibration fit
    "tests/views/test_tune_dashboard.py",  # 22 s: tune end to end per control
    "tests/estimate/test_memory.py",  # 22 s
    "tests/sweep/test_store_sharing.py",  # 18 s: sweeps in two processes at once
    "tests/capture/test_piecewise.py",  # 18 s: inductor compiles
    "tests/capture/test_runner_gen2.py",  # 16 s
    "notebooks/05_bring_your_own_model.ipynb",  # 14 s
    "tests/project/test_readme.py",  # 14 s
    "tests/sweep/test_sweep.py",  # 13 s
    "tests/sweep/test_sweep_gen2.py",  # 12 s
    "tests/sweep/test_dask.py",  # 12 s: a two-process dask cluster
    "tests/cli/test_cache_environment.py",  # 12 s: two tune processes with no home
    "notebooks/03_mode_sweep.ipynb",  # 12 s
    "tests/views/test_report.py",  # 11 s
    "tests/capture/test_release.py",  # 11 s
    "tests/views/test_whatif_never_breaks.py",  # 11 s: the tune property test
    "tests/capture/test_lifetime.py",  # 11 s
)


def _file_rank(path: str, marks: set[str]) -> int:
    """Where a file goes in the queue: LONG_FILES in their order, then other notebooks and
    files with a slow or browser test, then the rest (each group in collection order)."""
    if path in LONG_FILES:
        return LONG_FILES.index(path)
    if path.endswith(".ipynb") or marks & {"slow", "browser"}:
        return len(LONG_FILES)
    return len(LONG_FILES) + 1


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    # every worker collects and sorts alike (a stable sort of the same collection), as
    # pytest-xdist requires
    files: dict[str, set[str]] = {}
    for item in items:
        path = item.nodeid.split("::", 1)[0]
        files.setdefault(path, set()).update(m.name for m in item.iter_markers())
    rank = {path: _file_rank(path, marks) for path, marks in files.items()}
    items.sort(key=lambda item: rank[item.nodeid.split("::", 1)[0]])


def _freeze_the_heap() -> None:
    gc.collect()
    gc.freeze()


def pytest_collection_finish(session: pytest.Session) -> None:
    # Freeze the heap every test module imported (torch, pandas, the package), as a server
    # freezes its start-up heap: a full collection then walks only what came after. Every
    # capture-all collects first (capture/graph.py: capture_session); with torch's whole heap
    # to walk, one collection took 0.2 s and half of a capture test's time.
    _freeze_the_heap()


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item: pytest.Item, nextitem: pytest.Item | None):
    yield
    # the same after each file, its module fixtures torn down: what stays alive then
    # (modules imported on first use, caches) is frozen, the file's garbage collected
    if nextitem is None or nextitem.path != item.path:
        _freeze_the_heap()


def pytest_configure(config: pytest.Config) -> None:
    args = config.invocation_params.args
    if hasattr(config.option, "loadscopereorder") and not any(
        arg == "--loadscope-reorder" for arg in args
    ):
        config.option.loadscopereorder = False  # keep the order set above
    if nbval_plugin is None:
        return
    nbval_plugin.RunningKernel = RetryingKernel  # what IPyNbFile.setup instantiates
    given = any(arg.startswith("--nbval-kernel-startup-timeout") for arg in args)
    if not given and hasattr(config.option, "nbval_kernel_startup_timeout"):
        config.option.nbval_kernel_startup_timeout = KERNEL_STARTUP_TIMEOUT_S
