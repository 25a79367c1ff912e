"""string_check (OpenAI semantics), format checks, and the answer / math final-answer graders."""

from __future__ import annotations

import asyncio

import pytest

from kitae.errors import ConfigError
from kitae.graders import build_grader


def score(spec: dict, output: str, reference="Paris", **item) -> float | None:
    grade = build_grader(spec).grade_group({"reference_answer": reference, **item}, [{"output_text": output}])[0]
    assert grade.error is None, grade.error
    return grade.score


@pytest.mark.parametrize(
    "operation, output, reference, expected",
    [
        ("eq", "Paris", "Paris", 1.0),
        ("eq", "paris", "Paris", 0.0),  # exact, as OpenAI
        ("eq", "Paris ", "Paris", 0.0),
        ("eq", "Paris<|im_end|>", "Paris", 1.0),  # output_text stops at the end-of-turn marker
        ("ne", "Lyon", "Paris", 1.0),
        ("ne", "Paris", "Paris", 0.0),
        ("like", "It is Paris.", "Paris", 1.0),
        ("like", "It is paris.", "Paris", 0.0),
        ("ilike", "It is PARIS.", "Paris", 1.0),
        ("ilike", "It is Lyon.", "Paris", 0.0),
        ("neq", "Lyon", "Paris", 1.0),  # neq: a common spelling of ne, read as ne
        ("neq", "Paris", "Paris", 0.0),
    ],
)
def test_string_check_operations(operation, output, reference, expected):
    assert score({"type": "string_check", "operation": operation}, output, reference) == expected


def test_neq_builds_the_ne_grader():
    assert build_grader({"type": "string_check", "operation": "neq"}).operation == "ne"


def test_string_check_openai_spec_loads_unchanged():
    spec = {"type": "string_check", "name": "label check", "input": "{{sample.output_json.label}}",
            "reference": "{{item.label}}", "operation": "eq"}
    assert score(spec, '{"label": "spam"}', label="spam") == 1.0


SCHEMA = {"type": "object", "properties": {"answer": {"type": "number"}}, "required": ["answer"]}


@pytest.mark.parametrize(
    "spec, output, expected",
    [
        ({"check": "json"}, '{"a": 1}', 1.0),
        ({"check": "json"}, "```json\n[1, 2]\n```", 1.0),  # a fenced block counts
        ({"check": "json"}, "{a: 1}", 0.0),
        ({"check": "json_schema", "schema": SCHEMA}, '{"answer": 4}', 1.0),
        ({"check": "json_schema", "schema": SCHEMA}, '{"answer": "4"}', 0.0),
        ({"check": "json_schema", "schema": SCHEMA}, "{}", 0.0),
        ({"check": "json_schema", "schema": SCHEMA}, "not json", 0.0),
        ({"check": "regex", "pattern": r"\d+"}, "answer: 47", 1.0),
        ({"check": "regex", "pattern": r"\d+", "full_match": True}, "answer: 47", 0.0),
        ({"check": "regex", "pattern": r"\d+", "full_match": True}, " 47\n", 1.0),  # surrounding space is stripped
        ({"check": "regex", "pattern": "yes", "ignore_case": True}, "YES", 1.0),
        ({"check": "regex", "pattern": "yes"}, "YES", 0.0),
        ({"check": "labels", "labels": ["positive", "negative"]}, " negative\n", 1.0),
        ({"check": "labels", "labels": ["positive", "negative"]}, "neutral", 0.0),
        ({"check": "labels", "labels": ["positive"]}, "Positive", 0.0),
        ({"check": "labels", "labels": ["positive"], "ignore_case": True}, "Positive", 1.0),
        ({"check": "labels", "labels": [1, 2]}, "2", 1.0),
        ({"check": "contains"}, "The capital is Paris.", 1.0),
        ({"check": "contains"}, "The capital is Lyon.", 0.0),
        ({"check": "contains", "ignore_case": True}, "PARIS!", 1.0),
        ({"check": "equals"}, "  Paris\n", 1.0),  # stripped
        ({"check": "equals"}, "Ｐａｒｉｓ", 1.0),  # NFKC
        ({"check": "equals"}, "paris", 0.0),
        ({"check": "equals", "ignore_case": True}, "paris", 1.0),
        ({"check": "equals", "reference": "{{item.city}}"}, "Lyon", 1.0),
    ],
)
def test_format_checks(spec, output, expected):
    assert score({"type": "format", **spec}, output, city="Lyon") == expected


def test_format_failures_say_why():
    grader = build_grader({"type": "format", "check": "json_schema", "schema": SCHEMA})
    grade = grader.grade_group({}, [{"output_text": "{}"}])[0]
    assert grade.reason == "schema: 'answer' is a required property"


