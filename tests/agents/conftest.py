"""Fixtures the agent tests share."""

from __future__ import annotations

import pytest

from tests.agents.episode_helpers import tools_tokenizer


@pytest.fixture(scope="module")
def tok():
    """The bundled tiny model's tokenizer with a ChatML template that renders tools as Qwen2.5 does."""
    return tools_tokenizer()
