"""Agreement with human scores: rank statistics by hand, pairwise agreement, checks and verdicts."""

from __future__ import annotations

import pytest

from kitae.errors import DataError
from kitae.graders import build_grader, validate
from kitae.graders.agreement import CHECKS, agreement, kendall_tau_b, leaf_specs, ranks, spearman, verdict
from kitae.graders.rows import parse_row


@pytest.mark.parametrize(
    "values, expected",
    [([3, 1, 2], [3, 1, 2]), ([3, 1, 2, 2], [4, 1, 2.5, 2.5]), ([5, 5, 5], [2, 2, 2]), ([], [])],
)
def test_ranks_average_ties(values, expected):
    assert ranks(values) == expected


@pytest.mark.parametrize(
    "x, y, rho, tau",
    [
        ([1, 2, 3, 4], [10, 20, 30, 40], 1.0, 1.0),
        ([1, 2, 3, 4], [4, 3, 2, 1], -1.0, -1.0),
        # one swapped neighbour pair: d² = 2 -> rho = 1 - 6·2/(4·15) = 0.8; 5 concordant, 1 discordant -> 4/6
        ([1, 2, 3, 4], [1, 3, 2, 4], 0.8, 4 / 6),
        # ties in y: tau-b = (C - D) / sqrt((C+D+Tx)(C+D+Ty)) with C=5, D=0, Tx=0, Ty=1 -> 5/sqrt(30)
        ([1, 2, 3, 4], [1, 2, 2, 3], pytest.approx(0.9486832980505138), 5 / 30 ** 0.5),
        ([1, 1, 1], [1, 2, 3], None, None),  # no variation in x
        ([1], [1], None, None),
    ],
)
def test_spearman_and_kendall_by_hand(x, y, rho, tau):
    assert spearman(x, y) == (pytest.approx(rho) if rho is not None else None)
    assert kendall_tau_b(x, y) == (pytest.approx(tau) if tau is not None else None)


def test_statistics_match_scipy_when_available():
    stats = pytest.importorskip("scipy.stats")
    x = [0.1, 0.5, 0.5, 0.9, 0.3, 0.7, 0.2, 0.2]
    y = [1, 3, 2, 5, 2, 4, 1, 3]
    assert spearman(x, y) == pytest.approx(stats.spearmanr(x, y).statistic)
    assert kendall_tau_b(x, y) == pytest.approx(stats.kendalltau(x, y).statistic)


def test_pairwise_agreement_within_groups_by_hand():
    # group 0: human 5 > 3 > 1; grader agrees on (0,1), (0,2), disagrees on (1,2)
    # group 1: human 2 < 4; grader ties -> one half. Total (1 + 1 + 0 + 0.5) / 4
    result = agreement([[5, 3, 1], [2, 4]], [[0.9, 0.2, 0.5], [0.3, 0.3]])
    assert result.pairwise == 0.625 and result.pairs == 4 and result.grader_ties == 1
    assert result.n_samples == 5
    [worst] = result.worst
    assert (worst.group, worst.better, worst.worse) == (0, 1, 2)
    assert worst.human == (3, 1) and worst.grader == (0.2, 0.5)
    # human gap 2 over span 4, grader gap 0.3 over span 0.7
    assert worst.severity == pytest.approx(2 / 4 + 0.3 / 0.7)


def test_pairs_the_human_tied_and_missing_scores_are_left_out():
    result = agreement([[3, 3, None, 1]], [[0.1, 0.9, 0.5, None]])
    assert result.pairs == 0 and result.pairwise is None and result.n_samples == 2


def test_worst_disagreements_are_sorted_and_capped():
    human = [[1, 2], [1, 5], [1, 3]]
    graded = [[0.6, 0.5], [1.0, 0.0], [0.7, 0.4]]
    result = agreement(human, graded, worst=2)
    assert [d.group for d in result.worst] == [1, 2]


@pytest.mark.parametrize(
    "pairwise, spearman_, n, starts",
    [
        (0.9, 0.8, 30, "GOOD"),
        (0.7, 0.6, 30, "WEAK"),
        (0.4, 0.1, 30, "BAD"),
        (0.9, 0.9, 3, "INCONCLUSIVE: too few labels to trust: 3, need 30"),
        (1.0, 1.0, 29, "INCONCLUSIVE: too few labels to trust: 29, need 30"),  # perfect, but on too few labels
        (None, 0.85, 30, "GOOD"),  # no groups: Spearman decides
        (None, None, 30, "INCONCLUSIVE: the scores do not vary"),
    ],
)
def test_verdict_thresholds(pairwise, spearman_, n, starts):
    from kitae.graders.agreement import Agreement

    line = verdict(Agreement(n, spearman_, None, pairwise, 4, 0))
    assert line.startswith(starts) and "\n" not in line


