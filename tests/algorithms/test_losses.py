"""Policy losses against hand-computed values on tiny tensors, and their gradients."""

import math

import pytest
import torch

from kitae.algorithms import (
    POLICY_LOSSES,
    LossConfig,
    LossInputs,
    LossSettings,
    Normalizer,
    aggregate,
    policy_loss,
    truncation_mask,
)
from kitae.errors import ConfigError

LN = math.log
INF = float("inf")


def loss_cfg(name: str = "grpo", *, max_completion_length: int | None = None, kl_coef: float = 0.0,
             kl_estimator: str = "k3", **settings) -> LossConfig:
    """What loss `name` runs with: its settings class with `settings`, built as code builds it (unchecked, so a
    bad value reaches policy_loss's own check)."""
    cls = LossSettings.settings_class(name, "") if name in POLICY_LOSSES else LossSettings.settings_class("grpo", "")
    return LossConfig(cls(type=name, **settings), max_completion_length, kl_coef, kl_estimator)


def one_token(ratio: float, adv: float, logp: float = -1.0) -> LossInputs:
    """One sequence of one token with the given ratio; logp is a leaf that requires grad."""
    lp = torch.tensor([[logp]], requires_grad=True)
    return LossInputs(logp=lp, old_logp=torch.tensor([[logp - LN(ratio)]]), advantages=torch.tensor([adv]),
                      mask=torch.ones(1, 1))


GRPO_TOKEN_CASES = [
    # ratio, A, eps_low, eps_high, expected loss, expected d loss/d logp, clipped
    (1.5, 1.0, 0.2, 0.2, -1.2, 0.0, 1.0),  # -min(1.5, 1.2): above 1+eps with A>0 -> clipped, no gradient
    (1.5, -1.0, 0.2, 0.2, 1.5, 1.5, 0.0),  # -min(-1.5, -1.2) = 1.5: unclipped branch, grad -A*ratio = 1.5
    (0.5, 1.0, 0.2, 0.2, -0.5, -0.5, 0.0),  # -min(0.5, 0.8) = -0.5: grad -A*ratio = -0.5
    (0.5, -1.0, 0.2, 0.2, 0.8, 0.0, 1.0),  # -min(-0.5, -0.8) = 0.8: below 1-eps with A<0 -> clipped
    (1.1, 2.0, 0.2, 0.2, -2.2, -2.2, 0.0),  # inside the range: -A*ratio, grad -A*ratio
    (1.25, 1.0, 0.2, 0.28, -1.25, -1.25, 0.0),  # clip-higher: 1.25 < 1.28, still learning
    (1.3, 1.0, 0.2, 0.28, -1.28, 0.0, 1.0),  # ... 1.3 > 1.28 clipped
    (1.0, 0.0, 0.2, 0.2, 0.0, 0.0, 0.0),  # zero advantage: no loss, no gradient
]


@pytest.mark.parametrize("ratio, adv, lo, hi, loss_ref, grad_ref, clip_ref", GRPO_TOKEN_CASES)
def test_grpo_single_token(ratio, adv, lo, hi, loss_ref, grad_ref, clip_ref):
    inp = one_token(ratio, adv)
    loss, m = policy_loss("grpo", inp, loss_cfg("grpo", eps_low=lo, eps_high=hi), Normalizer(1, 1))
    loss.backward()
    assert loss.item() == pytest.approx(loss_ref, abs=1e-6)
    assert inp.logp.grad.item() == pytest.approx(grad_ref, abs=1e-6)
    assert m["clip_frac"] == clip_ref
    assert m["ratio_mean"] == pytest.approx(ratio, abs=1e-6)


E20 = math.exp(20.0)  # the ratio at the log-ratio clamp (verl's [-20, 20])


