"""The format filter's English and Japanese rules, and drop/tag/disable/custom-rule configs."""

from __future__ import annotations

import pytest

from kitae.config import from_dict
from kitae.curate.formats import FormatConfig, build_rules, classify, run_format
from kitae.curate.step import Context
from kitae.errors import ConfigError

CASES = [
    # multiple choice
    ("Which of the following is prime? (A) 4 (B) 6 (C) 7", {"multiple_choice"}),
    ("What is 2+2?\nA) 3\nB) 4\nC) 5", {"multiple_choice"}),          # lettered options on their own lines
    ("What is 2+2?\n(a) 3\n(b) 4", {"multiple_choice"}),              # lower-case options
    ("Choose the correct answer from the options below: ...", {"multiple_choice"}),
    ("次のうち、素数はどれですか。", {"multiple_choice"}),
    ("正しいものを選びなさい。（ア）東京（イ）大阪", {"multiple_choice"}),   # full-width brackets (NFKC)
    ("①りんご ②みかん ③ぶどう のうち赤いのは？", {"multiple_choice"}),
    # true / false
    ("True or false: the Sun is a star.", {"true_false"}),
    ("Answer yes or no: is 7 prime?", {"true_false"}),
    ("Is the following statement true? Water boils at 50°C.", {"true_false"}),
    ("次の文は正しいか誤りか答えなさい。", {"true_false"}),
    ("○か×で答えてください：地球は丸い。", {"true_false"}),
    # proofs
    ("Prove that there are infinitely many primes.", {"proof"}),
    ("Show that the sum of two even numbers is even.", {"proof"}),
    ("√2が無理数であることを証明せよ。", {"proof"}),
    ("nが奇数ならn^2も奇数であることを示せ。", {"proof"}),
    # several at once
    ("True or false? Prove your answer.", {"true_false", "proof"}),
    # ordinary prompts: nothing
    ("What is the capital of France?", set()),
    ("フランスの首都は？", set()),
    ("12+35は？", set()),
    ("住民票と印鑑証明書の違いは？", set()),                              # 証明書 (a certificate) is not a proof
    ("Plan A costs 3 dollars and plan B costs 5. Which is cheaper?", set()),  # "plan A" is not an option list
    ("How can I improve my essay?", set()),                          # improve is not prove
    ("Is it true that you like cats?", set()),                       # a question, not a true/false item
]


@pytest.mark.parametrize("text, expected", CASES)
def test_builtin_rules(text, expected):
    assert set(classify(text, build_rules(FormatConfig()))) == expected


def rows(*texts: str) -> list[dict]:
    return [{"messages": [{"role": "user", "content": t}], "reference_answer": "x"} for t in texts]


def test_drop_tag_and_report():
    data = rows("True or false: 1+1=2.", "What is 1+1?", "Prove that 1+1=2.")
    cfg = from_dict(FormatConfig, {"action": "drop", "rules": {"proof": {"patterns": [r"\bprove\b"], "action": "tag"}}})
    result = run_format(data, cfg, Context())
    assert [r["messages"][0]["content"] for r in result.rows] == ["What is 1+1?", "Prove that 1+1=2."]
    assert result.rows[1]["format_tags"] == ["proof"]
    assert "format_tags" not in result.rows[0] and "format_tags" not in data[2]  # the input row is untouched
    assert [(d.reason, d.detail["row"]) for d in result.dropped] == [("format: true_false", 1)]
    assert (result.report.rows_in, result.report.rows_out, dict(result.report.tagged)) == (3, 2, {"proof": 1})


def test_disable_and_custom_rule():
    cfg = from_dict(FormatConfig, {"disable": ["true_false"],
                                   "rules": {"fill_in": {"patterns": ["_{3,}", "空欄"]}}})
    result = run_format(rows("True or false: x.", "The capital of France is ___.", "空欄に入る語は？"), cfg, Context())
    assert [d.reason for d in result.dropped] == ["format: fill_in", "format: fill_in"]
    assert len(result.rows) == 1


@pytest.mark.parametrize("data, where", [
    ({"disable": ["true_flase"]}, "disable[0]"),                          # did-you-mean for a rule name
    ({"action": "delete"}, "action"),                                     # drop or tag only
    ({"rules": {"x": {"patterns": ["(unclosed"]}}}, "rules.x.patterns[0]"),  # a bad regex names its place
])
def test_config_errors(data, where):
    with pytest.raises(ConfigError, match=where.replace("[", r"\[").replace("]", r"\]")):
        build_rules(from_dict(FormatConfig, data, "format"))
