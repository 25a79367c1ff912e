"""The bundled tiny base model (kitae/assets/models/kitae-tiny-base) and the bundled arith task.

Everything here loads the committed files offline; nothing is trained and nothing is downloaded.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
import torch

from kitae.chat import CHATML_TEMPLATE, END_OF_TEXT, IM_END, IM_START, chatml

ASSETS = Path(__file__).resolve().parents[1] / "kitae" / "assets"
MODEL_DIR = ASSETS / "models" / "kitae-tiny-base"
DATA_DIR = ASSETS / "data" / "arith"


@pytest.fixture(scope="module")
def tokenizer():
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(MODEL_DIR, local_files_only=True)


@pytest.fixture(scope="module")
def model():
    from transformers import AutoModelForCausalLM

    return AutoModelForCausalLM.from_pretrained(MODEL_DIR, local_files_only=True).eval()


def read_jsonl(name: str) -> list[dict]:
    lines = (DATA_DIR / name).read_text(encoding="utf-8").splitlines()
    return [json.loads(line) for line in lines if line.strip()]


# ------------------------------------------------------------------------------------------- model files
def test_checkpoint_is_small_safetensors_llama():
    weights = MODEL_DIR / "model.safetensors"
    assert weights.exists()
    assert weights.stat().st_size <= 20 * 1024 * 1024
    config = json.loads((MODEL_DIR / "config.json").read_text())
    assert config["model_type"] == "llama"
    assert (MODEL_DIR / "README.md").read_text(encoding="utf-8").startswith("# kitae-tiny-base")


def test_parameter_count_in_range(model):
    params = sum(p.numel() for p in model.parameters())
    assert 1_500_000 <= params <= 10_000_000, params  # "about 2-10M": 1.97M today


# ----------------------------------------------------------------------------------------------- tokenizer
@pytest.mark.parametrize("token", [END_OF_TEXT, IM_START, IM_END])
def test_special_tokens_are_single_ids(tokenizer, token):
    ids = tokenizer.encode(token, add_special_tokens=False)
    assert len(ids) == 1
    assert tokenizer.convert_ids_to_tokens(ids[0]) == token


def test_eos_is_im_end_and_pad_is_endoftext(tokenizer, model):
    assert tokenizer.eos_token == IM_END
    assert tokenizer.pad_token == END_OF_TEXT
    im_end = tokenizer.convert_tokens_to_ids(IM_END)
    assert model.generation_config.eos_token_id == im_end
    assert model.config.eos_token_id == im_end


@pytest.mark.parametrize("text", [
    "12+35は？",                                    # Japanese with digits
    "フランスの首都はパリです。",                   # kana + kanji
    "What is 12+35? The answer is 47.",             # English
    "漢字とカタカナ、English 123 ü ©",              # mixed, plus characters never seen in training (bytes)
    f"{IM_START}user\n7-3は？{IM_END}\n{END_OF_TEXT}",  # special tokens inside text
])
def test_encode_decode_round_trip(tokenizer, text):
    ids = tokenizer.encode(text, add_special_tokens=False)
    assert tokenizer.decode(ids, skip_special_tokens=False) == text


def test_digits_are_split_one_by_one(tokenizer):
    assert tokenizer.tokenize("12345", add_special_tokens=False) == ["1", "2", "3", "4", "5"]


def test_chat_template_renders_chatml(tokenizer):
    messages = [{"role": "system", "content": "Answer briefly."}, {"role": "user", "content": "12+35は？"}]
    rendered = tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
    assert rendered == (
        "<|im_start|>system\nAnswer briefly.<|im_end|>\n<|im_start|>user\n12+35は？<|im_end|>\n<|im_start|>assistant\n"
    )
    assert rendered == chatml(messages)
    assert tokenizer.chat_template == CHATML_TEMPLATE


# ------------------------------------------------------------------------------------------------ the task
@pytest.mark.parametrize("name,size", [("train.jsonl", 2000), ("test.jsonl", 200)])
def test_task_rows_are_well_formed(name, size):
    rows = read_jsonl(name)
    assert len(rows) == size
    for row in rows:
        assert set(row) == {"messages", "reference_answer", "difficulty", "lang"}, row
        assert row["difficulty"] in {"easy", "medium", "hard", "fact"}
        assert row["lang"] in {"ja", "en"}
        roles = [m["role"] for m in row["messages"]]
        assert roles in (["user"], ["system", "user"]), row
        assert all(m["content"].strip() for m in row["messages"])
        assert isinstance(row["reference_answer"], str) and row["reference_answer"]


EQUATION = re.compile(r"(\d+)\s*(\+|-|plus|minus|たす|ひく)\s*(\d+)")
DIGITS = {"easy": (1, 1), "medium": (2, 1), "hard": (2, 2)}


def test_arithmetic_references_are_correct():
    rows = [r for r in read_jsonl("train.jsonl") + read_jsonl("test.jsonl") if r["difficulty"] != "fact"]
    assert rows
    for row in rows:
        a, op, b = EQUATION.search(row["messages"][-1]["content"]).groups()
        assert (len(a), len(b)) == DIGITS[row["difficulty"]], row
        value = int(a) + int(b) if op in ("+", "plus", "たす") else int(a) - int(b)
        assert value >= 0 and row["reference_answer"] == str(value), row
        assert row["difficulty"] != "hard" or op in ("+", "plus", "たす"), row


def test_splits_have_disjoint_questions_and_mix_difficulties():
    train, test = read_jsonl("train.jsonl"), read_jsonl("test.jsonl")
    questions = lambda rows: {r["messages"][-1]["content"] for r in rows}  # noqa: E731
    assert not questions(train) & questions(test)
    for rows in (train, test):
        counts = {d: sum(r["difficulty"] == d for r in rows) for d in ("easy", "medium", "hard", "fact")}
        assert all(c >= len(rows) // 10 for c in counts.values()), counts
        assert counts["fact"] < len(rows) // 2  # mostly arithmetic
        assert {r["lang"] for r in rows} == {"ja", "en"}


# ------------------------------------------------------------------------------------------------ generation
@pytest.mark.parametrize("question", ["3+4は？", "What is the capital of France?"])
def test_greedy_generation_returns_text(tokenizer, model, question):
    prompt = tokenizer.apply_chat_template([{"role": "user", "content": question}], tokenize=False,
                                           add_generation_prompt=True)
    enc = tokenizer(prompt, return_tensors="pt", add_special_tokens=False)
    with torch.inference_mode():
        out = model.generate(**enc, max_new_tokens=16, do_sample=False,
                             eos_token_id=tokenizer.convert_tokens_to_ids(IM_END), pad_token_id=tokenizer.pad_token_id)
    new = out[0, enc["input_ids"].shape[1]:]  # [new_tokens]
    assert 1 <= len(new) <= 16
    assert tokenizer.decode(new, skip_special_tokens=True).strip()


# ------------------------------------------------------------------------------------ the build script
@pytest.fixture(scope="module")
def build_script():
    import importlib
    import sys

    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "scripts"))
    try:
        yield importlib.import_module("build_base_model")
    finally:
        sys.path.remove(str(Path(__file__).resolve().parents[1] / "scripts"))


def test_score_counts_compliance_and_accuracy_per_slice(build_script):
    rows = [
        {"reference_answer": "47", "lang": "ja", "difficulty": "hard"},
        {"reference_answer": "47", "lang": "ja", "difficulty": "hard"},
        {"reference_answer": "7", "lang": "en", "difficulty": "easy"},
        {"reference_answer": "Paris", "lang": "en", "difficulty": "fact"},
    ]
    completions = [
        ("12+35=47です。<|im_end|>", "stop"),            # compliant, correct
        ("47 47 47 47", "length"),                         # cut at the limit, but the last number is right
        ("7\n<|im_start|>user\n3+5?<|im_end|>", "stop"),   # fake turn: template token inside, last number 5
        ("London.<|im_end|>", "stop"),                     # compliant, wrong
    ]
    table = build_script.score(rows, completions, ("lang", "difficulty"))
    assert table["all"] == {"n": 4, "compliance": 0.5, "accuracy": 0.5}
    assert table["lang=ja"] == {"n": 2, "compliance": 0.5, "accuracy": 1.0}
    assert table["difficulty=easy"] == {"n": 1, "compliance": 0.0, "accuracy": 0.0}
    assert table["difficulty=fact"] == {"n": 1, "compliance": 1.0, "accuracy": 0.0}


def test_corpus_never_contains_test_questions(build_script):
    import random

    corpus = build_script._corpus
    test_questions = {r["messages"][-1]["content"] for r in read_jsonl("test.jsonl")}
    rng = random.Random(0)
    seen = set()
    for _ in range(3000):
        doc = corpus.document(rng, corpus.Mixture(), test_questions)
        seen |= {part.split(IM_END)[0] for part in doc.split(f"{IM_START}user\n")[1:]}
    assert len(seen) > 1000  # the generator really produced many distinct questions
    assert not seen & test_questions
    # without the ban, the same generator does produce test questions: the check above can fail
    unbanned = {part.split(IM_END)[0] for _ in range(3000)
                for part in corpus.document(rng, corpus.Mixture(), set()).split(f"{IM_START}user\n")[1:]}
    assert unbanned & test_questions


def test_task_splits_are_reproducible_from_the_seed(build_script):
    train, test = build_script._corpus.build_task(seed=0)
    assert test == read_jsonl("test.jsonl")
    assert train == read_jsonl("train.jsonl")


def test_model_card_is_rendered_from_build_info(build_script):
    info = json.loads((MODEL_DIR / "build_info.json").read_text(encoding="utf-8"))
    card = (MODEL_DIR / "README.md").read_text(encoding="utf-8")
    assert card == build_script.render_card(info)
    all_ = info["metrics"]["sampled_t1"]["all"]
    assert f"| all | {all_['n']} | {all_['compliance']:.2f} | {all_['accuracy']:.2f} |" in card


@pytest.mark.slow
def test_baseline_numbers_in_the_card_are_reproducible(build_script, model, tokenizer):
    """Re-measure the committed checkpoint (about 10 s): the seeded eval gives the card's numbers exactly."""
    info = json.loads((MODEL_DIR / "build_info.json").read_text(encoding="utf-8"))
    threads = torch.get_num_threads()
    torch.set_num_threads(info["config"]["threads"])
    try:
        metrics = build_script.evaluate(model, tokenizer, read_jsonl("test.jsonl"), info["config"]["seed"])
    finally:
        torch.set_num_threads(threads)
    assert metrics == info["metrics"]
    assert 0.1 < metrics["sampled_t1"]["all"]["compliance"] < 0.7
    assert 0.1 < metrics["sampled_t1"]["all"]["accuracy"] < 0.7


