"""A tiny real model that has learned two answers, for the model-based curation steps.

Trained (overfit, seconds on CPU) on two ChatML conversations: "what is 12+35?" answered 47 (right) and
"こんにちは" answered hello (graded against the reference "world": wrong). Greedy decoding then gives
hand-predictable pass rates (1 and 0); sampling at temperature 1 still strays now and then, so sampled pass
rates depend on the seed.
"""

from __future__ import annotations

import functools

from kitae.chat import IM_END, chatml
from kitae.rollout.hf import HFEngine
from tests.tiny import overfit, tiny_llama, tiny_tokenizer

TAUGHT = {"what is 12+35?": "47", "こんにちは": "hello"}
REFERENCE = {"what is 12+35?": "47", "こんにちは": "world"}


def rows() -> list[dict]:
    return [{"messages": [{"role": "user", "content": q}], "reference_answer": REFERENCE[q]} for q in TAUGHT]


@functools.lru_cache(maxsize=1)
def trained():
    tok = tiny_tokenizer()
    model = tiny_llama(len(tok), seed=0)
    overfit(model, tok, [chatml([{"role": "user", "content": q}]) + a + IM_END for q, a in TAUGHT.items()], steps=80)
    return model, tok


class CountingEngine(HFEngine):
    """The real engine, counting the prompts it is asked to sample (to see what a resumed run redoes)."""

    def __init__(self, model, tokenizer):
        super().__init__(model, tokenizer)
        self.prompts_sampled = 0

    def generate(self, prompts, n, sampling):
        self.prompts_sampled += len(prompts)
        return super().generate(prompts, n, sampling)


def engine() -> CountingEngine:
    return CountingEngine(*trained())


def engines() -> dict:
    """A Context.engines cache that hands the tiny engine to steps whose model is left at its default."""
    return {"None|float32|cpu": engine()}