@pytest.mark.parametrize("loss_name", ["grpo", "dapo"])
def test_a_huge_log_ratio_is_clamped_so_loss_and_gradient_stay_finite(loss_name):
    """log-ratio 89 with A = -1: exp(89) is inf in float32, and so were the loss and its gradient. Clamped to 20,
    the token's term is -min(-e^20, -1.2) = e^20 with no gradient (the clamp's); the other token, at ratio 1.5,
    keeps its own: -min(-1.5, -1.2) = 1.5, d/dlogp = -A * ratio / 2 tokens = 0.75."""
    lp = torch.tensor([[-1.0, -1.0]], requires_grad=True)
    inp = LossInputs(logp=lp, old_logp=torch.tensor([[-90.0, -1.0 - LN(1.5)]]), advantages=torch.tensor([-1.0]),
                     mask=torch.ones(1, 2))
    loss, m = policy_loss(loss_name, inp, loss_cfg(loss_name), Normalizer(1, 2))  # one sequence: every mean the same
    loss.backward()
    assert math.isfinite(loss.item()) and torch.isfinite(lp.grad).all()
    assert loss.item() == pytest.approx((E20 + 1.5) / 2, rel=1e-6)
    torch.testing.assert_close(lp.grad, torch.tensor([[0.0, 0.75]]))
    assert math.isfinite(m["ratio_mean"])


def test_gspo_clamps_the_sequence_log_ratio():
    """Token log-ratios [89, 89]: the sequence's is 89, clamped to 20; A = -1: -min(-e^20, -1.0004) = e^20."""
    lp = torch.tensor([[-1.0, -1.0]], requires_grad=True)
    inp = LossInputs(logp=lp, old_logp=torch.full((1, 2), -90.0), advantages=torch.tensor([-1.0]),
                     mask=torch.ones(1, 2))
    loss, m = policy_loss("gspo", inp, loss_cfg("gspo"), Normalizer(1, 2))
    loss.backward()
    assert loss.item() == pytest.approx(E20, rel=1e-6)
    torch.testing.assert_close(lp.grad, torch.zeros(1, 2))
    assert math.isfinite(m["seq_ratio_mean"]) and math.isfinite(m["ratio_mean"])


def two_sequences() -> LossInputs:
    """seq 0: 2 tokens at ratio 1, A = 1; seq 1: 1 token at ratio 1 plus a padding slot holding -inf, A = -3.
    Per-token policy term -ratio*A: [[-1, -1], [3, pad]]."""
    lp = torch.tensor([[-1.0, -2.0], [-0.5, -INF]], requires_grad=True)
    return LossInputs(logp=lp, old_logp=torch.tensor([[-1.0, -2.0], [-0.5, -INF]]),
                      advantages=torch.tensor([1.0, -3.0]), mask=torch.tensor([[1.0, 1.0], [1.0, 0.0]]))


AGG_CASES = [
    # aggregation, expected loss, expected grad (at ratio 1, d/dlogp = -A * d agg / d value)
    # seq mean of token means: (mean(-1,-1) + 3) / 2 = 1; grads -A/(len*N): -1/4, -1/4 | 3/2
    ("seq_mean_token_mean", 1.0, [[-0.25, -0.25], [1.5, 0.0]]),
    # token mean: (-1 - 1 + 3) / 3 = 1/3; grads -A/3
    ("token_mean", 1 / 3, [[-1 / 3, -1 / 3], [1.0, 0.0]]),
    # sum / max_len 4, mean over 2 seqs: (-2/4 + 3/4) / 2 = 0.125; grads -A/(4*2)
    ("seq_sum_constant", 0.125, [[-0.125, -0.125], [0.375, 0.0]]),
]


@pytest.mark.parametrize("aggregation, loss_ref, grad_ref", AGG_CASES)
def test_grpo_aggregation_and_gradient_at_ratio_one(aggregation, loss_ref, grad_ref):
    inp = two_sequences()
    cfg = loss_cfg("grpo", aggregation=aggregation, max_completion_length=4)
    loss, m = policy_loss("grpo", inp, cfg, Normalizer(num_sequences=2, num_tokens=3))
    loss.backward()
    assert loss.item() == pytest.approx(loss_ref, abs=1e-6)
    torch.testing.assert_close(inp.logp.grad, torch.tensor(grad_ref))  # finite although padding is -inf
    assert m["num_tokens"] == 3 and m["clip_frac"] == 0 and m["ratio_mean"] == pytest.approx(1.0)