# =============================================================================== kitae-tiny-tools
# The bundled model that sometimes calls a calculator tool (scripts/build_tools_model.py) and its task.
TOOLS_MODEL_DIR = ASSETS / "models" / "kitae-tiny-tools"
TOOLS_DATA_DIR = ASSETS / "data" / "tools"
TOOL_TOKENS = ["<tool_call>", "</tool_call>", "<tool_response>", "</tool_response>"]


@pytest.fixture(scope="module")
def tools_tokenizer():
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(TOOLS_MODEL_DIR, local_files_only=True)


@pytest.fixture(scope="module")
def tools_model():
    from transformers import AutoModelForCausalLM

    return AutoModelForCausalLM.from_pretrained(TOOLS_MODEL_DIR, local_files_only=True).eval()


@pytest.fixture(scope="module")
def tools_build_script(build_script):
    import importlib

    return importlib.import_module("build_tools_model")


@pytest.fixture(scope="module")
def calculator_schema():
    """The calculator tool's schema as transformers builds it from a typed function with a Google docstring
    (the way kitae's tools are described), worded as the calculator environment words it."""
    from transformers.utils import get_json_schema

    def calculator(expression: str) -> str:
        """Evaluate an arithmetic expression with numbers, +, -, *, / and parentheses.

        Args:
            expression: The expression to evaluate, e.g. "12 * (3 + 4)".

        Returns:
            The value of the expression.
        """
        return expression

    return get_json_schema(calculator)


