"""The episode loop (kitae.agents.episodes): the token layout of each turn, the limits, malformed calls, tool calls
of a turn running together, and the same episodes from the same seed with the real in-process engine."""

from __future__ import annotations

import asyncio

import pytest

from kitae.agents.episodes import Limits, run_episodes
from kitae.models import BUNDLED_MODEL, load_causal_lm
from kitae.rollout.base import SamplingParams
from kitae.rollout.trajectory import MALFORMED_TOOL
from kitae.rollout.hf import HFEngine
from kitae.agents.chat import ToolChat
from tests.agents.episode_helpers import CallLog, FunctionBox, ScriptedEngine, call_text

PROMPT = [{"role": "user", "content": "What is 12*7?"}]
SP = SamplingParams(temperature=1.0, max_new_tokens=99, seed=3)


def _run(tok, script, fns=None, limits=Limits(), prompts=(PROMPT,), n=1, reset_text=None, reward=None,
         rows=None):
    engine, chat, log = ScriptedEngine(tok, script), ToolChat(tok), CallLog()
    boxes = []

    def toolbox(rollout_id):
        boxes.append(FunctionBox(fns or {"mul": lambda a, b: a * b}, log, reset_text, reward))
        return boxes[-1]

    groups = run_episodes(engine, list(prompts), rows or [{"i": i} for i in range(len(prompts))], n, SP, chat,
                          toolbox, limits)
    return groups, engine, log, boxes


def _calls_then_answer(text, turn):
    return call_text("mul", a=12, b=7) + "<|im_end|>" if turn == 0 else "84<|im_end|>"


def test_layout_of_two_turns(tok):
    """Turn 0's sampled tokens (mask 1, their log-probs), the tool result and next header (mask 0, log-prob 0.0),
    turn 1's sampled tokens; the text is the last turn's; the spans, calls and messages say the same."""
    [[c]], engine, log, boxes = _run(tok, _calls_then_answer)
    ep = c.episode
    assert [t.finish_reason for t in ep.turns] == ["stop", "stop"] and ep.end == "answer"
    t0, t1 = ep.turns
    assert t0.start == 0 and t1.end == len(c.completion_ids) == len(c.loss_mask) == len(c.logprobs)
    assert c.loss_mask == [1] * t0.end + [0] * (t1.start - t0.end) + [1] * (t1.end - t1.start)
    assert c.logprobs[t0.end:t1.start] == [0.0] * (t1.start - t0.end)
    assert set(c.logprobs[:t0.end] + c.logprobs[t1.start:]) == {-0.5}
    context = tok.decode(c.completion_ids[t0.end:t1.start])
    assert "<tool_response>\n84\n</tool_response>" in context and context.endswith("<|im_start|>assistant\n")
    assert tok.decode(c.completion_ids[:t0.end]) == t0.text and c.text == t1.text == "84<|im_end|>"
    [call] = ep.tool_calls
    assert (call.name, call.arguments, call.result, call.error, call.turn) == ("mul", {"a": 12, "b": 7}, "84", None, 0)
    assert [m["role"] for m in ep.messages] == ["assistant", "tool", "assistant"]
    assert ep.messages[0]["tool_calls"][0]["function"]["name"] == "mul"
    # the second turn was sampled from the prompt and every token so far, verbatim
    assert engine.calls[1][0:2] == (1, 1) and c.sampled_tokens == t0.end + (t1.end - t1.start)
    assert boxes[0].closed


def test_one_turn_answer_is_an_episode_of_one_turn(tok):
    [[c]], *_ = _run(tok, lambda text, turn: "84<|im_end|>")
    assert c.episode.end == "answer" and len(c.episode.turns) == 1 and c.loss_mask == [1] * len(c.completion_ids)
    assert c.episode.tools == ["mul"]


def test_reset_text_joins_the_last_user_message_and_the_reward_is_read(tok):
    seen = []

    def script(text, turn):
        seen.append(text)
        return "84<|im_end|>"

    [[c]], _, _, boxes = _run(tok, script, reset_text="Use the tools.", reward=0.25, rows=[{"answer": "84"}])
    assert "What is 12*7?\n\nUse the tools.<|im_end|>" in seen[0]
    assert boxes[0].rows == [{"answer": "84"}] and c.episode.environment_reward == 0.25
    assert tok.decode(c.prompt_ids) == seen[0]


