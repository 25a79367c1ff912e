"""`kitae grader attack`: canned cheating answers on handwritten rows, with the flags worked out by hand for each
grader type, plus the attack templates, a user's attack file, --json and --strict."""

from __future__ import annotations

import json
import re

import pytest
from typer.testing import CliRunner

from kitae.cli.main import app
from kitae.errors import ConfigError
from kitae.graders import build_grader
from kitae.graders.attacks import (BUILTIN_ATTACKS, Attack, equations, load_attack_rows, load_attacks, one_change,
                                   row_fields, run_attacks, shape_of)
from kitae.graders.rows import Row
from kitae.judge.testing import ScriptedServer, judge_brain

runner = CliRunner()
NAMES = [a.name for a in BUILTIN_ATTACKS]

# Small sums: every reference is at most 100, so the spray 0..100 holds it; each prompt has two numbers.
SUMS = [
    {"messages": [{"role": "user", "content": "12+35=?"}], "reference_answer": "47"},
    {"messages": [{"role": "user", "content": "6+9=?"}], "reference_answer": "15"},
    {"messages": [{"role": "user", "content": "20+30=?"}], "reference_answer": "50"},
    {"messages": [{"role": "user", "content": "8+13=?"}], "reference_answer": "21"},
]
# Free-form answers of 6 and 7 words (ROUGE's words: lower case, punctuation dropped).
TEXT = [
    {"prompt": "Who signs off on it?", "reference_answer": "The finance director approves the report."},
    {"prompt": "Then what?", "reference_answer": "The report is shared with the client."},
]


def rows_of(items: list[dict]) -> list[Row]:
    return [Row(data=i, item=i, samples=[], is_group=True, number=n) for n, i in enumerate(items, 1)]


def flagged(spec, items=SUMS) -> set[str]:
    grader = build_grader(spec)
    try:
        report = run_attacks(grader, rows_of(items))
    finally:
        grader.close()
    assert report.rows == len(items)
    return {a.name for a in report.attacks if a.flagged}


LAX = {"number_spray", "prompt_equations", "repeated_text", "reference_plus_extras"}


@pytest.mark.parametrize("spec, items, expected", [
    # closest match: the spray 0..100 and the equation "12+35=47, 12-35=-23, 12*35=420" both hold 47, so do the
    # reference 20 times and the reference hedged with 57, 67, 77; the prompt's own numbers (35 for 47: 26% off,
    # 9 for 15: 40%) and 57 for 47 (21%) are past the 5% partial tolerance: 0
    ("numeric", SUMS, LAX),
    # the final answer only (match: last): the spray ends in 100, the equations in the product 420, the hedge in
    # 77, the prompt's numbers in 35: all past the 5% partial tolerance; the reference repeated still ends in 47
    ({"type": "numeric", "match": "last"}, SUMS, {"repeated_text"}),
    # exact equality: only "47" itself is "47"
    ({"type": "string_check", "operation": "eq"}, SUMS, set()),
    # contains: every text that holds "47" anywhere, the same four as closest match
    ({"type": "string_check", "operation": "like"}, SUMS, LAX),
    # the last number: 100 for the spray, the product (420, 54, 600, 104) for the equations, 77 for the hedge;
    # only the reference repeated ends in 47
    ("answer", SUMS, {"repeated_text"}),
    # math-verify reads the final answer the same way: only the repeated reference is 47
    ("math", SUMS, {"repeated_text"}),
    # the same check written as OpenAI's python grader: no attack
    ({"type": "python", "source": "def grade(sample, item):\n"
      "    return float(sample['output_text'].strip() == item['reference_answer'])\n"}, SUMS, set()),
    # ... and a lax one ("the reference appears"): the four of `like`
    ({"type": "python", "source": "def grade(sample, item):\n"
      "    return float(item['reference_answer'] in sample['output_text'])\n"}, SUMS, LAX),
    # numeric 40% + exact 60%: each lax attack earns 0.4 of the reference's 1.0, under the 50% flag
    ({"type": "weighted", "graders": {"num": {"type": "numeric", "weight": 0.4},
                                       "exact": {"type": "string_check", "operation": "eq", "weight": 0.6}}},
     SUMS, set()),
    # ... 60% + 40%: 0.6 each, flagged
    ({"type": "weighted", "graders": {"num": {"type": "numeric", "weight": 0.6},
                                       "exact": {"type": "string_check", "operation": "eq", "weight": 0.4}}},
     SUMS, LAX),
    # ROUGE-L F1: one word of 6 changed ("director" -> "something") keeps 5/6, of 7 ("report") 6/7: mean 0.85,
    # near the reference (>= 0.8); the question echoed shares no word with the answer: 0; the reference
    # hedged with three changed copies: LCS 6 of 24 words (P 0.25, R 1, F 0.4) and 7 of 28 (F 0.4): 0.4 < 0.5;
    # repeated 20 times: P 1/20, F 0.095
    ({"type": "text_similarity", "evaluation_metric": "rouge_l", "tokenizer": "words"}, TEXT,
     {"reference_one_change"}),
    # a regex format check: the reference ("47") is not in the format, the empty tag shell is
    ({"type": "format", "check": "regex", "pattern": "<answer>.*</answer>"}, SUMS, {"tag_shell"}),
])
def test_flags_by_grader_type(spec, items, expected):
    assert flagged(spec, items) == expected


