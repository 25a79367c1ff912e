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
