"""Tool-call formats: each family's calls read from a sampled turn, malformed calls as messages (never raised), the
format found from the models' own chat templates."""

from __future__ import annotations

import pytest

from kitae.agents.parsers import PARSERS, call_id, parser_for, valid_id
from kitae.chat import CHATML_TEMPLATE
from kitae.errors import KitaeError
from tests.agents._chat_fixtures import LLAMA31, NEMO, QWEN3, QWEN3_THINKING, QWEN25
from tests.families.families import real_template

CALC = '{"name": "calculator", "arguments": {"expression": "12*7"}}'


WHOLE = None  # the content is the turn's whole text (without its end marker): all of its calls were malformed


def parse(fmt: str, text: str):
    return PARSERS.get(fmt)().read(text, ())


def whole(text: str) -> str:
    for end in ("<|im_end|>", "<|eot_id|>", "<|eom_id|>", "</s>"):
        text = text.removesuffix(end)
    return text


def calls(parsed) -> list[tuple[str, dict]]:
    return [(c.name, c.arguments) for c in parsed.calls]


@pytest.mark.parametrize("template, fmt", [
    (QWEN25, "hermes"), (QWEN3, "hermes"), (QWEN3_THINKING, "hermes"),
    (LLAMA31, "llama3_json"),  # its template mentions "parameters" and the ipython role
    (NEMO, "mistral"),
])
def test_the_format_is_found_from_each_real_template(template, fmt):
    assert parser_for(real_template(template)) == fmt


def test_a_template_without_tools_is_refused_with_the_formats_named():
    with pytest.raises(KitaeError, match="environment.parser.*hermes, llama3_json, mistral"):
        parser_for(CHATML_TEMPLATE)


# ---- hermes: Qwen2.5, Qwen3, Hermes ---------------------------------------------------------------------------
HERMES_CASES = [
    # (turn text, content, calls, number of malformed calls)
    ("The answer is 84.<|im_end|>", "The answer is 84.", [], 0),  # an answer: the text as is, no end marker
    (f"<tool_call>\n{CALC}\n</tool_call><|im_end|>", "", [("calculator", {"expression": "12*7"})], 0),
    (f"Let me compute.\n<tool_call>\n{CALC}\n</tool_call>\n<tool_call>\n"
     '{"name": "search", "arguments": {"q": "x"}}\n</tool_call><|im_end|>',
     "Let me compute.", [("calculator", {"expression": "12*7"}), ("search", {"q": "x"})], 0),  # two in a turn
    ("<think>\nfirst multiply\n</think>\n\n" f"<tool_call>\n{CALC}\n</tool_call><|im_end|>",
     "<think>\nfirst multiply\n</think>", [("calculator", {"expression": "12*7"})], 0),  # Qwen3 thinking kept
    ('<tool_call>\n{"name": "calculator", "arguments": "{\\"expression\\": \\"1+1\\"}"}\n</tool_call>',
     "", [("calculator", {"expression": "1+1"})], 0),  # arguments quoted as a JSON string: read
    ('<tool_call>\n{"name": "now"}\n</tool_call>', "", [("now", {})], 0),  # no arguments: none
    ("<tool_call>\n{name: calculator}\n</tool_call><|im_end|>", WHOLE, [], 1),  # not JSON
    ('<tool_call>\n{"arguments": {}}\n</tool_call>', WHOLE, [], 1),  # no name
    ('<tool_call>\n{"name": "", "arguments": {}}\n</tool_call>', WHOLE, [], 1),  # empty name
    ('<tool_call>\n{"name": "calculator", "arguments": [1, 2]}\n</tool_call>', WHOLE, [], 1),  # arguments a list
    ('<tool_call>\n["calculator"]\n</tool_call>', WHOLE, [], 1),  # not an object
    (f"<tool_call>\n{CALC}", WHOLE, [], 1),  # cut before </tool_call> (length)
    (f"<tool_call>\n{{bad\n</tool_call>\n<tool_call>\n{CALC}\n</tool_call>", "",
     [("calculator", {"expression": "12*7"})], 1),  # one bad, one good: the good one runs
]