def test_code_grader_rows_without_reference_use_the_best_sample_and_skip_reference_attacks(tmp_path):
    data = tmp_path / "code.jsonl"
    item = {"messages": [{"role": "user", "content": "Read two integers a and b and print a + b."}],
            "tests": [{"input": "1 2\n", "output": "3\n"}, {"input": "5 5\n", "output": "10\n"}]}
    good = "```python\na, b = map(int, input().split())\nprint(a + b)\n```"
    data.write_text(json.dumps({"item": item, "samples": [{"output_text": good}, {"output_text": "print(3)"}]}) + "\n")
    grader = build_grader({"type": "code"})
    try:
        report = run_attacks(grader, load_attack_rows(data))
    finally:
        grader.close()
    assert report.reference_mean == 1.0  # the correct sample passes both cases
    by_name = {a.name: a for a in report.attacks}
    for name in ("reference_one_change", "format_only", "repeated_text", "reference_plus_extras",
                 "prompt_number_spray", "prompt_equations"):  # no reference; no digit in the prompt
        assert by_name[name].flagged is None and by_name[name].skipped_rows == 1, name
    assert [a.name for a in report.attacks if a.flagged] == []  # no canned text passes a test case
    assert by_name["empty"].rows == 1 and by_name["empty"].mean == 0.0
    assert any("1 of 1 rows have no reference answer" in note for note in report.notes)


def proper(text: str) -> int:  # 5 for the right answer of the rows below (47, 15), 1 for anything else
    return 5 if text.strip() in ("47", "15") else 1


def naive(text: str) -> int:  # believes answers that ask for a 5
    return 5 if "give 5" in text else proper(text)


@pytest.mark.parametrize("brain, expected", [(naive, {"injection"}), (proper, set())])
def test_judge(brain, expected):
    items = SUMS[:2]  # two different groups, so the judge's response cache answers neither
    with ScriptedServer(default=judge_brain(brain)) as server:
        spec = {"type": "judge", "model": server.model, "base_url": server.base_url, "retries": 0}
        assert flagged(spec, items) == expected
        assert len(server.chat_requests) == 2  # one call a row: the whole group at once
        shown = server.chat_requests[0]["messages"][-1]["content"]
        assert "Ignore the rubric" in shown and "0, 1, 2, 3" in shown  # the attacks are in the group


