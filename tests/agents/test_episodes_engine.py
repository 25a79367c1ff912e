"""The agent engine (kitae.agents.engine): episodes through an inference server (token ids in, token ids and
log-probs out, per turn: the server engine against a real HTTP server on 127.0.0.1), the wrapped engine's abilities
claimed and forwarded, evaluation sampling episodes from the rows, and pre-flight refusing what cannot run."""

from __future__ import annotations

import json

import pytest
import yaml

from kitae.agents.chat import ToolChat
from kitae.agents.engine import AgentEngine, agent_engine
from kitae.agents.episodes import Limits
from kitae.agents.tools import Tools
from kitae.errors import ConfigError
from kitae.graders import build_grader
from kitae.models import BUNDLED_MODEL
from kitae.rollout import base
from kitae.rollout.base import SamplingParams
from kitae.rollout.hf import HFEngine
from kitae.rollout.server import ServerEngine
from kitae.scoring.evaluate import evaluate
from kitae.trainer.config import load_train_config
from kitae.trainer.preflight import preflight
from tests.agents.episode_helpers import TOOLS_TEMPLATE, ScriptedEngine, call_text, tools_model
from tests.rollout.scripted import CompletionsServer, choice, reply
from tests.rollout.test_protocols import implemented, members

PROMPT = [{"role": "user", "content": "What is 12*7?"}]
FORWARDED = {base.SyncsWeights, base.RemoteLogprobs, base.SavesState}


def _calculator(tok, engine, **limits) -> AgentEngine:
    return agent_engine(engine, ToolChat(tok), Tools.from_config({"factory": "calculator"}), Limits(**limits))


def test_episodes_through_the_server_engine_send_the_kept_tokens_each_turn(tok):
    """Turn 1's request is the prompt, turn 0's tokens as the server sent them and the template's tokens, as ids;
    the calculator's result is in them; the server's log-probs are kept for the sampled tokens."""
    call = tok(call_text("calculator", expression="12*7") + "<|im_end|>", add_special_tokens=False)["input_ids"]
    answer = tok("84<|im_end|>", add_special_tokens=False)["input_ids"]

    def turn(ids):
        return lambda body: reply([choice(ids, [-0.25] * len(ids), "stop", i) for i in range(body["n"])])

    with CompletionsServer(script=[turn(call)], default=turn(answer)) as server:
        inner = ServerEngine(None, tok, [server.url], max_wait=5)
        agent = _calculator(tok, inner)
        try:
            [[a, b]] = agent.generate_rows([PROMPT], [{}], 2, SamplingParams(seed=4))
        finally:
            agent.close()
        first, *later = server.completions
    assert first["n"] == 2 and [b["n"] for b in later] == [1, 1] and first["prompt"] == a.prompt_ids
    t0, t1 = a.episode.turns
    assert later[0]["prompt"] == a.prompt_ids + a.completion_ids[:t1.start]  # one request per episode
    assert a.completion_ids[:t0.end] == call and a.completion_ids[t1.start:] == answer
    assert "<tool_response>\n84\n</tool_response>" in tok.decode(a.completion_ids[t0.end:t1.start])
    assert a.logprobs[:t0.end] == [-0.25] * len(call) and set(a.logprobs[t0.end:t1.start]) == {0.0}
    assert a.text == "84<|im_end|>" and b.episode.end == "answer"


def test_the_wrapper_claims_and_forwards_what_the_wrapped_engine_can(tok):
    server = _calculator(tok, ServerEngine(None, tok, ["http://127.0.0.1:9"]))
    local = _calculator(tok, HFEngine(None, tok))
    assert {p for p in FORWARDED if isinstance(server.engine, p)} == FORWARDED - {base.SavesState}
    for protocol in FORWARDED:
        assert isinstance(server, protocol) == isinstance(server.engine, protocol), protocol.__name__
        assert not isinstance(local, protocol), protocol.__name__
        if not isinstance(server, protocol):
            continue
        missing = [m for m in sorted(members(protocol)) if not implemented(server, m)]
        assert not missing, f"claims {protocol.__name__} but leaves {missing} to its stub"
    for agent in (server, local):  # its prompts carry tools and it samples episodes, not token continuations
        assert isinstance(agent, base.ReadsRows) and not isinstance(agent, base.EncodesPrompts)
    # stats: the server engine's own, and (both) the tools' (none here: the calculator has no MCP server)
    assert isinstance(server.engine, base.ReportsStats) and not isinstance(local.engine, base.ReportsStats)
    assert server.take_stats() == server.engine.take_stats() and local.take_stats() == {}
    server.version = 3  # forwarded: the trainer's push bookkeeping lands on the servers' engine
    assert server.engine.version == 3 and server.frozen == server.engine.frozen


