"""The >>> examples in the tools' docstrings run and print what they say."""

import doctest

import pytest

from kitae.agents import environments, tools


@pytest.mark.parametrize("module", [tools, environments], ids=lambda m: m.__name__)
def test_docstring_examples(module):
    result = doctest.testmod(module, optionflags=doctest.NORMALIZE_WHITESPACE)
    assert result.failed == 0
    assert result.attempted > 0  # the module has examples to check
