"""The GRPO step on one screen, as an executable spec: `Trainer.train_step` must compute the loss and the gradient
of the plain-torch step below, on the same samples.

Read :func:`sample_and_grade` and :func:`reference_loss` top to bottom for the algorithm kitae trains with by
default (docs/architecture.md, "One training step"): G completions per prompt at temperature T, a plain reward,
advantages (r - mean) / (std + 1e-4) per group (unbiased std), the clipped surrogate per token with eps 0.2 on
both sides, a token mean per sequence then a mean over sequences, no KL term (its weight defaults to 0), one
optimizer pass (mu 1). kitae's own step runs the same algorithm through its machinery (engines, micro-batches,
packed sequences, skipped rows, the Normalizer): change that freely; this test says whether the algorithm
stayed the same.

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
    """The GRPO loss of the samples under policy: its gradient is the step's."""
    per_sequence = []
    for g in groups:
        r = torch.tensor(g["rewards"])  # [G]
        advantages = (r - r.mean()) / (r.std() + STD_EPS)  # [G]; torch.std is unbiased (n - 1)
        for completion, old, a in zip(g["completions"], g["old_logps"], advantages):
            ratio = torch.exp(logps(policy, g["prompt"], completion) - old)  # [len]
            surrogate = torch.minimum(ratio * a, ratio.clamp(1 - CLIP, 1 + CLIP) * a)  # [len]
            per_sequence.append(-surrogate.mean())  # a token mean per sequence ...
    return torch.stack(per_sequence).mean()  # ... then a mean over sequences


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
    """The reference's reward as a reward function with TRL's signature, for the trainer's config."""
    return [reward(c[0]["content"], len(ids), a) for c, ids, a in zip(completions, completion_ids, reference_answer)]


def replayed(tokenizer, group: dict) -> list[Completion]:
    """A group of the reference as the Completions an engine returns (log-probs: pi_old's, as sampled)."""
    ends = (tokenizer.convert_tokens_to_ids("<|im_end|>"), tokenizer.convert_tokens_to_ids("<|endoftext|>"))
    return [Completion(tokenizer.decode(c), group["prompt"], c, old.tolist(), "stop" if c[-1] in ends else "length")
            for c, old in zip(group["completions"], group["old_logps"])]


def trainer_on(tmp_path) -> Trainer:
    """A Trainer with kitae's default algorithm on PROMPTS, the replay engine and the reference's reward."""
    rows = tmp_path / "prompts.jsonl"
    rows.write_text("".join(json.dumps({"messages": [{"role": "user", "content": q}], "reference_answer": a}) + "\n"
                            for q, a in PROMPTS))
    return Trainer(load_train_config(data={
        "name": "reference", "output_dir": str(tmp_path), "seed": 0, "threads": 1,
        "model": {"path": "bundled"},
        "data": {"train": str(rows), "eval": None},
        "rewards": [{"name": "reference", "function": f"{__name__}:reward_function"}],
        "sampling": {"engine": "replay", "group_size": G, "temperature": T, "max_new_tokens": MAX_NEW},
        "optim": {"steps": 1, "prompts_per_step": len(PROMPTS), "max_grad_norm": 1e9},  # no clipping of the gradient
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
    loss = reference_loss(policy, groups)
    loss.backward()

    replay = {g["messages"][-1]["content"]: replayed(tokenizer, g) for g in groups}
    monkeypatch.setattr(ReplayEngine, "completions", replay)
    trainer = trainer_on(tmp_path)
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


def relative_error(got: torch.Tensor, want: torch.Tensor) -> float:
    return float((got - want).norm() / want.norm())