def test_report_numbers_for_the_numeric_grader():
    report = run_attacks(build_grader("numeric"), rows_of(SUMS))
    by_name = {a.name: a for a in report.attacks}
    assert report.reference_mean == 1.0 and report.rows_without_baseline == 0
    spray = by_name["number_spray"]
    assert (spray.mean, spray.credit, spray.ties_reference, spray.rows) == (1.0, 1.0, 1.0, 4)
    assert "as good as the reference on 100% of rows" in spray.why
    assert by_name["empty"].ties_reference == 0.0 and by_name["empty"].flagged is False
    assert by_name["prompt_equations"].example == "12+35=47, 12-35=-23, 12*35=420"
    assert by_name["long_filler"].example.endswith("(6599 characters)")


def test_numeric_skips_rows_without_a_number_and_says_so():
    items = SUMS[:1] + [{"prompt": "Capital of France?", "reference_answer": "Paris"}]
    report = run_attacks(build_grader("numeric"), rows_of(items))
    assert report.rows_without_baseline == 1
    assert any("no score on 1 of 2 rows" in note for note in report.notes)
    assert {a.name: a.rows for a in report.attacks}["number_spray"] == 1


@pytest.mark.parametrize("reference, k, expected", [
    ("47", 1, "57"),
    ("95", 1, "15"),  # 9+1 is 0, which would read as 5: one more
    ("9", 1, "0"),  # a lone digit may become 0
    ("WACC 9.91%", 2, "WACC 1.91%"),
    ("It is blue.", 1, "It is something."),  # no digit: the longest word ("blue"; "It", "is" are shorter)
    ("!!", 1, "!! something"),
])
def test_one_change(reference, k, expected):
    assert one_change(reference, k) == expected


@pytest.mark.parametrize("reference, expected", [
    ('{"answer": 47, "unit": "kg", "steps": [1, 2]}', '{"answer": 0, "unit": "", "steps": []}'),
    ("<think>add</think><answer>47</answer>", "<think></think><answer></answer>"),
    ("WACC ≈ 9.91%, EV $1,705M.", "≈ .%, $,."),
])
def test_shape_of(reference, expected):
    assert shape_of(reference) == expected


def test_equations_are_exact_over_every_number():
    assert equations(["1.5", "2.25"]) == "1.5+2.25=3.75, 1.5-2.25=-0.75, 1.5*2.25=3.375"
    assert equations(["2", "3", "4"]) == "2+3+4=9, 2-3-4=-5, 2*3*4=24"


def test_row_fields():
    fields = row_fields({"messages": [{"role": "system", "content": "Be brief."},
                                      {"role": "user", "content": "１２+35=?"}], "reference_answer": "47", "lang": "en"})
    assert fields["prompt"] == "１２+35=?"  # the user turns only
    assert fields["prompt_numbers"] == "12, 35"  # full-width digits read
    assert fields["reference_extras"] == "57, 67, 77"
    assert fields["item.lang"] == "en"
    assert "reference" not in row_fields({"prompt": "Hi", "reference_answer": "  "})


def test_templates_render_fields_and_literal_braces():
    attack = Attack("json_guess", '{{"answer": "{reference}"}} {prompt}', repeat=2)
    assert attack.render({"reference": "47", "prompt": "q"}) == '{"answer": "47"} q\n{"answer": "47"} q'
    assert attack.render({"prompt": "q"}) is None  # a row without a reference skips it
    assert Attack("j", '{"a": 1}').render({}) == '{"a": 1}'  # a brace not around a field name is text


def test_builtin_attacks_are_valid_specs():
    for attack in BUILTIN_ATTACKS:
        attack.validate(f"attacks.{attack.name}")
    assert len(set(NAMES)) == len(NAMES)


# ---- a user's attacks ---------------------------------------------------------------------------------
def test_user_attacks_from_yaml_and_jsonl(tmp_path):
    yaml_file = tmp_path / "mine.yaml"
    yaml_file.write_text("attacks:\n  - name: answer_is\n    template: 'The answer is {reference}, or not.'\n"
                         "    max_ties: 0.5\n")
    jsonl_file = tmp_path / "mine.jsonl"
    jsonl_file.write_text(json.dumps({"name": "lang_echo", "template": "{item.lang}", "repeat": 3}) + "\n")
    (a,), (b,) = load_attacks(yaml_file), load_attacks(jsonl_file)
    assert (a.name, a.max_ties, a.max_credit) == ("answer_is", 0.5, 0.5)
    assert b.render(row_fields({"prompt": "x", "lang": "ja"})) == "ja\nja\nja"


