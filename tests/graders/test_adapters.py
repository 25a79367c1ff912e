"""TRL reward functions <-> kitae graders, with TRL's exact call convention (and one real GRPOTrainer step)."""

from __future__ import annotations

import asyncio
import warnings
from collections import defaultdict

import pytest

from kitae.errors import ConfigError
from kitae.graders import GRADERS, Grade, Grader, as_reward_function, build_grader, grader_from_callable, register_grader


class TrlLogs:
    """Stands in for the trainer's log_extra / log_metric sinks (plain collectors, as in GRPOTrainer)."""

    def __init__(self):
        self.extra, self.metrics = defaultdict(list), defaultdict(list)

    def kwargs(self) -> dict:
        return {"trainer_state": object(), "log_extra": lambda c, v: self.extra[c].extend(v),
                "log_metric": lambda n, v: self.metrics[n].append(v)}


def test_a_grader_as_a_trl_reward_function():
    reward = as_reward_function(build_grader({"type": "numeric"}), "num")  # no ids: TRL's text as it is
    logs = TrlLogs()
    # TRL's batch: each prompt repeated num_generations (2) times, dataset columns repeated alongside
    out = reward(
        prompts=["rate?", "rate?", "capital?", "capital?"],
        completions=["5%", "9%", "Paris", "Lyon"],
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
    with GRADERS.scoped("test_batch_rank"):
        @register_grader("test_batch_rank")
        class Rank(Grader):
            needs_group = True

            def grade_samples(self, item, samples):
                lengths = [len(s["output_text"]) for s in samples]
                return [Grade(score=float(n == max(lengths))) for n in lengths]

        yield build_grader("test_batch_rank")


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
    (prompts, completions, ids, columns), = calls
    assert (prompts, completions, ids) == (["say hi", "say hi"], ["hi", "hello"], [[5], [6, 7]])
    extras = {k: columns.pop(k) for k in ("trainer_state", "log_extra", "log_metric")}  # TRL passes them always
    assert columns == {"reference_answer": ["hi", "hi"], "level": [2, 2]}
    assert extras["trainer_state"] is None and callable(extras["log_extra"]) and callable(extras["log_metric"])


def test_callable_with_conversational_messages():
    seen = []

    def fn(prompts, completions, **kw):
        seen.append(completions)
        return [1.0]

    grader_from_callable(fn, "conv").grade_group({"messages": [{"role": "user", "content": "hi"}]}, [{"output_text": "yo<|im_end|>"}])
    assert seen == [[[{"role": "assistant", "content": "yo"}]]]


@pytest.mark.parametrize("sample, text", [
    ({"output_text": "3<|endoftext|>"}, "3"),  # ended on ChatML's end of text, not its turn end
    ({"output_text": "a<|im_start|>b<|im_end|>"}, "ab"),  # a stray template token inside the content
    ({"output_text": "4<|eot_id|>", "end_marker": "<|eot_id|>",
      "control_tokens": ("<|eot_id|>", "<|start_header_id|>", "<|begin_of_text|>")}, "4"),
    ({"output_text": "x<|begin_of_text|>y", "end_marker": "<|eot_id|>",
      "control_tokens": ("<|eot_id|>", "<|begin_of_text|>")}, "xy"),
])
def test_a_reward_function_gets_the_text_without_special_tokens_as_trl_decodes_it(sample, text):
    """TRL decodes completions with skip_special_tokens=True: a reward function ported from TRL never sees the
    model's control tokens, wherever they are in the sample (kitae's graders still see them)."""
    seen = []
    grader_from_callable(lambda completions, **kw: seen.extend(completions) or [1.0] * len(completions), "f")\
        .grade_group({"prompt": "q"}, [sample])
    assert seen == [text]


def test_async_callable():
    async def fn(prompts, completions, **kw):
        await asyncio.sleep(0)
        return [0.5 for _ in completions]

    assert [g.score for g in grader_from_callable(fn).grade_group({"prompt": "p"}, [{"output_text": "a"}] * 2)] == [0.5, 0.5]



# Reward functions written as TRL's docs and trl.rewards write them: each reads one part of the contract.
def _doc_format_reward(completions, **kwargs):  # conversational: each completion is a list of messages
    return [1.0 if c[0]["content"].startswith("<think>") else 0.0 for c in completions]


def _doc_length_reward(completion_ids, **kwargs):  # tokens, not characters
    return [float(len(ids)) for ids in completion_ids]


def _doc_scheduled_reward(completions, trainer_state, **kwargs):  # a reward that ramps over the run
    return [trainer_state.global_step / trainer_state.max_steps for _ in completions]


def _doc_column_reward(completions, ground_truth, **kwargs):  # a dataset column, one value per completion
    return [float(c[0]["content"] == gt) for c, gt in zip(completions, ground_truth)]


def _doc_logging_reward(completions, log_metric, log_extra, **kwargs):
    log_metric("mean_chars", sum(len(c[0]["content"]) for c in completions) / len(completions))
    log_extra("verdict", ["long" if len(c[0]["content"]) > 3 else "short" for c in completions])
    log_extra("chars", [len(c[0]["content"]) for c in completions])
    return [0.0 for _ in completions]


def _trl_repetition():
    from trl.rewards import get_repetition_penalty_reward

    return get_repetition_penalty_reward(ngram_size=2, max_penalty=-1.0)  # reads completion_ids only


TRAINING = [{"output_text": "<think>47<|im_end|>", "completion_ids": [5, 6, 5, 6, 5, 6], "step": 3, "max_steps": 4,
             "epoch": 0.5},
            {"output_text": "47<|im_end|>", "completion_ids": [5, 6, 7], "step": 3, "max_steps": 4, "epoch": 0.5}]
ROW = {"messages": [{"role": "user", "content": "12+35?"}], "ground_truth": "47"}


@pytest.mark.parametrize(
    "fn, scores",
    [
        (_doc_format_reward, [1.0, 0.0]),
        (_doc_length_reward, [6.0, 3.0]),  # the ids the rollout sampled (kitae passed None: 100% abstained)
        (_doc_scheduled_reward, [0.5, 0.5]),  # global_step 2 (steps finished) of max_steps 4
        (_doc_column_reward, [0.0, 1.0]),
        (_trl_repetition(), [pytest.approx(-0.6), 0.0]),  # trl.rewards' own: -(1 - 2 distinct / 5 bigrams)
    ],
)
def test_reward_functions_written_as_trls_docs_write_them(fn, scores):
    grades = grader_from_callable(fn, "f").grade_group(ROW, TRAINING)
    assert [g.error for g in grades] == [None, None]
    assert [g.score for g in grades] == scores


def test_trainer_state_has_trls_attributes_during_training_and_is_none_outside_it():
    seen = []

    def fn(completions, trainer_state, **kwargs):
        seen.append(trainer_state)
        return [0.0 for _ in completions]

    grader = grader_from_callable(fn)
    grader.grade_group(ROW, TRAINING)
    grader.grade_group(ROW, [{"output_text": "47"}])  # graded on its own (kitae eval, curation): no trainer
    state, outside = seen
    assert (state.global_step, state.max_steps, state.epoch) == (2, 4, 0.5)
    assert outside is None


def test_log_metric_and_log_extra_reach_the_grades():
    grades = grader_from_callable(_doc_logging_reward).grade_group(ROW, TRAINING)
    assert [g.sub_scores for g in grades] == [{"mean_chars": 5.5, "chars": 9.0}, {"mean_chars": 5.5, "chars": 2.0}]
    assert [g.reason for g in grades] == ["verdict: long", "verdict: short"]


def test_every_dataset_column_is_passed_but_the_ones_trl_skips():
    seen = {}

    def fn(prompts, completions, completion_ids, trainer_state, log_extra, log_metric, **columns):
        seen.update(columns)
        return [0.0 for _ in completions]

    row = {"prompt": "say hi", "completion": "hi", "completion_ids": [1], "answer": "hi", "level": 2, "tags": ["a"]}
    grader_from_callable(fn).grade_group(row, [{"output_text": "x"}] * 2)
    assert seen == {"answer": ["hi", "hi"], "level": [2, 2], "tags": [["a"], ["a"]]}


def test_the_readmes_reward_functions():
    """README.md's my_rewards.py, run as kitae runs it (tests/test_readme.py trains with it too)."""
    from tests.test_readme import my_rewards

    fns: dict = {}
    exec(compile(my_rewards(), "README.md: my_rewards.py", "exec"), fns)
    chat = {"messages": [{"role": "user", "content": "12+35?"}], "reference_answer": "47"}
    samples = [dict(s, output_text=t) for s, t in zip(TRAINING, ["47<|im_end|>", " 48 <|im_end|>"])]
    scores = {name: [g.score for g in grader_from_callable(fns[name], name).grade_group(chat, samples)]
              for name in ("brevity", "correct", "shorter_later")}
    assert scores == {"brevity": [-0.02, -0.04], "correct": [1.0, 0.0],
                      "shorter_later": [pytest.approx(-0.045), pytest.approx(-0.0225)]}  # step 3 of 4: -3/4 * ids/100
    plain = [g.score for g in grader_from_callable(fns["brevity"]).grade_group({"prompt": "12+35?"}, samples)]
    assert plain == [-0.02, -0.04]  # a plain prompt string: string completions
    outside = grader_from_callable(fns["shorter_later"]).grade_group(chat, [{"output_text": "47", "completion_ids": [1]}])
    assert [g.score for g in outside] == [None]  # no trainer_state outside training: it abstains
    no_ref = grader_from_callable(fns["correct"]).grade_group({"messages": chat["messages"]}, samples)
    assert [g.score for g in no_ref] == [None, None]  # a row without the field: the call fails, counted as an error
    assert "missing 1 required positional argument: 'reference_answer'" in no_ref[0].error

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


# ---- what TRL strips, restored from completion_ids ---------------------------------------------------
# A real GRPOTrainer step with every grader type: tests/graders/test_trl_grpo.py.
@pytest.fixture(scope="module")
def tokenizer():
    from kitae.models import load_tokenizer

    return load_tokenizer(None)  # the bundled tokenizer: <|im_end|> is its end-of-sequence token


def trl_call(reward, tokenizer, texts: list[str], **kwargs):
    """Call `reward` as TRL does: ids up to the first end token, text decoded without special tokens."""
    ids = [tokenizer.encode(t, add_special_tokens=False) for t in texts]
    completions = [tokenizer.decode(i, skip_special_tokens=True) for i in ids]
    return reward(prompts=["12+35?"] * len(texts), completions=completions, completion_ids=ids,
                  **{"reference_answer": ["47"] * len(texts), **kwargs})


class Recorder(Grader):
    """Keeps the samples it is given."""

    def __init__(self):
        self.samples = []

    def grade_sample(self, item, sample):
        self.samples.append(sample)
        return Grade(score=0.0)


@pytest.mark.parametrize(
    "text, finish, output_text",
    [
        ("47<|im_end|>", "stop", "47<|im_end|>"),  # ended its turn: the end marker is back
        ("47です", "length", "47です"),  # 3 tokens = max_completion_length, no end token: cut
        ("答えは2です。<|endoftext|><|im_start|>user", "length", "答えは2です。<|endoftext|><|im_start|>user"),  # stray tokens kept
        ("47", "stop", "47"),  # 2 tokens < 3: TRL stopped it at an end token of the generation config
    ],
)
def test_completion_ids_restore_the_end_marker_and_finish_reason(tokenizer, text, finish, output_text):
    recorder = Recorder()
    trl_call(as_reward_function(recorder, tokenizer=tokenizer, max_completion_length=3), tokenizer, [text],
             trainer_state=type("State", (), {"global_step": 4})())
    (sample,) = recorder.samples
    assert sample["output_text"] == output_text and sample["finish_reason"] == finish
    assert sample["completion_tokens"] == len(tokenizer.encode(text, add_special_tokens=False))
    assert sample["max_completion_length"] == 3
    assert sample["step"] == 5  # TRL's global_step counts finished steps; kitae's steps start at 1


def test_without_max_completion_length_the_end_token_decides(tokenizer):
    recorder = Recorder()
    trl_call(as_reward_function(recorder, tokenizer=tokenizer), tokenizer, ["47<|im_end|>", "47"])
    assert [s["finish_reason"] for s in recorder.samples] == ["stop", "length"]
    assert "max_completion_length" not in recorder.samples[0]


@pytest.mark.parametrize(
    "spec, scores",
    [
        ({"type": "template", "min_chars": 0, "full_chars": 0}, [1.0, -5.0]),  # was -5 for both
        ({"type": "overlong"}, [0.0, -1.5]),  # abstained for both
        ({"type": "soft_overlong", "cache_tokens": 1}, [0.0, -1.0]),  # abstained for both
        ({"type": "length"}, [0.5, -0.5]),  # the shorter correct one gains, in tokens
    ],
)
def test_rules_that_need_the_end_marker_and_the_length(tokenizer, spec, scores):
    reward = as_reward_function(build_grader(spec), tokenizer=tokenizer, max_completion_length=4)
    assert trl_call(reward, tokenizer, ["47<|im_end|>", "48です。"]) == pytest.approx(scores)  # 3 tokens, 4 (cut)


def test_a_tool_loop_keeps_trls_text_and_gets_its_end_marker_back(tokenizer):
    """With tools, TRL's completion is several messages and the ids hold the tool results too."""
    recorder = Recorder()
    reward = as_reward_function(recorder, tokenizer=tokenizer, max_completion_length=50)
    ids = tokenizer.encode("call<|im_end|>tool says 47<|im_end|>47<|im_end|>", add_special_tokens=False)
    turns = [{"role": "assistant", "content": "call"}, {"role": "tool", "content": "tool says 47"},
             {"role": "assistant", "content": "47"}]
    reward(prompts=[[{"role": "user", "content": "hi"}]], completions=[turns], completion_ids=[ids])
    assert recorder.samples[0]["output_text"] == "calltool says 4747<|im_end|>"
    assert recorder.samples[0]["finish_reason"] == "stop"


def test_without_a_tokenizer_a_warning_says_what_will_be_misjudged():
    recorder = Recorder()
    reward = as_reward_function(recorder, "mine")
    with pytest.warns(UserWarning, match="reward function 'mine'.*Pass tokenizer="):
        reward(prompts=["p"], completions=["47"], completion_ids=[[22, 25]])
    assert recorder.samples[0] == {"output_text": "47", "completion_ids": [22, 25], "completion_tokens": 2}
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        reward(prompts=["p"], completions=["47"], completion_ids=[[22, 25]])  # once is enough


@pytest.mark.parametrize("bad", [0, -1, 2.5, True, "8"])
def test_a_bad_max_completion_length_is_refused(bad):
    with pytest.raises(ConfigError, match="as_reward_function.max_completion_length: expected a positive integer"):
        as_reward_function(build_grader({"type": "answer"}), max_completion_length=bad)


# ---- other model families: the end marker is the model's own ------------------------------------------------
@pytest.fixture(scope="module", params=["llama3", "gemma3", "mistral"])
def family_tokenizer(request, tmp_path_factory):
    """(Family, its tokenizer loaded from a saved folder, as TRL's processing_class is)."""
    from kitae.models import load_tokenizer
    from tests.families.families import BY_NAME

    fam = BY_NAME[request.param]
    return fam, load_tokenizer(fam.save(tmp_path_factory.mktemp(fam.name)))


def test_a_family_s_turn_end_is_its_end_marker_in_trl_completions(family_tokenizer):
    """Llama 3 ends its turn with <|eot_id|>, Gemma with <end_of_turn> (not its eos <eos>), Mistral with </s>:
    the rebuilt sample carries the model's marker, so the template reward and {{sample.output_text}} cut there."""
    fam, tok = family_tokenizer
    recorder = Recorder()
    trl_call(as_reward_function(recorder, tokenizer=tok, max_completion_length=50), tok, [f"Paris.{fam.end}"])
    (sample,) = recorder.samples
    assert sample["output_text"] == f"Paris.{fam.end}" and sample["finish_reason"] == "stop"
    assert sample["end_marker"] == fam.end
    template = as_reward_function(build_grader({"type": "template", "min_chars": 0, "full_chars": 0}),
                                  tokenizer=tok, max_completion_length=50)
    assert trl_call(template, tok, [f"Paris.{fam.end}", "Paris."]) == [1.0, -5.0]
    answer = as_reward_function(build_grader({"type": "answer"}), tokenizer=tok, max_completion_length=50)
    assert trl_call(answer, tok, [f"The capital is Paris.{fam.end}"], reference_answer=["Paris"]) == [1.0]


def test_every_end_id_of_the_model_s_generation_config_stops_a_trl_completion(family_tokenizer):
    """Gemma's <end_of_turn> is no eos_token of its tokenizer, but its generation config stops there, as TRL does."""
    fam, tok = family_tokenizer
    recorder = Recorder()
    trl_call(as_reward_function(recorder, tokenizer=tok), tok, [f"47{fam.end}", "47"])
    assert [s["finish_reason"] for s in recorder.samples] == ["stop", "length"]


def test_an_end_marker_given_to_the_adapter_overrides_the_tokenizer_s(tokenizer):
    recorder = Recorder()
    trl_call(as_reward_function(recorder, tokenizer=tokenizer, end_marker="<|endoftext|>"), tokenizer,
             ["47<|endoftext|>"])
    assert recorder.samples[0]["end_marker"] == "<|endoftext|>"
    assert recorder.samples[0]["finish_reason"] == "stop"