@pytest.mark.parametrize("text, content, expected, malformed", HERMES_CASES)
def test_hermes(text, content, expected, malformed):
    parsed, content = parse("hermes", text), whole(text) if content is WHOLE else content
    assert (parsed.content, calls(parsed), len(parsed.malformed)) == (content, expected, malformed)


def test_a_malformed_call_says_what_is_wrong_and_how_to_write_it():
    [msg] = parse("hermes", "<tool_call>\n{name: calculator}\n</tool_call>").malformed
    assert "tool call 1 is not valid JSON" in msg and '"arguments"' in msg
    [msg] = parse("hermes", '<tool_call>\n{"name": "c", "arguments": 3}\n</tool_call>').malformed
    assert "'c'" in msg and "must be a JSON object" in msg


# ---- llama3_json: Llama 3.1 -------------------------------------------------------------------------------------
LLAMA_CALL = '{"name": "calculator", "parameters": {"expression": "12*7"}}'
LLAMA_CASES = [
    ("The answer is 84.<|eot_id|>", "The answer is 84.", [], 0),
    (f"{LLAMA_CALL}<|eot_id|>", "", [("calculator", {"expression": "12*7"})], 0),
    (f"<|python_tag|>{LLAMA_CALL}<|eom_id|>", "", [("calculator", {"expression": "12*7"})], 0),  # ipython mode
    (f"Computing.<|python_tag|>{LLAMA_CALL}<|eom_id|>", "Computing.", [("calculator", {"expression": "12*7"})], 0),
    ('{"name": "calculator", "arguments": {"expression": "1"}}<|eot_id|>', "",
     [("calculator", {"expression": "1"})], 0),  # "arguments" for "parameters": read
    (f"{LLAMA_CALL}; {LLAMA_CALL}<|eot_id|>", "", [("calculator", {"expression": "12*7"})], 1),  # one per turn
    ("<|python_tag|>brave_search.call(query=\"x\")<|eom_id|>", WHOLE, [], 1),  # a built-in tool's call: not JSON
    ('{"name": "calculator", "parameters": "12*7"}<|eot_id|>', WHOLE, [], 1),  # parameters not an object
    ('<|python_tag|>{"parameters": {}}<|eom_id|>', WHOLE, [], 1),  # no name
    ("{not a call at all}<|eot_id|>", "{not a call at all}", [], 0),  # JSON-looking text without "name": answer
]


@pytest.mark.parametrize("text, content, expected, malformed", LLAMA_CASES)
def test_llama3_json(text, content, expected, malformed):
    parsed, content = parse("llama3_json", text), whole(text) if content is WHOLE else content
    assert (parsed.content, calls(parsed), len(parsed.malformed)) == (content, expected, malformed)


def test_llama_says_one_call_per_turn():
    [msg] = parse("llama3_json", f"{LLAMA_CALL};{LLAMA_CALL}").malformed
    assert "one tool call per turn" in msg


# ---- mistral: Mistral Nemo --------------------------------------------------------------------------------------
MISTRAL_CASES = [
    ("The answer is 84.</s>", "The answer is 84.", [], 0),
    ('[TOOL_CALLS][{"name": "calculator", "arguments": {"expression": "12*7"}, "id": "a1b2c3d4e"}]</s>', "",
     [("calculator", {"expression": "12*7"})], 0),
    ('[TOOL_CALLS][{"name": "a", "arguments": {}}, {"name": "b", "arguments": {"x": 1}}]</s>', "",
     [("a", {}), ("b", {"x": 1})], 0),  # two calls, no ids: ids made for them
    ('Sure.[TOOL_CALLS]{"name": "a", "arguments": {}}</s>', "Sure.", [("a", {})], 0),  # one object, not a list
    ("[TOOL_CALLS][{'name': 'a'}]</s>", WHOLE, [], 1),  # Python, not JSON
    ('[TOOL_CALLS][{"name": "a", "arguments": 1}, {"name": "b", "arguments": {}}]</s>', "", [("b", {})], 1),
    ('[TOOL_CALLS][{"arguments": {}}]</s>', WHOLE, [], 1),
    ('[TOOL_CALLS][{"name": "a", "arguments": {}', WHOLE, [], 1),  # cut (length)
]


