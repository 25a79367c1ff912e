"""Every bundled grader type as a reward function of one real TRL GRPOTrainer step on the bundled model.

TRL hands reward functions its completions decoded without special tokens (no ``<|im_end|>``) and no finish
reason. For each grader we record what TRL passed and what the reward function returned, then grade the same
completions the way kitae's trainer does (kitae.scoring.sample_and_grade.sample_dict on a rollout Completion: the text
with its end token, the finish reason, the token count) and require the same score for every completion.
"""

from __future__ import annotations

import json

import pytest

from kitae.graders import as_reward_function, build_grader
from kitae.judge.testing import Reply, ScriptedServer, judge_brain
from kitae.models import BUNDLED_DATA
from kitae.rollout.base import Completion
from kitae.scoring.sample_and_grade import sample_dict

pytestmark = pytest.mark.slow

MAX_LEN = 6  # tokens: short enough that some completions are cut, long enough that some end their turn
GENERATIONS = 4
PROMPTS = 3


def _last_user_text(request: dict) -> str:
    return str(request["messages"][-1]["content"])


def score_brain(request: dict) -> Reply:
    """A score_model server: a number that depends on the answer it is shown."""
    return Reply(content=json.dumps({"result": (len(_last_user_text(request)) % 11) / 10}))


def label_brain(request: dict) -> Reply:
    labels = ["correct", "partly_correct", "wrong"]
    return Reply(content=json.dumps({"label": labels[len(_last_user_text(request)) % 3]}))


PYTHON_SOURCE = '''
def grade(sample, item):
    """Reads the fields a rollout gives: the finish reason and the token count."""
    if sample.get("finish_reason") != "stop":
        return -1.0
    return sample["completion_tokens"] / 10 + (sample["output_text"].strip() == item["reference_answer"])
'''


def grader_specs(judge_url: str, score_url: str, label_url: str) -> dict[str, dict]:
    """One spec per bundled grader type (the combinators wrap graders whose scores depend on the end marker)."""
    client = {"model": "scripted-judge", "retries": 0, "cache": False}
    judge_input = [{"role": "user", "content": "Reference: {{item.reference_answer}}\nAnswer: {{sample.output_text}}"}]
    template = {"type": "template", "min_chars": 0, "full_chars": 0}
    return {
        "template": template,
        "template_default": {"type": "template"},
        "repetition": {"type": "repetition", "n": 2},
        "overlong": {"type": "overlong"},
        "soft_overlong": {"type": "soft_overlong", "cache_tokens": 2},
        "diversity": {"type": "diversity"},
        "reward_model": {"type": "reward_model", "model": "bundled", "full_chars": 0},
        "length": {"type": "length"},
        "answer": {"type": "answer"},
        "math": {"type": "math"},
        "numeric": {"type": "numeric"},
        "string_check": {"type": "string_check", "operation": "eq"},
        "text_similarity": {"type": "text_similarity", "evaluation_metric": "fuzzy_match"},
        "format": {"type": "format", "check": "regex", "pattern": r"^\d+"},
        "python": {"type": "python", "source": PYTHON_SOURCE, "timeout": 20},
        "weighted": {"type": "weighted", "graders": {"t": {**template, "weight": 1}, "a": {"type": "answer", "weight": 1}}},
        "gate": {"type": "gate", "gate": template, "grader": {"type": "answer"}, "threshold": 1.0},
        "multi": {"type": "multi", "graders": {"t": template, "o": {"type": "overlong"}}, "calculate_output": "t + o"},
        "judge": {"type": "judge", "base_url": judge_url, **client},
        "score_model": {"type": "score_model", "base_url": score_url, "input": judge_input, "range": [0, 1], **client},
        "label_model": {"type": "label_model", "base_url": label_url, "input": judge_input,
                        "labels": ["correct", "partly_correct", "wrong"], "passing_labels": ["correct"], **client},
    }


def recording(fn, calls: list):
    """``fn`` as TRL sees it (same name), recording each call's completion ids and the rewards it returned."""

    def reward(prompts, completions, completion_ids=None, **kwargs):
        out = fn(prompts=prompts, completions=completions, completion_ids=completion_ids, **kwargs)
        calls.append({"prompts": prompts, "completion_ids": completion_ids, "rewards": list(out)})
        return out

    reward.__name__ = fn.__name__
    return reward


@pytest.fixture(scope="module")
def servers():
    with (ScriptedServer(default=judge_brain(lambda text: 1 + len(text) % 5)) as judge,
          ScriptedServer(default=score_brain) as score, ScriptedServer(default=label_brain) as label):
        yield judge, score, label


