"""Seed 000's group diversity penalty: -0.3 per duplicate copy, -0.2 × Jaccard for near-duplicates (>= 0.85)."""

import pytest

from kitae.rewards.common import jaccard, shingles
from kitae.rewards.diversity import DiversityConfig, diversity_penalties

S = "今日はとても良い天気なので散歩に行きます"  # 20 characters
# S + "。" and S + "！": 19 trigrams each, the first 18 shared, 1 own each -> Jaccard 18 / 20 = 0.9
NEAR_A, NEAR_B = S + "。<|im_end|>", S + "！<|im_end|>"
# "The answer is 47." / "48.": 15 trigrams each, 13 shared (" 47", "47." differ) -> 13 / 17
EN_A, EN_B = "The answer is 47.", "The answer is 48."


@pytest.mark.parametrize(
    "texts,cfg,scores",
    [
        (["a cat sat", "a cat sat", "dogs run"], DiversityConfig(), [0.0, -0.3, 0.0]),
        (["x", "x", "x", "y"], DiversityConfig(), [0.0, -0.3, -0.3, 0.0]),  # each copy after the first
        (["47<|im_end|>", "47", " 47 "], DiversityConfig(), [0.0, -0.3, -0.3]),  # compared on content
        (["", "", "x"], DiversityConfig(), [0.0, -0.3, 0.0]),  # empty completions are duplicates
        (["<|im_end|>", ""], DiversityConfig(), [0.0, -0.3]),  # only the marker = empty content
        ([NEAR_A, NEAR_B, "全然違う答えです"], DiversityConfig(), [-0.18, -0.18, 0.0]),  # Japanese, 0.9
        ([EN_A, EN_B], DiversityConfig(), [0.0, 0.0]),  # 13/17 = 0.76 < 0.85
        ([EN_A, EN_B], DiversityConfig(threshold=0.7), [-0.2 * 13 / 17, -0.2 * 13 / 17]),
        ([NEAR_A, NEAR_A, NEAR_B], DiversityConfig(), [-0.18, -0.3, -0.18]),  # copy: duplicate only
        (["only one"], DiversityConfig(), [0.0]),
        ([], DiversityConfig(), []),
        (["x", "x"], DiversityConfig(duplicate_penalty=-1.0), [0.0, -1.0]),
    ],
)
def test_diversity_penalties(texts, cfg, scores):
    assert [r.score for r in diversity_penalties(texts, cfg)] == pytest.approx(scores)


def test_metrics_report_similarity_and_duplicates():
    first, second = diversity_penalties([EN_A, EN_B])
    assert first.metrics == {"duplicate": 0.0, "max_similarity": pytest.approx(13 / 17)}
    dup = diversity_penalties(["x", "x"])[1]
    assert dup.metrics["duplicate"] == 1.0 and dup.reason == "exact duplicate"


@pytest.mark.parametrize(
    "a,b,n,sim",
    [
        ("abcd", "abcd", 3, 1.0),
        ("abcd", "abce", 3, 1 / 3),  # {abc, bcd} vs {abc, bce}
        ("47", "48", 3, 0.0),  # shorter than n: each text is its own shingle
        ("a  b", "a b", 3, 1.0),  # whitespace runs collapse
        ("", "", 3, 1.0),
        ("", "x", 3, 0.0),
    ],
)
def test_jaccard_of_shingles(a, b, n, sim):
    assert jaccard(shingles(a, n), shingles(b, n)) == pytest.approx(sim)
