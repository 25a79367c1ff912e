"""Prompt text helpers and the blockwise cosine search, on hand-made vectors whose answers are known."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest

from kitae.curate.embed import Guard, best_matches, first_duplicates, ngram_vectors, resolve_model
from kitae.curate.text import answer_form, detect_lang, normalize, numbers, operators, prompt_text
from kitae.errors import ConfigError


@pytest.mark.parametrize("text, expected", [
    ("What is 2+2?", "whatis2+2"),                # spaces and '?' go, '+' stays
    ("what is 2 + 2", "whatis2+2"),               # same form as above
    ("１２＋３５は？", "12+35は"),                   # NFKC: full-width digits and plus
    ("12 - 35.", "12-35"),                        # a minus sign stays: 12-35 is not 1235
    ("「東京」、です。", "東京です"),                  # Japanese brackets and punctuation go
])
def test_normalize(text, expected):
    assert normalize(text) == expected


@pytest.mark.parametrize("text, expected", [
    ("What is 12+35?", ("12", "35")),
    ("35 + 12", ("12", "35")),                    # a multiset: order does not matter
    ("１,２００円と3.50ドル", ("1200", "3.5")),     # thousands comma, trailing zeros
    ("no numbers", ()),
    ("007 agents", ("7",)),                       # leading zeros
])
def test_numbers(text, expected):
    assert numbers(text) == expected


@pytest.mark.parametrize("text, expected", [
    ("12+35は？", ("+",)),
    ("12たす35はいくつですか？", ("+",)),            # the word is the operator
    ("What is 12 plus 35?", ("+",)),
    ("What is 9 minus 0?", ("-",)),               # so 9-0 and 9+0 (both 9) stay apart
    ("9ひく0", ("-",)),
    ("3×4÷2", ("*", "/")),
    ("Add 12 and 35.", ()),                       # no operator stated
    ("a well-known fact", ()),                    # a hyphen between letters is not a minus
])
def test_operators(text, expected):
    assert operators(text) == expected


@pytest.mark.parametrize("row, expected", [
    ({"reference_answer": "47"}, "47.0"),
    ({"reference_answer": "47.0"}, "47.0"),       # the same number
    ({"reference_answer": "Paris."}, "paris"),    # normalized text
    ({}, None),
])
def test_answer_form(row, expected):
    assert answer_form(row) == expected


def test_prompt_text_and_lang():
    row = {"messages": [{"role": "system", "content": "short"}, {"role": "user", "content": "日本の首都は？"}]}
    assert prompt_text(row) == "日本の首都は？"
    assert detect_lang(prompt_text(row)) == "ja"
    assert detect_lang("Tokyo?") == "en"


# ---- search -------------------------------------------------------------------------------------
def unit(deg: float) -> list[float]:
    return [math.cos(math.radians(deg)), math.sin(math.radians(deg))]


@pytest.mark.parametrize("angles, threshold, partners", [
    ([0, 20, 40], 0.9, [-1, 0, -1]),        # cos20=.94 >= .9: drop; cos40=.77 vs the kept 0°: keep (no chaining)
    ([0, 20, 40], 0.7, [-1, 0, 0]),         # cos40=.77 >= .7: both go to the first row
    ([0, 90, 0.0], 0.99, [-1, -1, 0]),      # an exact copy of row 0
    ([0, 90, 85], 0.99, [-1, -1, 1]),       # its best kept match: row 1 (cos5=.996), not row 0
    ([0, 60, 120], 0.9, [-1, -1, -1]),      # nothing close
])
def test_first_duplicates_by_hand(angles, threshold, partners):
    v = np.array([unit(a) for a in angles], dtype=np.float32)
    for block in (1, 2, 8):  # blocks of 1 put every comparison across blocks; 8 keeps them inside one
        got, score = first_duplicates(v, threshold, block=block, col_block=1)
        assert got.tolist() == partners
        for i, j in enumerate(partners):
            expected = 0.0 if j < 0 else math.cos(math.radians(angles[i] - angles[j]))
            assert score[i] == pytest.approx(expected, abs=1e-5)


def test_guards_block_and_bonus():
    v = np.array([unit(0), unit(20), unit(40)], dtype=np.float32)
    keys = np.array([[0], [1], [-1]])  # row 1 is incompatible with row 0; row 2 is a wildcard
    partner, _ = first_duplicates(v, 0.7, Guard(keys))
    assert partner.tolist() == [-1, -1, 1]  # row 2 matches row 1 (cos20) rather than row 0 (cos40)
    strong = np.array([5, -1, 5])  # rows 0 and 2 share a strong id: they match at 0.9 - 0.2 = 0.7
    partner, score = first_duplicates(v, 0.9, Guard(None, strong, bonus=0.2))
    assert partner.tolist() == [-1, 0, 0]
    assert score[2] == pytest.approx(math.cos(math.radians(40)), abs=1e-5)  # the plain cosine is reported


def naive_first_duplicates(v: np.ndarray, threshold: float) -> list[int]:
    """The textbook version: the full N×N matrix, row by row."""
    sims = v @ v.T
    kept: list[int] = []
    out = []
    for i in range(len(v)):
        cands = [j for j in kept if sims[i, j] >= threshold]
        out.append(max(cands, key=lambda j: sims[i, j]) if cands else -1)
        if not cands:
            kept.append(i)
    return out


def test_blockwise_equals_full_matrix():
    rng = np.random.default_rng(0)
    base = rng.normal(size=(120, 16))
    copies = base[rng.integers(0, 120, 80)] + 0.15 * rng.normal(size=(80, 16))  # planted near-duplicates
    v = np.concatenate([base, copies]).astype(np.float32)
    v /= np.linalg.norm(v, axis=1, keepdims=True)
    v = v[rng.permutation(len(v))]
    expected = naive_first_duplicates(v, 0.95)
    assert sum(p >= 0 for p in expected) > 40  # the planted copies are found
    for block, col_block in ((7, 5), (64, 33), (1024, 8192)):
        got, _ = first_duplicates(v, 0.95, block=block, col_block=col_block)
        assert got.tolist() == expected


def test_best_matches_with_mask():
    corpus = np.array([unit(0), unit(30), unit(90)], dtype=np.float32)
    q = np.array([unit(10)], dtype=np.float32)
    s, j = best_matches(q, corpus, col_block=1)
    assert (j.tolist(), round(float(s[0]), 4)) == ([0], round(math.cos(math.radians(10)), 4))
    s, j = best_matches(q, corpus, c_mask=np.array([False, True, True]))
    assert j.tolist() == [1]  # row 0 masked out: 30° is next


def test_ngram_vectors_cosine_is_set_overlap():
    v = ngram_vectors(["abcd", "abce", "xyz"], n=2, dim=4096)
    # bigrams {ab, bc, cd} vs {ab, bc, ce}: 2 shared / sqrt(3 * 3)
    assert float(v[0] @ v[1]) == pytest.approx(2 / 3, abs=1e-6)
    assert float(v[0] @ v[2]) == pytest.approx(0.0)


@pytest.mark.parametrize("name, ok", [
    ("all-MiniLM-L6-v2", True),                       # the packaged weights
    ("sentence-transformers/all-MiniLM-L6-v2", True),
    ("intfloat/multilingual-e5-small", "not in the Hub cache"),  # a Hub id, offline and not cached
    ("/no/such/folder", "not a sentence-transformers folder or Hub id"),
])
def test_resolve_model(name, ok):
    if ok is True:
        assert (Path(resolve_model(name)) / "modules.json").exists()
    else:
        with pytest.raises(ConfigError, match=ok):
            resolve_model(name)
