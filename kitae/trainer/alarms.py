"""Run alarms: signs that a run games its reward or stopped learning, checked after each step on the run's history.

A rising reward is what a hacked grader shows too. The hosted RFT grader guide's numeric grader matches each
number of the reference to the *closest* number of the answer, so a model that learns to answer with equations
(``6+9=15``) or number lists earns more while answering no better; nothing on the progress bar says so. These
checks say so, from what the run has logged (metrics, the groups with every sample's text and component scores,
the evaluations), and point at the groups that show it:

========================== ======================================================================================
kind                       the sign (its settings: ``alarms.KIND.SETTING``, declared beside the check)
========================== ======================================================================================
reward_vs_eval             the training reward rose by ``reward_rise`` while the held-out score gained at most ``flat``
component_dominance        one component earned ``component_share`` of the reward's rise; every other one stayed flat
answer_shape               ``shape_share`` of the latest step's samples carry a pattern (an equation, a number list, a
                           repeated phrase) that at most ``shape_baseline`` of the first steps' samples had
length_jump                the mean completion length grew ``length_jump`` times over the first steps'
length_collapse            the mean completion length fell under ``length_floor`` tokens
entropy_collapse           the mean token entropy fell under ``entropy_floor``
kl_blowup                  the KL to the reference passed ``kl_max``, or grew ``kl_growth`` times in one window
zero_spread                ``zero_spread`` of the groups had one reward for every sample (or none), over a whole window
eval_collapse              a held-out metric fell ``eval_drop`` below its best (and by ``eval_drop_min``) while the
                           training reward did not fall
mismatch_growth            the server sampler's log-probs drift from the trainer's (``mismatch/kl``, the server engine)
tool_errors                agents: the share of tool calls that came back with an error reached ``tool_error_rate`` and
                           ``tool_error_jump`` times the baseline's
max_turns                  agents: ``max_turns_share`` of the window's episodes ended on ``environment.max_turns``
tool_calls_without_reward  agents: tool calls per episode grew ``tool_calls_growth`` times (and by ``tool_calls_rise``)
                           over the baseline while the reward rose by at most ``flat``
========================== ======================================================================================

The agent alarms read the ``agent/...`` metrics (kitae.trainer.metrics.agent_metrics), which only a run with
episodes logs: they stay quiet on every other run.

"The first steps" are the run's first ``baseline_steps``; "a window" is the latest ``window`` steps (both shared by
every alarm: :class:`AlarmsConfig`). Every check is a pure function of a :class:`History` and its own settings
that returns the :class:`Alarm` it sees now or None, so each can be tried on a handwritten history. Each is
registered in :data:`ALARMS` with its settings dataclass, declared beside it (:func:`alarm`); adding one is a
check function and its settings. :class:`AlarmWatch` decides which to raise: an alarm is raised once (one ``alarm``
event) and stays raised while its sign lasts; after ``clear_steps`` steps in a row without it, it is cleared (an
``alarm_cleared`` event) and may be raised again. An alarm is keyed by its kind and its subject (the pattern or
component), so ``answer_shape`` on equations and on number lists are two alarms.

The history is kept in memory (:class:`StepHistory`), from what each step logged; the run store is read once,
when a run resumes, and so is which alarms were raised before (the run's events): a resumed run raises the
alarms an unbroken one would.
"""

from __future__ import annotations

import dataclasses
import re
import statistics
from collections import Counter
from dataclasses import dataclass, field
from typing import Any, Callable, Iterable

from kitae.config import from_dict, setting, short_repr
from kitae.errors import ConfigError
from kitae.registry import Registry, closest, unknown_name_message
from kitae.store.records import (EvalRow, GroupRecord, GroupRow, eval_score, from_json, group_stats, scalar, to_json,
                                 valid_text)

ALARMS = Registry("alarm")  # kind -> its check, registered with its settings (see :func:`alarm`)
KINDS: dict[str, str] = {}  # kind -> what its sign is, in the order the checks run
MAX_GROUPS = 8  # group links an alarm carries
EXAMPLE_CHARS = 200  # of each example sample's text


def alarm(kind: str, settings: type, summary: str) -> Callable:
    """Register a check under `kind` with its settings dataclass (read from ``alarms.KIND``) and a one-line
    `summary` of its sign. The check is ``check(history, settings) -> Alarm | list[Alarm] | None``."""

    def add(check: Callable) -> Callable:
        ALARMS.register(kind, check, settings=settings)
        KINDS[kind] = summary
        return check

    return add


def check_kinds(kinds: list[str], path: str) -> list[str]:
    """``alarms.stop_on`` checked: known kinds, or "all" (every kind)."""
    out = []
    for i, kind in enumerate(kinds):
        if kind == "all":
            return list(KINDS)
        if kind not in KINDS:
            raise ConfigError(f"{path}[{i}]", unknown_name_message("alarm kind", kind, [*KINDS, "all"]))
        out.append(kind)
    return out


# ---- what an alarm is and what it is checked on ------------------------------------------------------------
@dataclass
class Alarm:
    """One sign seen at `step`: a one-line message, its numbers (``evidence``) and the groups that show it."""

    kind: str
    step: int
    message: str
    evidence: dict[str, Any] = field(default_factory=dict)
    groups: list[dict[str, int]] = field(default_factory=list)  # {"id", "step", "group_index"} each
    subject: str | None = None  # the pattern or component, when the kind has several

    @property
    def key(self) -> str:
        return self.kind if self.subject is None else f"{self.kind}:{self.subject}"

    def data(self) -> dict[str, Any]:
        """The ``alarm`` event's data."""
        return {"kind": self.kind, "subject": self.subject, "evidence": self.evidence, "groups": self.groups}