@pytest.mark.parametrize(
    "spec, message",
    [
        ({"check": "jsn"}, "grader.check: got 'jsn'; expected one of json, json_schema, regex, labels, contains, "
                           "equals; did you mean 'json'?"),
        ({}, "grader.check: missing (required)"),
        ({"check": "regex", "pattern": "("}, "grader.pattern: not a valid regular expression"),
        ({"check": "regex"}, "grader.pattern: missing (required)"),
        ({"check": "json_schema", "schema": {"type": "objekt"}}, "grader.schema: not a valid JSON Schema"),
        ({"check": "json_schema", "schema": "x"}, "grader.schema: expected a mapping"),
        ({"check": "labels", "labels": []}, "grader.labels: needs at least one label"),
        ({"check": "labels", "labels": [{"a": 1}]}, "grader.labels[0]: expected a string"),
        ({"check": "json", "pattern": "x"}, "grader.pattern: belongs to check: regex, not check: json"),
        ({"check": "json", "reference": "{{item.x}}"}, "grader.reference: belongs to check: contains or equals"),
        ({"check": "json", "patern": "x"}, "grader.patern: unknown key"),
    ],
)
def test_format_spec_errors(spec, message):
    with pytest.raises(ConfigError) as err:
        build_grader({"type": "format", **spec})
    assert message in str(err.value)


@pytest.mark.parametrize(
    "output, reference, expected",
    [
        ("12+35=47です。<|im_end|>", "47", 1.0),
        ("答えは４７", "47", 1.0),  # full-width digits
        ("47.0", "47", 1.0),
        ("46", "47", 0.0),
        ("The capital is Paris.", "Paris", 1.0),
        ("Lyon", "Paris", 0.0),
        ("1,200", "1200", 1.0),
        ("5", "1e999", 0.0),  # a reference that overflows to infinity is no number: not within 1e-9·inf of 5
        ("47", "inf", 0.0),  # "inf" and "nan" are words here, not numbers every answer is close to
        ("the limit is inf", "inf", 1.0),
        # a decimal comma (as math-verify reads 1,22): one comma before one or two digits
        ("1.22", "1,22", 1.0),  # was 0: the reference read 122
        ("122", "1,22", 0.0),  # was 1
        ("答えは1,22です", "1.22", 1.0),  # was 0: the answer read 22
        ("x = -0,5", "-0.5", 1.0),  # was 0
        ("1,234", "1234", 1.0),  # a comma before three digits still groups thousands
        ("1,2,3", "3", 1.0),  # a list: the last number is 3
        # answers as people write them: markdown emphasis and punctuation are not part of the words
        ("**Paris**", "Paris", 1.0),  # was 0
        ("The answer is **Paris**.", "Paris", 1.0),  # was 0
        ("I'd say *Paris*, of course", "Paris", 1.0),  # was 0: "*paris*," was the word
        ("`Paris`", "Paris", 1.0),  # was 0: inline code
        ("The answer is __New York__!", "New York", 1.0),  # was 0
        ("**Lyon**", "Paris", 0.0),
        ("**47**", "47", 1.0),  # numbers were read so already
    ],
)
def test_answer_grader(output, reference, expected):
    assert score({"type": "answer"}, output, reference) == expected


@pytest.mark.parametrize(
    "text_match, output, reference, expected",
    [
        # the default takes the reference as any one word: a list of candidates earns it
        ("any_word", "London Paris Berlin", "Paris", 1.0),
        ("any_word", "Lyon or Paris", "Paris", 1.0),
        ("any_word", "Paris is the capital", "Paris", 1.0),
        # whole: the whole normalized answer must be the reference
        ("whole", "London Paris Berlin", "Paris", 0.0),
        ("whole", "Lyon or Paris", "Paris", 0.0),
        ("whole", "Paris is the capital", "Paris", 0.0),  # the price: a sentence around the answer fails
        ("whole", "The capital is Paris.", "Paris", 1.0),  # prefixes and punctuation are stripped
        ("whole", "ＰＡＲＩＳ", "Paris", 1.0),  # NFKC, casefold
        ("whole", "答えは東京です。", "東京", 1.0),  # Japanese prefix and polite ending
        ("whole", "The answer is **Paris**.", "Paris", 1.0),  # was 0: markdown emphasis
        ("whole", "**Paris**, London", "Paris", 0.0),  # still a list, not the whole answer
        ("whole", "Lyon", "Paris", 0.0),
        # numeric references are read by the last number either way
        ("whole", "6+9=15", "15", 1.0),
        ("whole", "15 or 16", "15", 0.0),
    ],
)
def test_answer_text_match(text_match, output, reference, expected):
    assert score({"type": "answer", "text_match": text_match}, output, reference) == expected


