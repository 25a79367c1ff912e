"""The judge tests run their tiny models on one torch thread (tiny_lm and random_lm: tests/plugins/tiny_models.py)."""

from __future__ import annotations

import pytest


@pytest.fixture(autouse=True)
def one_torch_thread():
    """Tiny models run fastest on one thread, above all on a busy machine; restored after each test."""
    import torch

    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)
