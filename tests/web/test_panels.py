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
    # eval pass@1 and compliance left, eval mean length right
    (["eval/pass@1", "eval/compliance", "eval/len_mean"],
     {"eval": (["eval/pass@1", "eval/compliance"], ["eval/len_mean"])}),
    # the trainer's eval keys: scores and rates left, lengths right; an unknown kind gets its own plot
    (["eval/pass@1", "eval/pass@1/en", "eval/trunc_rate", "eval/len_p90", "eval/bleu"],
     {"eval": (["eval/pass@1", "eval/pass@1/en", "eval/trunc_rate"], ["eval/len_p90"]),
      "key:eval/bleu": (["eval/bleu"], [])}),
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
    register_panel("test_lr", Panel(85, "Learning rate", ("lr",)))
    try:
        assert panels_of(["lr"]) == {"test_lr": (["lr"], [])}
    finally:
        PANELS._entries.pop("test_lr")
