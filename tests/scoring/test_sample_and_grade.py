"""The one sample-and-grade loop (kitae.scoring.sample_and_grade): a prompt set in fixed batches, batch b seeded with
``seed + b·B``, done batches skipped without sampling, every sample graded against its own row."""

from __future__ import annotations

import pytest

from kitae.graders.base import Grade, Grader
from kitae.rollout.base import Completion, SamplingParams
from kitae.scoring.components import RewardComponent
from kitae.scoring.sample_and_grade import graded_batches, sample_and_grade


class SeedEcho:
    """An engine whose completions say which prompt and seed sampled them; it records every call."""

    def __init__(self):
        self.calls: list[tuple[list[str], int, int | None]] = []

    def generate(self, prompts, n, sampling):
        self.calls.append((list(prompts), n, sampling.seed))
        return [[Completion(f"{p}@{sampling.seed}#{j}", [0], [1] * (j + 1), [0.0] * (j + 1), "stop")
                 for j in range(n)] for p in prompts]


class RowMatch(Grader):
    """1 when the sample is of its own row's prompt, else 0: grading against the wrong row shows."""

    def grade_sample(self, item, sample):
        return Grade(float(sample["output_text"].startswith(f"{item['prompt']}@")))


PROMPTS = [f"p{i}" for i in range(5)]
ROWS = [{"prompt": p} for p in PROMPTS]


@pytest.mark.parametrize("batch_prompts, skipped, calls", [
    (2, set(), [(["p0", "p1"], 10), (["p2", "p3"], 12), (["p4"], 14)]),  # seed + first index of the batch
    (2, {2, 3}, [(["p0", "p1"], 10), (["p4"], 14)]),  # a done batch is not sampled; the others keep their seeds
    (2, {2}, [(["p0", "p1"], 10), (["p2", "p3"], 12), (["p4"], 14)]),  # partly done: sampled whole, same seed
    (5, set(), [(PROMPTS, 10)]),  # one batch
    (3, {0, 1, 2, 3, 4}, []),  # everything done: nothing sampled
])
def test_batches_seeds_and_skips(batch_prompts, skipped, calls):
    engine = SeedEcho()
    comp = [RewardComponent("row", 1.0, RowMatch())]
    batches = list(graded_batches(engine, PROMPTS, ROWS, 2, SamplingParams(seed=10, max_new_tokens=7), comp,
                                  batch_prompts, skip=lambda idx: all(i in skipped for i in idx)))
    assert [(p, s) for p, _, s in engine.calls] == calls
    assert [list(b.indices) for b in batches] == [[PROMPTS.index(p) for p in ps] for ps, _ in calls]
    for b in batches:
        assert b.items == [ROWS[i] for i in b.indices]
        assert [s.totals for s in b.scores] == [[1.0, 1.0]] * len(b.items)  # each against its own row
        assert all(s["max_completion_length"] == 7 for g in b.samples for s in g)
        assert [[s["output_text"] for s in g] for g in b.samples] == [[c.text for c in g] for g in b.groups]


def test_sample_and_grade_puts_extra_in_every_sample_and_keeps_the_seed():
    engine = SeedEcho()
    comp = [RewardComponent("row", 1.0, RowMatch())]
    got = sample_and_grade(engine, PROMPTS[:2], ROWS[:2], 3, SamplingParams(seed=5), comp, {"step": 4}, start=7)
    assert engine.calls == [(PROMPTS[:2], 3, 5)]  # the seed as given: offsets are graded_batches' business
    assert list(got.indices) == [7, 8]
    assert [s["step"] for g in got.samples for s in g] == [4] * 6
    assert [s["completion_tokens"] for s in got.samples[0]] == [1, 2, 3]
