"""Reward functions of the trainer tests, named in their configs as ``tests.reward_functions:NAME`` (the repository
root is on sys.path in a pytest session, and on PYTHONPATH for the runs a test starts: the ``rewards_on_path``
fixture). Each has the shape of a user's reward function; the comment says which case it exists for."""

from __future__ import annotations

import os
import time


def short(prompts, completions, completion_ids=None, **kw):
    return [-len(c[0]["content"]) / 10 for c in completions]


def paced(prompts, completions, completion_ids=None, **kw):  # a slow grader: the run lasts long enough to watch
    time.sleep(1.0)
    return [0.0 for _ in completions]


def picky(prompts, completions, completion_ids=None, **kw):  # zero variance in every group of process 1
    if os.environ.get("RANK", "0") == "1":
        return [1.0 for _ in completions]
    return [-len(c[0]["content"]) / 10 for c in completions]


def down(prompts, completions, completion_ids=None, **kw):  # a reward service, down until TINY_REWARDS_UP is set
    if not os.environ.get("TINY_REWARDS_UP"):
        raise ConnectionError("reward service down: \udcff")  # with a lone surrogate, as decoded bytes can be
    return [-len(c[0]["content"]) / 10 for c in completions]


def silent(prompts, completions, completion_ids=None, **kw):  # abstains on every sample, says nothing
    return [None for _ in completions]


# written as TRL's docs write them: each reads one more part of TRL's contract
def by_tokens(completion_ids, **kwargs):  # token counts (kitae passed completion_ids=None: failed every sample)
    return [-len(ids) / 10 for ids in completion_ids]


def ramp(completions, trainer_state, **kwargs):  # a schedule over the run (trainer_state was never passed)
    return [trainer_state.global_step / trainer_state.max_steps - len(c[0]["content"]) / 10 for c in completions]


def repetition(completion_ids, **kwargs):  # trl.rewards' own, made by its factory
    from trl.rewards import get_repetition_penalty_reward

    return get_repetition_penalty_reward(ngram_size=2)(completion_ids=completion_ids, **kwargs)


def as_strings(completions, **kwargs):  # written for string completions: a chat completion is a 1-message list
    return [-abs(20 - len(c)) for c in completions]


def huge(prompts, completions, completion_ids=None, **kw):  # 1e308 on every other sample: finite, but its mean is not
    return [1e308 if i % 2 else -len(c[0]["content"]) / 10 for i, c in enumerate(completions)]


def flaky(prompts, completions, completion_ids=None, **kw):
    if "1" in prompts[0][-1]["content"]:
        raise RuntimeError("grader service down")
    return [None if i % 2 else 1.0 for i in range(len(completions))]


# the model families' tests (tests/families)
def chars(prompts, completions, **kw):  # a reward with variance in every group of a random model
    return [len(c[0]["content"]) / 10 for c in completions]


def answered(prompts, completions, **kw):  # 1 for a completion with an answer (what think: strip left of it)
    return [float(bool(c[0]["content"].strip())) for c in completions]


SEEN: list[str] = []  # what `seen` was given (a test that reads it puts an empty list of its own here first)


def seen(prompts, completions, **kw):  # what a reward function is given: the content, without the marker
    SEEN.extend(c[0]["content"] for c in completions)
    return [float(len(c[0]["content"])) for c in completions]
