"""Llama 3's real tokenizer, built offline from the vocabulary the ``llama-models`` package ships (Meta's
llama_models/llama3/tokenizer.model: tiktoken BPE ranks), as transformers' TikTokenConverter builds it: byte-level
BPE over Llama 3's split pattern, merges derived from the ranks, the 256 special tokens from id 128000."""

from __future__ import annotations

import base64
import importlib.util
from pathlib import Path

from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers
from transformers import PreTrainedTokenizerFast

PATTERN = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+"
           r"|\s+(?!\S)|\s+")
SPECIALS = ["<|begin_of_text|>", "<|end_of_text|>", "<|reserved_special_token_0|>", "<|reserved_special_token_1|>",
            "<|finetune_right_pad_id|>", "<|step_id|>", "<|start_header_id|>", "<|end_header_id|>", "<|eom_id|>",
            "<|eot_id|>", "<|python_tag|>", "<|image|>"]
SPECIALS += [f"<|reserved_special_token_{2 + i}|>" for i in range(256 - len(SPECIALS))]


def llama3_vocab_file() -> Path | None:
    """llama_models/llama3/tokenizer.model of the installed llama-models package (not imported), or None."""
    spec = importlib.util.find_spec("llama_models")
    if spec is None or not spec.submodule_search_locations:
        return None
    path = Path(list(spec.submodule_search_locations)[0]) / "llama3" / "tokenizer.model"
    return path if path.is_file() else None


def _byte_chars() -> dict[int, str]:
    """GPT-2's byte -> printable character table (the ByteLevel pre-tokenizer's alphabet)."""
    bs = list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1)) + list(range(ord("®"), ord("ÿ") + 1))
    cs, n = bs[:], 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    return dict(zip(bs, map(chr, cs)))


def bpe_from_ranks(ranks: dict[bytes, int], pattern: str, specials: dict[str, int] | None = None,
                   offset: int = 0) -> Tokenizer:
    """A byte-level BPE tokenizer from tiktoken-style ranks (token bytes -> rank), as transformers'
    TikTokenConverter builds it: merges derived from the ranks, the split `pattern`, token ids ``offset + rank``
    (Mistral's tekken puts its special tokens first) and `specials` (text -> id) added as special tokens."""
    table = _byte_chars()
    text = lambda b: "".join(table[x] for x in b)  # noqa: E731
    merges = []
    for token, rank in ranks.items():
        pairs = [(token[:i], token[i:]) for i in range(1, len(token)) if token[:i] in ranks and token[i:] in ranks]
        pairs.sort(key=lambda p: (ranks[p[0]], ranks[p[1]]))
        merges += [(rank, text(a), text(b)) for a, b in pairs]
    merges.sort(key=lambda m: m[0])
    vocab = {text(t): offset + r for t, r in ranks.items()}
    vocab.update(specials or {})
    bpe = models.BPE(vocab, [(a, b) for _, a, b in merges], ignore_merges=True)
    tok = Tokenizer(bpe)
    tok.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(pattern), behavior="isolated", invert=False),
        pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False),
    ])
    tok.decoder = decoders.ByteLevel()
    tok.add_special_tokens(sorted(specials or {}, key=(specials or {}).get))
    return tok


def llama3_tokenizer(path: Path, chat_template: str) -> PreTrainedTokenizerFast:
    ranks = {base64.b64decode(tok): int(rank) for tok, rank in (line.split() for line in path.read_text().splitlines()
                                                                if line)}
    tok = bpe_from_ranks(ranks, PATTERN, {s: 128000 + i for i, s in enumerate(SPECIALS)})  # Meta's order
    out = PreTrainedTokenizerFast(tokenizer_object=tok, bos_token="<|begin_of_text|>", eos_token="<|eot_id|>")
    out.add_special_tokens({"additional_special_tokens": SPECIALS[1:12]})  # the named ones, as special tokens
    out.chat_template = chat_template
    return out
