"""The GRPO step on one screen, as an executable spec: `Trainer.train_step` must compute the loss and the gradient
of the plain-torch step below, on the same samples.

Read :func:`sample_and_grade` and :func:`reference_loss` top to bottom for the algorithm kitae trains with by
default (docs/architecture.md, "One training step"): G completions per prompt at temperature T, a plain reward,
advantages (r - mean) / (std + 1e-4) per group (unbiased std), the clipped surrogate per token with eps 0.2 on
both sides, a token mean per sequence then a mean over sequences, no KL term (its weight defaults to 0), one
optimizer pass (mu 1). kitae's own step runs the same algorithm through its machinery (engines, micro-batches,
packed sequences, skipped rows, the Normalizer): change that freely; this test says whether the algorithm
stayed the same.

An agent's episodes are the same algorithm over the tokens the policy sampled: :func:`sample_episodes` samples two
turns with a tool's result put in between (loss mask 0, log-prob 0.0), and the reference's token mean per
sequence runs over the sampled tokens only; ``train_step`` must equal that too, on the update's packed path (the
samples of a prompt in one sequence sharing their prefix, tool tokens included) and its row path, in one
micro-batch and in several.

The samples come from pi_old, the policy with its weights nudged (as a policy some optimizer steps behind would
be), so ratios leave the clip range and the clip acts; the trainer gets the same samples through a replay rollout
engine and the same reward as a reward function.
"""

from __future__ import annotations

import copy
import json

import pytest
import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

from kitae.models import BUNDLED_MODEL
from kitae.rollout.base import ENGINES, Completion
from kitae.rollout.trajectory import Episode, ToolCall, Turn
from kitae.trainer import update
from kitae.trainer.batch import common_prefix
from kitae.trainer.config import load_train_config
from kitae.trainer.loop import Trainer

PROMPTS = [("2+3=?", "5"), ("7-4は？", "3"), ("6+2=?", "8"), ("9-5=?", "4")]  # (question, reference answer)
G, T, MAX_NEW = 4, 0.8, 24  # completions per prompt, sampling temperature, most new tokens
CLIP = 0.2  # ratio clipped to [1 - CLIP, 1 + CLIP] (kitae's eps_low = eps_high default)
STD_EPS = 1e-4  # added to each group's std (kitae.algorithms.advantages.DEFAULT_EPS)


# ---- the reference step ---------------------------------------------------------------------------------------
def reward(text: str, num_tokens: int, answer: str) -> float:
    """1 when the reference answer appears in the completion, less 0.01 per token (shorter is better)."""
    return float(answer in text) - 0.01 * num_tokens


def logps(model, prompt: list[int], completion: list[int]) -> torch.Tensor:
    """log pi(token) of each completion token, pi = softmax(logits / T) (the sampling distribution)."""
    logits = model(torch.tensor([prompt + completion])).logits[0, len(prompt) - 1 : -1] / T  # [len, V]
    return logits.log_softmax(-1).gather(-1, torch.tensor(completion)[:, None]).squeeze(-1)  # [len]


@torch.no_grad()
def sample_and_grade(old_policy, tokenizer) -> list[dict]:
    """Per prompt: G completions sampled from old_policy (each up to its first end token), their log-probs
    there, their rewards."""
    ends = {tokenizer.convert_tokens_to_ids(t) for t in ("<|im_end|>", "<|endoftext|>")}
    groups = []
    for question, answer in PROMPTS:
        messages = [{"role": "user", "content": question}]
        prompt = tokenizer.apply_chat_template(messages, add_generation_prompt=True)["input_ids"]
        ids = torch.tensor([prompt] * G)  # [G, P]
        for _ in range(MAX_NEW):
            probs = (old_policy(ids).logits[:, -1] / T).softmax(-1)  # [G, V]
            ids = torch.cat([ids, torch.multinomial(probs, 1)], dim=1)  # [G, P + t]
        completions = []
        for row in ids[:, len(prompt) :].tolist():
            stop = next((i for i, t in enumerate(row) if t in ends), None)
            completions.append(row if stop is None else row[: stop + 1])  # the end token is part of it
        groups.append({
            "messages": messages, "prompt": prompt, "completions": completions,
            "old_logps": [logps(old_policy, prompt, c) for c in completions],
            "rewards": [reward(tokenizer.decode(c, skip_special_tokens=True), len(c), answer) for c in completions],
        })
    return groups


