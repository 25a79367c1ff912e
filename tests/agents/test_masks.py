"""No tool or template token ever gets a gradient: the gradient of every registered loss (with the KL term on)
reaches the logits of the positions that predict a sampled token, and is exactly 0.0 at every position that
predicts a token the template or a tool put in (loss mask 0), on both of the update's paths (rows, packed)."""

from __future__ import annotations

import pytest
import torch

from kitae.algorithms import POLICY_LOSSES, LossConfig, LossInputs, Normalizer, policy_loss
from kitae.rollout.base import Completion
from kitae.trainer.batch import build_batch, pack, packed_logps, token_logps
from tests.tiny import tiny_llama

PROMPT = [1, 2, 3]
# (turn 0 sampled, tool result + next header put in, turn 1 sampled) of each episode; episodes 0 and 1 share
# turn 0 and the tool result, so the packed sequence's shared prefix holds tool tokens
EPISODES = [([4, 5], [6, 7, 8], [9, 10]), ([4, 5], [6, 7, 8], [11]), ([12], [6, 7, 8, 13], [14, 15, 16])]


def episode(first: list[int], tool: list[int], second: list[int]) -> Completion:
    mask = [1] * len(first) + [0] * len(tool) + [1] * len(second)
    logprobs = [-1.5 * m for m in mask]  # 0.0 where the policy did not sample
    return Completion("", PROMPT, first + tool + second, logprobs, "stop", loss_mask=mask)


def loss_settings(name: str) -> LossConfig:
    return LossConfig.for_loss(name, kl_coef=0.1, max_completion_length=16)


class LogitGrads:
    """The gradient at the input of the output layer (the final norm's output): its row at a position is zero
    exactly when the gradient of the loss w.r.t. that position's logits is (the layer is linear and feeds
    nothing else)."""

    def __init__(self, model):
        self.grad = None
        model.model.norm.register_forward_hook(self._hook)

    def _hook(self, module, args, out) -> None:
        out.register_hook(self._keep)  # [B, L, H]: every position, before logits_to_keep takes the last ones

    def _keep(self, grad) -> None:
        self.grad = grad.detach().clone()


@pytest.mark.parametrize("name", sorted(POLICY_LOSSES.names()))
def test_tool_and_template_tokens_get_no_gradient_under_every_loss(name):
    model = tiny_llama(64).train()
    grads = LogitGrads(model)
    batch = build_batch([episode(*e) for e in EPISODES], [1.0, -0.5, 0.75], pad_id=0)
    batch.ref_logp = -torch.rand(batch.mask.shape)  # [B, L-1] a reference's log-probs: the KL term is on
    logp, _ = token_logps(model, batch)  # [B, L-1]
    loss, _ = policy_loss(name, LossInputs(logp, batch.old_logp, batch.advantages, batch.mask, batch.ref_logp),
                          loss_settings(name), Normalizer.from_masks([batch.mask]))
    loss.backward()
    per_position = grads.grad[:, :-1].abs().sum(-1)  # [B, L-1]: column c predicts token c + 1
    mask = batch.mask  # [B, L-1]
    tool = (mask == 0) & (batch.attention_mask[:, 1:] == 1) & (torch.arange(mask.shape[1]) >= len(PROMPT) - 1)
    assert int(tool.sum()) == 3 + 3 + 4  # the tool and template tokens of the three episodes
    assert torch.all(per_position[mask == 0] == 0.0)  # tool, template, prompt and padding columns: exactly 0
    assert torch.all(per_position[mask == 1] > 0)  # every sampled token's position gets a gradient


@pytest.mark.parametrize("name", sorted(POLICY_LOSSES.names()))
def test_packed_tool_tokens_get_no_gradient_even_inside_the_shared_prefix(name):
    model = tiny_llama(64).train()
    grads = LogitGrads(model)
    batch = build_batch([episode(*e) for e in EPISODES], [1.0, -0.5, 0.75], pad_id=0)
    batch.ref_logp = -torch.rand(batch.mask.shape)
    packed = pack(batch, [[0, 1, 2]])
    logp, _ = packed_logps(model, packed)  # [b, L-1] of the packed rows
    rows = packed.rows
    loss, _ = policy_loss(name, LossInputs(logp, rows.old_logp, rows.advantages, rows.mask, rows.ref_logp),
                          loss_settings(name), Normalizer.from_masks([rows.mask]))
    loss.backward()
    per_position = grads.grad[0].abs().sum(-1)  # [P] of the one packed sequence
    trained = set(packed.where[1].tolist())  # positions predicting a sampled token
    assert trained and all(per_position[p] > 0 for p in trained)
    assert all(per_position[p] == 0.0 for p in range(len(per_position)) if p not in trained)
    # the shared prefix [1 2 3 4 5 6 7 8] predicts tool tokens 6, 7, 8 from positions 4, 5, 6: none trained,
    # while position 7 (predicting turn 1's first token of each of the two episodes) is
    assert packed.input_ids[0, :8].tolist() == [1, 2, 3, 4, 5, 6, 7, 8]
    assert not {4, 5, 6} & trained and 7 in trained
