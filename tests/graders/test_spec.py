"""Spec loading, the registry, typed field reading and templates."""

from __future__ import annotations

import json
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from kitae.config import setting
from kitae.errors import ConfigError
from kitae.graders import (GRADERS, Grade, Grader, Template, TemplateError, build_grader, load_spec, read_spec,
                           register_grader)
from kitae.graders.numeric import NumericGrader


@pytest.mark.parametrize(
    "spec, message",
    [
        ({"type": "numerc"}, "grader.type: unknown grader 'numerc'; did you mean 'numeric'?"),
        ({}, "grader.type: missing; one of:"),
        ({"type": 3}, "grader.type: expected a grader type name, got 3"),
        ({"type": "numeric", "tolerance": "one"}, "grader.tolerance: expected a number, got 'one'"),
        ({"type": "numeric", "tolerence": 0.1}, "grader.tolerence: unknown key; did you mean 'tolerance'?"),
        ({"type": "numeric", "partial_credit": 2}, "grader.partial_credit: must be <= 1, got 2"),
        ({"type": "numeric", "tolerance": 0.1, "partial_tolerance": 0.05}, "grader.partial_tolerance: must be >= tolerance"),
        ({"type": "numeric", "tolerance": True}, "grader.tolerance: expected a number, got True"),
        ({"type": "numeric", "name": 5}, "grader.name: expected a string"),
        ({"type": "numeric", "nmae": "num"}, "grader.nmae: unknown key; did you mean 'name'?"),  # common keys too
        ({"type": "numeric", "tolerance": None}, "grader.tolerance: expected a number, got None"),  # not nullable
        ({"type": "numeric", "input": 5}, "grader.input: expected a string, got 5"),  # a template is text
        ({"type": "numeric", "partial_credit": 10**1000}, "grader.partial_credit: expected a number, got 1000"),
        ({"type": "gate", "gate": {"type": "answer"}, "grader": {"type": "answer"}, "threshold": 10**400},
         "grader.threshold: expected a number, got 1000"),  # too large for a float: an error, not a crash
        ({"type": "code", "memory_mb": -10**400}, "grader.memory_mb: must be >= 32, got -1000"),
        ({"type": "string_check", "operation": "eq", "refrence": "x"}, "did you mean 'reference'?"),
        # nested specs report the full path
        ({"type": "weighted", "graders": {"num": {"type": "numeric", "tolerance": "x"}}},
         "grader.graders.num.tolerance: expected a number, got 'x'"),
        ({"type": "weighted", "graders": {"num": {"type": "numric"}}},
         "grader.graders.num.type: unknown grader 'numric'; did you mean 'numeric'?"),
        ({"type": "weighted", "graders": {"num": "numeric"}}, "grader.graders.num: expected a grader spec"),
        ({"type": "gate", "gate": {"type": "format", "check": "json"}}, "grader.grader: missing (required)"),
        ({"type": "string_check", "operation": "lik"},
         "grader.operation: got 'lik'; expected one of eq, ne, like, ilike, neq; did you mean 'like'?"),
        ({"type": "text_similarity", "evaluation_metric": "rouge_L"}, "did you mean 'rouge_l'?"),
        ({"type": "text_similarity", "evaluation_metric": "meteors"}, "did you mean 'meteor'?"),
        ({"type": "text_similarity", "tokenizer": "jp"}, "grader.tokenizer: unknown tokenizer 'jp'; did you mean 'ja'?"),
        # templates are checked when the spec is read
        ({"type": "numeric", "input": "{{items.answer}}"}, "grader.input: template {{items.answer}}: unknown template root 'items'; did you mean 'item'?"),
        ({"type": "numeric", "reference": "{{item}}"}, "grader.reference: template {{item}} names no field"),
        ({"type": "numeric", "reference": "{{item.a b}}"}, "grader.reference: bad template path"),
        ({"type": "numeric", "reference": "{{item.answer"}, "grader.reference: unclosed '{{'"),
    ],
)
def test_bad_specs_name_the_path(spec, message):
    with pytest.raises(ConfigError) as err:
        build_grader(spec)
    assert message in str(err.value)


def test_large_values_are_not_printed_in_full():
    big: list = ["lol"] * 10
    for _ in range(7):
        big = [big] * 10  # 10**8 leaves if printed in full
    for spec in ({"type": "numeric", "tolerance": big}, {"type": "numeric", "input": big},
                 {"type": "code", "workers": big}, {"type": "string_check", "operation": big},
                 {"type": "numeric", "partial_credit": 10**4000}, {"type": "code", "memory_mb": -10**4000},
                 {"type": "format", "check": "labels", "labels": [big]}):
        with pytest.raises(ConfigError) as err:
            build_grader(spec)
        assert len(str(err.value)) < 200, str(err.value)[:300]