def reference_loss(policy, groups: list[dict]) -> torch.Tensor:
    """The GRPO loss of the samples under policy: its gradient is the step's. An agent's episode (a group with
    ``masks``) counts only the tokens the policy sampled (mask 1), never the tool results between its turns."""
    per_sequence = []
    for g in groups:
        r = torch.tensor(g["rewards"])  # [G]
        advantages = (r - r.mean()) / (r.std() + STD_EPS)  # [G]; torch.std is unbiased (n - 1)
        masks = g.get("masks") or [[1] * len(c) for c in g["completions"]]
        for completion, old, a, mask in zip(g["completions"], g["old_logps"], advantages, masks):
            ratio = torch.exp(logps(policy, g["prompt"], completion) - old)  # [len]
            surrogate = torch.minimum(ratio * a, ratio.clamp(1 - CLIP, 1 + CLIP) * a)  # [len]
            m = torch.tensor(mask, dtype=surrogate.dtype)  # [len] 1 where sampled
            per_sequence.append(-(surrogate * m).sum() / m.sum())  # a token mean per sequence ...
    return torch.stack(per_sequence).mean()  # ... then a mean over sequences


# ---- an agent's episodes: two sampled turns with a tool result between them ---------------------------------
# what the chat template and the tool put in after turn 0 (kitae.agents.chat.ToolChat.suffix_ids makes the real one)
TOOL_RESULT = "\n<|im_start|>user\n<tool_response>\n{}\n</tool_response><|im_end|>\n<|im_start|>assistant\n"
TURN_NEW = 12  # most new tokens of each turn


def sample_turn(old_policy, ids: list[int], ends: set[int]) -> list[int]:
    """Up to TURN_NEW tokens sampled from old_policy after ``ids``, up to its first end token (kept)."""
    out: list[int] = []
    for _ in range(TURN_NEW):
        probs = (old_policy(torch.tensor([ids + out])).logits[0, -1] / T).softmax(-1)  # [V]
        out.append(int(torch.multinomial(probs, 1)))
        if out[-1] in ends:
            break
    return out


@torch.no_grad()
def sample_episodes(old_policy, tokenizer) -> list[dict]:
    """Per prompt: G two-turn episodes, turn 0 sampled, the tool's result put in (loss mask 0, log-prob 0.0),
    turn 1 sampled; reward as :func:`reward`, on the last turn's text. Episodes 0 and 1 of a group share turn 0
    and the tool result, so the packed update's shared prefix holds tool tokens and sampled tokens."""
    ends = {tokenizer.convert_tokens_to_ids(t) for t in ("<|im_end|>", "<|endoftext|>")}
    groups = []
    for question, answer in PROMPTS:
        messages = [{"role": "user", "content": question}]
        prompt = tokenizer.apply_chat_template(messages, add_generation_prompt=True)["input_ids"]
        tool = tokenizer(TOOL_RESULT.format(answer))["input_ids"]
        completions, masks, turns = [], [], []
        for k in range(G):
            first = turns[0][0] if k == 1 else sample_turn(old_policy, prompt, ends)
            second = sample_turn(old_policy, prompt + first + tool, ends)
            completions.append(first + tool + second)
            masks.append([1] * len(first) + [0] * len(tool) + [1] * len(second))
            turns.append((first, second))
        groups.append({
            "messages": messages, "prompt": prompt, "completions": completions, "masks": masks, "turns": turns,
            "tool_result": answer,
            "old_logps": [logps(old_policy, prompt, c) * torch.tensor(m) for c, m in zip(completions, masks)],
            "rewards": [reward(tokenizer.decode(second, skip_special_tokens=True), len(c), answer)
                        for c, (_, second) in zip(completions, turns)],
        })
    return groups