def test_answer_text_match_reason_and_bad_value():
    grade = build_grader({"type": "answer", "text_match": "whole"}).grade_group(
        {"reference_answer": "Paris"}, [{"output_text": "London Paris Berlin"}])[0]
    assert grade.reason == "'Paris' is one word of the answer, not all of it (text_match: whole)"
    with pytest.raises(ConfigError, match=r"^grader\.text_match: got 'exact'; expected one of any_word, whole"):
        build_grader({"type": "answer", "text_match": "exact"})


@pytest.mark.parametrize(
    "output, expected",
    [
        (r"\boxed{3} \boxed{15}", 0.0),  # several boxed answers: the set {3, 15}, not 15
        (r"\boxed{15} \boxed{3}", 0.0),
        (r"\boxed{15} wait no \boxed{3}", 0.0),
        ("$3$ or $15$", 0.0),
        (r"\boxed{15}", 1.0),
    ],
)
def test_math_gives_several_boxed_answers_nothing(math_grader, output, expected):
    grade = math_grader.grade_group({"reference_answer": "15"}, [{"output_text": output}])[0]
    assert grade.score == expected


@pytest.fixture(scope="module")
def math_grader():
    grader = build_grader({"type": "math"})
    yield grader
    grader.close()


@pytest.mark.parametrize(
    "output, reference, expected",
    [
        (r"so the answer is $\boxed{\frac{1}{2}}$", "0.5", 1.0),
        (r"$\boxed{0.5}$", r"\frac{1}{2}", 1.0),
        (r"$\boxed{2x+1}$", "1+2x", 1.0),  # symbolic equivalence
        (r"$\boxed{3}$", "4", 0.0),
        (r"$x = \sqrt{2}$", r"\sqrt{2}", 1.0),
        # a bare reference with a decimal comma reads as math_verify.parse("1,22") does: 1.22, not the set {1, 22}
        (r"$\boxed{1.22}$", "1,22", 1.0),  # was 0
        ("1,22", "1,22", 1.0),  # was 0: math-verify reads the plain answer 1,22 as 1.22 too
        (r"$\boxed{12.5}$", "12,5", 1.0),  # was 0
        (r"$\boxed{-0.5}$", "-0,5", 1.0),  # was 0
        (r"$\boxed{\{1, 22\}}$", "1,22", 0.0),  # was 1: the set is not the decimal
        (r"$\boxed{1234}$", "1,234", 1.0),  # a comma before three digits groups thousands (already so)
        (r"$\boxed{\{1, 2, 3\}}$", "1,2,3", 1.0),  # two commas: a set (already so)
        # a bare reference with space-grouped thousands reads as math_verify.parse("12 500") does: 12500
        (r"$\boxed{1000}$", "1 000", 1.0),  # was 0: $1 000$ is the product 1·0
        (r"$\boxed{12500}$", "12 500", 1.0),  # was 0: $12 500$ read as 512
        (r"$\boxed{12500}$", "12\u00a0500", 1.0),  # was 0: a no-break space
        (r"$\boxed{1234567.5}$", "1 234 567.5", 1.0),  # was 0
        (r"$\boxed{512}$", "12 500", 0.0),  # was 1
        (r"$\boxed{0}$", "1 000", 0.0),  # was 1
    ],
)
def test_math_grader(math_grader, output, reference, expected):
    grade = math_grader.grade_group({"reference_answer": reference}, [{"output_text": output}])[0]
    assert grade.score == expected, grade


def test_math_grader_works_off_the_main_thread(math_grader):
    # math-verify's own signal timeouts fail in threads; the trainer grades in threads and event loops
    async def inside_a_loop():
        return await math_grader.agrade_group({"reference_answer": "2"}, [{"output_text": r"$\boxed{2}$"}] * 3)

    grades = asyncio.run(inside_a_loop())
    assert [g.score for g in grades] == [1.0, 1.0, 1.0]


def test_math_grader_abstains_on_an_unparsable_reference(math_grader):
    grade = math_grader.grade_group({"reference_answer": ""}, [{"output_text": "$1$"}])[0]
    assert grade.score is None and "could not parse the reference" in grade.error


# ---- ignore_prompt_echo: a contains check not earned by repeating the prompt ---------------------------
LARGER = [{"role": "user", "content": "Which is larger, 7 or 12?"}]
ECHO = "Which is larger, 7 or 12?"  # the prompt-echo hack: the prompt holds the expected "12"