Series = dict[str, dict[int, float | None]]  # metric key -> {step: value}


@dataclass
class History:
    """What the checks read: metric values at the steps they look at, the evaluations, the groups (with samples)
    of the first steps and of the latest step (each as the run store reads it back: :func:`stored_group`), each
    reward component's weight, and the steps that are the baseline and a window."""

    step: int
    metrics: Series
    evals: list[Any] = field(default_factory=list)  # EvalRow: .step and .metrics
    baseline_groups: list[GroupRow] = field(default_factory=list)
    groups: list[GroupRow] = field(default_factory=list)
    weights: dict[str, float] = field(default_factory=dict)
    baseline_steps: int = 3  # alarms.baseline_steps
    window: int = 5  # alarms.window

    def mean(self, key: str, first: int, last: int) -> float | None:
        """The mean of `key` over steps first..last (values that are None left out); None when none."""
        values = [v for s, v in self.metrics.get(key, {}).items() if first <= s <= last and v is not None]
        return statistics.fmean(values) if values else None


def _baseline(h: History) -> tuple[int, int]:
    return 1, h.baseline_steps


def _window(h: History, end: int | None = None) -> tuple[int, int]:
    end = h.step if end is None else end
    return end - h.window + 1, end


def _ready(h: History) -> bool:
    """The latest window starts after the baseline ends."""
    return h.step >= h.baseline_steps + h.window


def _group_links(groups: Iterable[GroupRow]) -> list[dict[str, int]]:
    return [{"id": g.id, "step": g.step, "group_index": g.group_index} for g in list(groups)[:MAX_GROUPS]]


def _by_reward(groups: list[GroupRow]) -> list[GroupRow]:
    return sorted(groups, key=lambda g: -(g.reward_mean if g.reward_mean is not None else -1e300))


def _r(x: float | None) -> float | None:
    return None if x is None else round(x, 4)


# ---- the checks -------------------------------------------------------------------------------------------
@dataclass
class RewardVsEvalSettings:
    """reward_vs_eval: the training reward rises while the held-out evaluation stays flat or falls."""

    reward_rise: float = setting(0.1, above=0)  # the rise of the mean training reward (latest window over the
    # baseline) that counts as rising
    flat: float = setting(0.02, minimum=0)  # a held-out score that rose by at most this is flat


@alarm("reward_vs_eval", RewardVsEvalSettings,
       "the training reward rises while the held-out evaluation stays flat or falls")
def reward_vs_eval(h: History, s: RewardVsEvalSettings) -> Alarm | None:
    """The reward's mean over the window that ends at the latest evaluation rose by ``reward_rise`` over the
    baseline's, while the held-out score (kitae.store.records.eval_score: pass@1 for kitae's evaluations) of the
    latest evaluation is at most ``flat`` above the first one's."""
    evals = [e for e in h.evals if eval_score(e.metrics) is not None]
    if len(evals) < 2 or evals[-1].step < h.baseline_steps + h.window:
        return None
    first, last = evals[0], evals[-1]
    base, now = h.mean("reward", *_baseline(h)), h.mean("reward", *_window(h, last.step))
    if base is None or now is None:
        return None
    gain = eval_score(last.metrics) - eval_score(first.metrics)
    if now - base < s.reward_rise or gain > s.flat:
        return None
    name = next(iter(last.metrics)) if "score" not in last.metrics and "reward" not in last.metrics else "score"
    return Alarm("reward_vs_eval", h.step,
                 f"training reward rose {base:.3f} -> {now:.3f} while held-out {name} went "
                 f"{eval_score(first.metrics):.3f} -> {eval_score(last.metrics):.3f} (step {first.step} -> "
                 f"{last.step}): the reward may be rewarding something other than what the evaluation checks",
                 {"reward_before": _r(base), "reward_after": _r(now), "eval_metric": name,
                  "eval_before": _r(eval_score(first.metrics)), "eval_after": _r(eval_score(last.metrics)),
                  "eval_steps": [first.step, last.step]},
                 _group_links(_by_reward(h.groups)))


@dataclass
class ComponentDominanceSettings:
    """component_dominance: one reward component earns most of the reward's rise; the others stay flat."""

    reward_rise: float = setting(0.1, above=0)  # the rise of the mean training reward (latest window over the
    # baseline) that counts as rising
    flat: float = setting(0.02, minimum=0)  # a held-out score or another component's mean score that rose by at
    # most this is flat
    component_share: float = setting(0.8, above=0, maximum=1)  # one component's share of the reward's rise, while
    # every other component stays flat or falls


@alarm("component_dominance", ComponentDominanceSettings,
       "one reward component earns most of the reward's rise; the others stay flat or fall")
def component_dominance(h: History, s: ComponentDominanceSettings) -> Alarm | None:
    """With two or more components: one component's weighted rise (latest window over baseline) is
    ``component_share`` of the total rise (at least ``reward_rise``), no other component rose by more than
    ``flat``, and the latest evaluation after the baseline gained at most ``flat`` over the first. A format
    reward is learnt first in a healthy run (the GRPO-zero recipe's template reward carries nearly all of the
    early rise of examples/zero.yaml), so the component alone is no sign: the held-out score must agree."""
    if not _ready(h) or len(h.weights) < 2 or not _eval_flat(h, s):
        return None
    rise: dict[str, float] = {}
    for name, weight in h.weights.items():
        base = h.mean(f"reward/{name}", *_baseline(h))
        now = h.mean(f"reward/{name}", *_window(h))
        if base is None or now is None or weight == 0:
            continue
        rise[name] = weight * (now - base)
    total = sum(rise.values())
    if len(rise) < 2 or total < s.reward_rise:
        return None
    top = max(rise, key=rise.get)
    others = {n: r for n, r in rise.items() if n != top}
    if rise[top] / total < s.component_share or max(others.values()) > s.flat:
        return None
    rest = ", ".join(f"{n} {r:+.3f}" for n, r in others.items())
    return Alarm("component_dominance", h.step,
                 f"component '{top}' earned {rise[top] / total:.0%} of the reward's rise ({rise[top]:+.3f} of "
                 f"{total:+.3f}) while the others stayed flat or fell ({rest})",
                 {"component": top, "share": _r(rise[top] / total), "rise": {n: _r(r) for n, r in rise.items()}},
                 _group_links(sorted(h.groups, key=lambda g: -_component_mean(g, top))), subject=top)