AGGREGATE_CASES = [
    # v [[1,3],[5,0]], mask [[1,1],[1,0]], max len 4
    ("seq_mean_token_mean", Normalizer(2, 3), (2 + 5) / 2),  # token means 2 and 5
    ("token_mean", Normalizer(2, 3), 9 / 3),
    ("seq_sum_constant", Normalizer(2, 3), (4 / 4 + 5 / 4) / 2),
    # the same micro-batch inside a bigger optimizer batch (4 sequences, 6 tokens): its share only
    ("seq_mean_token_mean", Normalizer(4, 6), (2 + 5) / 4),
    ("token_mean", Normalizer(4, 6), 9 / 6),
    ("seq_sum_constant", Normalizer(4, 6), (4 / 4 + 5 / 4) / 4),
    # ... whose 2 other rows are masked out entirely: Dr. GRPO's constant still counts them
    ("seq_mean_token_mean", Normalizer(2, 3, num_rows=4), (2 + 5) / 2),
    ("token_mean", Normalizer(2, 3, num_rows=4), 9 / 3),
    ("seq_sum_constant", Normalizer(2, 3, num_rows=4), (4 / 4 + 5 / 4) / 4),
    # one of 2 processes whose gradients DDP averages: the batch's counts, its share times 2
    ("seq_mean_token_mean", Normalizer(4, 6, processes=2), (2 + 5) / 4 * 2),
    ("token_mean", Normalizer(4, 6, processes=2), 9 / 6 * 2),
    ("seq_sum_constant", Normalizer(4, 6, processes=2), (4 / 4 + 5 / 4) / 4 * 2),
]


@pytest.mark.parametrize("mode, norm, expected", AGGREGATE_CASES)
def test_aggregate(mode, norm, expected):
    v = torch.tensor([[1.0, 3.0], [5.0, 0.0]])
    mask = torch.tensor([[1.0, 1.0], [1.0, 0.0]])
    assert aggregate(v, mask, mode, norm, max_completion_length=4).item() == pytest.approx(expected)


def test_seq_sum_constant_needs_max_completion_length():
    with pytest.raises(ConfigError, match="algorithm.max_completion_length"):
        aggregate(torch.ones(1, 2), torch.ones(1, 2), "seq_sum_constant", Normalizer(1, 2))


def test_unknown_aggregation_suggests_a_name():
    with pytest.raises(ConfigError, match=r"algorithm\.aggregation: .*did you mean 'token_mean'"):
        policy_loss("grpo", one_token(1.0, 1.0), loss_cfg(aggregation="token_maen"), Normalizer(1, 1))
    with pytest.raises(ConfigError, match=r"algorithm\.loss\.aggregation: .*did you mean 'token_mean'"):
        LossConfig.for_loss("grpo", aggregation="token_maen")


DEFAULT_CASES = [
    # loss, settings given, field, the value the loss runs with
    ("dapo", {}, "aggregation", "token_mean"),
    ("dapo", {}, "eps_high", 0.28),
    ("dapo", {"eps_high": 0.3}, "eps_high", 0.3),  # a given value wins
    ("dapo", {"eps_high": 0.2}, "eps_high", 0.2),  # ... also when it equals grpo's default
    ("dapo", {"aggregation": "seq_mean_token_mean"}, "aggregation", "seq_mean_token_mean"),  # ... here too
    ("dapo", {"eps_high": None}, "eps_high", 0.28),  # None: not given
    ("dapo", {"eps_low": 0.1}, "eps_low", 0.1),
    ("dapo", {}, "eps_low", 0.2),
    ("dr_grpo", {}, "aggregation", "seq_sum_constant"),
    ("dr_grpo", {"aggregation": "token_mean"}, "aggregation", "token_mean"),
    ("cispo", {}, "aggregation", "token_mean"),
    ("cispo", {}, "cispo_eps_high", 0.28),
    ("grpo", {}, "aggregation", "seq_mean_token_mean"),
    ("grpo", {}, "eps_high", 0.2),
    ("gspo", {}, "gspo_eps_low", 3e-4),
    ("gspo", {}, "gspo_eps_high", 4e-4),
    ("kimi", {}, "kimi_tau", 0.1),
]


@pytest.mark.parametrize("name, given, field, expected", DEFAULT_CASES)
def test_for_loss_fills_what_is_not_given_from_the_losss_own_defaults(name, given, field, expected):
    assert getattr(LossConfig.for_loss(name, **given).settings, field) == expected