def replayed_episodes(tokenizer, group: dict) -> list[Completion]:
    """A group of episodes as the Completions the agent runner returns: every token after the prompt, the loss
    mask, pi_old's log-probs (0.0 at the tool's tokens), the turns; the text is the last turn's."""
    ends = (tokenizer.convert_tokens_to_ids("<|im_end|>"), tokenizer.convert_tokens_to_ids("<|endoftext|>"))
    out = []
    for c, mask, old, (first, second) in zip(group["completions"], group["masks"], group["old_logps"],
                                             group["turns"]):
        finish = ["stop" if t and t[-1] in ends else "length" for t in (first, second)]
        call = ToolCall("calculator", {"expression": group["messages"][-1]["content"]}, result=group["tool_result"])
        text = [tokenizer.decode(t) for t in (first, second)]
        episode = Episode(
            turns=[Turn(0, len(first), text[0], finish[0], [call]),
                   Turn(len(c) - len(second), len(c), text[1], finish[1])],
            messages=[{"role": "assistant", "content": text[0], "tool_calls": [
                          {"type": "function", "function": {"name": call.name, "arguments": call.arguments}}]},
                      {"role": "tool", "name": call.name, "content": call.result},
                      {"role": "assistant", "content": text[1]}])
        out.append(Completion(text[1], group["prompt"], c, old.tolist(), finish[1], loss_mask=mask, episode=episode))
    return out


# ---- the same samples and reward for a Trainer ---------------------------------------------------------------
class ReplayEngine:
    """A rollout engine that returns completions sampled beforehand (``completions``: by prompt text). It has
    only ``generate``, all an engine must have (kitae/rollout/base.py, RolloutEngine)."""

    completions: dict[str, list[Completion]] = {}

    def __init__(self, policy, tokenizer):
        pass

    def generate(self, prompts, n, sampling):
        return [self.completions[p[-1]["content"]][:n] for p in prompts]


ENGINES.register("replay", ReplayEngine)


def reward_function(completions, completion_ids, reference_answer, **kwargs) -> list[float]:
    """The reference's reward as a reward function with TRL's signature, for the trainer's config: an episode's
    completion is its messages (TRL's tool loop), the last one its final answer; its ids hold every token."""
    return [reward(c[-1]["content"], len(ids), a) for c, ids, a in zip(completions, completion_ids, reference_answer)]


def replayed(tokenizer, group: dict) -> list[Completion]:
    """A group of the reference as the Completions an engine returns (log-probs: pi_old's, as sampled)."""
    ends = (tokenizer.convert_tokens_to_ids("<|im_end|>"), tokenizer.convert_tokens_to_ids("<|endoftext|>"))
    return [Completion(tokenizer.decode(c), group["prompt"], c, old.tolist(), "stop" if c[-1] in ends else "length")
            for c, old in zip(group["completions"], group["old_logps"])]


def trainer_on(tmp_path, max_new_tokens: int = MAX_NEW, **optim) -> Trainer:
    """A Trainer with kitae's default algorithm on PROMPTS, the replay engine and the reference's reward;
    ``optim``: more optimizer settings (micro_batch_size)."""
    rows = tmp_path / "prompts.jsonl"
    rows.write_text("".join(json.dumps({"messages": [{"role": "user", "content": q}], "reference_answer": a}) + "\n"
                            for q, a in PROMPTS))
    return Trainer(load_train_config(data={
        "name": "reference", "output_dir": str(tmp_path), "seed": 0, "threads": 1,
        "model": {"path": "bundled"},
        "data": {"train": str(rows), "eval": None},
        "rewards": [{"name": "reference", "function": f"{__name__}:reward_function"}],
        "sampling": {"engine": "replay", "group_size": G, "temperature": T, "max_new_tokens": max_new_tokens},
        "optim": {"steps": 1, "prompts_per_step": len(PROMPTS), "max_grad_norm": 1e9,  # no clipping of the gradient
                  **optim},
    }))


def nudged(model, scale: float = 0.1):
    """A copy with each weight tensor moved by scale x its spread of seeded noise: a pi_old near the policy."""
    old, gen = copy.deepcopy(model), torch.Generator().manual_seed(0)
    with torch.no_grad():
        for p in old.parameters():
            p.add_(scale * p.std() * torch.randn(p.shape, generator=gen))
    return old


def test_train_step_has_the_loss_and_gradient_of_the_reference_step(tmp_path, monkeypatch):
    torch.set_num_threads(1)  # deterministic; restored after the test (tests/conftest.py)
    tokenizer = AutoTokenizer.from_pretrained(BUNDLED_MODEL)
    policy = AutoModelForCausalLM.from_pretrained(BUNDLED_MODEL, dtype=torch.float32)
    torch.manual_seed(0)
    groups = sample_and_grade(nudged(policy), tokenizer)
    replay = {g["messages"][-1]["content"]: replayed(tokenizer, g) for g in groups}
    metrics = assert_train_step_equals_reference(policy, groups, replay, trainer_on(tmp_path), monkeypatch)
    assert not [k for k in metrics if k.startswith("agent/")]  # a one-turn step logs no agent metric