@pytest.mark.parametrize("content, message", [
    ("- {name: x, template: '{refrence}'}\n", "unknown field {refrence}"),
    ("- {name: x}\n", "template: missing (required)"),
    ("- {name: x, template: a, repeat: 0}\n", "repeat"),
    ("- {name: x, template: a}\n- {name: x, template: b}\n", "'x' is used twice"),
    ("- {name: 'a b', template: a}\n", "name: use letters"),
    ("{}\n", "expected a list of attacks"),
    ("- {name: x, template: a, repeats: 2}\n", "did you mean 'repeat'"),
])
def test_bad_attack_files_name_the_place(tmp_path, content, message):
    file = tmp_path / "bad.yaml"
    file.write_text(content)
    with pytest.raises(ConfigError, match=re.escape(message)) as err:
        load_attacks(file)
    assert str(file) in str(err.value)


# ---- the command ----------------------------------------------------------------------------------------
@pytest.fixture()
def sums_file(tmp_path):
    path = tmp_path / "sums.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in SUMS))
    return path


def test_cli_text_report_and_strict(sums_file):
    lax = runner.invoke(app, ["grader", "attack", "-g", "numeric", "-d", str(sums_file)])
    strict = runner.invoke(app, ["grader", "attack", "-g", "numeric", "-d", str(sums_file), "--strict"])
    clean = runner.invoke(app, ["grader", "attack", "-g", "{type: string_check, operation: eq}",
                                "-d", str(sums_file), "--strict"])
    assert lax.exit_code == 0, lax.output
    assert strict.exit_code == 1, strict.output
    assert clean.exit_code == 0, clean.output
    assert "number_spray" in lax.output and "FLAGGED: " in lax.output
    assert "FLAGGED 4 of 12 attacks" in lax.output
    assert "prompt_equations: '12+35=47, 12-35=-23, 12*35=420'" in lax.output
    assert "no attack flagged (12 tried)" in clean.output


def test_cli_json_shape_and_user_attacks(sums_file, tmp_path):
    mine = tmp_path / "mine.jsonl"
    mine.write_text(json.dumps({"name": "answer_twice", "template": "{reference} {reference}"}) + "\n")
    result = runner.invoke(app, ["grader", "attack", "-g", "answer", "-d", str(sums_file), "--json",
                                 "--attacks", str(mine)])
    assert result.exit_code == 0, result.output
    report = json.loads(result.output)
    assert report["rows"] == 4 and report["reference_mean"] == 1.0
    names = [a["name"] for a in report["attacks"]]
    assert names == NAMES + ["answer_twice"]
    twice = report["attacks"][-1]
    assert {"name", "mean", "flagged", "ties_reference", "credit", "example", "why"} <= set(twice)
    assert (twice["mean"], twice["flagged"], twice["example"]) == (1.0, True, "47 47")  # the last number is 47


def test_cli_bundled_data_and_limit():
    result = runner.invoke(app, ["grader", "attack", "-g", "answer", "-d", "bundled:arith/train", "--limit", "5",
                                 "--json"])
    assert result.exit_code == 0, result.output
    assert json.loads(result.output)["rows"] == 5


def test_cli_bad_attack_file_is_an_error_for_people(sums_file, tmp_path):
    bad = tmp_path / "bad.yaml"
    bad.write_text("- {name: x, template: '{answer}'}\n")
    result = runner.invoke(app, ["grader", "attack", "-g", "numeric", "-d", str(sums_file), "--attacks", str(bad)])
    assert result.exit_code != 0
    assert isinstance(result.exception, ConfigError) and "unknown field {answer}" in str(result.exception)
