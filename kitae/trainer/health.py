"""The run's health after each step, in one place: reward droughts, same scores, skipped optimizer steps, alarms.

:class:`RunHealth` is built once by the trainer; the loop calls :meth:`RunHealth.after_step` after each logged step
and :meth:`RunHealth.after_eval` after each evaluation. After a step, in this order:

1. alarms (kitae.trainer.alarms, main process): checked on the run's history, kept in memory from what each step
   logged; each new one is an event and goes to the console; one of ``alarms.stop_on`` asks the run to stop after
   this step, at a checkpoint, as Ctrl-C does (every process learns it).
2. skipped optimizer steps (a gradient norm that was not finite, kitae.trainer.update): an event each.
3. rewards (:class:`Drought`): steps in a row in which no sample got a reward stop the run, a checkpoint saved
   (:func:`no_reward_message`), and so do steps in a row in which one component gave no sample a finite score
   (:func:`component_message`; a reward function that fails on every sample trained on nothing while the others
   carried the run), or they warn (:func:`component_warning`). At the run's first step, a reward function that
   gives every sample the same score is worth a warning too (:func:`same_score_warning`): it cannot tell
   completions apart.
"""

from __future__ import annotations

import warnings
from typing import Any, Callable

from kitae.errors import KitaeError
from kitae.graders.adapters import CallableGrader
from kitae.graders.base import is_finite_number
from kitae.scoring.components import GroupScores, RewardComponent
from kitae.store.records import GroupRecord, valid_text
from kitae.trainer.alarms import Alarm, RunAlarms
from kitae.trainer.processes import gather


class RunHealth:
    """The checks after each step and what they decide: a stop (``request_stop(alarm)``), a checkpoint and an
    error (``save(step)``, then KitaeError), warnings and events. ``skipped_total()``: the optimizer steps skipped
    so far (kitae.trainer.update.PolicyUpdate.skipped_steps); ``on_alarm(alarm)``: the console's hook."""

    def __init__(self, cfg, acc, store, components: list[RewardComponent], start_step: int, *,
                 save: Callable[[int], None], request_stop: Callable[[Alarm], None],
                 skipped_total: Callable[[], int], on_alarm: Callable[[Alarm], None]):
        self.cfg, self.acc, self.store, self.components = cfg, acc, store, components
        self.start_step = start_step
        self.save, self.request_stop, self.skipped_total, self.on_alarm = save, request_stop, skipped_total, on_alarm
        self.drought = Drought([c.name for c in components])  # steps in a row without a finite score
        weights = {r.name: r.weight for r in cfg.rewards}
        self.alarms = RunAlarms(store, cfg.alarms, weights) if store is not None else None  # reads a resumed run once

    def after_step(self, step: int, metrics: dict[str, float], records: list[GroupRecord], got: Any,
                   trained: dict[str, float]) -> None:
        """After step `step` is logged: `metrics` as logged, `records` the groups as logged (every process's, in
        multi-process runs), `got` the step's kitae.trainer.collect.Collected, `trained` the update's metrics. A
        step without groups (partial rollouts: none finished) is only remembered. Every process calls it."""
        if self.alarms is not None:
            self.alarms.add_step(step, metrics, records)
        if not got.groups:
            return
        self._check_alarms(step)
        self._record_skipped_steps(step, trained)
        self._watch_rewards(step, metrics, got)

    def after_eval(self, step: int, metrics: dict[str, float] | None) -> None:
        """After the evaluation at `step` (its metrics; None on the processes that did not evaluate)."""
        if self.alarms is not None and metrics is not None:
            self.alarms.add_eval(step, metrics)

    def _check_alarms(self, step: int) -> None:
        """The run's alarms (main process): each new one is an event and goes to the console; one of
        ``alarms.stop_on`` stops the run after this step. Every process learns whether to stop."""
        raised = self.alarms.check(step) if self.alarms is not None else []
        for alarm in raised:
            self.on_alarm(alarm)
        stop_on = self.cfg.alarms.stop_on
        stop = next((a for a in raised if a.kind in stop_on), None)
        if stop_on and self.acc.num_processes > 1:
            stop = next((a for a in gather(self.acc, [stop]) if a is not None), None)
        if stop is not None:
            self.request_stop(stop)

    def _record_skipped_steps(self, step: int, trained: dict[str, float]) -> None:
        """An optimizer step skipped for a gradient norm that was not finite is an event of the run: it says the
        step's batch did not train."""
        skipped = int(trained.get("skipped_steps", 0))
        if skipped and self.store is not None:
            self.store.log_event(step, "step_skipped", f"{skipped} of {self.cfg.algorithm.mu} optimizer step(s) "
                                 f"skipped: the gradient norm was not finite ({trained['grad_norm']}); the weights "
                                 "were left as they were", {"skipped_steps": skipped, "total": self.skipped_total()})

    def _watch_rewards(self, step: int, metrics: dict[str, float], got: Any) -> None:
        """Stop (a checkpoint saved, an error raised) after `algorithm.max_steps_without_reward` steps in a row in
        which no sample got a reward (a grader failing on every sample, a reward server down), or in which one
        component gave no sample a finite score (a reward function that fails on every sample: the run trained
        on the others alone); `algorithm.component_without_reward: warn` only warns for the latter. A run that
        trains on nothing, or not on what was asked, must not end as "finished". Warns at the first step a
        component has no finite score, and at the run's first step when a reward function gives every sample
        the same score. The rates are means over processes, so every process decides alike."""
        a = self.cfg.algorithm
        limit = a.max_steps_without_reward or 0
        dry = {c.name: metrics[f"grader/{c.name}/abstain_rate"] >= 1.0 for c in self.components}
        first_dry = self.drought.update(metrics["invalid_rate"] >= 1.0, dry)
        if limit and self.drought.no_reward >= limit:
            self.save(step)
            raise KitaeError(no_reward_message(self.drought.no_reward, step,
                                               last_problems(self.components, got.scores), self.cfg.run_dir))
        name, steps = self.drought.longest()
        if limit and steps >= limit and a.component_without_reward == "stop":
            self.save(step)
            raise KitaeError(component_message(name, steps, step, component_errors(name, got.scores),
                                               self.cfg.run_dir))
        if self.acc.is_main_process:
            for name in first_dry:
                warnings.warn(component_warning(name, step, component_errors(name, got.scores), limit,
                                                a.component_without_reward), stacklevel=3)
        if step == self.start_step + 1:
            self._warn_same_scores(step, got)

    def _warn_same_scores(self, step: int, got: Any) -> None:
        """A reward function that gave every sample of the step (all processes) one score reads its input wrong,
        often: for chat prompts TRL's completions are message lists, not strings."""
        values: dict[str, set[float]] = {}
        scored: dict[str, int] = {}
        for per_process in gather(self.acc, [function_scores(self.components, got.scores)]):
            for name, (distinct, n) in per_process.items():
                values.setdefault(name, set()).update(distinct)
                scored[name] = scored.get(name, 0) + n
        row = got.rows[0]
        conversational = isinstance(row.get("prompt", row.get("messages")), list)
        for name, seen in values.items():
            if len(seen) == 1 and scored[name] > 1 and self.acc.is_main_process:
                warnings.warn(same_score_warning(name, next(iter(seen)), step, conversational), stacklevel=4)