@pytest.mark.parametrize("name, given, message", [
    ("gspo", {"cispo_eps_high": 0.3},
     "algorithm.loss.cispo_eps_high: not a setting of loss 'gspo'; loss cispo takes it"),
    ("kimi", {"aggregation": "token_mean"}, "algorithm.loss.aggregation: not a setting of loss 'kimi'"),
    ("grpo", {"eps_low": -0.1}, "algorithm.loss.eps_low: must be >= 0"),
])
def test_for_loss_refuses_a_setting_the_loss_does_not_take_or_cannot_use(name, given, message):
    with pytest.raises(ConfigError) as err:
        LossConfig.for_loss(name, **given)
    assert message in str(err.value)


def test_every_loss_registers_its_settings_and_they_validate():
    for name in POLICY_LOSSES.names():
        settings = LossConfig.for_loss(name).settings
        assert isinstance(settings, LossSettings) and settings.type == name
        LossConfig(settings).validate()


def test_a_loss_given_another_losss_settings_is_told_which_it_reads():
    with pytest.raises(ValueError, match="loss 'gspo' reads gspo_eps_high, gspo_eps_low"):
        policy_loss("gspo", one_token(1, 1), loss_cfg("grpo"), Normalizer(1, 1))


def test_dapo_is_grpo_with_token_mean_and_clip_higher():
    dapo = LossConfig.for_loss("dapo")
    # ratio 1.25, A = 1: grpo clips at 1.2 -> -1.2; dapo's 1.28 does not -> -1.25
    assert policy_loss("grpo", one_token(1.25, 1.0), loss_cfg(), Normalizer(1, 1))[0].item() == pytest.approx(-1.2)
    assert policy_loss("dapo", one_token(1.25, 1.0), dapo, Normalizer(1, 1))[0].item() == pytest.approx(-1.25)
    # and on the two-sequence batch it aggregates like token_mean: 1/3 (see AGG_CASES)
    assert policy_loss("dapo", two_sequences(), dapo, Normalizer(2, 3))[0].item() == pytest.approx(1 / 3)


def test_a_loss_runs_with_the_settings_as_given():
    # dapo given grpo's values (eps_high 0.2, seq_mean_token_mean) is grpo: no default is applied at loss time
    as_grpo = loss_cfg("dapo", eps_high=0.2, aggregation="seq_mean_token_mean")
    assert policy_loss("dapo", one_token(1.25, 1.0), as_grpo, Normalizer(1, 1))[0].item() == pytest.approx(-1.2)
    grpo = policy_loss("grpo", two_sequences(), loss_cfg(), Normalizer(2, 3))[0].item()
    assert policy_loss("dapo", two_sequences(), as_grpo, Normalizer(2, 3))[0].item() == pytest.approx(grpo)


def test_dr_grpo_aggregates_with_the_constant():
    cfg = LossConfig.for_loss("dr_grpo", max_completion_length=4)
    assert policy_loss("dr_grpo", two_sequences(), cfg, Normalizer(2, 3))[0].item() == pytest.approx(0.125)
    with pytest.raises(ConfigError, match="max_completion_length"):
        policy_loss("dr_grpo", two_sequences(), LossConfig.for_loss("dr_grpo"), Normalizer(2, 3))


def test_dr_grpo_divides_by_every_row_masked_ones_included():
    """Dr. GRPO's divisor is a constant: rows x max_completion_length, as TRL's dr_grpo (per_token_loss.size(0)).
    A row masked out entirely (overlong filtering) adds nothing to the sum but still counts in the divisor."""
    inp = two_sequences()
    masked_row = LossInputs(logp=torch.zeros(1, 2), old_logp=torch.zeros(1, 2), advantages=torch.tensor([5.0]),
                            mask=torch.zeros(1, 2))
    norm = Normalizer.from_masks([inp.mask, masked_row.mask])
    assert (norm.num_sequences, norm.num_tokens, norm.num_rows) == (2, 3, 3)
    loss, _ = policy_loss("dr_grpo", inp, LossConfig.for_loss("dr_grpo", max_completion_length=4), norm)
    assert loss.item() == pytest.approx((-2 / 4 + 3 / 4) / 3)  # 3 rows, not the 2 with counted tokens