def read_tools_jsonl(name: str) -> list[dict]:
    from kitae.data.loader import load_prompts
    from kitae.trainer.config import resolve_data_path

    return load_prompts(resolve_data_path(f"bundled:tools/{name.removesuffix('.jsonl')}"))


def test_tools_checkpoint_is_a_small_llama_found_by_name(tools_model):
    from kitae.models import BUNDLED_TOOLS, base_name, resolve_model_path

    weights = TOOLS_MODEL_DIR / "model.safetensors"
    assert weights.stat().st_size <= 20 * 1024 * 1024
    assert json.loads((TOOLS_MODEL_DIR / "config.json").read_text())["model_type"] == "llama"
    assert 1_500_000 <= sum(p.numel() for p in tools_model.parameters()) <= 10_000_000
    assert resolve_model_path("kitae-tiny-tools") == str(BUNDLED_TOOLS) == str(TOOLS_MODEL_DIR)
    assert base_name(TOOLS_MODEL_DIR).name == "kitae-tiny-tools"


@pytest.mark.parametrize("token", TOOL_TOKENS)
def test_tool_markers_are_single_text_tokens(tools_tokenizer, token):
    """One id each, and text rather than control tokens (as in Qwen2.5): a turn that calls a tool still follows
    the template, and decoding without special tokens keeps the call."""
    from kitae.chat import end_marker_of

    ids = tools_tokenizer.encode(f"x{token}\n", add_special_tokens=False)
    assert tools_tokenizer.convert_tokens_to_ids(token) in ids
    assert len(tools_tokenizer.encode(token, add_special_tokens=False)) == 1
    assert tools_tokenizer.decode(ids, skip_special_tokens=True) == f"x{token}\n"
    marker = end_marker_of(tools_tokenizer)
    assert marker.text == IM_END and token not in marker.controls