# ---- rewards: droughts and the messages that say so -----------------------------------------------------------
def last_problems(components: list[RewardComponent], scores: list[GroupScores]) -> dict[str, str]:
    """Per component, why its last sample of the step has no score: the grader's error, else its reason."""
    out = {}
    for c in components:
        grades = [g for gs in scores for g in gs.grades[c.name] if g.score is None]
        last = grades[-1] if grades else None
        why = (last.error or last.reason) if last is not None else None
        out[c.name] = why or ("abstained without saying why" if last is not None else "scored (weight 0: logs only)")
    return out


def no_reward_message(steps: int, last_step: int, problems: dict[str, str], run_dir: Any) -> str:
    """The error that stops a run in which no sample got a reward for ``steps`` steps in a row."""
    first = last_step - steps + 1
    span = f"step {last_step}" if steps == 1 else f"steps {first}-{last_step}"
    lines = [f"no sample got a reward in {span}: every reward component abstained or failed on every sample, so "
             f"training learned nothing (algorithm.max_steps_without_reward: {steps}). Each component's last error:"]
    lines += [f"  {name}: {_short(why)}" for name, why in problems.items()]
    lines.append(f"Fix the rewards (the run page, `kitae ui`, shows every sample's errors), then continue from the "
                 f"checkpoint of step {last_step} with `kitae train --resume {run_dir}`; "
                 f"algorithm.max_steps_without_reward: 0 never stops.")
    return "\n".join(lines)