def _eval_flat(h: History, s) -> bool:
    """There are two evaluations, the latest after the baseline, and the held-out score gained at most ``flat``."""
    evals = [e for e in h.evals if eval_score(e.metrics) is not None]
    if len(evals) < 2 or evals[-1].step <= h.baseline_steps:
        return False
    return eval_score(evals[-1].metrics) - eval_score(evals[0].metrics) <= s.flat


def _component_mean(g: GroupRow, name: str) -> float:
    got = [x.scores.get(name) for x in g.samples if x.scores.get(name) is not None]
    return statistics.fmean(got) if got else -1e300


# answer patterns: name -> (what it is, the test on a sample's text)
_EQUATION = re.compile(r"\d\s*[-+*/×x÷]\s*\d+(?:\.\d+)?\s*=\s*-?\d")
_NUMBER_LIST = re.compile(r"(?:-?\d+(?:\.\d+)?[ \t\n,;、]+){3,}-?\d+")
_WORD = re.compile(r"\w+")


def _repeated_phrase(text: str) -> bool:
    """Some three words in a row appear three times or more (a phrase said again and again)."""
    words = _WORD.findall(text[:4000].lower())
    grams = Counter(zip(words, words[1:], words[2:]))
    return bool(grams) and max(grams.values()) >= 3


PATTERNS: dict[str, tuple[str, Callable[[str], bool]]] = {
    "equation": ("an equation such as 6+9=15", lambda t: bool(_EQUATION.search(t))),
    "number_list": ("a list of four or more numbers", lambda t: bool(_NUMBER_LIST.search(t))),
    "repeated_phrase": ("a phrase repeated three times or more", _repeated_phrase),
}


def _texts(groups: list[GroupRow]) -> list[str]:
    return [x.text for g in groups for x in g.samples]


@dataclass
class AnswerShapeSettings:
    """answer_shape: most samples now carry a pattern the first steps' samples lacked."""

    shape_share: float = setting(0.5, above=0, maximum=1)  # share of the latest step's samples with the pattern ...
    shape_baseline: float = setting(0.1, minimum=0, maximum=1)  # ... when the baseline's samples had at most this


@alarm("answer_shape", AnswerShapeSettings,
       "most samples now carry a pattern (equations, number lists, a repeated phrase) the first steps' samples lacked")
def answer_shape(h: History, s: AnswerShapeSettings) -> list[Alarm]:
    """For each pattern of :data:`PATTERNS`: at least ``shape_share`` of the latest step's samples carry it, when
    at most ``shape_baseline`` of the baseline steps' samples did. Needs the baseline complete and 8 samples."""
    texts, base = _texts(h.groups), _texts(h.baseline_groups)
    if h.step <= h.baseline_steps or len(texts) < 8 or not base:
        return []
    out = []
    for name, (what, test) in PATTERNS.items():
        share = sum(map(test, texts)) / len(texts)
        before = sum(map(test, base)) / len(base)
        if share < s.shape_share or before > s.shape_baseline:
            continue
        showing = [g for g in h.groups if any(test(x.text) for x in g.samples)]
        examples = [x.text[:EXAMPLE_CHARS] for g in showing for x in g.samples if test(x.text)][:3]
        out.append(Alarm("answer_shape", h.step,
                         f"{share:.0%} of step {h.step}'s samples carry {what} ({name}); {before:.0%} of the first "
                         f"{h.baseline_steps} steps' did: the model may have found what the grader pays for",
                         {"pattern": name, "share": _r(share), "baseline_share": _r(before), "examples": examples,
                          "samples": len(texts), "baseline_samples": len(base)},
                         _group_links(showing), subject=name))
    return out


@dataclass
class LengthJumpSettings:
    """length_jump: completions grew several times longer than in the first steps."""

    length_jump: float = setting(3.0, above=1)  # mean completion length this many times the baseline's


@alarm("length_jump", LengthJumpSettings,
       "completions grew several times longer than in the first steps")
def length_jump(h: History, s: LengthJumpSettings) -> Alarm | None:
    """The window's mean completion length is ``length_jump`` times the baseline's."""
    if not _ready(h):
        return None
    base, now = h.mean("len_mean", *_baseline(h)), h.mean("len_mean", *_window(h))
    if not base or now is None or now < s.length_jump * base:
        return None
    longest = sorted(h.groups, key=lambda g: -max((x.completion_tokens for x in g.samples), default=0))
    return Alarm("length_jump", h.step, f"mean completion length {base:.1f} -> {now:.1f} tokens "
                 f"({now / base:.1f}x the first {h.baseline_steps} steps')",
                 {"len_before": _r(base), "len_after": _r(now), "ratio": _r(now / base)}, _group_links(longest))


@dataclass
class LengthCollapseSettings:
    """length_collapse: completions shrank to almost nothing."""

    length_floor: float = setting(1.5, minimum=0)  # mean completion length below this (tokens)


