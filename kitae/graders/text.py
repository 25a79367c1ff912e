"""Tokenizers and text-overlap metrics: ROUGE-N, ROUGE-L (Lin, 2004), BLEU (sacreBLEU), GLEU, METEOR (nltk),
fuzzy match.

ROUGE-L is the F1 of the longest common subsequence (LCS) of tokens: precision = LCS / sample tokens, recall =
LCS / reference tokens, as in the hosted RFT grader guide and the ``rouge-score`` package (whose numbers it reproduces on
English with the ``words`` tokenizer; no stemming). The LCS uses the bit-parallel algorithm of Allison &
Dix (1986) / Hyyrö (2004): one big-integer add, subtract, and, or per token of the shorter text, so the
cost is O(n·m/64) machine words instead of rouge-score's pure-Python O(n·m) table.

Tokenizers (a grader pins one; ``auto`` picks per text pair):
- ``words``: rouge-score's tokenizer: lowercase, runs of [a-z0-9]; everything else (Japanese too) is dropped.
- ``ja``: morphological tokens from fugashi + unidic-lite (the ``ja`` extra), NFKC, lowercased, punctuation
  dropped. Without the extra it falls back to ``chars`` and warns once.
- ``chars``: one token per CJK/kana character, ASCII letter/digit runs as one token, punctuation dropped.
- ``auto``: ``ja`` when either text has kana or kanji, else ``words``.
"""

from __future__ import annotations

import functools
import re
import unicodedata
import warnings
from collections import Counter
from typing import Callable, Hashable, Sequence

from kitae.registry import Registry

TOKENIZERS = Registry("tokenizer")
_WORDS = re.compile(r"[a-z0-9]+")
_CJK = re.compile(r"[\u3040-\u30ff\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff\uff66-\uff9f]")
_CHAR_TOKEN = re.compile(r"[a-z0-9]+|[^\W\d_a-z]", re.UNICODE)


@TOKENIZERS.register("words")
def words(text: str) -> list[str]:
    """rouge-score's default tokenizer (no stemmer)."""
    return _WORDS.findall(text.lower())


@TOKENIZERS.register("chars")
def chars(text: str) -> list[str]:
    return _CHAR_TOKEN.findall(unicodedata.normalize("NFKC", text).lower())


@functools.cache
def _fugashi_tagger():
    try:
        import fugashi

        return fugashi.Tagger()
    except (ImportError, RuntimeError) as exc:
        warnings.warn(
            f"Japanese tokenizer unavailable ({exc}); ROUGE on Japanese falls back to characters. "
            "Install the ja extra for morphological tokens: pip install 'kitae[ja]'",
            RuntimeWarning,
            stacklevel=3,
        )
        return None


@TOKENIZERS.register("ja")
def japanese(text: str) -> list[str]:
    """fugashi + unidic-lite morphemes (NFKC, lowercased, punctuation and symbols dropped)."""
    tagger = _fugashi_tagger()
    if tagger is None:
        return chars(text)
    normal = unicodedata.normalize("NFKC", text).lower()
    return [w.surface for w in tagger(normal) if _is_wordlike(w.surface)]


def _is_wordlike(token: str) -> bool:
    return any(unicodedata.category(c)[0] in "LN" for c in token)


def has_japanese(text: str) -> bool:
    return bool(_CJK.search(text))


def tokenizer_for(name: str, *texts: str) -> Callable[[str], list[str]]:
    """The tokenizer function for ``name``; ``auto`` looks at the texts."""
    if name == "auto":
        name = "ja" if any(has_japanese(t) for t in texts) else "words"
    return TOKENIZERS.get(name)


# ---- longest common subsequence -----------------------------------------------------------------
def lcs_length(a: Sequence[Hashable], b: Sequence[Hashable]) -> int:
    """Length of the longest common subsequence (bit-parallel; exact)."""
    if len(a) < len(b):
        a, b = b, a  # bits index the longer sequence; the Python loop runs over the shorter
    if not b:
        return 0
    masks: dict[Hashable, int] = {}
    for i, token in enumerate(a):
        masks[token] = masks.get(token, 0) | (1 << i)
    full = (1 << len(a)) - 1
    v = full  # a zero bit i means a[i] ends a match of the current LCS
    for token in b:
        u = v & masks.get(token, 0)
        v = ((v + u) | (v - u)) & full
    return len(a) - v.bit_count()


