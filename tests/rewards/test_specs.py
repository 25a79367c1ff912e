"""Every reward component is a grader type usable in `kitae grade` specs; spec mistakes name the key path."""

import pytest

from kitae.errors import ConfigError
from kitae.graders import GRADERS, build_grader
from kitae.rewards.graders import OverlongGrader
from kitae.rewards.overlong import OverlongConfig

TYPES = ["template", "repetition", "overlong", "diversity", "reward_model", "length", "soft_overlong"]


def test_all_types_are_registered():
    build_grader({"type": "template"})  # imports kitae.rewards
    assert set(TYPES) <= set(GRADERS.names())


ITEM = {"messages": [{"role": "user", "content": "12+35は?"}], "reference_answer": "47"}


@pytest.mark.parametrize(
    "spec,sample,score",
    [
        ("{type: template, min_chars: 1, full_chars: 0}", {"output_text": "47<|im_end|>"}, 1.0),
        ("{type: template}", {"output_text": "47<|im_end|>"}, -5.0),
        ("{type: template, min_chars: 1, full_chars: 4, reward: 2}", {"output_text": "47<|im_end|>"}, 1.0),
        ("{type: repetition, n: 2, floor: -0.25}", {"output_text": "aaaa"}, -0.25),
        ("{type: overlong}", {"output_text": "x", "completion_tokens": 90, "max_completion_length": 100},
         -0.8 / 9),
        ("{type: overlong, max_completion_length: 100}", {"output_text": "x", "completion_tokens": 90}, -0.8 / 9),
        # the sample's own limit wins over the spec's
        ("{type: overlong, max_completion_length: 1000}",
         {"output_text": "x", "completion_tokens": 90, "max_completion_length": 100}, -0.8 / 9),
        ("{type: overlong, max_completion_length: 100}", {"output_text": "x", "finish_reason": "length"}, -1.5),
        ("{type: soft_overlong, cache_tokens: 10}",
         {"output_text": "x", "completion_tokens": 95, "max_completion_length": 100}, -0.5),
        ("{type: diversity}", {"output_text": "x"}, 0.0),
    ],
)
def test_spec_builds_and_grades(spec, sample, score):
    assert build_grader(spec).grade_group(ITEM, [sample])[0].score == pytest.approx(score)


@pytest.mark.parametrize(
    "spec,sample,error",
    [
        ("{type: overlong}", {"output_text": "x", "completion_tokens": 9},
         "no max_completion_length: the sample has none and the spec sets none"),
        ("{type: overlong, max_completion_length: 100}", {"output_text": "x"},
         "the sample has no completion_tokens (the rollout sets it)"),
    ],
)
def test_missing_lengths_abstain_with_a_reason(spec, sample, error):
    grade = build_grader(spec).grade_group(ITEM, [sample])[0]
    assert grade.score is None and grade.error == error


def test_config_fields_are_the_spec_fields():
    grader = build_grader({"type": "overlong", "soft_start": 0.5, "coef": 1, "hard_penalty": -2})
    assert isinstance(grader, OverlongGrader)
    assert grader.cfg == OverlongConfig(soft_start=0.5, coef=1.0, hard_penalty=-2.0)


