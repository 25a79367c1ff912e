"""An entry registered for one test: ``scoped_entry(ENGINES, "mine", MyEngine)`` (Registry.scoped, until the test
ends), for tests whose registration must outlast a ``with`` block (a Trainer built in a helper, then resumed)."""

from __future__ import annotations

from contextlib import ExitStack

import pytest


@pytest.fixture
def scoped_entry():
    """scoped_entry(registry, name, obj) -> obj: registered under `name` until the test ends, then the registry as
    it was before."""
    with ExitStack() as scopes:
        yield lambda registry, name, obj: scopes.enter_context(registry.scoped(name, obj))
