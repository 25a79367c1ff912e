"""Every test starts with the torch thread count the session started with.

A trainer's ``threads`` setting (and some fixtures) change torch's process-wide thread count; restoring it
after each test keeps every later test's result independent of the order tests run in.
"""

from __future__ import annotations

import pytest
import torch

_SESSION_THREADS = torch.get_num_threads()


@pytest.fixture(autouse=True)
def _restore_torch_threads():
    yield
    if torch.get_num_threads() != _SESSION_THREADS:
        torch.set_num_threads(_SESSION_THREADS)