def rows_of(groups: list[tuple[str, list[tuple[str, float]]]]) -> list:
    return [parse_row({"item": {"reference_answer": ref}, "samples": [{"output_text": t, "human_score": h} for t, h in samples]},
                      "data.jsonl", i + 1) for i, (ref, samples) in enumerate(groups)]


AGREEING = [
    ("WACC 9.91%", [("9.9%", 5), ("9.5%", 3), ("12%", 1)]),
    ("EV $1,705M", [("1.7B", 5), ("1.6B", 3), ("2B", 1)]),
    ("growth 4%", [("4%", 4), ("7%", 1)]),
    ("margin 20%", [("20%", 5), ("19.5%", 4), ("30%", 2)]),
]


def test_validate_a_numeric_grader_that_agrees_on_too_few_labels():
    spec = {"type": "numeric"}
    report = validate(build_grader(spec), rows_of(AGREEING), spec=spec)
    # 10 ordered pairs; the grader ties 1.6B and 2B (both beyond 5%: 0) -> (9 + 0.5) / 10
    assert report.agreement.pairwise == 0.95 and report.agreement.grader_ties == 1
    assert report.scored == 11 and report.errors == 0
    # Wilson's 95% interval of 0.95 on 11 labels: 0.67 to 0.99, from WEAK to GOOD: no grade can be given yet
    assert report.verdict.startswith("INCONCLUSIVE: too few labels to trust: 11, need 30 (pairwise agreement 0.95, "
                                     "95% interval 0.67 to 0.99 from 11 labels"), report.verdict


def test_validate_a_numeric_grader_that_agrees_on_enough_labels():
    spec = {"type": "numeric"}
    report = validate(build_grader(spec), rows_of(AGREEING * 3), spec=spec)  # 33 labels, the same agreement
    assert report.agreement.pairwise == 0.95 and report.agreement.n_samples == 33
    assert report.verdict.startswith("GOOD: the grader ranks answers like you (pairwise agreement 0.95, 95% interval "
                                     "0.82 to 0.99 from 33 labels"), report.verdict


def test_validate_warns_about_the_seeds_common_mistakes():
    rows = rows_of([
        ("Open the report and click share", [("Open the report and click share to the admin", 1),
                                             ("Use the share button of the report", 5)]),
        ("Paris", [("Paris", 5), ("Lyon", 1)]),
    ])
    spec = {"type": "weighted", "graders": {"sim": {"type": "text_similarity"}, "num": {"type": "numeric"}}}
    report = validate(build_grader(spec), rows, spec=spec)
    text = "\n".join(report.warnings)
    assert "too few labels to trust: 4, need 30" in report.verdict  # one verdict, no warning beside it
    assert "numeric grading where 2 of 2 references have no number" in text
    assert "nothing checks length or repetition" in text
    assert report.verdict.startswith("INCONCLUSIVE")
    sim_alone = {"type": "text_similarity"}
    report = validate(build_grader(sim_alone), rows, spec=sim_alone)
    assert any(w.startswith("similarity alone") for w in report.warnings)
    assert report.agreement.pairwise == 0.5  # paraphrase ranked below the wrong answer; Paris above Lyon


def test_validate_counts_errors_and_flat_groups():
    rows = rows_of([("5", [("5", 5), ("5.0", 3)]), ("7", [("7", 5), ("7", 1)])])
    report = validate(build_grader("numeric"), rows, spec={"type": "numeric"})
    assert any("groups got one score for every sample" in w for w in report.warnings)
    bad = {"type": "numeric", "reference": "{{item.missing}}"}
    report = validate(build_grader(bad), rows, spec=bad)
    assert report.errors == 4 and any("4 of 4 samples failed to grade" in w for w in report.warnings)


def test_checks_are_a_registry_others_can_extend():
    with CHECKS.scoped("test_always"):
        @CHECKS.register("test_always")
        def always(ctx):
            return [f"saw {len(ctx.rows)} rows"]

        report = validate(build_grader("numeric"), rows_of([("5", [("5", 1)])]))
        assert "saw 1 rows" in report.warnings


def test_bad_human_score_names_row_and_field():
    with pytest.raises(DataError, match=r"row 1, field 'samples\[0\].human_score': expected a number"):
        validate(build_grader("numeric"), rows_of([("5", [("5", "high")])]))


def test_leaf_specs_carry_effective_weights():
    spec = {"type": "weighted", "graders": {
        "a": {"type": "numeric", "weight": 0.5},
        "b": {"type": "gate", "weight": 0.5, "gate": {"type": "format", "check": "json"}, "grader": {"type": "text_similarity"}},
        "c": {"type": "repetition", "weight": 0}}}
    assert [(s["type"], s["weight"]) for s in leaf_specs(spec)] == [
        ("numeric", 0.5), ("format", 0.5), ("text_similarity", 0.5), ("repetition", 0)]
