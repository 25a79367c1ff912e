"""Tiny real models saved as model folders (no downloads): a causal LM for the judge and the model server, a
reward model for the reward-model graders and the reward server; each built once per session."""

from __future__ import annotations

import pytest


def build_tiny_lm(folder) -> str:
    """A 2-layer random Llama with the tests' ChatML tokenizer, saved like a real checkpoint."""
    from tests.tiny import tiny_llama, tiny_tokenizer

    tok = tiny_tokenizer()
    tiny_llama(len(tok)).save_pretrained(folder)
    tok.save_pretrained(folder)
    return str(folder)


def build_random_rm(folder) -> str:
    """A 2-layer LlamaForSequenceClassification (1 label) with the tests' tiny ChatML tokenizer."""
    import torch
    from transformers import LlamaConfig, LlamaForSequenceClassification

    from tests.tiny import tiny_tokenizer

    tok = tiny_tokenizer()
    torch.manual_seed(0)
    cfg = LlamaConfig(vocab_size=len(tok), hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                      num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=512,
                      num_labels=1, pad_token_id=tok.pad_token_id)
    LlamaForSequenceClassification(cfg).save_pretrained(folder)
    tok.save_pretrained(folder)
    return str(folder)


def bundled_or_random_rm(tmp_path_factory) -> str:
    """The bundled kitae-tiny-rm when it is built, else a random one."""
    from kitae.rewards.reward_model import bundled_rm_path

    bundled = bundled_rm_path()
    if (bundled / "config.json").exists():
        return str(bundled)
    return build_random_rm(tmp_path_factory.mktemp("tiny-rm"))


@pytest.fixture(scope="session")
def tiny_lm(tmp_path_factory) -> str:
    """The bundled kitae-tiny-base once it is built, else a random tiny LM."""
    from kitae.models import BUNDLED_MODEL

    if (BUNDLED_MODEL / "config.json").exists():
        return str(BUNDLED_MODEL)
    return build_tiny_lm(tmp_path_factory.mktemp("tiny-lm"))


@pytest.fixture(scope="session")
def random_lm(tmp_path_factory) -> str:
    return build_tiny_lm(tmp_path_factory.mktemp("random-lm"))


@pytest.fixture(scope="session")
def tiny_rm(tmp_path_factory) -> str:
    return bundled_or_random_rm(tmp_path_factory)


@pytest.fixture(scope="session")
def random_rm(tmp_path_factory) -> str:
    return build_random_rm(tmp_path_factory.mktemp("random-rm"))
