"""The >>> examples in the trainer's docstrings run and print what they say."""

import doctest

import pytest

from kitae.scoring import config as scoring_config
from kitae.trainer import batch, setup


# kitae.scoring.config holds the eval grader's examples that kitae.trainer.config held before the sections moved
@pytest.mark.parametrize("module", [batch, scoring_config, setup], ids=lambda m: m.__name__)
def test_docstring_examples(module):
    result = doctest.testmod(module, optionflags=doctest.NORMALIZE_WHITESPACE)
    assert result.failed == 0
    assert result.attempted > 0  # the module has examples to check