def test_max_turns_ends_an_episode_that_keeps_calling(tok):
    always = lambda text, turn: call_text("mul", a=turn, b=2) + "<|im_end|>"  # noqa: E731
    [[c]], engine, log, _ = _run(tok, always, limits=Limits(max_turns=3))
    assert c.episode.end == "max_turns" and len(c.episode.turns) == 3 and len(engine.calls) == 3
    assert [tc.result for tc in c.episode.tool_calls] == ["0", "2", "4"]  # the last turn's call ran (its state)
    assert c.loss_mask[-1] == 1  # nothing appended after the last sampled turn


def test_max_tool_calls_gives_the_extra_call_an_error_and_ends(tok):
    three = lambda text, turn: "".join(call_text("mul", a=i, b=1) for i in range(3)) + "<|im_end|>"  # noqa: E731
    [[c]], _, log, _ = _run(tok, three, limits=Limits(max_tool_calls=2))
    calls = c.episode.tool_calls
    assert c.episode.end == "max_tool_calls" and log.calls == 2
    assert [x.ok for x in calls] == [True, True, False] and "limit of 2 tool calls" in calls[2].error
    assert [x.error_kind for x in calls] == [None, None, "refused"]  # not run: no tool failed


def test_token_budget_cuts_the_next_turn(tok):
    """Each later turn samples at most what is left of episode_max_tokens; the cut turn ends the episode."""
    long_answer = lambda text, turn: (_calls_then_answer(text, 0) if turn == 0  # noqa: E731
                                      else "eighty four " * 40 + "<|im_end|>")
    limits = Limits(turn_max_new_tokens=100, episode_max_tokens=120)  # turn 0 says 65 tokens
    [[c]], engine, _, _ = _run(tok, long_answer, limits=limits)
    first_and_context = c.episode.turns[1].start
    assert engine.calls[1][2].max_new_tokens == 120 - first_and_context < 100
    assert len(c.completion_ids) == 120 and c.episode.end == "episode_max_tokens" and c.finish_reason == "length"


def test_length_cut_turn_ends_with_length(tok):
    [[c]], *_ = _run(tok, lambda text, turn: "word " * 50, limits=Limits(turn_max_new_tokens=8))
    assert c.episode.end == "length" and len(c.completion_ids) == 8


def test_malformed_call_goes_back_as_a_tool_error_and_is_counted(tok):
    def script(text, turn):
        return "<tool_call>\n{not json\n</tool_call><|im_end|>" if turn == 0 else "84<|im_end|>"

    [[c]], _, log, _ = _run(tok, script)
    t0 = c.episode.turns[0]
    assert t0.malformed == 1 and t0.tool_calls == [] and log.calls == 0 and c.episode.end == "answer"
    tool_msg = c.episode.messages[1]
    assert tool_msg["role"] == "tool" and tool_msg["name"] == MALFORMED_TOOL and "not valid JSON" in tool_msg["content"]
    assert "not valid JSON" in tok.decode(c.completion_ids[t0.end:c.episode.turns[1].start])
    # ToolChat names a malformed call as the loop does (it once named it "")
    [own] = ToolChat(tok).malformed_calls(ToolChat(tok).parse(script("", 0)))
    assert (own.name, own.error_kind, own.error) == (MALFORMED_TOOL, "malformed", tool_msg["content"].removeprefix(
        "error: "))


def test_tool_calls_of_a_turn_run_together(tok):
    """Four episodes, two calls each: all eight calls are inside the tool at once (each waits until all arrived)."""
    arrived = asyncio.Event()
    count = {"n": 0}

    async def wait_for_all(x):
        count["n"] += 1
        if count["n"] == 8:
            arrived.set()
        await asyncio.wait_for(arrived.wait(), 30)
        return x

    two = lambda text, turn: (call_text("w", x=1) + call_text("w", x=2) + "<|im_end|>" if turn == 0  # noqa: E731
                              else "done<|im_end|>")
    groups, engine, log, _ = _run(tok, two, fns={"w": wait_for_all}, prompts=(PROMPT, PROMPT), n=2)
    assert log.most == 8 and all(c.episode.end == "answer" for g in groups for c in g)
    # turn 0: one call sharing each prompt's prefill; turn 1: one call for the four active episodes
    assert [(rows, n) for rows, n, _ in engine.calls] == [(2, 2), (4, 1)]
    assert engine.calls[1][2].seed != SP.seed