@pytest.mark.parametrize("text, content, expected, malformed", MISTRAL_CASES)
def test_mistral(text, content, expected, malformed):
    parsed, content = parse("mistral", text), whole(text) if content is WHOLE else content
    assert (parsed.content, calls(parsed), len(parsed.malformed)) == (content, expected, malformed)


def test_mistral_ids_are_the_models_when_valid_else_nine_alphanumerics_made_from_the_turn():
    text = ('[TOOL_CALLS][{"name": "a", "arguments": {}, "id": "a1b2c3d4e"}, {"name": "a", "arguments": {}}, '
            '{"name": "a", "arguments": {}, "id": "bad-id"}]</s>')
    ids = [c.id for c in parse("mistral", text).calls]
    assert ids[0] == "a1b2c3d4e"
    assert all(valid_id(i) for i in ids) and len(set(ids)) == 3
    assert ids == [c.id for c in parse("mistral", text).calls]  # the same turn, the same ids (resume)
    assert call_id("x") != call_id("y") and valid_id(call_id("x"))


def test_mistral_results_are_json_strings_with_a_valid_call_id():
    from kitae.rollout.trajectory import ToolCall

    fmt = PARSERS.get("mistral")()
    message = fmt.tool_message(ToolCall("a", {}, id="a1b2c3d4e", result='say "hi"'))
    assert message == {"role": "tool", "name": "a", "content": '"say \\"hi\\""', "tool_call_id": "a1b2c3d4e"}
    assert valid_id(fmt.tool_message(ToolCall("", None, error="not JSON"))["tool_call_id"])  # a malformed call


# ---- no input raises ------------------------------------------------------------------------------------------
GARBAGE = ["", "<tool_call>", "</tool_call>", "<tool_call></tool_call>", "<tool_call>null</tool_call>",
           "[TOOL_CALLS]", "[TOOL_CALLS][]", "[TOOL_CALLS]null", "<|python_tag|>", "<|python_tag|>{",
           '{"name": 1}', "{" * 50, '<tool_call>{"name": "a", "arguments": {}}</tool_call>' * 3 + "<tool_call>{",
           "\x00\ufffd", '<|python_tag|>{"name": "a", "parameters": {}} trailing words']


DEEP = "[" * 100_000  # nesting past Python's recursion limit: json raises RecursionError, not a JSONDecodeError
GARBAGE += [f"<tool_call>{DEEP}</tool_call>", f"<|python_tag|>{DEEP}", f"[TOOL_CALLS]{DEEP}",
            '<tool_call>{"name": "a", "arguments": "%s"}</tool_call>' % DEEP,
            '{"name": "a", "parameters": "%s"}' % DEEP, '[TOOL_CALLS][{"name": "a", "arguments": "%s"}]' % DEEP]


@pytest.mark.parametrize("fmt", ["hermes", "llama3_json", "mistral"])
def test_no_turn_text_makes_a_parser_raise(fmt):
    for text in GARBAGE:
        parsed = parse(fmt, text)
        assert all(isinstance(m, str) and m for m in parsed.malformed), text
        assert all(isinstance(c.arguments, dict) and c.name for c in parsed.calls), text


def test_assistant_messages_carry_tool_calls_only_when_there_are_calls():
    """Llama 3.1's and Mistral's templates take any ``tool_calls`` key as a call (an empty list renders a broken
    ``[TOOL_CALLS][`` or raises), so an answer has none."""
    for fmt in ("hermes", "llama3_json", "mistral"):
        f = PARSERS.get(fmt)()
        assert "tool_calls" not in f.assistant_message(f.read("42", ()))
    f = PARSERS.get("mistral")()
    [call] = f.assistant_message(f.read('[TOOL_CALLS][{"name": "a", "arguments": {"x": 1}, "id": "a1b2c3d4e"}]',
                                        ()))["tool_calls"]
    assert call == {"type": "function", "id": "a1b2c3d4e", "function": {"name": "a", "arguments": {"x": 1}}}
