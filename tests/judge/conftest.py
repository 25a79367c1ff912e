"""Fixtures of the judge tests: a tiny causal LM folder (the bundled kitae-tiny-base once it is built)."""

from __future__ import annotations

import pytest

from kitae.models import BUNDLED_MODEL


def build_tiny_lm(folder) -> str:
    """A 2-layer random Llama with the tests' ChatML tokenizer, saved like a real checkpoint."""
    from tests.tiny import tiny_llama, tiny_tokenizer

    tok = tiny_tokenizer()
    tiny_llama(len(tok)).save_pretrained(folder)
    tok.save_pretrained(folder)
    return str(folder)


@pytest.fixture(autouse=True)
def one_torch_thread():
    """Tiny models run fastest on one thread, above all on a busy machine; restored after each test."""
    import torch

    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


@pytest.fixture(scope="session")
def tiny_lm(tmp_path_factory) -> str:
    if (BUNDLED_MODEL / "config.json").exists():
        return str(BUNDLED_MODEL)
    return build_tiny_lm(tmp_path_factory.mktemp("tiny-lm"))


@pytest.fixture(scope="session")
def random_lm(tmp_path_factory) -> str:
    return build_tiny_lm(tmp_path_factory.mktemp("random-lm"))