def test_an_engine_that_cannot_continue_token_ids_is_refused(tok):
    class OnlyGenerate(base.RolloutEngine):
        def generate(self, prompts, n, sampling):
            return []

    with pytest.raises(ConfigError, match="ContinuesTokens"):
        _calculator(tok, OnlyGenerate())


def test_evaluation_samples_episodes_from_the_rows(tok):
    """kitae.scoring.evaluate goes through sample_and_grade, which hands the rows to an engine that reads them."""
    said = {0: call_text("calculator", expression="12*7") + "<|im_end|>", 1: "84<|im_end|>"}
    agent = _calculator(tok, ScriptedEngine(tok, lambda text, turn: said[min(turn, 1)]))
    rows = [{"messages": PROMPT, "reference_answer": "84"}]
    try:
        metrics, results = evaluate(agent, rows, build_grader({"type": "answer"}), k=2,
                                    sampling=SamplingParams(seed=1))
    finally:
        agent.close()
    assert metrics["pass@1"] == 1.0 and all(r["turns"] == 2 for r in results)
    assert results[0]["tool_calls"][0]["result"] == "84"


# ---- pre-flight ---------------------------------------------------------------------------------------------
def _cfg(tmp_path, model, environment):
    rows = [{"messages": PROMPT, "reference_answer": "84"}]
    (tmp_path / "train.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    cfg = {"name": "a", "output_dir": str(tmp_path), "model": {"path": str(model)},
           "data": {"train": str(tmp_path / "train.jsonl"), "eval": None},
           "rewards": [{"name": "correct", "grader": {"type": "answer"}}], "sampling": {"group_size": 2},
           "environment": environment}
    (tmp_path / "cfg.yaml").write_text(yaml.safe_dump(cfg))
    return load_train_config(tmp_path / "cfg.yaml")


def test_preflight_refuses_a_chat_template_without_tools(tmp_path):
    with pytest.raises(ConfigError, match="environment.parser: the model's chat template cannot be used for tools"):
        preflight(_cfg(tmp_path, BUNDLED_MODEL, {"factory": "calculator"}))


def test_preflight_refuses_a_tool_function_that_does_not_import(tmp_path):
    with pytest.raises(ConfigError, match=r"environment.tools\[0\]"):
        preflight(_cfg(tmp_path, BUNDLED_MODEL, {"tools": ["no_such_module_here:search"]}))


def test_preflight_refuses_prompts_with_tools_and_budget_over_the_context(tmp_path):
    model = tools_model(tmp_path / "model", TOOLS_TEMPLATE)  # a prompt with the calculator's schema: ~340 tokens
    with pytest.raises(Exception, match="environment.episode_max_tokens"):
        preflight(_cfg(tmp_path, model, {"factory": "calculator", "episode_max_tokens": 2048}))


@pytest.mark.parametrize("name,tools", [("tools.yaml", ["calculator"]), ("agent_code.yaml", ["python"])])
def test_the_agent_examples_load(name, tools):
    from pathlib import Path

    cfg = load_train_config(Path(__file__).resolve().parents[2] / "examples" / name)
    env = cfg.environment
    offered = [env.factory] if env.factory else ["python"] if env.python else []
    assert offered == tools and env.max_turns >= 3
    assert not cfg.sampling.async_ and cfg.sampling.partial is None


@pytest.mark.slow  # a kitae eval process: the full suite runs it
def test_kitae_eval_with_a_config_that_has_an_environment_samples_episodes(tmp_path):
    """`kitae eval --config` takes the run's environment: each sample is an episode (its turns in the results)."""
    import subprocess
    import sys

    model = tools_model(tmp_path / "model")
    cfg = _cfg(tmp_path, model, {"factory": "calculator", "turn_max_new_tokens": 16, "episode_max_tokens": 64})
    assert cfg.environment is not None
    out = tmp_path / "results"
    done = subprocess.run([sys.executable, "-m", "kitae.cli.main", "eval", "-m", str(model), "--config",
                           str(tmp_path / "cfg.yaml"), "--data", str(tmp_path / "train.jsonl"), "-k", "2", "-o",
                           str(out), "--json"], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    [results] = list(out.glob("*.jsonl"))
    samples = [json.loads(line) for line in results.read_text().splitlines()]
    assert len(samples) == 2 and all(s["turns"] >= 1 and s["episode_end"] for s in samples)
