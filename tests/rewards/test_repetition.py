"""Seed 000's repetition penalty: -0.5 × (n-grams / distinct n-grams - 1), floored at -2."""

import pytest

from kitae.rewards.repetition import RepetitionConfig, repetition_penalty, repetition_rate

LOOP_JA = "同じことを言います。" * 10  # 10 distinct characters looped: 95 six-grams, 10 distinct
ORDINARY_JA = "東京は日本の首都で、人口が最も多い都市です。富士山は静岡県と山梨県にまたがる山です。"


@pytest.mark.parametrize(
    "text,cfg,rate,score",
    [
        ("", RepetitionConfig(), 0.0, 0.0),  # empty completion
        ("<|im_end|>", RepetitionConfig(), 0.0, 0.0),  # only the end marker: no content
        ("abcde<|im_end|>", RepetitionConfig(), 0.0, 0.0),  # shorter than n
        ("abcdefg", RepetitionConfig(), 0.0, 0.0),  # 2 six-grams, both distinct
        ("abcdefabcdef", RepetitionConfig(), 1 / 6, -1 / 12),  # 7 six-grams, 6 distinct
        ("ababababab", RepetitionConfig(), 1.5, -0.75),  # 5 six-grams, 2 distinct
        ("ababababab<|im_end|>", RepetitionConfig(), 1.5, -0.75),  # the marker is not content
        (ORDINARY_JA, RepetitionConfig(), 0.0, 0.0),  # ordinary Japanese: untouched
        (LOOP_JA, RepetitionConfig(), 8.5, -2.0),  # a loop hits the floor (-4.25 -> -2.0)
        (LOOP_JA, RepetitionConfig(floor=-5.0), 8.5, -4.25),  # -0.5 × 8.5 with a lower floor
        ("aaaa", RepetitionConfig(n=2), 2.0, -1.0),  # 3 bigrams, 1 distinct
        ("aaaa", RepetitionConfig(n=2, coef=0.1), 2.0, -0.2),
    ],
)
def test_repetition_penalty(text, cfg, rate, score):
    got = repetition_penalty(text, cfg)
    assert got.metrics["rate"] == pytest.approx(rate)
    assert got.score == pytest.approx(score)
    assert (got.reason is None) == (score == 0.0)


def test_ordinary_text_with_one_repeated_phrase_is_barely_touched():
    text = "".join(chr(0x4E00 + i) for i in range(190)) + "".join(chr(0x4E00 + i) for i in range(10))
    # 195 six-grams; the last 5 repeat earlier ones -> 190 distinct; rate 195/190 - 1
    assert repetition_rate(text, 6) == pytest.approx(195 / 190 - 1)
    assert repetition_penalty(text).score == pytest.approx(-0.5 * (195 / 190 - 1))
    assert repetition_penalty(text).score > -0.02