def test_tools_template_without_tools_is_chatml(tools_tokenizer):
    messages = [{"role": "system", "content": "Answer briefly."}, {"role": "user", "content": "12+35は？"}]
    rendered = tools_tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
    assert rendered == chatml(messages)


@pytest.mark.parametrize("system", [None, "You are a math teacher."])
def test_tools_template_lists_the_schemas_in_the_system_turn(tools_tokenizer, calculator_schema, system):
    messages = ([{"role": "system", "content": system}] if system else []) + [{"role": "user", "content": "47+38は？"}]
    rendered = tools_tokenizer.apply_chat_template(messages, tools=[calculator_schema], tokenize=False,
                                                   add_generation_prompt=True)
    head = f"{IM_START}system\n{system or 'You are a helpful assistant.'}\n\n# Tools\n\n"
    assert rendered.startswith(head)
    assert f"<tools>\n{json.dumps(calculator_schema, ensure_ascii=False)}\n</tools>" in rendered
    assert rendered.endswith(f"{IM_END}\n{IM_START}user\n47+38は？{IM_END}\n{IM_START}assistant\n")
    assert rendered.count(f"{IM_START}system") == 1  # the system message is in the tools turn, not repeated


TOOL_CONVERSATION = [
    {"role": "user", "content": "What is 47+38?"},
    {"role": "assistant", "content": "", "tool_calls": [
        {"type": "function", "function": {"name": "calculator", "arguments": {"expression": "47+38"}}}]},
    {"role": "tool", "name": "calculator", "content": "85"},
    {"role": "assistant", "content": "The answer is 85."},
]
RENDERED_TAIL = (  # what the template writes after the system turn, end markers included
    f"{IM_START}user\nWhat is 47+38?{IM_END}\n"
    f'{IM_START}assistant\n<tool_call>\n{{"name": "calculator", "arguments": {{"expression": "47+38"}}}}\n'
    f"</tool_call>{IM_END}\n"
    f"{IM_START}user\n<tool_response>\n85\n</tool_response>{IM_END}\n"
    f"{IM_START}assistant\nThe answer is 85.{IM_END}\n"
)


def test_tool_call_conversation_renders_hermes_style_and_round_trips(tools_tokenizer, calculator_schema):
    rendered = tools_tokenizer.apply_chat_template(TOOL_CONVERSATION, tools=[calculator_schema], tokenize=False)
    assert rendered.endswith(f"</tool_call>{IM_END}\n" + RENDERED_TAIL)  # the system turn's call format, then these
    ids = tools_tokenizer.encode(rendered, add_special_tokens=False)
    assert tools_tokenizer.decode(ids, skip_special_tokens=False) == rendered
    for token in TOOL_TOKENS:
        assert ids.count(tools_tokenizer.convert_tokens_to_ids(token)) == rendered.count(token)
    # OpenAI-style arguments (a JSON string) render the same as a dict
    as_string = json.loads(json.dumps(TOOL_CONVERSATION))
    as_string[1]["tool_calls"][0]["function"]["arguments"] = '{"expression": "47+38"}'
    assert tools_tokenizer.apply_chat_template(as_string, tools=[calculator_schema], tokenize=False) == rendered


