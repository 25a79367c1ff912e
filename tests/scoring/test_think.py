"""Reasoning models: graders score the answer after a <think> block (``think: strip``) or the whole completion
(``keep``); length and overlong rewards count every token either way."""

from __future__ import annotations

import pytest

from kitae.errors import ConfigError
from kitae.graders import build_grader
from kitae.rollout.base import Completion
from kitae.scoring.components import RewardComponent, answer_after_think, graded_samples, score_groups
from kitae.scoring.evaluate import evaluate
from kitae.trainer.config import load_train_config
from kitae.trainer.preflight import build_components

END = "<|im_end|>"


@pytest.mark.parametrize("text, answer", [
    ("<think>2+2 is 4</think>4" + END, "4" + END),  # the answer after the block, end marker kept
    ("<think>2+2 is 4</think>\n\n  4" + END, "4" + END),  # leading whitespace of the answer trimmed
    ("<think>a</think>b<think>c</think>d", "d"),  # several blocks: after the last </think>
    ("2+2 is 4</think>4", "4"),  # the chat template opened <think> in the prompt: only the close is sampled
    ("<think>2+2 is", ""),  # opened and never closed (cut off while thinking): no answer
    ("\n <think>2+2 is", ""),  # the same after leading whitespace
    ("<think></think>", ""),  # an empty block and nothing after it
    ("4" + END, "4" + END),  # no think block: unchanged
    ("  4 ", "  4 "),  # unchanged means unchanged, whitespace included
    ("I write <think> tags" + END, "I write <think> tags" + END),  # an open tag that does not lead: unchanged
    ("", ""),  # empty stays empty
    ("<think>4</think>東京", "東京"),  # any script
])
def test_answer_after_think(text, answer):
    assert answer_after_think(text) == answer


def test_graded_samples_copies_and_keeps_the_other_fields():
    samples = [{"output_text": "<think>x</think>4", "completion_tokens": 9, "completion_ids": [1] * 9},
               {"output_json": {"a": 1}}]  # no text: passed as it is
    stripped = graded_samples(samples, "strip")
    assert stripped[0] == {"output_text": "4", "completion_tokens": 9, "completion_ids": [1] * 9}
    assert stripped[1] is samples[1]
    assert samples[0]["output_text"] == "<think>x</think>4"  # the sample itself (what the store keeps) unchanged
    assert graded_samples(samples, "keep") is samples


def _scores(grader_spec: dict, think: str, item: dict, samples: list[dict]) -> list:
    comp = RewardComponent("c", 1.0, build_grader(grader_spec), think)
    return [g.score for g in score_groups([comp], [item], [samples])[0].grades["c"]]


CORRECTNESS = [  # (text, finish reason, score with strip, score with keep); reference "4"
    ("<think>2+2 is 4</think>4" + END, "stop", 1.0, 1.0),  # right answer after the thinking
    ("<think>2+2 is 4</think>five" + END, "stop", 0.0, 1.0),  # the 4 is only in the thinking
    ("<think>2+2 is 4, so the answer is 4", "length", 0.0, 1.0),  # cut off while thinking: no answer
    ("<think>maybe 5?</think>4" + END, "stop", 1.0, 1.0),
    ("4" + END, "stop", 1.0, 1.0),  # no think block: the same either way
    ("5" + END, "stop", 0.0, 0.0),
]


def test_a_correctness_grader_scores_the_answer_with_strip_and_the_raw_text_with_keep():
    samples = [{"output_text": t, "finish_reason": f} for t, f, _, _ in CORRECTNESS]
    item = {"reference_answer": "4"}
    assert _scores({"type": "answer"}, "strip", item, samples) == [s for _, _, s, _ in CORRECTNESS]
    assert _scores({"type": "answer"}, "keep", item, samples) == [k for _, _, _, k in CORRECTNESS]