@pytest.mark.parametrize(
    "spec, attribute, value",
    [
        ({"type": "text_similarity", "pass_threshold": None}, "pass_threshold", None),  # null: no passed sub-score
        ({"type": "text_similarity", "pass_threshold": 1}, "pass_threshold", 1.0),  # an integer is a number
        ({"type": "python", "source": "def grade(s, i): return 1", "pass_threshold": 0.5}, "pass_threshold", 0.5),
        ({"type": "gate", "gate": {"type": "answer"}, "grader": {"type": "answer"}, "fail_score": None},
         "fail_score", None),
        ({"type": "code", "tolerance": None}, "tolerance", None),
        ({"type": "format", "check": "labels", "labels": ["yes", 2]}, "labels", {"yes", "2"}),  # numbers as text
    ],
)
def test_nullable_and_coerced_fields(spec, attribute, value):
    grader = build_grader(spec)
    try:
        assert getattr(grader, attribute) == value
    finally:
        grader.close()


def test_path_argument_prefixes_errors():
    with pytest.raises(ConfigError, match=r"^rewards\[0\]\.grader\.tolerance: "):
        build_grader({"type": "numeric", "tolerance": "x"}, "rewards[0].grader")


def test_long_inline_specs_are_parsed_not_stat_ed():
    spec = "{type: string_check, operation: eq, reference: '" + "x" * 300 + "'}"  # > 255 bytes, one line
    assert load_spec(spec)["reference"] == "x" * 300
    assert build_grader("{type: text_similarity, input: '" + "y" * 400 + " {{sample.output_text}}'}").metric == "rouge_l"
    assert load_spec("{type: string_check, operation: eq, reference: a.yaml}")["reference"] == "a.yaml"  # inline, not a file


def test_spec_file_errors_name_the_file(tmp_path):
    (tmp_path / "bad.yaml").write_bytes(b"type: \xff\xfe numeric\n")
    with pytest.raises(ConfigError, match=r"line 1: not UTF-8 text \(byte 0xff\)") as err:
        load_spec(tmp_path / "bad.yaml")
    assert str(err.value).startswith(f"grader ({tmp_path / 'bad.yaml'})")


def test_spec_sources_give_the_same_grader(tmp_path):
    spec = {"type": "numeric", "tolerance": 0.02, "name": "num"}
    (tmp_path / "g.yaml").write_text("type: numeric\ntolerance: 0.02\nname: num\n")
    (tmp_path / "g.json").write_text(json.dumps(spec))
    (tmp_path / "wrapped.yaml").write_text("grader:\n  type: numeric\n  tolerance: 0.02\n  name: num\n")
    (tmp_path / "g.spec").write_text("type: numeric\ntolerance: 0.02\nname: num\n")
    sources = [spec, tmp_path / "g.yaml", str(tmp_path / "g.json"), tmp_path / "wrapped.yaml", str(tmp_path / "g.spec"),
               json.dumps(spec), "{type: numeric, tolerance: 0.02, name: num}"]
    for source in sources:
        grader = build_grader(source)
        assert isinstance(grader, NumericGrader) and grader.tolerance == 0.02 and grader.name == "num", source


def test_type_name_alone_and_default_name():
    grader = build_grader("numeric")
    assert isinstance(grader, NumericGrader) and grader.name == "numeric"


@pytest.mark.parametrize(
    "source, message",
    [
        ("missing.yaml", "grader spec file 'missing.yaml' does not exist"),
        ("[1, 2]", "expected a mapping with a 'type', got [1, 2]"),
        ("{type: numeric", "not valid YAML/JSON"),
        ("x" * 300 + ".json", "grader spec file 'xxxxx"),  # too long for a file name: still "does not exist"
        ("{type: numeric, reference: '" + "x" * 300, "not valid YAML/JSON"),  # long broken inline YAML
        ("a\0b.yaml", "does not exist"),  # a NUL byte: no file can have that name
        (Path("no/such/dir") / ("y" * 300 + ".yaml"), "does not exist"),
    ],
)
def test_bad_spec_sources(source, message):
    with pytest.raises(ConfigError, match="^grader") as err:
        load_spec(source)
    assert message in str(err.value)


