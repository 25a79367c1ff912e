"""The plots of the run overview: which metric keys share a panel, registered by name in :data:`PANELS`.

A panel lists key patterns (shell-style, ``reward/*``) for its left axis and, when two quantities of
different scale belong together (KL and its coefficient, mean length and truncation rate), for its right
axis. Every key goes to the first panel (by ``order``) with a matching pattern; a key no panel claims gets
a panel of its own, so a metric the trainer starts logging tomorrow is plotted without touching this file.

Eval metrics come from the run store's ``evals`` table and are named ``eval/<metric>`` here
(``eval/pass@1``, ``eval/pass@1/en``, ``eval/compliance``, ``eval/trunc_rate``, ``eval/len_mean``); those
of a known kind share the eval panel (scores and rates left, lengths right), any other gets its own.

    layout(["reward", "reward/accuracy", "kl", "kl_coef", "loss"])
    -> reward: left [reward, reward/accuracy]; kl: left [kl], right [kl_coef]; loss: left [loss]
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
                             help="pass@1, template compliance and rates on the eval set; right axis: lengths"))
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
    return [p for p in out.values() if p["left"] or p["right"]] + extra