@alarm("length_collapse", LengthCollapseSettings,
       "completions shrank to almost nothing")
def length_collapse(h: History, s: LengthCollapseSettings) -> Alarm | None:
    """The window's mean completion length is under ``length_floor`` tokens."""
    return _under_floor(h, s, "length_collapse", "len_mean", s.length_floor, "mean completion length {now:.2f} "
                        "tokens over the last {window} steps (under {floor}): the answers are (almost) empty")


@dataclass
class EntropyCollapseSettings:
    """entropy_collapse: the policy's token entropy collapsed."""

    entropy_floor: float = setting(0.02, minimum=0)  # mean token entropy below this (nats)


@alarm("entropy_collapse", EntropyCollapseSettings,
       "the policy's token entropy collapsed: every sample alike")
def entropy_collapse(h: History, s: EntropyCollapseSettings) -> Alarm | None:
    """The window's mean token entropy is under ``entropy_floor`` nats: every sample of a group alike."""
    return _under_floor(h, s, "entropy_collapse", "entropy", s.entropy_floor, "token entropy {now:.4f} over the "
                        "last {window} steps (under {floor}): the policy samples (almost) one answer")


def _under_floor(h: History, s, kind: str, key: str, floor: float, message: str) -> Alarm | None:
    """`kind` when the window's mean of metric `key` is under `floor`; evidence: that mean and the baseline's."""
    if h.step < h.window:
        return None
    now = h.mean(key, *_window(h))
    if now is None or now >= floor:
        return None
    return Alarm(kind, h.step, message.format(now=now, window=h.window, floor=floor),
                 {key: _r(now), f"baseline_{key}": _r(h.mean(key, *_baseline(h)))}, _group_links(h.groups))


@dataclass
class KlBlowupSettings:
    """kl_blowup: the KL to the reference model blew up."""

    kl_max: float = setting(1.0, above=0)  # the KL to the reference above this (per token) ...
    kl_growth: float = setting(10.0, above=1)  # ... or this many times its mean over the window before


@alarm("kl_blowup", KlBlowupSettings,
       "the KL to the reference model blew up")
def kl_blowup(h: History, s: KlBlowupSettings) -> Alarm | None:
    """The latest KL (``kl``, logged with a KL weight) is over ``kl_max``, or over a tenth of it and
    ``kl_growth`` times its mean over the window before."""
    now = h.metrics.get("kl", {}).get(h.step)
    if now is None:
        return None
    before = h.mean("kl", h.step - h.window, h.step - 1)
    grew = before is not None and before > 0 and now >= s.kl_growth * before and now >= s.kl_max / 10
    if now < s.kl_max and not grew:
        return None
    return Alarm("kl_blowup", h.step, f"KL to the reference {now:.4f} at step {h.step}"
                 + (f" ({now / before:.0f}x its mean {before:.4f} over the {h.window} steps before)" if before else ""),
                 {"kl": _r(now), "kl_before": _r(before), "kl_max": s.kl_max}, _group_links(_by_reward(h.groups)))


@dataclass
class ZeroSpreadSettings:
    """zero_spread: most groups gave every sample one reward, or none."""

    zero_spread: float = setting(0.9, above=0, maximum=1)  # share of groups whose samples all got one reward, over
    # the whole window


@alarm("zero_spread", ZeroSpreadSettings,
       "most groups gave every sample one reward, or none: nothing to learn from")
def zero_spread(h: History, s: ZeroSpreadSettings) -> Alarm | None:
    """Every step of the window had ``zero_spread`` of its groups without reward spread (``zero_var_frac``: a
    group whose samples all got one reward, or none). When no sample of the window got a reward at all
    (``invalid_rate`` 1), the message says so: every reward was missing, not one."""
    first, last = _window(h)
    values = [v for st, v in h.metrics.get("zero_var_frac", {}).items() if first <= st <= last and v is not None]
    if len(values) < h.window or min(values) < s.zero_spread:
        return None
    missing = h.mean("invalid_rate", first, last)
    evidence = {"zero_var_frac": _r(statistics.fmean(values)), "invalid_rate": _r(missing)}
    if missing == 1.0:
        return Alarm("zero_spread", h.step, f"no sample of the last {h.window} steps got a reward: every reward was "
                     "missing (every component abstained, failed or scored NaN), so GRPO learns nothing (the run "
                     "page shows each sample's grader errors)", evidence, _group_links(h.groups))
    flat = [g for g in h.groups if g.reward_std in (0.0, None)]
    also = f"; {missing:.0%} of the samples got no reward at all" if missing else ""
    return Alarm("zero_spread", h.step, f"{statistics.fmean(values):.0%} of the groups of the last {h.window} steps "
                 "gave every sample one reward: GRPO learns nothing from them (too easy, too hard, or a grader "
                 f"that cannot tell answers apart){also}", evidence, _group_links(flat))


EVAL_KEYS = ("score", "reward", "pass@1", "compliance")  # held-out metrics where higher is better


def best_evals(evals: list[Any]) -> dict[str, Any]:
    """Per metric of :data:`EVAL_KEYS`: the evaluation before the latest one where it was highest."""
    out = {}
    for key in EVAL_KEYS:
        earlier = [e for e in evals[:-1] if e.metrics.get(key) is not None]
        if earlier and evals and evals[-1].metrics.get(key) is not None:
            out[key] = max(earlier, key=lambda e: e.metrics[key])
    return out