def test_length_and_overlong_rewards_count_every_token_with_strip_and_keep():
    texts = ["<think>" + "x " * 40 + "</think>4" + END, "4" + END, "<think>" + "y " * 90 + "</think>4" + END,
             "<think>" + "z " * 120]
    tokens = [45, 2, 120, 128]  # the thinking's tokens included; the last one was cut at the limit
    samples = [{"output_text": t, "completion_tokens": n, "max_completion_length": 128,
                "finish_reason": "length" if n == 128 else "stop"} for t, n in zip(texts, tokens)]
    item = {"reference_answer": "4"}
    for spec in ({"type": "overlong"}, {"type": "soft_overlong"}):
        strip, keep = _scores(spec, "strip", item, samples), _scores(spec, "keep", item, samples)
        assert strip == keep and strip[2] < 0 and strip[3] < 0  # long ones are penalized: tokens counted
    comps = {t: RewardComponent("len", 1.0, build_grader({"type": "length"}), t) for t in ("strip", "keep")}
    grades = {t: score_groups([c], [item], [samples])[0].grades["len"] for t, c in comps.items()}
    for think in ("strip", "keep"):
        assert [g.sub_scores["length"] for g in grades[think]] == tokens  # every token, not the answer's
    # the nested correctness grader agrees on the first three (the answer is 4 either way), so their rewards do
    assert [g.score for g in grades["strip"][:3]] == [g.score for g in grades["keep"][:3]]
    assert grades["strip"][0].score > 0 > grades["strip"][2].score  # short correct rewarded, long penalized


def test_the_template_reward_sees_the_whole_turn_by_default():
    # ended its turn without closing the block: the template reward judges the turn as sampled
    cfg = load_train_config(data={"rewards": [
        {"name": "template", "grader": {"type": "template", "min_chars": 1, "full_chars": 0}},
        {"name": "correct", "grader": {"type": "answer"}},
        {"name": "penalty", "grader": {"type": "overlong"}},
        {"name": "mine", "function": "os.path:basename"},
        {"name": "raw", "grader": {"type": "answer"}, "think": "keep"}]})
    assert {r.name: r.think for r in cfg.rewards} == {
        "template": "keep", "correct": "strip", "penalty": "keep", "mine": "strip", "raw": "keep"}
    assert cfg.eval.think == "strip"
    comps = build_components(cfg.rewards[:2])
    assert [c.think for c in comps] == ["keep", "strip"]
    sample = {"output_text": "<think>the answer is 4</think>4" + END, "finish_reason": "stop"}
    grades = score_groups(comps, [{"reference_answer": "4"}], [[sample]])[0].grades
    assert grades["template"][0].score == 1.0 and grades["correct"][0].score == 1.0
    # the end of the turn is after the block: stripping it leaves the template's verdict on a closed block alone
    template = build_grader({"type": "template", "min_chars": 1, "full_chars": 0})
    assert _scores({"type": "template", "min_chars": 1, "full_chars": 0}, "strip", {}, [sample]) == \
        [g.score for g in template.grade_group({}, [sample])]


def test_a_bad_think_value_names_the_field_and_the_choices():
    with pytest.raises(ConfigError, match=r"rewards\[0\]\.think.*strip, keep"):
        load_train_config(data={"rewards": [{"name": "c", "grader": {"type": "answer"}, "think": "drop"}]})
    with pytest.raises(ConfigError, match=r"eval\.think"):
        load_train_config(data={"rewards": [{"name": "c", "grader": {"type": "answer"}}], "eval": {"think": "no"}})


class Scripted:
    """An engine that answers every prompt with the same completions (what the grader sees is the test)."""

    def __init__(self, texts: list[tuple[str, str]]):
        self.texts = texts

    def generate(self, prompts, k, sampling):
        return [[Completion(t, [0], [1] * (3 + i), [0.0] * (3 + i), f) for i, (t, f) in enumerate(self.texts[:k])]
                for _ in prompts]


def test_eval_grades_the_answer_with_strip_and_keeps_the_whole_text():
    texts = [("<think>2+2 is 4</think>five" + END, "stop"), ("<think>2+2 is 4</think>4" + END, "stop"),
             ("<think>2+2 is 4", "length")]
    rows = [{"messages": [{"role": "user", "content": "2+2?"}], "reference_answer": "4"}]
    grader = build_grader({"type": "answer"})
    strip, samples = evaluate(Scripted(texts), rows, grader, k=3, think="strip")
    keep, _ = evaluate(Scripted(texts), rows, grader, k=3, think="keep")
    assert [s["passed"] for s in samples] == [False, True, False]
    assert strip["pass@1"] == pytest.approx(1 / 3) and keep["pass@1"] == 1.0
    assert [s["output_text"] for s in samples] == [t for t, _ in texts]  # the run store keeps every token
    assert [s["compliant"] for s in samples] == [True, True, False]  # compliance of the whole completion
    assert strip["len_mean"] == keep["len_mean"] == 4.0