def f1(precision: float, recall: float) -> float:
    return 2 * precision * recall / (precision + recall) if precision + recall > 0 else 0.0


def rouge_l(sample: Sequence[str], reference: Sequence[str]) -> tuple[float, float, float]:
    """(precision, recall, F1) of the token LCS; all 0 when either side is empty (as rouge-score)."""
    if not sample or not reference:
        return 0.0, 0.0, 0.0
    lcs = lcs_length(sample, reference)
    p, r = lcs / len(sample), lcs / len(reference)
    return p, r, f1(p, r)


def ngrams(tokens: Sequence[str], n: int) -> Counter:
    return Counter(tuple(tokens[i : i + n]) for i in range(len(tokens) - n + 1))


def rouge_n(sample: Sequence[str], reference: Sequence[str], n: int) -> tuple[float, float, float]:
    """(precision, recall, F1) of clipped n-gram overlap, as rouge-score computes it."""
    s, r = ngrams(sample, n), ngrams(reference, n)
    overlap = sum((s & r).values())
    p = overlap / max(sum(s.values()), 1)
    rec = overlap / max(sum(r.values()), 1)
    return p, rec, f1(p, rec)


def bleu(sample: str, reference: str, tokenizer: str = "auto") -> float:
    """sacreBLEU's sentence BLEU / 100 (``sacrebleu.sentence_bleu``: exp smoothing, effective order).

    ``auto`` on text without Japanese uses sacreBLEU's own default tokenizer (13a: case and punctuation
    kept), so the value equals ``sacrebleu.sentence_bleu(sample, [reference]).score / 100``. Japanese text
    (``auto``) and a named tokenizer use kitae's tokens, joined by spaces, with sacreBLEU's ``none``. No
    shared word gives 0 (sacreBLEU stops early when no n-gram matches).
    """
    if tokenizer == "auto" and not (has_japanese(sample) or has_japanese(reference)):
        metric = _sacrebleu("13a")
    else:
        tokenize = tokenizer_for(tokenizer, sample, reference)
        sample, reference, metric = " ".join(tokenize(sample)), " ".join(tokenize(reference)), _sacrebleu("none")
    return min(1.0, metric.sentence_score(sample, [reference]).score / 100)  # 100.00000000000004 happens


@functools.cache
def _sacrebleu(tokenize: str):
    from sacrebleu.metrics import BLEU

    return BLEU(tokenize=tokenize, effective_order=True)  # sentence_bleu's settings


def gleu(sample: Sequence[str], reference: Sequence[str], max_order: int = 4) -> float:
    """Google-BLEU (Wu et al., 2016): min(precision, recall) over all 1..4-grams together."""
    s = sum((ngrams(sample, n) for n in range(1, max_order + 1)), Counter())
    r = sum((ngrams(reference, n) for n in range(1, max_order + 1)), Counter())
    if not s or not r:
        return 0.0
    overlap = sum((s & r).values())
    return min(overlap / sum(s.values()), overlap / sum(r.values()))


def meteor(sample: Sequence[str], reference: Sequence[str]) -> float:
    """nltk's METEOR (Lavie & Agarwal, 2007) with exact and Porter-stem matching, no WordNet synonyms.

    The synonym stage is given a WordNet with no entries (WordNet's data is not installable as a package),
    so the value equals ``nltk.translate.meteor_score.meteor_score([reference], sample)`` wherever no
    unmatched word pair is a WordNet synonym pair, and is lower where one is.
    """
    from nltk.translate.meteor_score import meteor_score

    return meteor_score([list(reference)], list(sample), wordnet=NO_SYNONYMS)


class _NoSynonyms:
    """Stands in for nltk's WordNet reader: no word has synonyms."""

    def synsets(self, word: str) -> list:
        return []


NO_SYNONYMS = _NoSynonyms()


def fuzzy_ratio(a: str, b: str) -> float:
    """Indel similarity of the two strings' characters, 2·LCS / (|a| + |b|) (rapidfuzz's ``fuzz.ratio`` / 100)."""
    if not a and not b:
        return 1.0
    return 2 * lcs_length(a, b) / (len(a) + len(b))
