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