# the update's two paths (kitae.trainer.update.PolicyUpdate.micro_batches): each group's samples packed into one
# sequence that computes their shared prefix once, or rows of similar length; in one micro-batch or several
@pytest.mark.parametrize("packed, micro_batch_size", [(True, 32), (True, 3), (False, 32), (False, 3)])
def test_train_step_on_episodes_trains_only_the_sampled_tokens_as_the_reference_step(
        tmp_path, monkeypatch, packed, micro_batch_size):
    torch.set_num_threads(1)
    tokenizer = AutoTokenizer.from_pretrained(BUNDLED_MODEL)
    policy = AutoModelForCausalLM.from_pretrained(BUNDLED_MODEL, dtype=torch.float32)
    torch.manual_seed(0)
    groups = sample_episodes(nudged(policy), tokenizer)
    assert all(0 in m for g in groups for m in g["masks"])  # every episode has tool tokens in it
    replay = {g["messages"][-1]["content"]: replayed_episodes(tokenizer, g) for g in groups}
    monkeypatch.setattr("kitae.trainer.update._takes_block_masks", lambda config: packed)
    packs = []
    monkeypatch.setattr("kitae.trainer.update.packed_micro_batches", spy(update.packed_micro_batches, packs))
    trainer = trainer_on(tmp_path, max_new_tokens=2 * TURN_NEW + 64, micro_batch_size=micro_batch_size)
    metrics = assert_train_step_equals_reference(policy, groups, replay, trainer, monkeypatch)
    assert metrics["agent/turns"] == 2 and metrics["agent/tool_calls"] == 1 and metrics["agent/ended/answer"] == 1
    masks = [m for g in groups for m in g["masks"]]
    assert metrics["agent/trained_token_share"] == pytest.approx(sum(map(sum, masks)) / sum(map(len, masks)))
    assert bool(packs) == packed and (not packed or (len(packs[0]) > 1) == (micro_batch_size < len(PROMPTS) * G))
    if packed:  # some packed sequence's shared prefix runs past a tool result into the next turn's sampled tokens
        shared = [common_prefix([g["prompt"] + c for c in g["completions"][:2]]) - len(g["prompt"]) for g in groups]
        assert all(s > len(g["turns"][0][0]) for s, g in zip(shared, groups))


def spy(fn, calls: list):
    def wrapper(*args, **kwargs):
        out = fn(*args, **kwargs)
        calls.append(out)
        return out
    return wrapper


def assert_train_step_equals_reference(policy, groups, replay, trainer, monkeypatch) -> dict[str, float]:
    """trainer.train_step on the replayed samples has the reference's reward, loss and gradient; returns the
    step's metrics."""
    loss = reference_loss(policy, groups)
    loss.backward()
    monkeypatch.setattr(ReplayEngine, "completions", replay)
    grads = {}
    trainer.optimizer.optimizer.register_step_pre_hook(  # the gradient the torch optimizer steps with
        lambda opt, args, kwargs: grads.update({n: p.grad.clone() for n, p in trainer.policy.named_parameters()}))
    metrics = trainer.train_step(1)

    rewards = [r for g in groups for r in g["rewards"]]
    assert metrics["reward"] == pytest.approx(sum(rewards) / len(rewards))
    assert all(len(set(g["rewards"])) > 1 for g in groups)  # every group has a spread of rewards ...
    assert metrics["clip_frac"] > 0  # ... and some tokens are clipped: the samples reach every part of the loss
    # the loss is a sum of terms that nearly cancel (each group's advantages sum to 0): float32 rounding leaves
    # about 1e-7 of it; the gradient has no such cancellation
    assert metrics["loss"] == pytest.approx(loss.item(), rel=1e-5, abs=1e-6)
    names = [n for n, _ in policy.named_parameters()]
    assert sorted(grads) == sorted(names)
    got = torch.cat([grads[n].flatten() for n in names])
    want = torch.cat([p.grad.flatten() for p in policy.parameters()])
    assert relative_error(got, want) < 1e-5  # float32 rounding: about 3e-6
    for name, p in policy.named_parameters():  # rounding: up to 2e-4 (layer 0's q_proj: a small gradient)
        assert relative_error(grads[name], p.grad) < 2e-3, name
    return metrics


def relative_error(got: torch.Tensor, want: torch.Tensor) -> float:
    return float((got - want).norm() / want.norm())