def gspo_inputs() -> LossInputs:
    """seq 0: token log-ratios [0.01, -0.002] (mean 0.004), A = 1; seq 1: [1e-4, 1e-4], A = 2."""
    old = torch.tensor([[-1.0, -1.0], [-2.0, -2.0]])
    lp = (old + torch.tensor([[0.01, -0.002], [1e-4, 1e-4]])).requires_grad_(True)
    return LossInputs(logp=lp, old_logp=old, advantages=torch.tensor([1.0, 2.0]), mask=torch.ones(2, 2))


def test_gspo_hand_values():
    inp = gspo_inputs()
    loss, m = policy_loss("gspo", inp, loss_cfg("gspo"), Normalizer(2, 4))
    loss.backward()
    s1 = math.exp(1e-4)  # 1.0001 < 1.0004: inside the range
    # seq 0: s = exp(0.004) = 1.004008 > 1 + 4e-4, A > 0 -> clipped: -1.0004, no gradient
    # seq 1: -s1 * 2; d/dlogp_t = -2 * s1 / len(2) = -s1;  loss averaged over 2 sequences
    assert loss.item() == pytest.approx((-1.0004 - 2 * s1) / 2, abs=1e-6)
    torch.testing.assert_close(inp.logp.grad, torch.tensor([[0.0, 0.0], [-s1 / 2, -s1 / 2]]))
    assert m["clip_frac"] == 0.5  # the two tokens of seq 0
    assert m["seq_ratio_mean"] == pytest.approx((math.exp(0.004) + s1) / 2, abs=1e-6)


def test_gspo_negative_advantage_is_not_clipped_above():
    inp = gspo_inputs()
    inp.advantages = torch.tensor([-1.0, 0.0])
    loss, m = policy_loss("gspo", inp, loss_cfg("gspo"), Normalizer(2, 4))
    loss.backward()
    s0 = math.exp(0.004)
    # seq 0: -min(-s0, -1.0004) = s0; d/dlogp_t = s0 / 2; averaged over 2 sequences -> s0 / 4
    assert loss.item() == pytest.approx(s0 / 2, abs=1e-6)
    torch.testing.assert_close(inp.logp.grad, torch.tensor([[s0 / 4, s0 / 4], [0.0, 0.0]]))
    assert m["clip_frac"] == 0.0


def test_cispo_hand_values():
    # one sequence: rho [1.5, 0.5], logp [-1, -2], A = 2 -> weights sg([1.28, 0.5])
    lp = torch.tensor([[-1.0, -2.0]], requires_grad=True)
    inp = LossInputs(logp=lp, old_logp=torch.tensor([[-1 - LN(1.5), -2 - LN(0.5)]]),
                     advantages=torch.tensor([2.0]), mask=torch.ones(1, 2))
    loss, m = policy_loss("cispo", inp, LossConfig.for_loss("cispo"), Normalizer(1, 2))
    loss.backward()
    # per token -w*A*logp = [2.56, 2.0], token mean 2.28; grad -w*A / 2 tokens = [-1.28, -0.5]
    assert loss.item() == pytest.approx(2.28, abs=1e-6)
    torch.testing.assert_close(lp.grad, torch.tensor([[-1.28, -0.5]]))
    assert m["clip_frac"] == 0.5 and m["ratio_mean"] == pytest.approx(1.0)


def test_cispo_truncates_the_weight_for_negative_advantages_too():
    # rho 1.5 > 1.28 with A = -1: the weight is 1.28 (PPO would not clip here); grad -w*A = 1.28
    inp = one_token(1.5, -1.0, logp=-1.0)
    loss, m = policy_loss("cispo", inp, LossConfig.for_loss("cispo"), Normalizer(1, 1))
    loss.backward()
    assert loss.item() == pytest.approx(-1.28)  # -1.28 * (-1) * (-1)
    assert inp.logp.grad.item() == pytest.approx(1.28)
    assert m["clip_frac"] == 1.0


def kimi_inputs() -> LossInputs:
    """seq 0: log-ratios [0.5, 0.5] (delta 1), A = 1; seq 1: [0, pad -inf] (delta 0), A = -0.5."""
    old = torch.tensor([[-1.0, -1.0], [-2.0, -INF]])
    lp = torch.tensor([[-0.5, -0.5], [-2.0, -INF]], requires_grad=True)
    return LossInputs(logp=lp, old_logp=old, advantages=torch.tensor([1.0, -0.5]),
                      mask=torch.tensor([[1.0, 1.0], [1.0, 0.0]]))


