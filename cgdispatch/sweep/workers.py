"""Worker processes that die with the sweep that started them.

``ProcessPoolExecutor``'s workers outlive a parent killed with SIGKILL (each blocks on a
queue whose write end it holds itself) and, on Ctrl-C to the process group, each gets its
own KeyboardInterrupt, prints a traceback and keeps its unit running. :func:`worker_pool`
makes a pool whose workers ignore SIGINT (the parent alone handles it), ask Linux to kill
them when the parent dies (``PR_SET_PDEATHSIG``), and watch the parent's pid twice a
second where that is not available; :func:`stop_workers` terminates them at once.
"""

from __future__ import annotations

import concurrent.futures as cf
import ctypes
import multiprocessing
import os
import signal
import sys
import threading
import time

__all__ = ["worker_pool", "stop_workers"]

_PR_SET_PDEATHSIG = 1
_WATCH_S = 0.5


def _die_with(parent_pid: int) -> None:
    """Worker initializer: ignore Ctrl-C, exit when ``parent_pid`` is gone."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    if sys.platform.startswith("linux"):
        try:
            libc = ctypes.CDLL(None, use_errno=True)
            libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
        except (OSError, AttributeError):
            pass  # the watcher below still ends the worker
    if os.getppid() != parent_pid:  # the parent died before the signal was armed
        os._exit(1)

    def watch() -> None:
        while os.getppid() == parent_pid:
            time.sleep(_WATCH_S)
        os._exit(1)

    threading.Thread(target=watch, name="cgdispatch-parent-watch", daemon=True).start()


def worker_pool(workers: int) -> cf.ProcessPoolExecutor:
    """``workers`` spawned processes that die with this one (see the module's docstring)."""
    return cf.ProcessPoolExecutor(
        workers,
        mp_context=multiprocessing.get_context("spawn"),
        initializer=_die_with,
        initargs=(os.getpid(),),
    )


def stop_workers(executor: cf.Executor, timeout_s: float = 3.0) -> None:
    """Cancel what has not started and end every worker process now (SIGTERM, then SIGKILL
    after ``timeout_s``); a unit half done is lost, its finished rows are in the store."""
    procs = list((getattr(executor, "_processes", None) or {}).values())
    for proc in procs:
        if proc.is_alive():
            proc.terminate()
    deadline = time.monotonic() + timeout_s
    for proc in procs:
        proc.join(max(0.0, deadline - time.monotonic()))
        if proc.is_alive():
            proc.kill()
            proc.join(1.0)
    executor.shutdown(wait=False, cancel_futures=True)