def test_tool_conversation_grows_by_appending_only(tools_tokenizer, calculator_schema):
    """Each later turn only appends to what was rendered before (no earlier turn rewritten): token-in/token-out
    across turns can keep the sampled tokens and add the template's suffix."""
    previous = ""
    for k in range(1, len(TOOL_CONVERSATION) + 1):
        rendered = tools_tokenizer.apply_chat_template(TOOL_CONVERSATION[:k], tools=[calculator_schema],
                                                       tokenize=False)
        assert rendered.startswith(previous)
        prompt = tools_tokenizer.apply_chat_template(TOOL_CONVERSATION[:k], tools=[calculator_schema],
                                                     tokenize=False, add_generation_prompt=True)
        assert prompt == rendered + f"{IM_START}assistant\n"
        previous = rendered


def test_two_tool_results_share_one_user_turn(tools_tokenizer, calculator_schema):
    messages = TOOL_CONVERSATION[:1] + [
        {"role": "assistant", "content": "", "tool_calls": [
            {"type": "function", "function": {"name": "calculator", "arguments": {"expression": e}}}
            for e in ("47+38", "85-1")]},
        {"role": "tool", "name": "calculator", "content": "85"},
        {"role": "tool", "name": "calculator", "content": "84"},
    ]
    rendered = tools_tokenizer.apply_chat_template(messages, tools=[calculator_schema], tokenize=False)
    assert rendered.endswith(f'"85-1"}}}}\n</tool_call>{IM_END}\n{IM_START}user\n<tool_response>\n85\n'
                             f"</tool_response>\n<tool_response>\n84\n</tool_response>{IM_END}\n")


def test_tools_generation_from_a_tools_prompt(tools_tokenizer, tools_model, calculator_schema):
    prompt = tools_tokenizer.apply_chat_template([{"role": "user", "content": "What is 47+38?"}],
                                                 tools=[calculator_schema], tokenize=False, add_generation_prompt=True)
    enc = tools_tokenizer(prompt, return_tensors="pt", add_special_tokens=False)
    assert enc["input_ids"].shape[1] < tools_model.config.max_position_embeddings // 2  # room for two more turns
    with torch.inference_mode():
        out = tools_model.generate(**enc, max_new_tokens=40, do_sample=False, pad_token_id=tools_tokenizer.pad_token_id)
    assert tools_tokenizer.decode(out[0, enc["input_ids"].shape[1]:], skip_special_tokens=True).strip()


# ------------------------------------------------------------------------------------------ the tools task
EXPRESSION = re.compile(r"(\d+)\s*(\+|-|plus|minus|たす|ひく)\s*(\d+)")


@pytest.mark.parametrize("name,size", [("train", 2000), ("test", 200)])
def test_tools_task_rows_are_two_digit_sums_and_differences(name, size):
    rows = read_tools_jsonl(name)
    assert len(rows) == size
    for row in rows:
        assert set(row) >= {"messages", "reference_answer", "lang", "op"}, row
        assert [m["role"] for m in row["messages"]] in (["user"], ["system", "user"]), row
        a, op, b = EXPRESSION.search(row["messages"][-1]["content"]).groups()
        assert len(a) == len(b) == 2, row
        plus = op in ("+", "plus", "たす")
        assert row["op"] == ("+" if plus else "-")
        assert row["reference_answer"] == str(int(a) + int(b) if plus else int(a) - int(b)), row
        assert int(row["reference_answer"]) >= 0
    assert {r["lang"] for r in rows} == {"ja", "en"} and {r["op"] for r in rows} == {"+", "-"}


def test_tools_splits_share_no_sum(tools_build_script):
    tc = tools_build_script.tc
    train, test = read_tools_jsonl("train"), read_tools_jsonl("test")
    assert not {tc.triple_of(r) for r in train} & {tc.triple_of(r) for r in test}
    assert (train, test) == tuple(json.loads(json.dumps(s)) for s in tc.build_task(seed=0))  # from the seed


