"""Seed 000's chat-template reward: +1 × length factor when compliant, -5 otherwise, -5 under min_chars."""

import pytest

from kitae.chat import is_template_compliant
from kitae.graders import build_grader
from kitae.rewards.common import length_factor
from kitae.rewards.chat_template import TemplateConfig, template_reward, template_violation

E = "<|im_end|>"
TOKYO_JA = "東京は日本の首都で、人口が最も多い都市です。"  # 22 characters
TOKYO_EN = "The capital of Japan is Tokyo."  # 30 characters
SHORT = TemplateConfig(min_chars=1, full_chars=0)  # what the bundled task ("47") uses

CASES = [
    # text, finish_reason, cfg, score, reason (None = compliant)
    (TOKYO_JA + E, "stop", TemplateConfig(), 0.22, None),  # 22 / 100 characters
    (TOKYO_EN + E, None, TemplateConfig(), 0.30, None),  # 30 / 100
    (TOKYO_EN + E + "\n", None, TemplateConfig(), 0.30, None),  # whitespace after the marker is fine
    ("x" * 150 + E, None, TemplateConfig(), 1.0, None),  # length factor saturates at 1
    (TOKYO_JA + E, None, TemplateConfig(full_chars=11), 1.0, None),  # 22 >= 11 characters
    ("", None, TemplateConfig(), -5.0, "no end marker <|im_end|>"),  # empty completion
    (E, "stop", TemplateConfig(), -5.0, "empty answer"),  # only the end marker
    ("  \n" + E, "stop", SHORT, -5.0, "empty answer"),  # whitespace is not an answer
    ("47" + E, "stop", TemplateConfig(), -5.0, "2 characters < min_chars 15"),
    ("47" + E, "stop", SHORT, 1.0, None),  # min_chars 1, length factor off
    ("47" + E, "stop", TemplateConfig(min_chars=1), 0.02, None),  # 2 / 100
    ("47" + E, "stop", TemplateConfig(min_chars=1, reward=2.0, full_chars=4), 1.0, None),  # 2 × 2/4
    (TOKYO_EN, "stop", TemplateConfig(), -5.0, "no end marker <|im_end|>"),
    (TOKYO_EN + E, "length", TemplateConfig(), -5.0, "cut at the length limit"),
    (TOKYO_EN + E + "\n<|im_start|>user", None, TemplateConfig(), -5.0, "text after the end marker <|im_end|>"),
    ("<|im_start|>assistant\n" + TOKYO_EN + E, None, TemplateConfig(), -5.0,
     "stray template token <|im_start|>"),
    (TOKYO_EN + "<|endoftext|>" + E, None, TemplateConfig(), -5.0, "stray template token <|endoftext|>"),
    (TOKYO_EN + E, None, TemplateConfig(penalty=-1.0, end_marker="</s>"), -1.0, "no end marker </s>"),
    (TOKYO_EN + "</s>", None, TemplateConfig(end_marker="</s>"), 0.30, None),
    ("47" + E, None, TemplateConfig(short_penalty=-2.0), -2.0, "2 characters < min_chars 15"),
]


@pytest.mark.parametrize("text,finish,cfg,score,reason", CASES)
def test_template_reward(text, finish, cfg, score, reason):
    got = template_reward(text, finish, cfg)
    assert got.score == pytest.approx(score)
    assert got.reason == reason
    assert got.metrics["compliant"] == (0.0 if reason and "min_chars" not in reason else 1.0)


@pytest.mark.parametrize("text,finish,cfg,score,reason", [c for c in CASES if c[2].end_marker in (None, E)])  # None: ChatML here
def test_violation_agrees_with_chat_helper(text, finish, cfg, score, reason):
    assert (template_violation(text, finish) is None) == is_template_compliant(text, finish)


@pytest.mark.parametrize(
    "chars,full,factor",
    [(0, 100, 0.0), (15, 100, 0.15), (100, 100, 1.0), (250, 100, 1.0), (3, 0, 1.0), (3, -5, 1.0)],
)
def test_length_factor(chars, full, factor):
    assert length_factor(chars, full) == pytest.approx(factor)


LLAMA3 = {"end_marker": "<|eot_id|>", "control_tokens": ("<|eot_id|>", "<|begin_of_text|>", "<|start_header_id|>")}


@pytest.mark.parametrize(
    "sample, spec, compliant",
    [
        ({**LLAMA3, "output_text": "a long enough answer<|eot_id|>"}, {}, 1.0),
        ({**LLAMA3, "output_text": "a long<|start_header_id|>user answer<|eot_id|>"}, {}, 0.0),  # the model's own
        ({**LLAMA3, "output_text": "a long <|im_start|> answer<|eot_id|>"}, {}, 1.0),  # ChatML's is text to Llama 3
        ({"output_text": "a long <|im_start|> answer<|im_end|>"}, {}, 0.0),  # no control tokens: ChatML's
        ({**LLAMA3, "output_text": "a long <|im_start|> answer<|eot_id|>"}, {"stray_tokens": ["<|im_start|>"]}, 0.0),
        ({**LLAMA3, "output_text": "a long<|start_header_id|>answer<|eot_id|>"}, {"stray_tokens": []}, 1.0),  # none
    ],
)
def test_stray_tokens_are_the_model_s_control_tokens_unless_the_spec_names_them(sample, spec, compliant):
    grade = build_grader({"type": "template", "min_chars": 1, **spec}).grade_sample({}, sample)
    assert grade.sub_scores["compliant"] == compliant, grade.reason
