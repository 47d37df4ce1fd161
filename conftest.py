"""Repository-wide pytest hooks, loaded for tests/ and notebooks/ alike.

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


def pytest_configure(config: pytest.Config) -> None:
    if nbval_plugin is None:
        return
    nbval_plugin.RunningKernel = RetryingKernel  # what IPyNbFile.setup instantiates
    given = any(
        arg.startswith("--nbval-kernel-startup-timeout") for arg in config.invocation_params.args
    )
    if not given and hasattr(config.option, "nbval_kernel_startup_timeout"):
        config.option.nbval_kernel_startup_timeout = KERNEL_STARTUP_TIMEOUT_S
