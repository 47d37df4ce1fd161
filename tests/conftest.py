"""Suite-wide settings."""

import pytest


@pytest.fixture(scope="session", autouse=True)
def _one_torch_thread():
    """Tiny models on a 2-core machine: one intra-op thread is about 2x faster than two,
    and leaves the other core to the Jupyter kernels and servers the tests start."""
    import torch

    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


@pytest.fixture(scope="session")
def browser():
    """Debian's Chromium through Playwright, one for every real-browser test of the run."""
    from browser_support import CHROMIUM, CHROMIUM_ARGS
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        chromium = p.chromium.launch(executable_path=str(CHROMIUM), args=CHROMIUM_ARGS)
        yield chromium
        chromium.close()