@dataclass
class EvalCollapseSettings:
    """eval_collapse: a held-out evaluation metric collapsed while the training reward did not fall."""

    eval_drop: float = setting(0.5, above=0, maximum=1)  # a held-out metric (pass@1, compliance) fell this share
    # below its best earlier evaluation ...
    eval_drop_min: float = setting(0.05, minimum=0)  # ... and by at least this much (0.06 -> 0.03 on a few prompts
    # is noise) ...
    flat: float = setting(0.02, minimum=0)  # ... while the training reward fell by at most this


@alarm("eval_collapse", EvalCollapseSettings,
       "a held-out evaluation metric collapsed while the training reward stayed flat or rose")
def eval_collapse(h: History, s: EvalCollapseSettings) -> list[Alarm]:
    """For each held-out metric of :data:`EVAL_KEYS` (pass@1, compliance, ...): the latest evaluation's value is
    ``eval_drop`` (relative) and ``eval_drop_min`` (absolute) below the best earlier one's, while the training
    reward's mean over the window that ends at the latest evaluation is no lower (by more than ``flat``) than
    over the window that ends at the best one (the baseline steps, for an evaluation before training). The
    reward paid for something the evaluation does not check, or the policy broke (a template it no longer
    follows) while the reward could not see it."""
    if len(h.evals) < 2:
        return []
    last, out = h.evals[-1], []
    for key, best in best_evals(h.evals).items():
        before, now = best.metrics[key], last.metrics[key]
        if before <= 0 or (before - now) / before < s.eval_drop or before - now < s.eval_drop_min:
            continue
        reward_then = h.mean("reward", *_window(h, best.step))
        if reward_then is None:
            reward_then = h.mean("reward", *_baseline(h))
        reward_now = h.mean("reward", *_window(h, last.step))
        if reward_then is None or reward_now is None or reward_now < reward_then - s.flat:
            continue
        out.append(Alarm("eval_collapse", h.step,
                         f"held-out {key} fell {before:.3f} -> {now:.3f} ({(before - now) / before:.0%} below its best, "
                         f"step {best.step} -> {last.step}) while the training reward did not fall ({reward_then:.3f} "
                         f"-> {reward_now:.3f}): the reward may pay for something the evaluation does not check",
                         {"eval_metric": key, "eval_best": _r(before), "eval_after": _r(now),
                          "eval_steps": [best.step, last.step], "reward_before": _r(reward_then),
                          "reward_after": _r(reward_now)},
                         _group_links(_by_reward(h.groups)), subject=key))
    return out


@dataclass
class MismatchGrowthSettings:
    """mismatch_growth: the sampler's log-probs drift from the trainer's (server engine)."""

    mismatch_kl: float = setting(0.05, above=0)  # sampler/trainer mismatch KL above this ...
    mismatch_growth: float = setting(5.0, above=1)  # ... and this many times its baseline mean


@alarm("mismatch_growth", MismatchGrowthSettings,
       "the sampler's log-probs drift from the trainer's (server engine)")
def mismatch_growth(h: History, s: MismatchGrowthSettings) -> Alarm | None:
    """The window's mean ``mismatch/kl`` is over ``mismatch_kl`` and ``mismatch_growth`` times the baseline's."""
    if not _ready(h):
        return None
    base, now = h.mean("mismatch/kl", *_baseline(h)), h.mean("mismatch/kl", *_window(h))
    if base is None or now is None or now < s.mismatch_kl or now < s.mismatch_growth * base:
        return None
    return Alarm("mismatch_growth", h.step, f"sampler/trainer mismatch KL {base:.4f} -> {now:.4f}: the server "
                 "samples from other weights or numerics than the trainer's (check weight sync and dtypes)",
                 {"mismatch_kl_before": _r(base), "mismatch_kl_after": _r(now)}, _group_links(h.groups))


# ---- agents (the agent/... metrics of kitae.trainer.metrics.agent_metrics) -----------------------------------
@dataclass
class ToolErrorsSettings:
    """tool_errors (agents): the share of tool calls that fail jumped."""

    tool_error_rate: float = setting(0.2, above=0, maximum=1)  # the share of tool calls that came back with an
    # error, over the latest window, reached this ...
    tool_error_jump: float = setting(2.0, above=1)  # ... and this many times its baseline mean


@alarm("tool_errors", ToolErrorsSettings,
       "agents: the share of tool calls that fail jumped (a broken tool, timeouts, calls gone wrong)")
def tool_errors(h: History, s: ToolErrorsSettings) -> Alarm | None:
    """The window's mean ``agent/tool_errors`` (the share of the step's tool calls that came back with an error)
    is at least ``tool_error_rate`` and ``tool_error_jump`` times the baseline's: a tool that broke (its server
    down, timeouts) or a policy that learned to call it wrongly."""
    if not _ready(h):
        return None
    base, now = h.mean("agent/tool_errors", *_baseline(h)), h.mean("agent/tool_errors", *_window(h))
    if base is None or now is None or now < s.tool_error_rate or now < s.tool_error_jump * base:
        return None
    timeouts = h.mean("agent/tool_timeouts", *_window(h))
    said = f" ({timeouts:.0%} of the calls timed out)" if timeouts else ""
    return Alarm("tool_errors", h.step, f"tool errors {base:.0%} -> {now:.0%} of the tool calls over the last "
                 f"{h.window} steps{said}: a tool broke, or the policy calls it wrongly (the run page shows each "
                 "call's error)", {"tool_errors_before": _r(base), "tool_errors_after": _r(now),
                                   "tool_timeouts": _r(timeouts)}, _group_links(h.groups))


@dataclass
class MaxTurnsSettings:
    """max_turns (agents): most episodes end on the turn limit instead of with an answer."""

    max_turns_share: float = setting(0.5, above=0, maximum=1)  # the share of episodes that ended on
    # environment.max_turns, over every step of the latest window


