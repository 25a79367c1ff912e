"""A thinking model whose chat template opens ``<think>`` for it (Qwen3-4B-Thinking-2507's real template; QwQ and the
DeepSeek-R1 distills do the same): the completion holds ``...</think>answer`` with no opening tag. Sampled by the
in-process engine and graded by the loop training, evaluation and curation share (kitae.scoring.graded), a
completion cut off while thinking has no answer and the answer after ``</think>`` is what ``think: strip`` grades.
Qwen3's hybrid template (the model opens the block itself) is graded as before."""

from __future__ import annotations

import pytest

from kitae.chat import opens_thinking, to_messages
from kitae.graders import build_grader
from kitae.models import load_causal_lm, load_tokenizer
from kitae.rollout.base import SamplingParams
from kitae.rollout.hf import HFEngine
from kitae.scoring.graded import sample_and_grade
from kitae.scoring.rewards import RewardComponent
from tests.families.conftest import Say
from tests.families.families import QWEN3_HYBRID, QWEN3_THINKING_2507

ITEM = {"messages": to_messages("what is 40+2?"), "reference_answer": "42"}


@pytest.fixture(scope="module")
def folders(tmp_path_factory):
    root = tmp_path_factory.mktemp("thinking")
    return {f.name: f.save(root / f.name) for f in (QWEN3_THINKING_2507, QWEN3_HYBRID)}


@pytest.fixture(scope="module")
def math():
    grader = build_grader({"type": "math"})
    yield grader
    grader.close()


def engine_of(folder) -> HFEngine:
    return HFEngine(load_causal_lm(folder), load_tokenizer(folder))


def say_and_grade(engine: HFEngine, text: str, max_new_tokens: int, math) -> tuple[list, list[float | None]]:
    """The engine made to say ``text`` (its tokens, greedy), cut at ``max_new_tokens``, graded by ``math`` with
    ``think: strip`` (the completions and their scores)."""
    say = Say(engine.model, engine.tokenizer.encode(text, add_special_tokens=False))
    try:
        graded = sample_and_grade(engine, [ITEM["messages"]], [ITEM], 2,
                                  SamplingParams(temperature=0, max_new_tokens=max_new_tokens),
                                  [RewardComponent("math", 1.0, math, "strip")])
    finally:
        say.remove()
    return graded.groups[0], [g.score for g in graded.scores[0].grades["math"]]


def test_the_real_2507_template_opens_the_thinking_in_the_prompt_and_the_hybrid_does_not(folders):
    thinking = engine_of(folders["qwen3-thinking-2507"])
    prompt = thinking.tokenizer.decode(thinking.encode_prompt(ITEM["messages"]))
    assert prompt.endswith("<|im_start|>assistant\n<think>\n") and opens_thinking(prompt)
    hybrid = engine_of(folders["qwen3-hybrid"])
    for kwargs in ({}, {"enable_thinking": True}, {"enable_thinking": False}):
        prompt = hybrid.tokenizer.decode(hybrid.encode_prompt(ITEM["messages"], kwargs))
        assert not opens_thinking(prompt), kwargs


def test_a_completion_cut_off_while_thinking_has_no_answer(folders, math):
    engine = engine_of(folders["qwen3-thinking-2507"])
    text = "40+2 is 42, so the answer is 42. Let me check that again"
    cut_at = len(engine.tokenizer.encode("40+2 is 42, so the answer is 42.", add_special_tokens=False))
    completions, scores = say_and_grade(engine, text, cut_at, math)
    assert all(c.finish_reason == "length" and "</think>" not in c.text and "42" in c.text for c in completions)
    assert all(c.thinking_open for c in completions)
    assert scores == [0.0, 0.0]  # the 42 in the thinking is no answer


def test_the_answer_after_the_closing_tag_is_graded(folders, math):
    engine = engine_of(folders["qwen3-thinking-2507"])
    completions, scores = say_and_grade(engine, "40+2 makes 41 or 42</think>\n\n42<|im_end|>", 40, math)
    assert all(c.finish_reason == "stop" and c.text.endswith("</think>\n\n42<|im_end|>") for c in completions)
    assert scores == [1.0, 1.0]
    _, wrong = say_and_grade(engine, "40+2 makes 42</think>\n\n41<|im_end|>", 40, math)
    assert wrong == [0.0, 0.0]  # the answer, not the 42 in the thinking


def test_the_hybrid_template_is_graded_as_before(folders, math):
    engine = engine_of(folders["qwen3-hybrid"])
    completions, scores = say_and_grade(engine, "<think>40+2 is 42, the answer is 42", 12, math)
    assert not any(c.thinking_open for c in completions) and scores == [0.0, 0.0]  # opened itself, cut off
    _, plain = say_and_grade(engine, "42<|im_end|>", 12, math)
    assert plain == [1.0, 1.0]  # no think block: the whole text is the answer
