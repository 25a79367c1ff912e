"""balance: domain rules, bands from pass rates or labels, target mixes, sizes, by hand."""

from __future__ import annotations

from collections import Counter

import pytest

from kitae.config import from_dict
from kitae.curate.balance import BalanceConfig, largest_remainder, run_balance
from kitae.curate.step import Context
from kitae.errors import ConfigError, DataError


def row(text: str, rate=None, **extra) -> dict:
    return {"messages": [{"role": "user", "content": text}], "reference_answer": "1", "pass_rate": rate, **extra}


# arithmetic: hard, hard, medium, medium, easy, easy; general: hard, medium, easy, easy
ROWS = [row(f"{i}+1は？", r) for i, r in enumerate([0.1, 0.2, 0.5, 0.6, 0.9, 1.0])] + [
    row("What is the capital of France?", 0.0), row("What colour is the sky?", 0.5),
    row("Name a day of the week.", 0.8), row("What is the opposite of hot?", 0.9)]


def balance(rows=ROWS, **cfg):
    return run_balance(rows, from_dict(BalanceConfig, cfg, "balance"), Context())


def cells(result) -> Counter:
    return Counter((r["domain"], r["band"]) for r in result.rows)


def test_tags():
    result = balance()  # no mix: keeps everything, tagged
    assert [(r["domain"], r["band"]) for r in result.rows] == [
        ("arithmetic", "hard"), ("arithmetic", "hard"), ("arithmetic", "medium"), ("arithmetic", "medium"),
        ("arithmetic", "easy"), ("arithmetic", "easy"),
        ("general", "hard"), ("general", "medium"), ("general", "easy"), ("general", "easy")]


def test_equal_bands_within_natural_domains():
    # targets: arithmetic 0.6 × 1/3 = 0.2 per band, general 0.4 × 1/3 = 0.133 per band; the largest size that
    # fits is 7 (general/hard has 1 row: 1 / 0.133 = 7.5): 1.4 -> 1 or 2 arithmetic, 0.93 -> 1 general per band
    result = balance(bands={"hard": 1, "medium": 1, "easy": 1})
    assert len(result.rows) == 7
    assert cells(result) == {("arithmetic", "easy"): 2, ("arithmetic", "hard"): 1, ("arithmetic", "medium"): 1,
                             ("general", "easy"): 1, ("general", "hard"): 1, ("general", "medium"): 1}
    assert Counter(d.reason for d in result.dropped) == {"over its target share": 3}


def test_domain_mix_and_seed():
    result = balance(domains={"arithmetic": 1})
    assert cells(result) == {("arithmetic", "hard"): 2, ("arithmetic", "medium"): 2, ("arithmetic", "easy"): 2}
    assert Counter(d.reason for d in result.dropped) == {"not in the target mix": 4}
    a = balance(domains={"arithmetic": 1, "general": 1}, seed=1)
    b = balance(domains={"arithmetic": 1, "general": 1}, seed=1)
    assert [r["messages"] for r in a.rows] == [r["messages"] for r in b.rows]
    assert Counter(r["domain"] for r in a.rows) == {"arithmetic": 4, "general": 4}


def test_size_beyond_what_is_there():
    short = balance(domains={"arithmetic": 1, "general": 1}, size=14)
    assert len(short.rows) == 10 and short.report.stats["short cells"]  # 7 + 7 wanted, 6 arithmetic exist
    repeat = balance(domains={"arithmetic": 1, "general": 1}, size=14, allow_repeat=True)
    assert Counter(r["domain"] for r in repeat.rows) == {"arithmetic": 7, "general": 7}
    assert repeat.report.stats["repeated rows"] == 4


def test_label_bands_and_domain_field():
    rows = [row("a", difficulty=d, topic=t) for d, t in
            [("easy", "x"), ("easy", "y"), ("hard", "x"), ("hard", "y"), ("hard", "y"), ("fact", "x")]]
    result = balance(rows, band_field="difficulty", domain_field="topic", bands={"easy": 1, "hard": 1})
    assert cells(result) == {("x", "easy"): 1, ("x", "hard"): 1, ("y", "easy"): 1, ("y", "hard"): 1}
    with pytest.raises(DataError, match="row 1, field 'subject'"):
        balance(rows, domain_field="subject")


def test_rows_without_a_band_are_unknown():
    result = balance([row("1+1は？"), row("2+2は？", 0.5)], bands={"medium": 1})
    assert [r["band"] for r in result.rows] == ["medium"]
    assert result.dropped[0].detail["band"] == "unknown"


@pytest.mark.parametrize("total, fractions, expected", [
    (7, {"a": 0.5, "b": 0.5}, {"a": 4, "b": 3}),          # a tie goes to the first key
    (10, {"a": 0.25, "b": 0.25, "c": 0.5}, {"a": 3, "b": 2, "c": 5}),
    (3, {"a": 0.7, "b": 0.2, "c": 0.1}, {"a": 2, "b": 1, "c": 0}),  # 2.1, 0.6, 0.3
])
def test_largest_remainder(total, fractions, expected):
    assert largest_remainder(total, fractions, sorted(fractions)) == expected


@pytest.mark.parametrize("cfg, where", [
    ({"bands": {"hard": -1}}, "balance.bands.hard"),
    ({"domains": {"x": 0}}, "balance.domains"),
    ({"domain_rules": {"x": ["(bad"]}}, "balance.domain_rules.x"),
])
def test_config_errors(cfg, where):
    with pytest.raises(ConfigError, match=where):
        balance(**cfg)


def test_bands_a_domain_does_not_have():
    """The bundled task's facts have only the 'fact' band, its arithmetic never does: each domain balances the
    target bands it has, instead of waiting for rows that cannot exist."""
    rows = [row("1+1は？", difficulty=d) for d in ["easy"] * 4 + ["hard"] * 2] + \
        [row("What colour is the sky?", difficulty="fact")] * 3
    result = balance(rows, band_field="difficulty", bands={"easy": 1, "hard": 1, "fact": 1})
    # arithmetic 6/9 and general 3/9 of the rows: size 6 fits (arithmetic 4 = 2 easy + 2 hard, general 2 facts)
    assert cells(result) == {("arithmetic", "easy"): 2, ("arithmetic", "hard"): 2, ("general", "fact"): 2}
    assert result.report.stats["no rows for"] == ["arithmetic/fact", "general/easy", "general/hard"]