def asked_sums(docs) -> set[tuple[int, str, int]]:
    """(a, op, b) of every two-digit ± two-digit question the user asks in `docs`."""
    sums = set()
    for doc in docs:
        for turn in doc.split(f"{IM_START}user\n")[1:]:
            m = EXPRESSION.search(turn.split(IM_END)[0])
            if m and len(m.group(1)) == len(m.group(3)) == 2:
                op = "+" if m.group(2) in ("+", "plus", "たす") else "-"
                sums.add((int(m.group(1)), op, int(m.group(3))))
    return sums


def test_tools_corpus_never_asks_a_test_sum(tools_build_script):
    import random

    tc = tools_build_script.tc
    banned = {tc.triple_of(r) for r in read_tools_jsonl("test")}
    rng = random.Random(0)
    asked = asked_sums(tc.document(rng, tc.ToolsMixture(), banned, set()) for _ in range(6000))
    assert len(asked) > 1000 and not asked & banned
    # the ban does the work: without it the same generator asks test sums
    assert asked_sums(tc.document(rng, tc.ToolsMixture(), set(), set()) for _ in range(6000)) & banned


def test_tools_corpus_calls_are_what_the_template_renders(tools_build_script, tools_tokenizer):
    tools_build_script.check_template(tools_tokenizer)


def test_tools_model_card_is_rendered_from_build_info(tools_build_script):
    info = json.loads((TOOLS_MODEL_DIR / "build_info.json").read_text(encoding="utf-8"))
    card = (TOOLS_MODEL_DIR / "README.md").read_text(encoding="utf-8")
    assert card.startswith("# kitae-tiny-tools") and card == tools_build_script.render_card(info)
    assert info["tool_schema"]["function"]["name"] == "calculator"


def test_tools_scoring_counts_calls_and_answers(tools_build_script):
    rows = [{"messages": [{"role": "user", "content": "What is 47 plus 38?"}], "reference_answer": "85",
             "lang": "en", "op": "+"}] * 3
    call = '<tool_call>\n{"name": "calculator", "arguments": {"expression": "%s"}}\n</tool_call><|im_end|>'
    eps = [{"expression": "47+38", "final": "85<|im_end|>", "final_finish": "stop"},       # right call, right answer
           {"expression": "47+39", "final": "86<|im_end|>", "final_finish": "stop"},       # miscopied call
           {"expression": None, "final": "84<|im_end|>", "final_finish": "stop"}]          # in the head, wrong
    assert [tools_build_script.parse_call(call % e) for e in ("47+38", "47+39")] == ["47+38", "47+39"]
    assert tools_build_script.parse_call('<tool_call>\n{"name": "calculator", "arguments": 47}\n</tool_call>') is None
    table = tools_build_script.score(rows, eps)
    assert table["all"] == {"n": 3, "accuracy": 0.333, "tool_call": 0.667, "exact_call": 0.333, "compliance": 1.0}
    assert table["answered=tool"]["accuracy"] == 0.5 and table["answered=head"]["tool_call"] == 0.0


@pytest.mark.slow
def test_tools_baseline_numbers_in_the_card_are_reproducible(tools_build_script, tools_model, tools_tokenizer):
    """Re-measure the committed checkpoint (a minute at most): the seeded two-turn eval gives the card's numbers,
    and they are a demo's starting point: the tool is called in a minority of episodes and answers are rarely
    right, while calling it pays (the gap a reward for the right answer pushes on)."""
    info = json.loads((TOOLS_MODEL_DIR / "build_info.json").read_text(encoding="utf-8"))
    threads = torch.get_num_threads()
    torch.set_num_threads(info["config"]["threads"])
    try:
        metrics = tools_build_script.evaluate(tools_model, tools_tokenizer, read_tools_jsonl("test"),
                                              info["config"]["seed"])
    finally:
        torch.set_num_threads(threads)
    assert metrics == info["metrics"]
    table = metrics["sampled_t1"]
    assert 0.05 <= table["all"]["tool_call"] <= 0.4
    assert table["all"]["accuracy"] <= 0.3
    assert table["answered=tool"]["accuracy"] > table["answered=head"]["accuracy"]
