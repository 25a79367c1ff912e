"""Truncated importance sampling and the sampler/trainer mismatch metrics, by hand-computed examples."""

from __future__ import annotations

import math

import pytest
import torch

from kitae.algorithms.losses import LossConfig, LossInputs, Normalizer, policy_loss
from kitae.algorithms.mismatch import mismatch_metrics, tis_weight

LN = math.log


def test_tis_weight_is_the_capped_ratio_on_counted_tokens():
    train = torch.tensor([[LN(0.5), LN(0.3), 0.0]])
    sampler = torch.tensor([[LN(0.2), LN(0.6), 5.0]])
    w = tis_weight(train, sampler, torch.tensor([[1.0, 1.0, 0.0]]), cap=2.0)
    assert torch.allclose(w, torch.tensor([[2.0, 0.5, 1.0]]))  # 2.5 capped; 0.5 kept; padding 1


def test_mismatch_metrics_by_hand():
    train = torch.tensor([[LN(0.5), LN(0.3), -1.0]])
    sampler = torch.tensor([[LN(0.2), LN(0.6), -7.0]])
    m = mismatch_metrics(train, sampler, torch.tensor([[1.0, 1.0, 0.0]]), cap=2.0)
    assert m["mismatch/logp_abs_diff"] == pytest.approx((LN(2.5) + LN(2)) / 2)  # the padding column is ignored
    assert m["mismatch/logp_abs_diff_max"] == pytest.approx(LN(2.5))
    assert m["mismatch/kl"] == pytest.approx(((2.5 - 1 - LN(2.5)) + (0.5 - 1 + LN(2))) / 2)
    assert m["mismatch/tis_weight_mean"] == pytest.approx(1.25)
    assert m["mismatch/tis_clip_frac"] == pytest.approx(0.5)
    assert "mismatch/tis_weight_mean" not in mismatch_metrics(train, sampler, torch.ones(1, 3), cap=None)
    assert mismatch_metrics(train, sampler, torch.zeros(1, 3), cap=2.0) == {}  # nothing counted


def test_same_log_probs_mean_no_mismatch():
    logp = torch.tensor([[-1.0, -2.0]])
    m = mismatch_metrics(logp, logp.clone(), torch.ones(1, 2), cap=2.0)
    assert m["mismatch/logp_abs_diff"] == 0 and m["mismatch/kl"] == 0 and m["mismatch/tis_clip_frac"] == 0


def test_is_weight_multiplies_the_policy_term_not_the_kl():
    # grpo at ratio 1, A = 1, one sequence of 2 tokens: per token -1; weights [2, 0.5] -> [-2, -0.5], mean -1.25
    logp = torch.tensor([[-1.0, -2.0]], requires_grad=True)
    base = dict(old_logp=logp.detach().clone(), advantages=torch.tensor([1.0]), mask=torch.ones(1, 2))
    norm = Normalizer(num_sequences=1, num_tokens=2)
    weighted = LossInputs(logp, **base, is_weight=torch.tensor([[2.0, 0.5]]))
    loss, _ = policy_loss("grpo", weighted, LossConfig(), norm)
    loss.backward()
    assert loss.item() == pytest.approx(-1.25)
    assert logp.grad[0].tolist() == pytest.approx([-1.0, -0.25])  # -A * w / len per token
    # KL term (kl_coef 0.5, ref = logp - 1 per token: k3 = e^-1 - 1 + 1 = e^-1) is added unweighted
    ref = logp.detach() - 1.0
    with_kl, _ = policy_loss("grpo", LossInputs(logp, **base, ref_logp=ref, is_weight=torch.tensor([[2.0, 0.5]])),
                             LossConfig(kl_coef=0.5), norm)
    assert with_kl.item() == pytest.approx(-1.25 + 0.5 * math.exp(-1.0))


def test_is_weight_must_match_logp():
    logp = torch.zeros(1, 2)
    inp = LossInputs(logp, logp, torch.tensor([1.0]), torch.ones(1, 2), is_weight=torch.ones(1, 3))
    with pytest.raises(ValueError, match="is_weight has shape"):
        policy_loss("grpo", inp, LossConfig(), Normalizer(1, 2))
