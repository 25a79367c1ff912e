"""TRL reward functions <-> kitae graders, with TRL's exact call convention (and one real GRPOTrainer step)."""

from __future__ import annotations

import asyncio
from collections import defaultdict

import pytest

from kitae.graders import GRADERS, Grade, Grader, as_reward_function, build_grader, grader_from_callable, register_grader


class TrlLogs:
    """Stands in for the trainer's log_extra / log_metric sinks (plain collectors, as in GRPOTrainer)."""

    def __init__(self):
        self.extra, self.metrics = defaultdict(list), defaultdict(list)

    def kwargs(self) -> dict:
        return {"trainer_state": object(), "log_extra": lambda c, v: self.extra[c].extend(v),
                "log_metric": lambda n, v: self.metrics[n].append(v)}


def test_a_grader_as_a_trl_reward_function():
    reward = as_reward_function(build_grader({"type": "numeric"}), "num")
    logs = TrlLogs()
    # TRL's batch: each prompt repeated num_generations (2) times, dataset columns repeated alongside
    out = reward(
        prompts=["rate?", "rate?", "capital?", "capital?"],
        completions=["5%", "9%", "Paris", "Lyon"],
        completion_ids=[[1], [2], [3], [4]],
        reference_answer=["5%", "5%", "Paris", "Paris"],
        **logs.kwargs(),
    )
    assert out == [1.0, 0.0, None, None]  # no number in the reference: abstain (TRL masks None)
    assert reward.__name__ == "num"
    assert logs.extra["num_reason"][0] == "5%→5% (0.0%): 1"
    assert logs.extra["num_reason"][2] == "reference has no number: skipped"


def test_sub_scores_are_logged_as_metrics():
    spec = {"type": "weighted", "graders": {"sim": {"type": "text_similarity"}, "exact": {"type": "string_check", "operation": "eq"}}}
    reward = as_reward_function(build_grader(spec), "mix")
    logs = TrlLogs()
    out = reward(prompts=["p", "p"], completions=["a b", "a c"], reference_answer=["a b", "a b"], **logs.kwargs())
    assert out == pytest.approx([1.0, 0.25])  # (0.5 + 0) / 2 for the second
    assert logs.metrics["mix/exact"] == [0.5] and logs.metrics["mix/sim"] == [pytest.approx(0.75)]


def test_conversational_prompts_and_completions():
    reward = as_reward_function(build_grader({"type": "answer"}))
    prompt = [{"role": "user", "content": "12+35?"}]
    out = reward(prompts=[prompt, prompt], completions=[[{"role": "assistant", "content": "47"}],
                                                         [{"role": "assistant", "content": "48"}]],
                 reference_answer=["47", "47"])
    assert out == [1.0, 0.0]


@pytest.fixture
def group_grader():
    @register_grader("test_batch_rank")
    class Rank(Grader):
        needs_group = True

        def grade_samples(self, item, samples):
            lengths = [len(s["output_text"]) for s in samples]
            return [Grade(score=float(n == max(lengths))) for n in lengths]

    yield build_grader("test_batch_rank")
    GRADERS._entries.pop("test_batch_rank")


def test_consecutive_rows_of_one_prompt_form_a_group(group_grader):
    reward = as_reward_function(group_grader)
    out = reward(prompts=["p", "p", "p", "q", "q"], completions=["aaa", "a", "aa", "b", "bbbb"], answer=[1, 1, 1, 2, 2])
    assert out == [1.0, 0.0, 0.0, 0.0, 1.0]  # the longest in each group, not in the batch


def test_async_reward_function():
    reward = as_reward_function(build_grader({"type": "answer"}), asynchronous=True)
    assert asyncio.iscoroutinefunction(reward)
    assert asyncio.run(reward(prompts=["p"], completions=["47"], reference_answer=["47"])) == [1.0]


# ---- a TRL reward function as a kitae grader ------------------------------------------------------
def test_callable_receives_trls_arguments():
    calls = []

    def reward_len(prompts, completions, completion_ids=None, **columns):
        calls.append((prompts, completions, completion_ids, columns))
        return [len(c) / 10 for c in completions]

    grader = grader_from_callable(reward_len)
    item = {"prompt": "say hi", "reference_answer": "hi", "level": 2}
    grades = grader.grade_group(item, [{"output_text": "hi", "completion_ids": [5]}, {"output_text": "hello", "completion_ids": [6, 7]}])
    assert [g.score for g in grades] == [0.2, 0.5] and grader.name == "reward_len"
    assert calls == [(["say hi", "say hi"], ["hi", "hello"], [[5], [6, 7]], {"reference_answer": ["hi", "hi"], "level": [2, 2]})]


def test_callable_with_conversational_messages():
    seen = []

    def fn(prompts, completions, **kw):
        seen.append(completions)
        return [1.0]

    grader_from_callable(fn, "conv").grade_group({"messages": [{"role": "user", "content": "hi"}]}, [{"output_text": "yo<|im_end|>"}])
    assert seen == [[[{"role": "assistant", "content": "yo"}]]]


def test_async_callable():
    async def fn(prompts, completions, **kw):
        await asyncio.sleep(0)
        return [0.5 for _ in completions]

    assert [g.score for g in grader_from_callable(fn).grade_group({"prompt": "p"}, [{"output_text": "a"}] * 2)] == [0.5, 0.5]


@pytest.mark.parametrize(
    "returned, scores, error",
    [
        ([None, 0.5], [None, 0.5], None),  # None abstains
        ([float("nan"), 1], [None, 1.0], "returned nan, not a finite number"),  # abstains, counted as an error
        ([float("inf"), -float("inf")], [None, None], "returned inf, not a finite number"),
        ([1.0], [None, None], "grader returned 1 grades for 2 samples"),
        (["high", 1.0], [None, 1.0], "returned 'high', not a number"),
        (RuntimeError("boom"), [None, None], "RuntimeError: boom"),
    ],
)
def test_callable_results_and_failures(returned, scores, error):
    def fn(prompts, completions, **kw):
        if isinstance(returned, Exception):
            raise returned
        return returned

    grades = grader_from_callable(fn, "f").grade_group({"prompt": "p"}, [{"output_text": "a"}, {"output_text": "b"}])
    assert [g.score for g in grades] == scores
    if error:
        assert any(error in (g.error or "") for g in grades)


@pytest.mark.slow
def test_a_real_grpo_trainer_step_with_a_kitae_reward(tmp_path):
    pytest.importorskip("trl")
    from datasets import Dataset
    from trl import GRPOConfig, GRPOTrainer

    from tests.tiny import tiny_llama, tiny_tokenizer

    tok = tiny_tokenizer()
    reward = as_reward_function(build_grader({"type": "numeric"}), "num")
    dataset = Dataset.from_list([{"prompt": "what is 12+35?", "reference_answer": "47"}] * 4)
    args = GRPOConfig(output_dir=str(tmp_path), per_device_train_batch_size=4, num_generations=4,
                      max_completion_length=8, max_steps=1, report_to="none", use_cpu=True, logging_steps=1,
                      save_strategy="no")
    trainer = GRPOTrainer(model=tiny_llama(len(tok)), processing_class=tok, reward_funcs=[reward], args=args,
                          train_dataset=dataset)
    trainer.train()
    logged = trainer.state.log_history[0]
    assert "rewards/num/mean" in logged and 0.0 <= logged["rewards/num/mean"] <= 1.0
