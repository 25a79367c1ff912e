"""benchmarks/agents.py compares kitae and TRL's GRPOTrainer with tools on equal work: its two configs agree on
every setting that changes the work (rows, group, turns, length, sampling, optimizer, loss), both sides get the
same tool and reward functions, the tool is the one the bundled tools model is offered (the calculator
environment's schema), TRL reads the model's <tool_call> calls as kitae does once the benchmark sets its response
template, and the episode arms run the same episodes. It never asserts times."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import pytest

from tests.test_vs_trl_benchmark import assert_same_sampling_and_update

BENCHMARKS = Path(__file__).resolve().parents[1] / "benchmarks"


@pytest.fixture(scope="module")
def bench():
    """The benchmark as its children import it: the module ``agents`` from benchmarks/ (kitae's config names its
    tools and reward as agents:...)."""
    sys.path.insert(0, str(BENCHMARKS))
    sys.modules.pop("agents", None)
    try:
        import agents

        yield agents
    finally:
        sys.path.remove(str(BENCHMARKS))
        sys.modules.pop("agents", None)


@pytest.fixture(scope="module")
def tools_model(bench):
    """The bundled kitae-tiny-tools: a Qwen2.5-style tools template, a model that calls its calculator."""
    assert (bench.MODEL / "config.json").exists()
    return str(bench.MODEL)


@pytest.fixture(scope="module")
def rows_file(tmp_path_factory):
    import json

    rows = [{"messages": [{"role": "system", "content": "You are a math teacher."},
                          {"role": "user", "content": f"What is {a} plus {b}?"}], "reference_answer": str(a + b)}
            for a, b in [(12, 30), (47, 38), (90, 9)]]
    path = tmp_path_factory.mktemp("rows") / "train.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


@pytest.mark.parametrize("tool", ["sleep", "python"])
def test_both_sides_run_the_same_settings(bench, tools_model, rows_file, tool, tmp_path):
    k = bench.side_settings("kitae", tool, tools_model, str(rows_file), 3, 4, 3, 1, str(tmp_path))
    t = bench.side_settings("trl", tool, tools_model, str(rows_file), 3, 4, 3, 1, str(tmp_path))
    trl, env = t["config"], k["environment"]
    assert k["sampling"]["group_size"] == trl["num_generations"] == 4
    assert k["optim"]["prompts_per_step"] * k["sampling"]["group_size"] == trl["per_device_train_batch_size"]
    # turns: TRL counts the tool rounds after the first turn, kitae the assistant turns
    assert env["max_turns"] - 1 == trl["max_tool_calling_iterations"] >= 1
    # length: TRL's budget is the episode's tokens after the prompt (sampled and tool), kitae's the same, per turn too
    assert env["episode_max_tokens"] == env["turn_max_new_tokens"] == trl["max_completion_length"] == bench.MAX_NEW
    assert env["max_tool_calls"] >= env["max_turns"]  # TRL has no such limit: kitae's never cuts first here
    assert env["max_concurrent_tools"] == trl["per_device_train_batch_size"]  # every episode's call at once
    assert_same_sampling_and_update(k, trl)
    assert k["optim"]["skip_zero_advantage"] is False  # every row trained, as TRL trains them
    assert k["model"]["gradient_checkpointing"] is trl["gradient_checkpointing"] is False
    assert k["seed"] == trl["seed"]
    from kitae.trainer.config import load_train_config

    cfg = load_train_config(data=k)  # kitae takes it as it is
    assert cfg.environment.max_turns == env["max_turns"] and cfg.environment.tools == [bench.TOOL_TARGETS[tool]]


@pytest.mark.parametrize("tool", ["sleep", "python"])
def test_both_sides_get_the_same_tool_and_reward(bench, tool, tmp_path):
    from kitae.registry import load_target

    t = bench.side_settings("trl", tool, "m", "rows", 2, 2, 3, 1, str(tmp_path))
    k = bench.side_settings("kitae", tool, "m", "rows", 2, 2, 3, 1, str(tmp_path))
    assert load_target(k["environment"]["tools"][0]) is t["tool"] is bench.TOOL_FUNCTIONS[tool]
    assert load_target(k["rewards"][0]["function"]) is bench.final_answer


@pytest.mark.parametrize("tool", ["sleep", "python"])
def test_the_tool_is_the_calculator_the_model_is_offered(bench, tool):
    """The same schema as the built-in calculator environment's (examples/tools.yaml's tool), as kitae and TRL
    build it from the function."""
    from transformers.utils import get_json_schema

    from kitae.agents.environments import Calculator
    from kitae.agents.tools import environment_tools, function_tool

    fn = bench.TOOL_FUNCTIONS[tool]
    builtin = environment_tools(Calculator())[0].schema
    assert function_tool(fn).schema == builtin
    assert get_json_schema(fn) == builtin  # what TRL offers the model from the function


def test_the_sleep_tool_answers_a_fixed_text_and_is_counted(bench):
    bench.LEDGER.take()
    assert bench.sleep_tool("12+30") == bench.sleep_tool("1/0") == bench.SLEEP_RESULT
    calls, seconds = bench.LEDGER.take()
    assert calls == 2 and seconds > 0
    assert bench.LEDGER.take() == (0, 0.0)


def test_the_reward_reads_the_episodes_last_message(bench):
    episode = [{"role": "assistant", "content": "", "tool_calls": [{"type": "function", "function": {}}]},
               {"role": "tool", "name": "calculator", "content": "42"},
               {"role": "assistant", "content": "12 plus 30 is 42.<|im_end|>"}]
    wrong = [*episode[:2], {"role": "assistant", "content": "It is 41."}]
    assert bench.final_answer([episode, wrong, episode], ["42", "42", "43"]) == [1.0, 0.0, 0.0]


def test_trl_reads_the_tool_calls_kitae_reads(bench, tools_model):
    """TRL sets a response template only for the chat templates it knows (it refuses this one), and its tool
    loop reads calls through it; with the one the benchmark sets, TRL reads the call kitae reads."""
    from trl.chat_template_utils import add_response_schema, parse_response

    from kitae.agents.chat import ToolChat
    from kitae.models import load_tokenizer

    with pytest.raises(ValueError, match="Unrecognized chat template"):
        add_response_schema(load_tokenizer(tools_model))
    tok = bench.trl_tokenizer(tools_model)
    text = '<tool_call>\n{"name": "calculator", "arguments": {"expression": "47+38"}}\n</tool_call><|im_end|>'
    prompt = tok.apply_chat_template([{"role": "user", "content": "What is 47 plus 38?"}], tokenize=True,
                                     add_generation_prompt=True, return_dict=False)
    ids = tok(text, add_special_tokens=False)["input_ids"]
    trl = parse_response(tok, ids, prefix=prompt)
    kitae = ToolChat(tok).parse(text)
    assert [(c.name, c.arguments) for c in kitae.calls] == [("calculator", {"expression": "47+38"})]
    assert [(c["function"]["name"], c["function"]["arguments"]) for c in trl["tool_calls"]] == \
        [(c.name, c.arguments) for c in kitae.calls]


def test_the_rows_ask_for_the_tool_and_keep_their_order(bench, rows_file):
    rows = bench.task_rows(2, rows_file)
    assert [r["reference_answer"] for r in rows] == ["42", "85"]  # file order, the first --prompts
    for r in rows:  # the instruction replaces the row's system prompt; the question stays last
        assert [m["role"] for m in r["messages"]] == ["system", "user"]
        assert r["messages"][0]["content"] == bench.INSTRUCTION
    assert bench.task_rows(2, rows_file) == rows  # applying it again changes nothing (children re-read the file)


@pytest.mark.slow
def test_both_episode_arms_run_every_episode_of_the_same_rows(bench, tools_model, rows_file, tmp_path):
    """The arms differ only in how the runner is called: the same rows, group, limits; every episode returned."""
    out = {}
    for arm in bench.ARMS:
        args = argparse.Namespace(arm=arm, tool="sleep", model=tools_model, rows=str(rows_file), prompts=2, group=2,
                                  reps=1, threads=1)
        out[arm] = bench.run_episodes_arm(args)["rounds"]
    for arm, rounds in out.items():
        assert len(rounds) == 1 and rounds[0]["episodes"] == 4, arm  # the warm-up round not counted
        r = rounds[0]
        assert r["turns"] >= r["episodes"] and sum(r["ends"].values()) == r["episodes"]
        assert r["ledger_calls"] == r["tool_calls"]  # every call the episodes record, the tool got
        for k in ("turns", "tool_calls", "tool_secs", "sampled_tokens"):  # what the report prints beside the ratio
            assert isinstance(r[k], (int, float)), k
