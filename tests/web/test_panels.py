"""Which metric keys share a plot on the run overview."""

from __future__ import annotations

import pytest

from kitae.web.panels import PANELS, Panel, layout, register_panel


def panels_of(keys):
    return {p["name"]: (p["left"], p["right"]) for p in layout(keys)}


@pytest.mark.parametrize("keys, expected", [
    # total reward and each component on one plot
    (["reward", "reward/accuracy", "reward/judge"], {"reward": (["reward", "reward/accuracy", "reward/judge"], [])}),
    # KL left, its coefficient on the right axis
    (["kl_coef", "kl"], {"kl": (["kl"], ["kl_coef"])}),
    # eval metrics: one chart each, every one on its left axis (one metric, one scale)
    (["eval/pass@1", "eval/compliance", "eval/len_mean"],
     {"eval/pass@1": (["eval/pass@1"], []), "eval/compliance": (["eval/compliance"], []),
      "eval/len_mean": (["eval/len_mean"], [])}),
    # a metric and its slices share a chart; an unknown kind gets its own plot
    (["eval/pass@1", "eval/pass@1/en", "eval/trunc_rate", "eval/len_p90", "eval/bleu"],
     {"eval/pass@1": (["eval/pass@1", "eval/pass@1/en"], []), "eval/trunc_rate": (["eval/trunc_rate"], []),
      "eval/len_p90": (["eval/len_p90"], []), "key:eval/bleu": (["eval/bleu"], [])}),
    # length and truncation share a plot; abstain/error rates of every grader share another
    (["len_mean", "trunc_rate", "grader/a/abstain_rate", "grader/b/error_rate"],
     {"length": (["len_mean"], ["trunc_rate"]), "graders": (["grader/a/abstain_rate", "grader/b/error_rate"], [])}),
    # judge tokens are not grader rates
    (["grader/judge/judge_tokens"], {"judge_tokens": (["grader/judge/judge_tokens"], [])}),
    # a key no panel claims gets its own, after the known panels
    (["grad_norm", "entropy"], {"entropy": (["entropy"], []), "key:grad_norm": (["grad_norm"], [])}),
    ([], {}),
])
def test_layout(keys, expected):
    assert panels_of(keys) == expected


def test_panels_come_in_their_order_and_extras_last():
    names = [p["name"] for p in layout(["loss", "secs_per_step", "kl", "reward"])]
    assert names == ["reward", "kl", "speed", "key:loss"]


def test_a_registered_panel_claims_its_keys():
    with PANELS.scoped("test_lr"):
        register_panel("test_lr", Panel(85, "Learning rate", ("lr",)))
        assert panels_of(["lr"]) == {"test_lr": (["lr"], [])}


def test_the_eval_set_gets_one_small_chart_per_metric_in_one_group():
    """The trainer's dozen eval series (zero.yaml: pass@1 overall and per slice, compliance, rates, lengths) in
    small charts under one heading, scores first and lengths last, not one crowded chart."""
    keys = ["eval/len_mean", "eval/len_p90", "eval/trunc_rate", "eval/compliance", "eval/pass@1",
            *[f"eval/pass@1/{s}" for s in ("easy", "medium", "hard", "en", "ja")], "eval/pass@8", "eval/score"]
    charts = [p for p in layout(keys) if p.get("group") == "eval"]
    assert [p["name"] for p in charts] == ["eval/pass@1", "eval/pass@8", "eval/score", "eval/compliance",
                                           "eval/trunc_rate", "eval/len_mean", "eval/len_p90"]
    assert charts[0]["left"] == ["eval/pass@1", *[f"eval/pass@1/{s}" for s in ("easy", "medium", "hard", "en", "ja")]]
    assert {p["title"] for p in charts} >= {"pass@1", "len_mean"} and all(not p["right"] for p in charts)
    assert {p["group_title"] for p in charts} == {"Evaluation"}
    assert sorted(k for p in charts for k in p["left"]) == sorted(keys)  # every series, each in one chart