class Drought:
    """Steps in a row without a finite score: of the whole reward (no sample got one) and of each component.

    >>> d = Drought(["a", "b"])
    >>> d.update(no_reward=False, dry={"a": True, "b": False})
    ['a']
    >>> d.update(no_reward=False, dry={"a": True, "b": False}), d.steps["a"]
    ([], 2)
    """

    def __init__(self, names: list[str]):
        self.no_reward = 0
        self.steps = dict.fromkeys(names, 0)
        self._told: set[str] = set()

    def update(self, no_reward: bool, dry: dict[str, bool]) -> list[str]:
        """Count one step; returns the components dry for the first time in the run (to warn about, once)."""
        self.no_reward = self.no_reward + 1 if no_reward else 0
        for name, is_dry in dry.items():
            self.steps[name] = self.steps[name] + 1 if is_dry else 0
        new = [n for n, k in self.steps.items() if k and n not in self._told]
        self._told.update(new)
        return new

    def longest(self) -> tuple[str, int]:
        """The component dry for the most steps in a row, and how many ("", 0 without components)."""
        return max(self.steps.items(), key=lambda kv: kv[1], default=("", 0))


def component_errors(name: str, scores: list[GroupScores], keep: int = 3) -> list[str]:
    """The last ``keep`` distinct reasons the component's samples of a step have no score (errors, else reasons)."""
    out: list[str] = []
    for grade in (g for gs in scores for g in gs.grades[name] if not is_finite_number(g.score)):
        why = _short(grade.error or grade.reason or "abstained without saying why")
        if why in out:
            out.remove(why)
        out.append(why)
    return out[-keep:]


def _span(steps: int, last_step: int) -> str:
    return f"step {last_step}" if steps == 1 else f"steps {last_step - steps + 1}-{last_step}"


def component_message(name: str, steps: int, last_step: int, errors: list[str], run_dir: Any) -> str:
    """The error that stops a run in which component ``name`` gave no sample a finite score for ``steps`` steps
    in a row (the others did)."""
    lines = [f"reward component {name!r} gave no sample a finite score in {_span(steps, last_step)}, so the run "
             f"trained on the other components alone (algorithm.max_steps_without_reward: {steps}). Its last errors:"]
    lines += [f"  {e}" for e in errors]
    lines.append(f"Fix it (the run page, `kitae ui`, shows every sample's errors), then continue from the checkpoint "
                 f"of step {last_step} with `kitae train --resume {run_dir}`; algorithm.component_without_reward: warn "
                 f"only warns (for a component meant to abstain on whole steps).")
    return "\n".join(lines)


def component_warning(name: str, step: int, errors: list[str], limit: int, mode: str) -> str:
    """The warning at the first step in which component ``name`` gave no sample a finite score; ``limit`` and
    ``mode`` are ``algorithm.max_steps_without_reward`` and ``algorithm.component_without_reward``."""
    if mode == "stop" and limit:
        then = f"the run stops if it goes on for {limit} steps in a row (algorithm.max_steps_without_reward)"
    elif mode == "stop":
        then = "the run goes on without it (algorithm.max_steps_without_reward: 0)"
    else:
        then = "the run goes on without it (algorithm.component_without_reward: warn)"
    return (f"reward component {name!r} gave no sample a finite score in step {step}; {then}. Its last errors: "
            + " | ".join(errors))


def function_scores(components: list[RewardComponent], scores: list[GroupScores]) -> dict[str, tuple[list[float], int]]:
    """Per reward-function component (a ``function:`` reward): up to two of its distinct finite scores of the
    step and how many samples got one. One value for several samples: every sample scored the same."""
    out = {}
    for c in components:
        if isinstance(c.grader, CallableGrader):
            got = [float(g.score) for gs in scores for g in gs.grades[c.name] if is_finite_number(g.score)]
            out[c.name] = (sorted(set(got))[:2], len(got))
    return out


def same_score_warning(name: str, value: float, step: int, conversational: bool) -> str:
    """The warning when reward function ``name`` gave every sample of a whole step the same score."""
    shape = ('completions are lists of chat messages, [{"role": "assistant", "content": TEXT}] (TRL\'s conversational '
             'format): read completion[0]["content"]' if conversational else
             "completions are strings (the prompts are plain strings, TRL's standard format)")
    return (f"reward function {name!r} gave every sample it scored in step {step} the same score ({value:g}): it "
            f"cannot tell completions apart, so it adds nothing to the advantages. Check what it reads: here {shape}.")


def _short(text: str, limit: int = 300) -> str:
    text = " ".join(valid_text(text).split())  # printable, one line
    return text if len(text) <= limit else text[: limit - 3] + "..."
