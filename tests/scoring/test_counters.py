"""Grader.counters(): the cumulative numbers a run logs per step as ``grader/<component>/<counter>`` (judge calls and
tokens, reward-model failures, ...), read from every grader through that one method; combining graders include
their parts' as ``part/counter``."""

from __future__ import annotations

import pytest

from kitae.graders import build_grader
from kitae.graders.base import Grade, Grader
from kitae.graders.combine import WeightedGrader
from kitae.scoring.components import RewardComponent, counter_deltas

INPUT = [{"role": "user", "content": "{{sample.output_text}}"}]
URL = "http://127.0.0.1:9/v1"  # nothing is called: the graders are only built
JUDGE = ["judge_abstained_samples", "judge_cached_calls", "judge_calls", "judge_completion_tokens", "judge_failed_calls",
         "judge_invalid_outputs", "judge_prompt_tokens", "judge_tokens"]
MODEL = ["judge_abstained_samples", "judge_cached_calls", "judge_calls", "judge_non_finite", "judge_tokens",
         "judge_unreadable"]
RM = ["abstained", "failed_calls", "gated", "non_finite", "samples", "scored"]
CLIENT = ["client_bad_replies", "client_connection_errors", "client_failed_calls", "client_http_errors",
          "client_requests", "client_retries", "client_timeouts"]


@pytest.mark.parametrize("spec, names", [
    ({"type": "answer"}, []),  # counts nothing
    ({"type": "judge", "model": "m", "base_url": URL}, JUDGE),
    ({"type": "score_model", "model": "m", "base_url": URL, "input": INPUT}, MODEL),
    ({"type": "label_model", "model": "m", "base_url": URL, "input": INPUT, "labels": ["a", "b"],
      "passing_labels": ["a"]}, MODEL),
    ({"type": "reward_model", "url": "http://127.0.0.1:9"}, RM + CLIENT),  # the HTTP client's, once it exists
    ({"type": "weighted", "graders": {"j": {"type": "judge", "model": "m", "base_url": URL}, "a": {"type": "answer"}}},
     [f"j/{n}" for n in JUDGE]),  # a part's counters under its name
    ({"type": "gate", "gate": {"type": "format", "check": "json"},
      "grader": {"type": "multi", "graders": {"s": {"type": "score_model", "model": "m", "base_url": URL,
                                                    "input": INPUT}}, "calculate_output": "s"}},
     [f"grader/s/{n}" for n in MODEL]),  # parts of parts: the names joined
], ids=["answer", "judge", "score_model", "label_model", "reward_model", "weighted", "nested"])
def test_the_counters_each_grader_logs(spec, names):
    grader = build_grader(spec, "grader")
    if spec["type"] == "reward_model":
        grader.scorer  # the remote scorer (and its HTTP client) is made on first use
    counters = grader.counters()
    assert sorted(counters) == sorted(names)
    assert all(type(v) is float and v == 0.0 for v in counters.values())  # nothing graded yet
    grader.close()


class Counting(Grader):
    def __init__(self):
        self.calls = 0

    def grade_sample(self, item, sample):
        self.calls += 1
        return Grade(1.0)

    def counters(self):
        return {"calls": self.calls, "label": "not a number", "flag": True}


class Guessable(Grader):
    """metrics() and stats() are not counters: the trainer used to guess between them."""

    def grade_sample(self, item, sample):
        return Grade(1.0)

    def metrics(self):
        return {"calls": 1.0}

    def stats(self):
        return {"calls": 1}


def test_counter_deltas_log_each_steps_change_as_grader_component_counter():
    inner = Counting()
    components = [RewardComponent("judge", 1.0, WeightedGrader({"part": inner}, {"part": 1.0})),
                  RewardComponent("plain", 1.0, Guessable())]
    inner.grade_group({}, [{"output_text": "a"}, {"output_text": "b"}])
    step1, totals = counter_deltas(components, {})
    assert step1 == {"grader/judge/part/calls": 2.0}  # numbers only; metrics()/stats() are not read
    inner.grade_group({}, [{"output_text": "c"}])
    step2, totals = counter_deltas(components, totals)
    assert (step2, totals) == ({"grader/judge/part/calls": 1.0}, {"grader/judge/part/calls": 3.0})


def test_a_grader_counts_nothing_by_default():
    assert Grader().counters() == {}