def test_register_a_custom_grader_and_read_typed_fields():
    @dataclass
    class LengthSpec:
        max_chars: int = setting(10, minimum=1)
        labels: list[str] = field(default_factory=list)

    with GRADERS.scoped("test_length"):
        @register_grader("test_length")
        class LengthGrader(Grader):
            def __init__(self, max_chars: int, labels: list):
                self.max_chars, self.labels = max_chars, labels

            @classmethod
            def from_spec(cls, spec, path):
                s = read_spec(LengthSpec, spec, path)
                return cls(s.max_chars, s.labels)

            def grade_sample(self, item, sample):
                return Grade(score=float(len(sample["output_text"]) <= self.max_chars))

        grader = build_grader({"type": "test_length", "max_chars": 3})
        assert [g.score for g in grader.grade_group({}, [{"output_text": "abc"}, {"output_text": "abcd"}])] == [1.0, 0.0]
        with pytest.raises(ConfigError, match=r"grader.max_chars: expected an integer, got 2.5"):
            build_grader({"type": "test_length", "max_chars": 2.5})
        with pytest.raises(ConfigError, match=r"grader.max_chars: must be >= 1, got 0"):
            build_grader({"type": "test_length", "max_chars": 0})
        with pytest.raises(ConfigError, match=r"grader.labels: expected a list"):
            build_grader({"type": "test_length", "labels": "a"})
        with pytest.raises(ConfigError, match=r"grader.max_char: unknown key; did you mean 'max_chars'\?"):
            build_grader({"type": "test_length", "max_char": 3})


def test_a_grader_without_fields_needs_no_from_spec():
    with GRADERS.scoped("test_constant"):
        @register_grader("test_constant")
        class Constant(Grader):
            def grade_sample(self, item, sample):
                return Grade(score=1.0)

        assert build_grader({"type": "test_constant", "name": "c"}).grade_group({}, [{"output_text": ""}])[0].score == 1.0
        with pytest.raises(ConfigError, match="grader.value: unknown key"):
            build_grader({"type": "test_constant", "value": 1})


