"""Log-probs and entropy chunk by chunk of positions (kitae.trainer.logprobs): the numbers and gradients of the full
[positions x vocabulary] computation, without the output layer ever seeing more than a chunk of positions."""

from __future__ import annotations

import pytest
import torch

from kitae.rollout.base import Completion
from kitae.trainer.batch import build_batch, pack, packed_logps, token_logps
from kitae.trainer.logprobs import chosen_logps, chunk_stats
from tests.tiny import tiny_llama

V = 64


def completion(prompt: list[int], tokens: list[int]) -> Completion:
    return Completion("", prompt, tokens, [0.0] * len(tokens), "stop")


def a_batch():
    rows = [completion([1, 2, 3, 4, 5, 6], [7, 8, 9]), completion([1, 2, 3, 4], [9, 10, 11, 12, 13]),
            completion([5, 6, 7], [8, 2])]
    return build_batch(rows, [0.0] * 3, pad_id=0)


def full(logits: torch.Tensor, targets: torch.Tensor, temperature: float) -> tuple[torch.Tensor, torch.Tensor]:
    """Today's computation on the whole logits [N, V]: (log-probs [N], entropies [N])."""
    logits = logits.float() / temperature
    logp = logits.log_softmax(-1).gather(-1, targets[:, None]).squeeze(-1)
    entropy = torch.logsumexp(logits, -1) - (logits.softmax(-1) * logits).sum(-1)
    return logp, entropy


def full_forward_logps(model, batch) -> torch.Tensor:
    """Log-probs [B, L-1] from a plain forward over every position, the model's own logits."""
    logits = model(input_ids=batch.input_ids, attention_mask=batch.attention_mask).logits[:, :-1].float()
    return logits.log_softmax(-1).gather(-1, batch.input_ids[:, 1:, None]).squeeze(-1)


class Widest:
    """Records the most positions one call of the output layer computed logits for."""

    def __init__(self, head: torch.nn.Module):
        self.most = 0
        head.register_forward_hook(self.seen)

    def seen(self, _module, _inputs, logits):
        self.most = max(self.most, logits[..., 0].numel())


@pytest.mark.parametrize("logits, target, temperature, logp, entropy", [
    ([0.0, 0.0], 1, 1.0, -0.693147, 0.693147),  # a fair coin: ln 2 both
    ([0.0, 0.0, float("-inf")], 0, 1.0, -0.693147, 0.693147),  # a banned token (-inf) adds nothing
    ([2.0, 0.0], 0, 2.0, -0.313262, 0.582203),  # T 2: the coin of [1, 0], p = 0.7311
    ([0.0, 0.0, 0.0, 0.0], 3, 0.5, -1.386294, 1.386294),  # uniform stays uniform at any T: ln 4
])
def test_chunk_stats_by_hand(logits, target, temperature, logp, entropy):
    got_logp, got_entropy = chunk_stats(torch.tensor([logits]), torch.tensor([target]), temperature)
    assert got_logp.item() == pytest.approx(logp, abs=1e-6)
    assert got_entropy.item() == pytest.approx(entropy, abs=1e-6)


@pytest.mark.parametrize("chunk_size", [1, 3, 7, 0])  # 0: all 10 positions at once
@pytest.mark.parametrize("temperature", [1.0, 0.7])
def test_chunks_give_the_full_numbers_and_gradients(chunk_size, temperature):
    model = tiny_llama(V)
    torch.manual_seed(1)
    hidden = torch.randn(10, 32, requires_grad=True)  # [N, H] final hidden states
    targets = torch.randint(0, V, (10,))
    weights = torch.randn(10)  # a loss that weighs each position differently
    logp, entropy = chosen_logps(model, hidden, targets, temperature, chunk_size)
    (logp * weights).sum().backward()
    got = hidden.grad.clone(), model.lm_head.weight.grad.clone()
    hidden.grad, model.lm_head.weight.grad = None, None
    want_logp, want_entropy = full(model.lm_head(hidden), targets, temperature)
    (want_logp * weights).sum().backward()
    torch.testing.assert_close(logp, want_logp, atol=1e-6, rtol=0)
    torch.testing.assert_close(entropy, want_entropy.detach(), atol=1e-6, rtol=0)
    torch.testing.assert_close(got[0], hidden.grad, atol=1e-6, rtol=0)  # w.r.t. the hidden states
    torch.testing.assert_close(got[1], model.lm_head.weight.grad, atol=1e-6, rtol=0)  # the (tied) output layer
    assert not entropy.requires_grad  # a metric: no graph kept for it


def test_the_output_layer_never_computes_more_than_a_chunk():
    model = tiny_llama(V)
    widest = Widest(model.lm_head)
    batch = a_batch()  # 3 rows x 10 columns from position 3 on: 21 positions whose logits the update needs
    logp, _ = token_logps(model, batch, chunk_size=4)
    (logp * batch.mask).sum().backward()  # the backward recomputes a chunk at a time too
    assert widest.most == 4
    packed = pack(batch, [[0, 1, 2]])
    packed_logps(model, packed, chunk_size=4)[0].sum().backward()
    assert widest.most == 4


