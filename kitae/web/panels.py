"""The plots of the run overview: which metric keys share a panel, registered by name in :data:`PANELS`.

A panel lists key patterns (shell-style, ``reward/*``) for its left axis and, when two quantities of
different scale belong together (KL and its coefficient, mean length and truncation rate), for its right
axis. Every key goes to the first panel (by ``order``) with a matching pattern; a key no panel claims gets
a panel of its own, so a metric the trainer starts logging tomorrow is plotted without touching this file.

A panel with ``split`` becomes one small chart per metric, under one heading (its ``group``): the eval set's
dozen series (pass@1 and a pass@1 per slice, compliance, truncation, lengths) would crowd one chart. Eval
metrics come from the run store's ``evals`` table and are named ``eval/<metric>`` here (``eval/pass@1``,
``eval/pass@1/en``, ``eval/compliance``, ``eval/trunc_rate``, ``eval/len_mean``); a metric and its slices share
a chart (``eval/pass@1``: pass@1 overall and per slice), charts come in the order of the panel's patterns, and
an eval metric of no known kind gets its own panel.

    layout(["reward", "reward/accuracy", "kl", "kl_coef", "loss"])
    -> reward: left [reward, reward/accuracy]; kl: left [kl], right [kl_coef]; loss: left [loss]
    layout(["eval/pass@1", "eval/pass@1/en", "eval/len_mean"])
    -> eval/pass@1: left [eval/pass@1, eval/pass@1/en]; eval/len_mean: left [eval/len_mean] (group "eval")
"""

from __future__ import annotations

from dataclasses import dataclass
from fnmatch import fnmatchcase
from typing import Any

from kitae.registry import Registry

PANELS = Registry("plot panel")


@dataclass(frozen=True)
class Panel:
    order: int
    title: str
    left: tuple[str, ...]
    right: tuple[str, ...] = ()
    help: str = ""
    split: bool = False  # one chart per metric (the path part after the panel's prefix), not one for all

    def side(self, key: str) -> str | None:
        """"left" or "right" when this panel plots `key`, else None (right patterns are tried first)."""
        if any(fnmatchcase(key, p) for p in self.right):
            return "right"
        if any(fnmatchcase(key, p) for p in self.left):
            return "left"
        return None


def register_panel(name: str, panel: Panel) -> None:
    PANELS.register(name, panel)


register_panel("reward", Panel(10, "Reward: total and each component", ("reward", "reward/*"),
                               help="mean over scored samples; each component as its grader scored it"))
register_panel("eval", Panel(20, "Evaluation", ("eval/pass@*", "eval/score", "eval/accuracy", "eval/reward",
                                                 "eval/compliance", "eval/*_rate"), ("eval/len_*",),
                             help="on the eval set: pass@1 (overall and per slice), template compliance, rates and "
                                  "lengths, one chart each", split=True))
register_panel("kl", Panel(30, "KL to the reference and its coefficient", ("kl",), ("kl_coef",)))
register_panel("entropy", Panel(40, "Entropy", ("entropy",), help="mean token entropy of the policy"))
register_panel("length", Panel(50, "Mean length (tokens) and truncation rate", ("len_mean",), ("trunc_rate",)))
register_panel("graders", Panel(60, "Grader abstain and error rates",
                                ("grader/*/abstain_rate", "grader/*/error_rate", "invalid_rate"),
                                help="abstained samples are masked, not zero: a rising rate means less signal"))
register_panel("judge_tokens", Panel(70, "Judge tokens", ("judge/*", "grader/*/*tokens*", "*judge_tokens*")))
register_panel("clip", Panel(80, "Clipped fraction", ("clip_frac*",)))
register_panel("speed", Panel(90, "Seconds per step", ("secs_per_step", "secs_*")))


def layout(keys: list[str]) -> list[dict[str, Any]]:
    """Panels (as JSON) for the metric keys a run has; panels with no key are left out."""
    panels = sorted(((PANELS.get(n), n) for n in PANELS.names()), key=lambda p: p[0].order)
    out = {name: {"name": name, "title": p.title, "help": p.help, "left": [], "right": []} for p, name in panels}
    extra: list[dict[str, Any]] = []
    for key in keys:
        for panel, name in panels:
            side = panel.side(key)
            if side:
                out[name][side].append(key)
                break
        else:
            extra.append({"name": f"key:{key}", "title": key, "help": "", "left": [key], "right": []})
    shown = []
    for p, name in panels:
        found = out[name]
        if found["left"] or found["right"]:
            shown += split_by_metric(p, found) if p.split else [found]
    return shown + extra


def split_by_metric(panel: Panel, found: dict[str, Any]) -> list[dict[str, Any]]:
    """One small chart per metric of a ``split`` panel: ``eval/pass@1`` and ``eval/pass@1/en`` share one
    (named ``eval/pass@1``), each on the left axis (a chart of one metric has one scale); charts in the order
    of the panel's patterns (scores, compliance, rates, lengths), each marked with the panel as its group."""
    patterns = [*panel.left, *panel.right]
    charts: dict[str, list[str]] = {}
    for key in [*found["left"], *found["right"]]:
        prefix, _, rest = key.partition("/")
        charts.setdefault(f"{prefix}/{rest.split('/')[0]}" if rest else key, []).append(key)

    def rank(metric: str) -> int:  # the first pattern that claims one of its keys
        return min(i for i, p in enumerate(patterns) for k in charts[metric] if fnmatchcase(k, p))

    ordered = sorted(charts, key=rank)  # stable: metrics of one pattern keep the keys' order
    return [{"name": metric, "title": metric.partition("/")[2] or metric, "help": "", "left": charts[metric],
             "right": [], "group": found["name"], "group_title": panel.title, "group_help": panel.help}
            for metric in ordered]
