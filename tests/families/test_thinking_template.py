"""A thinking model whose chat template opens ``<think>`` for it (Qwen3-4B-Thinking-2507's real template; QwQ and the
DeepSeek-R1 distills do the same): the completion holds ``...</think>answer`` with no opening tag. Sampled by the
in-process engine and graded by the loop training, evaluation and curation share (kitae.scoring.sample_and_grade), a
completion cut off while thinking has no answer and the answer after ``</think>`` is what ``think: strip`` grades.
Qwen3's hybrid template (the model opens the block itself) is graded as before."""

from __future__ import annotations

import pytest

from kitae.chat import opens_thinking, to_messages
from kitae.graders import build_grader
from kitae.models import load_causal_lm, load_tokenizer
from kitae.rollout.base import SamplingParams
from kitae.rollout.hf import HFEngine
from kitae.scoring.components import RewardComponent
from kitae.scoring.sample_and_grade import sample_and_grade
from tests.families.families import QWEN3_HYBRID, QWEN3_THINKING_2507
from tests.families.say import Say

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


def said(engine: HFEngine, text: str):
    """The completion of the engine made to say ``text``, all of it (cut after its last token)."""
    ids = engine.tokenizer.encode(text, add_special_tokens=False)
    say = Say(engine.model, ids)
    try:
        [[c]] = engine.generate([ITEM["messages"]], 1, SamplingParams(temperature=0, max_new_tokens=len(ids)))
    finally:
        say.remove()
    return c


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


# ---- kitae chat ----------------------------------------------------------------------------------------------
def chat(folder, *args: str):
    from typer.testing import CliRunner

    from kitae.cli.main import app

    return CliRunner().invoke(app, ["chat", "what is 40+2?", "--model", str(folder), "--temperature", "0",
                                    "--threads", "1", *args])


def test_kitae_chat_shows_the_thinking_the_prompt_opened_as_one_block(folders):
    from kitae.cli.inference import shown_answer

    engine = engine_of(folders["qwen3-thinking-2507"])
    assert shown_answer(said(engine, "40+2 makes 42</think>\n\n42<|im_end|>")) == "<think>\n40+2 makes 42</think>\n\n42"
    assert shown_answer(said(engine, "40+2 makes")) == "<think>\n40+2 makes"  # cut off: open, as the model left it
    plain = engine_of(folders["qwen3-hybrid"])  # a block the model opened itself: printed as sampled
    assert shown_answer(said(plain, "<think>hm</think>42<|im_end|>")) == "<think>hm</think>42"
    sampled = ("--max-new-tokens", "6", "--temperature", "1", "--top-p", "1", "--seed", "0")  # not just newlines
    folder = folders["qwen3-thinking-2507"]
    printed, raw = chat(folder, *sampled), chat(folder, *sampled, "--raw")
    assert printed.exit_code == 0 and raw.exit_code == 0, printed.output + raw.output
    assert "thinking_open" in raw.stderr and raw.stdout.strip()
    assert printed.stdout == "<think>\n" + raw.stdout.removeprefix("\n")  # the same sample, its <think> printed


def test_kitae_chat_takes_the_chat_template_kwargs_and_turns_qwen3_thinking_off(folders):
    hybrid = folders["qwen3-hybrid"]
    off = chat(hybrid, "--max-new-tokens", "2", "--raw", "--chat-template-kwargs", '{"enable_thinking": false}')
    on = chat(hybrid, "--max-new-tokens", "2", "--raw")
    assert off.exit_code == 0 and on.exit_code == 0, off.output + on.output
    prompt = lambda result: result.stderr.split("[prompt]\n", 1)[1].split("\n[completion]", 1)[0]  # noqa: E731
    assert prompt(off).endswith("<|im_start|>assistant\n<think>\n\n</think>\n\n")  # the real template's empty block
    assert prompt(on).endswith("<|im_start|>assistant\n") and "<think>" not in prompt(on)
    bad = chat(hybrid, "--chat-template-kwargs", "{enable_thinking: false}")
    assert bad.exit_code == 2 and "--chat-template-kwargs" in bad.output and "enable_thinking" in bad.output


# ---- a training run ------------------------------------------------------------------------------------------
def test_a_training_run_grades_and_stores_the_thinking_its_prompts_opened(folders, tmp_path):
    import json

    from kitae.store import RunStore
    from kitae.trainer.config import load_train_config
    from kitae.trainer.loop import Trainer
    from tests.plugins.tiny_run import write_config

    train = tmp_path / "train.jsonl"
    train.write_text("".join(json.dumps({**ITEM, "messages": to_messages(f"what is {a}+2?")}) + "\n"
                             for a in range(4)))
    cfg = load_train_config(write_config(tmp_path, tmp_path / "runs", **{
        "model.path": str(folders["qwen3-thinking-2507"]), "data.train": str(train), "data.eval": str(train),
        "rewards": [{"name": "answered", "function": "tests.reward_functions:answered"}],
        "sampling.group_size": 2, "sampling.max_new_tokens": 4,  # a random model: cut off while thinking
        "optim.steps": 1, "eval.every": 0, "logging.save_every": 0,
    }))
    summary = Trainer(cfg).train()
    assert summary["status"] == "finished"
    samples = [s for g in RunStore.open(cfg.run_dir, read_only=True).groups(with_samples=True) for s in g.samples]
    assert samples and all(s.thinking_open for s in samples)
    thinking = [s for s in samples if "</think>" not in s.text and s.text.strip()]
    assert thinking and all(s.scores["answered"] == 0.0 for s in thinking)  # cut off while thinking: no answer
