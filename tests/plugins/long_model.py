"""A tiny real model that answers one prompt at length and loops on another (no downloads), for the rollout tests
(partial rollouts, repeat detection) and the long2short tests."""

from __future__ import annotations

import json

import pytest

from kitae.chat import IM_END

LONG_USER = [{"role": "user", "content": "hi"}]
LONG_ANSWER = "hello world, the answer is 47. what is 12+35? hello world" + IM_END
LOOP_USER = [{"role": "user", "content": "what is 12+35?"}]
LOOP_ANSWER = "the answer is" + " 47 47" * 12


@pytest.fixture(scope="session")
def long_engine():
    """An HFEngine: LONG_USER gives LONG_ANSWER (18 tokens, then a stop), LOOP_USER loops " 47" until the length
    limit."""
    from kitae.chat import chatml
    from kitae.rollout.hf import HFEngine
    from tests.tiny import overfit, tiny_llama, tiny_tokenizer

    tok = tiny_tokenizer()
    model = tiny_llama(len(tok))
    overfit(model, tok, [chatml(LONG_USER) + LONG_ANSWER, chatml(LOOP_USER) + LOOP_ANSWER], steps=100)
    return HFEngine(model, tok)


@pytest.fixture(scope="session")
def long_model_dir(long_engine, tmp_path_factory):
    """long_engine's model and tokenizer saved as a model folder, with a two-prompt set for it:
    LONG_USER's answer ends in "35" (its last number: correct), LOOP_USER never ends its turn (never correct)."""
    root = tmp_path_factory.mktemp("long")
    long_engine.model.save_pretrained(root / "model")
    long_engine.tokenizer.save_pretrained(root / "model")
    rows = [{"messages": LONG_USER, "reference_answer": "35"}, {"messages": LOOP_USER, "reference_answer": "47"}]
    (root / "prompts.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    return root