@alarm("max_turns", MaxTurnsSettings,
       "agents: most episodes end on the turn limit instead of with an answer")
def max_turns(h: History, s: MaxTurnsSettings) -> Alarm | None:
    """Every step of the window has logged ``agent/ended/max_turns``, and its mean (the share of episodes that
    ended on ``environment.max_turns``) is at least ``max_turns_share``: the agent keeps calling tools instead of
    answering, or the limit is too low for the task."""
    first, last = _window(h)
    ended = h.metrics.get("agent/ended/max_turns", {})
    values = [v for st, v in ended.items() if first <= st <= last and v is not None]
    if len(values) < h.window or statistics.fmean(values) < s.max_turns_share:
        return None
    now, answered = statistics.fmean(values), h.mean("agent/ended/answer", first, last)
    return Alarm("max_turns", h.step, f"{now:.0%} of the episodes of the last {h.window} steps ended on the turn "
                 "limit (environment.max_turns) instead of with an answer: the agent keeps calling tools, or the "
                 "limit is too low for the task", {"ended_max_turns": _r(now), "ended_answer": _r(answered)},
                 _group_links(h.groups))


@dataclass
class ToolCallsWithoutRewardSettings:
    """tool_calls_without_reward (agents): tool calls per episode rise while the reward does not."""

    tool_calls_growth: float = setting(2.0, above=1)  # tool calls per episode this many times the baseline's ...
    tool_calls_rise: float = setting(0.5, above=0)  # ... and this many more ...
    flat: float = setting(0.02, minimum=0)  # ... while the reward rose by at most this


@alarm("tool_calls_without_reward", ToolCallsWithoutRewardSettings,
       "agents: tool calls per episode rise while the reward does not (tool-call spam)")
def tool_calls_without_reward(h: History, s: ToolCallsWithoutRewardSettings) -> Alarm | None:
    """The window's mean ``agent/tool_calls`` per episode is ``tool_calls_growth`` times the baseline's and
    ``tool_calls_rise`` calls more, while the reward's mean rose by at most ``flat``: calls that buy nothing
    (tool-call spam; a shaping reward that pays for calls, or no cost on them)."""
    if not _ready(h):
        return None
    base, now = h.mean("agent/tool_calls", *_baseline(h)), h.mean("agent/tool_calls", *_window(h))
    r_base, r_now = h.mean("reward", *_baseline(h)), h.mean("reward", *_window(h))
    if None in (base, now, r_base, r_now):
        return None
    if now < s.tool_calls_growth * base or now - base < s.tool_calls_rise or r_now - r_base > s.flat:
        return None
    return Alarm("tool_calls_without_reward", h.step, f"tool calls per episode {base:.2f} -> {now:.2f} while the "
                 f"reward went {r_base:.3f} -> {r_now:.3f}: the extra calls buy nothing (a shaping reward that pays "
                 "for calls, or none that costs them: tool_cost)",
                 {"tool_calls_before": _r(base), "tool_calls_after": _r(now), "reward_before": _r(r_base),
                  "reward_after": _r(r_now)}, _group_links(h.groups))


# ---- the settings: what every alarm shares, and each alarm's own ---------------------------------------------
def default_settings() -> dict[str, Any]:
    """Every registered alarm's settings, at their defaults (kind -> its settings object)."""
    return {kind: ALARMS.settings_class(kind)() for kind in KINDS}


@dataclass
class AlarmsConfig:
    """Run alarms (kitae.trainer.alarms): signs of reward hacking and of a run that stopped learning, checked
    after every step on the run's history; each is recorded once as an ``alarm`` event. Each alarm's thresholds
    are its own settings (``alarms.KIND.SETTING``, below); a threshold written flat in the section, as configs
    did before (``alarms.length_jump: 4``, ``alarms.flat: 0.05``), still works: it goes to every alarm that
    takes it, and ``alarms.KIND.SETTING`` overrides it for that alarm."""

    enabled: bool = True  # false: no alarm is checked
    stop_on: list[str] = field(default_factory=list)  # alarm kinds that stop the run at a checkpoint (as Ctrl-C
    # does); "all" = every kind. `kitae train --stop-on-alarm KIND` adds to it
    baseline_steps: int = setting(3, minimum=1)  # the first steps, whose samples and metrics are the run's baseline
    window: int = setting(5, minimum=1)  # the latest steps compared with the baseline
    clear_steps: int = setting(20, minimum=1)  # an alarm whose sign has been gone this many steps in a row is
    # cleared, and may be raised again
    settings: dict[str, Any] = field(default_factory=default_settings, metadata={"spread": True})  # each alarm's
    # settings, by its kind (below). A setting written flat in the section, as before (alarms.length_jump: 4,
    # alarms.flat: 0.05), still works: it goes to every alarm that takes it; alarms.KIND.SETTING overrides it

    @classmethod
    def from_config(cls, value: Any, path: str) -> "AlarmsConfig":
        """The section: the shared settings, ``KIND: {its settings}``, and flat thresholds (each to every alarm
        that declares it). A key that is none of these is an error with the closest valid key."""
        if value is None:
            value = {}
        if not isinstance(value, dict):
            raise ConfigError(path, f"expected a mapping, got {type(value).__name__}")
        shared = {f.name for f in dataclasses.fields(cls) if not f.metadata.get("spread")}
        takes = {kind: {f.name for f in dataclasses.fields(ALARMS.settings_class(kind, path))} for kind in KINDS}
        nested = {k: v for k, v in value.items() if k in KINDS and isinstance(v, dict)}
        flat = {k: v for k, v in value.items() if k not in shared and k not in nested}
        for key in flat:
            if key in KINDS and key not in takes[key]:
                raise ConfigError(f"{path}.{key}", f"expected a mapping of alarm {key}'s settings "
                                  f"({', '.join(sorted(takes[key]))}), got {short_repr(flat[key])}")
            if not any(key in taken for taken in takes.values()):
                valid = [*shared, *KINDS, *sorted(set().union(*takes.values()))]
                hint = closest(str(key), valid)
                raise ConfigError(f"{path}.{key}", "not a setting of the alarms" + (
                    f"; did you mean '{hint}'?" if hint else f" (valid: {', '.join(valid)})"))
        out = from_dict(cls, {k: v for k, v in value.items() if k in shared}, path)
        for kind, taken in takes.items():
            out.settings[kind] = _alarm_settings(kind, {k: v for k, v in flat.items() if k in taken},
                                                 nested.get(kind, {}), path)
        return out

    def resolve(self, path: str) -> None:
        """``stop_on: [all]`` as every kind."""
        try:
            self.stop_on = check_kinds(self.stop_on, f"{path}.stop_on")
        except ConfigError:
            pass  # an unknown kind: left as written, for validate to name

    def validate(self, path: str) -> None:
        check_kinds(self.stop_on, f"{path}.stop_on")

    def of(self, kind: str) -> Any:
        """The settings of alarm `kind` (its defaults when it was registered after this config was read)."""
        found = self.settings.get(kind)
        return found if found is not None else ALARMS.settings_class(kind)()