@pytest.mark.parametrize(
    "spec, output, expected",
    [
        # the default counts the echo, as OpenAI's grader does
        ({"type": "string_check", "operation": "like"}, ECHO, 1.0),
        ({"type": "string_check", "operation": "ilike"}, ECHO, 1.0),
        ({"type": "format", "check": "contains"}, ECHO, 1.0),
        # ignore_prompt_echo: an occurrence copied with the word before or after it does not count
        ({"type": "string_check", "operation": "like", "ignore_prompt_echo": True}, ECHO, 0.0),
        ({"type": "string_check", "operation": "like", "ignore_prompt_echo": True}, "7 or 12", 0.0),  # "or 12"
        ({"type": "string_check", "operation": "like", "ignore_prompt_echo": True}, "12", 1.0),
        ({"type": "string_check", "operation": "like", "ignore_prompt_echo": True}, "The answer is 12.", 1.0),
        ({"type": "string_check", "operation": "like", "ignore_prompt_echo": True}, "12 is larger than 7", 1.0),
        ({"type": "string_check", "operation": "like", "ignore_prompt_echo": True}, ECHO + " 12", 1.0),  # answered
        ({"type": "string_check", "operation": "like", "ignore_prompt_echo": True}, "It is 7.", 0.0),
        ({"type": "string_check", "operation": "ilike", "ignore_prompt_echo": True}, ECHO.upper(), 0.0),
        ({"type": "format", "check": "contains", "ignore_prompt_echo": True}, ECHO, 0.0),
        ({"type": "format", "check": "contains", "ignore_prompt_echo": True}, "OR 12", 0.0),  # words casefolded
        ({"type": "format", "check": "contains", "ignore_prompt_echo": True}, "Answer: １２", 1.0),  # NFKC
    ],
)
def test_ignore_prompt_echo(spec, output, expected):
    assert score(spec, output, reference="12", messages=LARGER) == expected


TOKYO = {"messages": [{"role": "user", "content": "日本の首都は東京と大阪のどちらですか？東京ですか？"}]}


@pytest.mark.parametrize(
    "item, output, reference, expected",
    [
        ({"messages": [{"role": "user", "content": "12+35は？"}]}, "12+35は？", "35", 0.0),  # kana, kanji: words
        ({"messages": [{"role": "user", "content": "12+35は？"}]}, "12+35は47です", "47", 1.0),
        ({"prompt": "Is the answer 7 or 12?"}, "7 or 12", "12", 0.0),  # a TRL-style prompt string
        ({"messages": [{"role": "system", "content": "Say 7 or 12."}, {"role": "user", "content": "Go"}]},
         "7 or 12", "12", 0.0),  # the system turn is prompt too
        ({"messages": [{"role": "assistant", "content": "7 or 12"}]}, "7 or 12", "12", 1.0),  # not prompt
        ({}, "7 or 12", "12", 1.0),  # no prompt: nothing is an echo
        # a particle (one hiragana) beside the answer says little: the word past it must come from the prompt too
        (TOKYO, "東京と思います", "東京", 1.0),  # was 0: "東京と" is in the prompt, "東京と思" is not
        (TOKYO, "たぶん東京だと思う", "東京", 1.0),  # (already so)
        (TOKYO, "東京と大阪のどちら", "東京", 0.0),  # the echo: "東京と大" is in the prompt
        (TOKYO, "東京と", "東京", 0.0),  # nothing past the particle: "東京と" decides, copied
        (TOKYO, "東京ですか", "東京", 0.0),  # the cost that stays: "東京です" is copied from the prompt too
    ],
)
def test_ignore_prompt_echo_reads_the_rows_prompt(item, output, reference, expected):
    spec = {"type": "string_check", "operation": "like", "ignore_prompt_echo": True}
    assert score(spec, output, reference=reference, **item) == expected


def test_ignore_prompt_echo_reason():
    grader = build_grader({"type": "string_check", "operation": "like", "ignore_prompt_echo": True})
    grades = grader.grade_group({"reference_answer": "12", "messages": LARGER},
                                [{"output_text": ECHO}, {"output_text": "no idea"}])
    assert [g.reason for g in grades] == ["like found only copied from the prompt", "like failed"]


@pytest.mark.parametrize(
    "spec, message",
    [
        ({"type": "string_check", "operation": "eq", "ignore_prompt_echo": True},
         r"^grader\.ignore_prompt_echo: applies only to operation like or ilike \(contains\), not eq; "
         r"remove ignore_prompt_echo or make it a contains check"),
        ({"type": "format", "check": "equals", "ignore_prompt_echo": True},
         r"^grader\.ignore_prompt_echo: applies only to check: contains, not check: equals"),
        ({"type": "string_check", "operation": "like", "ignore_prompt_echo": "yes"},
         r"^grader\.ignore_prompt_echo: expected"),
    ],
)
def test_ignore_prompt_echo_refuses_bad_values(spec, message):
    with pytest.raises(ConfigError, match=message):
        build_grader(spec)