def test_reward_graders_are_known_by_name_and_imported_only_when_a_spec_names_one():
    code = (
        "import sys; from kitae.graders import GRADERS, build_grader\n"
        "known = all(t in GRADERS for t in ('repetition', 'overlong', 'template', 'reward_model'))\n"
        "build_grader('numeric')\n"
        "before = 'kitae.rewards.graders' in sys.modules\n"
        "g = build_grader('repetition')\n"
        "print(known, before, 'kitae.rewards.graders' in sys.modules, type(g).__name__)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.stdout.split() == ["True", "False", "True", "RepetitionGrader"], out.stderr


# ---- templates ----------------------------------------------------------------------------------
ITEM = {"reference_answer": "47", "meta": {"answers": ["a", "b"], "n": 3}, "tags": ["x"],
        "rows": [[{"name": "ann"}], [{"name": "bob"}]]}
SAMPLE = {"output_text": '{"answer": {"value": 5}, "list": [1, 2]}<|im_end|>\n', "finish_reason": "stop"}


@pytest.mark.parametrize(
    "template, expected",
    [
        ("{{item.reference_answer}}", "47"),
        ("{{ item.reference_answer }}", "47"),  # spaces inside braces are fine
        ("{{item.meta.answers.1}}", "b"),  # list index
        ("{{item.meta.answers.-1}}", "b"),
        ("{{item.meta.n}}", 3),  # a lone placeholder keeps the value's type
        ("n={{item.meta.n}}", "n=3"),  # inside text, formatted
        ("{{item.tags}}", ["x"]),
        ("tags: {{item.tags}}", 'tags: ["x"]'),
        ("{{sample.output_text}}", '{"answer": {"value": 5}, "list": [1, 2]}'),  # cut at <|im_end|>
        ("{{sample.raw_text}}", SAMPLE["output_text"]),
        ("{{sample.output_json.answer.value}}", 5),
        ("{{sample.output_json.list.0}}", 1),
        ("{{sample.finish_reason}}", "stop"),
        ("plain text", "plain text"),
        # OpenAI's bracket indexes, nested and mixed with dotted fields
        ("{{item.meta.answers[1]}}", "b"),
        ("{{item.meta.answers[-1]}}", "b"),  # from the end
        ("{{ item.meta.answers[ 0 ] }}", "a"),  # spaces inside the brackets are fine
        ("{{sample.output_json.list[1]}}", 2),
        ("{{item.rows[1][0].name}}", "bob"),  # list of lists of mappings
        ("first={{item.meta.answers[0]}}, n={{item.meta.n}}", "first=a, n=3"),
    ],
)
def test_template_values(template, expected):
    assert Template(template).value(ITEM, SAMPLE) == expected


@pytest.mark.parametrize(
    "template, sample, message",
    [
        ("{{item.missing}}", SAMPLE, "{{item.missing}}: no field 'missing' (fields: reference_answer, meta, tags, rows)"),
        ("{{item.meta.answers.5}}", SAMPLE, "index 5 out of range (length 2)"),
        ("{{item.meta.n.x}}", SAMPLE, "item.meta.n is a int, not a mapping or list"),
        ("{{sample.output_json.nope}}", SAMPLE, "{{sample.output_json.nope}}: no field 'nope'"),
        ("{{sample.output_json.a}}", {"output_text": "not json"}, "sample output is not JSON"),
        ("{{sample.logprobs}}", SAMPLE, "{{sample.logprobs}}: no field 'logprobs'"),
        ("{{item.meta.answers[5]}}", SAMPLE, "{{item.meta.answers[5]}}: index 5 out of range (length 2)"),
        ("{{item.meta[0]}}", SAMPLE, "{{item.meta[0]}}: item.meta is a dict, not a list"),
        ("{{item.rows[0][3].name}}", SAMPLE, "{{item.rows[0][3]}}: index 3 out of range (length 1)"),
        ("{{sample.output_tools[0].function.name}}", SAMPLE, "{{sample.output_tools[0]}}: index 0 out of range (length 0)"),
        ("{{sample.output_tools}}", {"output_text": "<tool_call>{oops}</tool_call>"}, "<tool_call> is not JSON"),
    ],
)
def test_template_errors_name_the_missing_path(template, sample, message):
    with pytest.raises(TemplateError) as err:
        Template(template).value(ITEM, sample)
    assert message in str(err.value)


@pytest.mark.parametrize(
    "template, message",
    [
        ("{{item.a[x]}}", "bad template path {{item.a[x]}}"),  # an index is a number
        ("{{item.a[0}}", "bad template path {{item.a[0}}"),  # unclosed bracket
        ("{{item..a}}", "bad template path {{item..a}}"),  # empty field name
        ("{{item[0]}}", "template {{item[0]}} names no field"),  # the row itself is not a list
    ],
)
def test_bad_template_paths_are_spec_errors(template, message):
    with pytest.raises(ConfigError, match="^grader.input: ") as err:
        build_grader({"type": "string_check", "operation": "eq", "input": template, "reference": "x"})
    assert message in str(err.value)


# OpenAI's reinforcement fine-tuning guide's tool-call check: does the first tool call name the right function?
TOOL_SPEC = {"type": "string_check", "operation": "eq", "input": "{{sample.output_tools[0].function.name}}",
             "reference": "{{item.tool}}"}


@pytest.mark.parametrize(
    "sample, score",
    [
        # OpenAI-style samples carry output_tools
        ({"output_text": "", "output_tools": [{"type": "function", "function": {"name": "get_acceptors",
                                                                               "arguments": "{}"}}]}, 1.0),
        ({"output_text": "", "output_tools": [{"type": "function", "function": {"name": "other", "arguments": "{}"}}]},
         0.0),
        # kitae rollouts: the <tool_call> blocks of the text (Qwen/Hermes format)
        ({"output_text": 'Checking.\n<tool_call>\n{"name": "get_acceptors", "arguments": {"id": 7}}\n</tool_call><|im_end|>'},
         1.0),
        ({"output_text": '<tool_call>{"name": "lookup", "arguments": {}}</tool_call>'
                         '<tool_call>{"name": "get_acceptors"}</tool_call>'}, 0.0),  # [0] is the first call
        ({"output_text": "no tool call<|im_end|>"}, None),  # nothing at [0]: abstains, naming the path
    ],
)
def test_openai_tool_call_template(sample, score):
    grade = build_grader(TOOL_SPEC).grade_group({"tool": "get_acceptors"}, [sample])[0]
    assert grade.score == score
    if score is None:
        assert "{{sample.output_tools[0]}}: index 0 out of range" in grade.error


def test_output_tools_from_text_are_openai_tool_calls():
    sample = {"output_text": '<tool_call>{"name": "f", "arguments": {"q": "東京", "n": 2}}</tool_call><|im_end|>'}
    assert Template("{{sample.output_tools}}").value({}, sample) == [
        {"type": "function", "function": {"name": "f", "arguments": '{"q": "東京", "n": 2}'}}]
    assert Template("{{sample.output_tools[0].function.arguments}}").value({}, sample) == '{"q": "東京", "n": 2}'


def test_output_json_reads_a_fenced_block():
    sample = {"output_text": 'Here:\n```json\n{"a": 1}\n```'}
    assert Template("{{sample.output_json.a}}").value({}, sample) == 1


def test_a_missing_template_path_abstains_with_the_path():
    grader = build_grader({"type": "numeric", "reference": "{{item.answer}}"})
    grade = grader.grade_group({"reference_answer": "5"}, [{"output_text": "5"}])[0]
    assert grade.score is None and "{{item.answer}}: no field 'answer'" in grade.error