def test_kimi_hand_values():
    inp = kimi_inputs()
    loss, m = policy_loss("kimi", inp, loss_cfg("kimi", kimi_tau=0.1), Normalizer(2, 3))
    loss.backward()
    # seq 0: (1 - 0.1*1)^2 / 0.2 = 4.05, d/dlogp_t = -(A - tau delta) = -0.9
    # seq 1: (-0.5)^2 / 0.2 = 1.25, d/dlogp_t = 0.5; mean over 2 sequences halves everything
    assert loss.item() == pytest.approx((4.05 + 1.25) / 2, abs=1e-5)
    torch.testing.assert_close(inp.logp.grad, torch.tensor([[-0.45, -0.45], [0.25, 0.0]]))
    assert m["clip_frac"] == 0.0


def test_kimi_gradient_is_the_papers():
    # arXiv 2501.12599 §2.3.2: ascent direction (1/k) sum_j [grad log pi(y_j) (r_j - r_bar)
    # - (tau/2) grad (log pi(y_j)/pi_i(y_j))^2]; the loss gradient must be exactly its negative
    g = torch.Generator().manual_seed(0)
    old = -torch.rand(4, 5, generator=g) * 3
    mask = (torch.arange(5) < torch.tensor([[5], [3], [1], [4]])).float()
    adv = torch.tensor([0.5, -0.25, 1.0, -1.25])
    lp = (old + 0.3 * torch.randn(4, 5, generator=g)).requires_grad_(True)
    tau = 0.3
    loss, _ = policy_loss("kimi", LossInputs(lp, old, adv, mask), loss_cfg("kimi", kimi_tau=tau), Normalizer(4, 13))
    (ours,) = torch.autograd.grad(loss, lp)
    lp2 = lp.detach().clone().requires_grad_(True)
    log_pi = (lp2 * mask).sum(-1)  # log pi(y_j)
    delta = ((lp2 - old) * mask).sum(-1)  # log pi(y_j) / pi_i(y_j)
    ascent = (log_pi * adv - tau / 2 * delta**2).mean()
    (paper,) = torch.autograd.grad(ascent, lp2)
    torch.testing.assert_close(ours, -paper)


def test_kimi_step_at_the_sampling_policy_is_reinforce_whatever_tau():
    for tau in (0.01, 1.0):
        inp = one_token(1.0, 2.0)
        policy_loss("kimi", inp, loss_cfg("kimi", kimi_tau=tau), Normalizer(1, 1))[0].backward()
        assert inp.logp.grad.item() == pytest.approx(-2.0)


KL_LOSS_CASES = [
    # estimator, per-token KL with logp = ln .25, ref = ln .5 (log r = ln 2)
    ("k1", -LN(2)),
    ("k2", 0.5 * LN(2) ** 2),
    ("k3", 2 - LN(2) - 1),
]


@pytest.mark.parametrize("loss_name", ["grpo", "dapo", "gspo", "cispo", "kimi"])
@pytest.mark.parametrize("estimator, kl", KL_LOSS_CASES)
def test_kl_in_the_loss(loss_name, estimator, kl):
    # A = 0 and ratio 1 leave only the KL term (kimi: A - tau*0 = 0 too); two tokens, mean = kl
    lp = torch.full((1, 2), LN(0.25), requires_grad=True)
    inp = LossInputs(lp, torch.full((1, 2), LN(0.25)), torch.zeros(1), torch.ones(1, 2),
                     ref_logp=torch.full((1, 2), LN(0.5)))
    loss, m = policy_loss(loss_name, inp, loss_cfg(loss_name, kl_coef=0.5, kl_estimator=estimator), Normalizer(1, 2))
    assert loss.item() == pytest.approx(0.5 * kl, abs=1e-6)
    assert m["kl"] == pytest.approx(kl, abs=1e-6)