@pytest.mark.parametrize("chunk_size", [1, 5, 0])
def test_token_logps_gradients_equal_a_full_forward(chunk_size):
    model = tiny_llama(V)
    batch = a_batch()
    (token_logps(model, batch, chunk_size=chunk_size)[0] * batch.mask).sum().backward()
    got = {n: p.grad.clone() for n, p in model.named_parameters()}
    model.zero_grad()
    want = full_forward_logps(model, batch)
    (want * batch.mask).sum().backward()
    torch.testing.assert_close(token_logps(model, batch, chunk_size=chunk_size)[0] * batch.mask,
                               want * batch.mask, atol=1e-6, rtol=0)
    for name, p in model.named_parameters():
        torch.testing.assert_close(got[name], p.grad, atol=1e-6, rtol=1e-5, msg=name)


def gemma2(softcap: float):
    from transformers import Gemma2Config, Gemma2ForCausalLM

    torch.manual_seed(0)
    cfg = Gemma2Config(vocab_size=V, hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4,
                       num_key_value_heads=2, head_dim=8, final_logit_softcapping=softcap)
    model = Gemma2ForCausalLM(cfg)
    with torch.no_grad():
        model.lm_head.weight.mul_(400)  # logits of tens: the cap at 5 changes them a lot
    return model


def test_gemma_soft_capping_is_applied_per_chunk():
    model = gemma2(softcap=5.0)
    widest = Widest(model.lm_head)
    batch = a_batch()
    logp, _ = token_logps(model, batch, chunk_size=4)
    assert widest.most == 4  # split at the output layer, the cap applied after it
    want = full_forward_logps(model, batch)
    torch.testing.assert_close(logp * batch.mask, want * batch.mask, atol=1e-6, rtol=0)
    uncapped = gemma2(softcap=None)
    assert not torch.allclose(token_logps(uncapped, batch)[0] * batch.mask, want * batch.mask, atol=1e-2)


def test_a_model_that_scales_its_logits_some_other_way_takes_the_whole_logits():
    from transformers import CohereConfig, CohereForCausalLM

    torch.manual_seed(0)
    model = CohereForCausalLM(CohereConfig(vocab_size=V, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                                           num_attention_heads=4, num_key_value_heads=2, logit_scale=0.5))
    batch = a_batch()
    logp, _ = token_logps(model, batch, chunk_size=4)
    torch.testing.assert_close(logp * batch.mask, full_forward_logps(model, batch) * batch.mask, atol=1e-6, rtol=0)


class NoOutputLayer(torch.nn.Module):
    """An architecture kitae cannot look into: no get_output_embeddings."""

    def __init__(self, inner):
        super().__init__()
        self.inner = inner

    def forward(self, **kwargs):
        return self.inner(**kwargs)


def test_a_model_without_an_output_layer_takes_the_whole_logits():
    model = tiny_llama(V)
    batch = a_batch()
    logp, _ = token_logps(NoOutputLayer(model), batch, chunk_size=4)
    torch.testing.assert_close(logp * batch.mask, full_forward_logps(model, batch) * batch.mask, atol=1e-6, rtol=0)


def test_lora_with_an_adapted_output_layer():
    from peft import LoraConfig, get_peft_model

    model = get_peft_model(tiny_llama(V), LoraConfig(r=4, lora_alpha=8, target_modules=["q_proj", "v_proj", "lm_head"],
                                                     init_lora_weights=False))
    widest = Widest(model.get_output_embeddings())
    batch = a_batch()
    (token_logps(model, batch, chunk_size=4)[0] * batch.mask).sum().backward()
    assert widest.most == 4
    got = {n: p.grad.clone() for n, p in model.named_parameters() if p.requires_grad}
    model.zero_grad()
    want = full_forward_logps(model, batch)
    (want * batch.mask).sum().backward()
    assert any("lm_head" in n for n in got)
    for name, p in model.named_parameters():
        if p.requires_grad:
            torch.testing.assert_close(got[name], p.grad, atol=1e-6, rtol=1e-5, msg=name)
    with torch.no_grad(), model.disable_adapter():  # the reference policy: the base without the adapter
        torch.testing.assert_close(token_logps(model, batch, chunk_size=4)[0] * batch.mask,
                                   full_forward_logps(model, batch) * batch.mask, atol=1e-6, rtol=0)


def test_a_vision_model_splits_and_keeps_its_placeholder_mask():
    from kitae.models import BUNDLED_VL, load_causal_lm

    model = load_causal_lm(BUNDLED_VL)  # its output layer's hook sets the image placeholder's logit to -1e4
    widest = Widest(model.get_output_embeddings())
    batch = a_batch()
    logp, _ = token_logps(model, batch, chunk_size=4)
    assert widest.most == 4  # split at the output layer; the hook runs on each chunk (else the log-probs differ)
    # log-probs near -20 here: fp32 rounding of the matmul is 2e-6 of them, so 1e-6 relative as well as absolute
    torch.testing.assert_close(logp * batch.mask, full_forward_logps(model, batch) * batch.mask, atol=1e-6, rtol=1e-6)