@pytest.mark.parametrize(
    "spec,message",
    [
        ({"type": "templte"}, "grader.type: unknown grader 'templte'; did you mean 'template'?"),
        ({"type": "repetition", "nn": 3}, "grader.nn: unknown key; did you mean 'n'?"),
        ({"type": "repetition", "n": 0}, "grader.n: must be >= 1, got 0"),
        ({"type": "template", "min_chars": "few"}, "grader.min_chars: expected an integer, got 'few'"),
        ({"type": "template", "stray_tokens": [["<|im_end|>"]]}, "grader.stray_tokens[0]: expected a string"),
        ({"type": "template", "stray_tokens": "<|im_end|>"}, "grader.stray_tokens: expected a list, got str"),
        ({"type": "overlong", "soft_start": 1.0}, "grader.soft_start: must be <= 0.999, got 1.0"),
        ({"type": "diversity", "threshold": "high"}, "grader.threshold: expected a number, got 'high'"),
        ({"type": "length", "unit": "bytes"}, "grader.unit: got 'bytes'; expected one of tokens, chars; did you mean"),
        ({"type": "length", "correct": "answer"}, "grader.correct: expected a mapping"),
        ({"type": "length", "correct": {"type": "nope"}}, "grader.correct.type: unknown grader 'nope'"),
        ({"type": "reward_model"}, "grader.model: give exactly one of 'model'"),
        ({"type": "reward_model", "model": "/nonexistent/rm"}, "grader.model: no model folder at '/nonexistent/rm'"),
        ({"type": "reward_model", "url": "localhost:8000"}, "grader.url: expected an http:// or https:// URL"),
        ({"type": "reward_model", "url": "http://127.0.0.1:9", "protocol": "sglng"},
         "grader.protocol: unknown protocol 'sglng'; did you mean 'sglang'?"),
        ({"type": "reward_model", "url": "http://127.0.0.1:9", "retries": -1}, "grader.retries: must be >= 0"),
        ({"type": "reward_model", "url": "http://127.0.0.1:9", "tokenizer": "/nope"},
         "grader.tokenizer: no model folder at '/nope'"),
        # a local model's fields on a server's spec, and the other way round, are mistakes, not ignored
        ({"type": "reward_model", "url": "http://127.0.0.1:9", "device": "cuda"},
         "grader.device: only for a local reward model (model)"),
        ({"type": "reward_model", "model": ".", "protocol": "sglang"},
         "grader.protocol: only for a reward model server (url)"),
        ({"type": "reward_model", "url": "http://127.0.0.1:9", "dtype": "int8"},
         "grader.dtype: got 'int8'; expected one of float32, bfloat16, float16"),
        ({"type": "overlong", "max_completion_length": 0}, "grader.max_completion_length: must be >= 1, got 0"),
        ({"type": "soft_overlong", "cache_tokens": None, "cache_fraction": 2}, "grader.cache_fraction: must be <= 1.0"),
        # a NaN scale made every score the top reward (min(clip, nan) is clip): numbers must be finite
        ({"type": "reward_model", "model": ".", "scale": float("nan")}, "grader.scale: expected a finite number"),
        ("{type: reward_model, model: ., scale: .nan}", "grader.scale: expected a finite number, got nan"),
        ({"type": "reward_model", "model": ".", "scale": "1e400"}, "grader.scale: expected a finite number"),
        ({"type": "reward_model", "model": ".", "clip": float("inf")}, "grader.clip: expected a finite number"),
        ({"type": "reward_model", "model": ".", "gated_score": float("nan")}, "grader.gated_score: expected a finite"),
        ({"type": "reward_model", "model": ".", "scale": -1}, "grader.scale: must be >= 0, got -1.0"),
        ({"type": "reward_model", "model": ".", "full_chars": -1}, "grader.full_chars: must be >= 0, got -1"),
        ({"type": "reward_model", "url": "http://127.0.0.1:9", "timeout": float("nan")},
         "grader.timeout: expected a finite number"),
        ({"type": "soft_overlong", "scale": float("inf")}, "grader.scale: expected a finite number"),  # any spec
    ],
)
def test_spec_errors_name_the_key(spec, message):
    with pytest.raises(ConfigError) as err:
        build_grader(spec)
    assert message in str(err.value)


def test_length_spec_defaults_to_the_answer_grader():
    grader = build_grader("{type: length, weight: 0.5}")
    samples = [{"output_text": "47<|im_end|>"}, {"output_text": "答えは47です。<|im_end|>"},
               {"output_text": "48です。<|im_end|>"}]  # content lengths 2, 8, 5: lambdas 0.5, -0.5, 0
    assert [g.score for g in grader.grade_group(ITEM, samples)] == pytest.approx([0.25, -0.25, 0.0])


def test_reward_model_spec_with_a_local_model(tiny_rm):
    from kitae.rewards.reward_model import LocalRewardModel

    grader = build_grader({"type": "reward_model", "model": tiny_rm, "batch_size": 2, "full_chars": 0})
    answers = ["47", "12+35=47です。", "The answer is 47."]
    grades = grader.grade_group(ITEM, [{"output_text": a + "<|im_end|>"} for a in answers])
    convs = [[ITEM["messages"][0], {"role": "assistant", "content": a}] for a in answers]
    assert [g.score for g in grades] == pytest.approx(LocalRewardModel(tiny_rm).score(convs), abs=1e-6)
    assert grader.stats()["scored"] == 3