def test_a_tool_that_raises_is_an_error_result(tok):
    def boom(a, b):
        raise ValueError("no")

    [[c]], *_ = _run(tok, _calls_then_answer, fns={"mul": boom})
    [call] = c.episode.tool_calls
    assert call.error == "ValueError: no" and "error: ValueError: no" in c.episode.messages[1]["content"]


@pytest.fixture(scope="module")
def hf_engine(tok):
    return HFEngine(load_causal_lm(BUNDLED_MODEL, "float32", "cpu"), tok)


def _real(hf_engine, tok, seed):
    """The bundled model with a tool that it may call: whatever it samples, the layout holds."""
    log = CallLog()
    sp = SamplingParams(temperature=1.0, seed=seed)
    return run_episodes(hf_engine, [PROMPT, [{"role": "user", "content": "2+2?"}]], [{}, {}], 3, sp, ToolChat(tok),
                        lambda rid: FunctionBox({"mul": lambda a, b: a * b}, log),
                        Limits(max_turns=3, turn_max_new_tokens=16, episode_max_tokens=40))


def _key(groups):
    return [[(c.completion_ids, c.loss_mask, c.episode.end) for c in g] for g in groups]


def test_same_seed_same_episodes_with_the_real_engine(hf_engine, tok):
    a, b, other = _real(hf_engine, tok, 5), _real(hf_engine, tok, 5), _real(hf_engine, tok, 6)
    assert _key(a) == _key(b) and _key(a) != _key(other)
    for c in (c for g in a for c in g):
        assert len(c.completion_ids) == len(c.loss_mask) == len(c.logprobs) <= 40
        assert all(lp < 0 for lp, m in zip(c.logprobs, c.loss_mask) if m) and c.episode.turns[0].start == 0


def test_resets_that_differ_give_each_episode_its_own_prompt(tok):
    """When the n environments of one prompt reset to different texts, turn 0 samples each episode's own prompt."""
    engine, chat, log = ScriptedEngine(tok, lambda text, turn: "84<|im_end|>"), ToolChat(tok), CallLog()
    made = []

    def toolbox(rollout_id):
        made.append(FunctionBox({"mul": lambda a, b: a * b}, log, reset_text=f"Episode {len(made)}."))
        return made[-1]

    [group] = run_episodes(engine, [PROMPT], [{}], 2, SP, chat, toolbox, Limits())
    assert [(rows, n) for rows, n, _ in engine.calls] == [(2, 1)]
    assert "Episode 0." in tok.decode(group[0].prompt_ids) and "Episode 1." in tok.decode(group[1].prompt_ids)


@pytest.mark.parametrize("family,rewrites", [
    ("qwen2.5", False),  # the template renders the conversation as the tokens kept
    ("qwen3", True),  # it would render the last turn with an empty <think> block the model never sampled
])
def test_the_loop_on_real_qwen_templates_keeps_the_sampled_tokens(family, rewrites):
    """Qwen's own chat templates and real vocabularies: the second turn starts right after the template's tokens
    for the tool result; the sampled tokens are kept either way, and a template that renders the conversation
    otherwise is recorded."""
    from tests.agents._chat_fixtures import real_tokenizer

    qtok = real_tokenizer(family)
    said = {0: call_text("mul", a=12, b=7) + "<|im_end|>", 1: "84<|im_end|>"}
    chat = ToolChat(qtok)
    [[c]] = run_episodes(ScriptedEngine(qtok, lambda text, turn: said[min(turn, 1)]), [PROMPT], [{}], 1, SP, chat,
                         lambda rid: FunctionBox({"mul": lambda a, b: a * b}, CallLog()), Limits())
    t0, t1 = c.episode.turns
    assert qtok.decode(c.completion_ids[:t0.end]) == said[0] and c.text == said[1]
    context = qtok.decode(c.completion_ids[t0.end:t1.start])
    assert "<tool_response>\n84\n</tool_response>" in context and context.endswith("<|im_start|>assistant\n")
    assert c.episode.template_rewrites is rewrites