def test_kl_metric_without_kl_in_the_loss():
    inp = one_token(1.0, 0.0, logp=LN(0.25))
    inp.ref_logp = torch.tensor([[LN(0.5)]])
    loss, m = policy_loss("grpo", inp, loss_cfg(), Normalizer(1, 1))
    assert loss.item() == 0.0 and m["kl"] == pytest.approx(1 - LN(2))


ERROR_CASES = [
    # loss, config, inputs, error, message
    ("drgrpo", loss_cfg(), one_token(1, 1), ConfigError, r"algorithm\.loss: .*did you mean 'dr_grpo'"),
    ("grpo", loss_cfg(kl_coef=0.1), one_token(1, 1), ConfigError, r"algorithm\.kl\.coef: .*no reference"),
    ("grpo", loss_cfg(kl_estimator="k4"), one_token(1, 1), ConfigError, r"algorithm\.kl\.estimator"),
    ("kimi", loss_cfg("kimi", kimi_tau=0.0), one_token(1, 1), ConfigError, r"algorithm\.kimi_tau: must be > 0"),
    ("grpo", loss_cfg(eps_low=-0.1), one_token(1, 1), ConfigError, r"algorithm\.eps_low: must be >= 0"),
    ("grpo", loss_cfg(),
     LossInputs(torch.zeros(2, 3), torch.zeros(2, 3), torch.zeros(2, 3), torch.ones(2, 3)),
     ValueError, r"advantages must be \[B\]"),
    ("grpo", loss_cfg(), LossInputs(torch.zeros(2, 3), torch.zeros(2, 4), torch.zeros(2), torch.ones(2, 3)),
     ValueError, "old_logp has shape"),
]


@pytest.mark.parametrize("name, cfg, inp, error, match", ERROR_CASES)
def test_errors_name_the_key(name, cfg, inp, error, match):
    with pytest.raises(error, match=match):
        policy_loss(name, inp, cfg, Normalizer(1, 1))


def test_registered_losses():
    assert POLICY_LOSSES.names() == ["cispo", "dapo", "dr_grpo", "grpo", "gspo", "kimi"]


def test_fully_masked_sequence_contributes_nothing():
    # seq 1 is masked out (e.g. truncated); with Normalizer.from_masks it is not counted either
    mask = torch.tensor([[1.0, 1.0], [0.0, 0.0]])
    norm = Normalizer.from_masks([mask])
    assert (norm.num_sequences, norm.num_tokens) == (1, 2)
    for name in POLICY_LOSSES.names():
        lp = torch.tensor([[-1.0, -1.0], [-INF, 5.0]], requires_grad=True)
        inp = LossInputs(lp, torch.tensor([[-1.0, -1.0], [0.0, 0.0]]), torch.tensor([1.0, 7.0]), mask)
        loss, _ = policy_loss(name, inp, LossConfig.for_loss(name, max_completion_length=2), norm)
        loss.backward()
        assert torch.isfinite(loss) and torch.isfinite(lp.grad).all(), name
        assert lp.grad[1].abs().sum() == 0, name


NORMALIZER_CASES = [
    # micro-batch masks, (num_sequences, num_tokens)
    ([torch.tensor([[1.0, 1.0, 0.0]]), torch.tensor([[1.0, 0.0, 0.0], [0.0, 0.0, 0.0]])], (2, 3)),
    ([torch.ones(4, 5)], (4, 20)),
]


@pytest.mark.parametrize("masks, expected", NORMALIZER_CASES)
def test_normalizer_from_masks(masks, expected):
    norm = Normalizer.from_masks(masks)
    assert (norm.num_sequences, norm.num_tokens) == expected


def test_truncation_mask():
    mask = torch.tensor([[1.0, 1.0], [1.0, 1.0], [1.0, 0.0]])
    out = truncation_mask(["stop", "length", "repeat"], mask)
    torch.testing.assert_close(out, torch.tensor([[1.0, 1.0], [0.0, 0.0], [1.0, 0.0]]))
    out = truncation_mask(["stop", "length", "repeat"], mask, reasons=("length", "repeat"))
    torch.testing.assert_close(out, torch.tensor([[1.0, 1.0], [0.0, 0.0], [0.0, 0.0]]))
    assert mask[1].sum() == 2  # the input is not modified
    with pytest.raises(ValueError, match="2 finish reasons for 3 mask rows"):
        truncation_mask(["stop", "stop"], mask)