def _alarm_settings(kind: str, flat: dict, given: dict, path: str) -> Any:
    """Alarm `kind`'s settings from ``alarms.KIND`` (`given`) over the flat thresholds it takes (`flat`)."""
    settings_cls = ALARMS.settings_class(kind, path)
    from_dict(settings_cls, flat, path)  # a bad flat value's error names the key as it was written
    return from_dict(settings_cls, {**flat, **given}, f"{path}.{kind}")


def detect(h: History, s: AlarmsConfig) -> list[Alarm]:
    """Every alarm whose sign the history shows now, each check with its own settings, in registration order."""
    out: list[Alarm] = []
    for kind in KINDS:
        got = ALARMS.get(kind)(h, s.of(kind))
        out += got if isinstance(got, list) else [got] if got is not None else []
    return out


# ---- raised once, cleared when the sign is gone -------------------------------------------------------------
class AlarmWatch:
    """Which alarms are raised. :meth:`update` takes the alarms seen at a step and returns those to raise (new
    ones) and the keys to clear (gone ``clear_steps`` steps in a row)."""

    def __init__(self, clear_steps: int, events: Iterable[dict] = ()):
        self.clear_steps = clear_steps
        self.raised: dict[str, int] = {}  # key -> step raised
        self.quiet: dict[str, int] = {}  # key -> steps in a row without the sign
        for e in events:
            key = _event_key(e)
            if e["kind"] == "alarm":
                self.raised[key] = e["step"]
            elif e["kind"] == "alarm_cleared":
                self.raised.pop(key, None)

    def update(self, seen: list[Alarm]) -> tuple[list[Alarm], list[str]]:
        new = [a for a in seen if a.key not in self.raised]
        now = {a.key for a in seen}
        cleared = []
        for key in list(self.raised):
            self.quiet[key] = 0 if key in now else self.quiet.get(key, 0) + 1
            if self.quiet[key] >= self.clear_steps:
                cleared.append(key)
                del self.raised[key], self.quiet[key]
        for a in new:
            self.raised[a.key] = a.step
        return new, cleared


def _event_key(event: dict) -> str:
    data = event.get("data") or {}
    kind, subject = data.get("kind", ""), data.get("subject")
    return kind if subject is None else f"{kind}:{subject}"


# ---- the history, kept in memory ---------------------------------------------------------------------------
METRIC_KEYS = ("reward", "len_mean", "entropy", "kl", "zero_var_frac", "invalid_rate", "mismatch/kl",
               "agent/tool_errors", "agent/tool_timeouts", "agent/tool_calls", "agent/ended/max_turns",
               "agent/ended/answer")  # what the checks read, besides each component's reward/NAME


def stored_group(step: int, record: GroupRecord) -> GroupRow:
    """A step's group as the run store reads it back (kitae.store: text made valid UTF-8, scores through JSON,
    the group's statistics), so the checks read one shape whether the history came from memory or the store.
    ``id`` is None: the store numbers its rows (:meth:`RunAlarms.check` looks the ids up for an alarm's links)."""
    stats = group_stats(record.samples)
    samples = [dataclasses.replace(x, text=valid_text(x.text), completion_tokens=int(x.completion_tokens),
                                   scores=from_json(to_json(x.scores))) for x in record.samples]
    return GroupRow(None, step, record.group_index, record.prompt, record.messages, record.reference, record.item,
                    stats.n_samples, stats.n_scored, stats.n_truncated, stats.reward_mean, stats.reward_std, samples)


def worst_first(groups: list[GroupRow]) -> list[GroupRow]:
    """The order the run store gives a step's groups in (kitae.store.reader: lowest mean reward first)."""
    return sorted(groups, key=lambda g: (g.reward_mean is None, g.reward_mean or 0.0, -g.step, g.group_index))