@pytest.fixture(scope="module")
def trl_step(servers, tmp_path_factory):
    """One GRPOTrainer step with every grader as a reward function: (trainer, specs, calls per grader, rows)."""
    pytest.importorskip("trl")
    from datasets import Dataset
    from trl import GRPOConfig, GRPOTrainer

    from kitae.models import load_causal_lm, load_tokenizer

    rows = [json.loads(line) for line in (BUNDLED_DATA / "train.jsonl").read_text(encoding="utf-8").splitlines()[:PROMPTS]]
    dataset = Dataset.from_list([{"prompt": r["messages"], "reference_answer": r["reference_answer"]} for r in rows])
    tokenizer = load_tokenizer(None)
    specs = grader_specs(*(s.base_url for s in servers))
    calls = {name: [] for name in specs}
    rewards = [recording(as_reward_function(build_grader(spec), name, tokenizer=tokenizer, max_completion_length=MAX_LEN),
                         calls[name]) for name, spec in specs.items()]
    args = GRPOConfig(output_dir=str(tmp_path_factory.mktemp("trl")), per_device_train_batch_size=PROMPTS * GENERATIONS,
                      num_generations=GENERATIONS, max_completion_length=MAX_LEN, max_steps=1, report_to="none",
                      use_cpu=True, bf16=False, logging_steps=1, save_strategy="no", seed=0)
    trainer = GRPOTrainer(model=load_causal_lm(None, "float32", "cpu"), processing_class=tokenizer,
                          reward_funcs=rewards, args=args, train_dataset=dataset)
    trainer.train()
    return trainer, specs, calls, rows


def kitae_samples(trainer, ids_per_completion: list[list[int]]) -> list[dict]:
    """The samples kitae's trainer grades for these completions (graded.sample_dict on rollout Completions)."""
    tokenizer = trainer.processing_class
    samples = []
    for ids in ids_per_completion:
        ended = bool(ids) and ids[-1] in trainer.eos_token_ids  # TRL's own end-of-sequence ids
        completion = Completion(text=tokenizer.decode(ids, skip_special_tokens=False), prompt_ids=[],
                                completion_ids=list(ids), logprobs=[0.0] * len(ids),
                                finish_reason="stop" if ended else "length")
        samples.append(sample_dict(completion, MAX_LEN, step=1))
    return samples


def test_trl_generated_completions_that_end_and_completions_that_are_cut(trl_step):
    trainer, _, calls, _ = trl_step
    (call,) = calls["template"]
    finish = [s["finish_reason"] for s in kitae_samples(trainer, call["completion_ids"])]
    assert len(finish) == PROMPTS * GENERATIONS
    assert "stop" in finish and "length" in finish  # both cases are exercised
    logged = trainer.state.log_history[0]
    assert logged["completions/clipped_ratio"] == pytest.approx(finish.count("length") / len(finish))


@pytest.mark.parametrize("name", list(grader_specs("u", "u", "u")))
def test_a_grader_scores_trls_completions_as_kitae_does(trl_step, name):
    trainer, specs, calls, rows = trl_step
    (call,) = calls[name]
    samples = kitae_samples(trainer, call["completion_ids"])
    grader = build_grader(specs[name])
    expected = []
    for start in range(0, len(samples), GENERATIONS):  # TRL's batch: each prompt's completions in a row
        (row,) = [r for r in rows if r["messages"] == call["prompts"][start]]
        expected += [grade.score for grade in grader.grade_group(row, samples[start : start + GENERATIONS])]
    grader.close()
    assert call["rewards"] == pytest.approx(expected, abs=1e-6, nan_ok=True)
    # TRL trained on what the function returned: its logged mean is the mean over the scored completions
    scored = [r for r in call["rewards"] if r is not None]
    if scored:
        assert trainer.state.log_history[0][f"rewards/{name}/mean"] == pytest.approx(sum(scored) / len(scored), abs=1e-5)


@pytest.mark.parametrize("name", ["template", "overlong", "soft_overlong", "reward_model", "python"])
def test_rules_that_read_the_end_marker_or_the_length_do_not_degenerate(trl_step, name):
    """Before kitae read completion_ids: template always its penalty, reward_model always 0 (gated), the length
    rules always abstaining, the python grader never seeing a finish reason."""
    _, _, calls, _ = trl_step
    (call,) = calls[name]
    assert None not in call["rewards"]
    assert len(set(call["rewards"])) > 1