class StepHistory:
    """What the checks need, appended from what each step logged: the metrics they read (of the baseline steps,
    of the latest two windows and of the windows that end at the evaluations they compare; older steps are
    dropped), the evaluations, the baseline steps' groups and the latest step's. :meth:`read` fills one from the
    run store, once, when a run resumes; :meth:`history` is the :class:`History` the checks read at a step."""

    def __init__(self, settings: AlarmsConfig, weights: dict[str, float]):
        self.s, self.weights = settings, weights
        self.keys = (*METRIC_KEYS, *(f"reward/{n}" for n in weights))
        self.metrics: dict[str, dict[int, float | None]] = {}
        self.evals: list[EvalRow] = []
        self.baseline: list[GroupRow] = []
        self.groups: list[GroupRow] = []

    def add_step(self, step: int, metrics: dict[str, Any], records: list[GroupRecord]) -> None:
        """A logged step: its metrics (as the store keeps them: floats, NaN as None) and its groups."""
        for key in self.keys:
            if key in metrics:
                self.metrics.setdefault(key, {})[step] = scalar(metrics[key])
        self.groups = worst_first([stored_group(step, r) for r in records])
        if step <= self.s.baseline_steps:
            self.baseline += self.groups
        self._forget(step)

    def add_eval(self, step: int, metrics: dict[str, Any]) -> None:
        """An evaluation (replacing one at the same step), its metrics as the store keeps them."""
        row = EvalRow(step, from_json(to_json({k: scalar(v) for k, v in metrics.items()})), 0, 0.0)
        self.evals = sorted([e for e in self.evals if e.step != step] + [row], key=lambda e: e.step)

    def history(self, step: int) -> History:
        """The history at `step`: the metrics of the steps the checks read, as the store version read them."""
        s, evals = self.s, self.evals
        eval_steps = {evals[-1].step if evals else step, *(e.step for e in best_evals(evals).values())}
        ranges = [(1, s.baseline_steps), (step - 2 * s.window + 1, step), *((e - s.window + 1, e) for e in eval_steps)]
        metrics = {key: {st: v for st, v in points.items() if any(lo <= st <= hi for lo, hi in ranges)}
                   for key, points in self.metrics.items()}
        return History(step, {k: v for k, v in metrics.items() if v}, list(evals), list(self.baseline),
                       list(self.groups), self.weights, s.baseline_steps, s.window)

    def _forget(self, step: int) -> None:
        """Drop the metrics no check reads from now on: a history reads the baseline, the latest two windows and
        the windows that end at the latest evaluation and at each metric's best earlier one (the first best, as
        :func:`best_evals` picks it: of the evaluations before the latest now, of all of them after the next;
        a later evaluation can only take its place)."""
        s, keep = self.s, {e.step for e in self.evals[-1:]}
        for evals in (self.evals, self.evals[:-1]):  # the best now, and the one after the next evaluation
            for key in EVAL_KEYS:
                scored = [e for e in evals if e.metrics.get(key) is not None]
                if scored:
                    keep.add(max(scored, key=lambda e: e.metrics[key]).step)
        ranges = [(1, s.baseline_steps), (step - 2 * s.window + 1, step), *((e - s.window + 1, e) for e in keep)]
        for points in self.metrics.values():
            for st in [st for st in points if not any(lo <= st <= hi for lo, hi in ranges)]:
                del points[st]

    @classmethod
    def read(cls, store, settings: AlarmsConfig, weights: dict[str, float]) -> "StepHistory":
        """The history of the run in `store` as it stands (a resumed run's), read once."""
        out = cls(settings, weights)
        known = set(store.metric_keys())
        with store.snapshot():
            for key, points in store.metrics([k for k in out.keys if k in known]).items():
                out.metrics[key] = dict(points)
            out.evals = [EvalRow(e.step, e.metrics, 0, 0.0) for e in store.evals()]
            steps = store.group_steps()
            for st in (st for st in steps if st <= settings.baseline_steps):
                out.baseline += store.groups(step=st, limit=None, with_samples=True)
            if steps:
                out.groups = store.groups(step=steps[-1], limit=None, with_samples=True)
        last = max((st for points in out.metrics.values() for st in points), default=0)
        out._forget(last)
        return out


# ---- the trainer's alarms -----------------------------------------------------------------------------------
class RunAlarms:
    """The run's alarm checker: :meth:`add_step` and :meth:`add_eval` keep its history (in memory); after each
    step, :meth:`check` runs the checks, records newly raised alarms (``alarm`` events) and cleared ones
    (``alarm_cleared``) in the run store, and returns the new ones. Built on a run store that holds steps (a
    resume), it reads the history and the raised alarms from it, once."""

    def __init__(self, store, settings: AlarmsConfig, weights: dict[str, float]):
        self.store, self.s = store, settings
        self.watch = AlarmWatch(settings.clear_steps, store.events())
        self.steps = StepHistory.read(store, settings, weights)

    def add_step(self, step: int, metrics: dict[str, Any], records: list[GroupRecord]) -> None:
        self.steps.add_step(step, metrics, records)

    def add_eval(self, step: int, metrics: dict[str, Any]) -> None:
        self.steps.add_eval(step, metrics)

    def check(self, step: int) -> list[Alarm]:
        if not self.s.enabled:
            return []
        new, cleared = self.watch.update(detect(self.steps.history(step), self.s))
        for a in new:
            a.groups = self._with_ids(a.groups)
            self.store.log_event(step, "alarm", a.message, a.data())
        for key in cleared:
            kind, _, subject = key.partition(":")
            self.store.log_event(step, "alarm_cleared", f"{key}: the sign has been gone for {self.s.clear_steps} "
                                 "steps", {"kind": kind, "subject": subject or None})
        return new

    def _with_ids(self, links: list[dict]) -> list[dict]:
        """An alarm's group links with the run store's group ids (the run page opens a group by its id)."""
        ids = {(g.step, g.group_index): g.id for st in {link["step"] for link in links}
               for g in self.store.groups(step=st, limit=None)}
        return [{**link, "id": ids.get((link["step"], link["group_index"]), link["id"])} for link in links]
