"""Hand-derived numbers for every policy loss (derivations in comments)."""

import math

import pytest
import torch

from components.losses import LOG_RATIO_LIMIT, CispoLoss, DapoLoss, GrpoLoss, GspoLoss


def leaf(values):
    return torch.tensor(values, dtype=torch.float64, requires_grad=True)


def test_cispo_truncates_the_weight_but_keeps_every_gradient():
    # rho = [1, 6, 0.5], eps_max = 4 -> weight sg(min(rho, 4)) = [1, 4, 0.5]; A = 2.
    # l_t = -w_t * A * logp_t with logp = [-1, -2, -0.5]  -> [2, 16, 0.5]
    # d l_t / d logp_t = -w_t * A                          -> [-2, -8, -1]
    # The rho = 6 token is scaled by eps_max, not dropped (DAPO would give it zero gradient).
    logprobs = leaf([[-1.0, -2.0, -0.5]])
    old = torch.tensor([[-1.0, -2.0 - math.log(6.0), -0.5 + math.log(2.0)]], dtype=torch.float64)
    out = CispoLoss(eps_max=4.0)(logprobs, old, torch.full((1, 3), 2.0, dtype=torch.float64), torch.ones(1, 3))
    torch.testing.assert_close(out.per_token_loss.detach(), torch.tensor([[2.0, 16.0, 0.5]], dtype=torch.float64))
    out.per_token_loss.sum().backward()
    torch.testing.assert_close(logprobs.grad, torch.tensor([[-2.0, -8.0, -1.0]], dtype=torch.float64))
    assert out.metrics["loss/truncated_frac"] == pytest.approx(1 / 3)
    assert out.metrics["loss/ratio_max"] == pytest.approx(6.0)


def test_cispo_two_sided_floors_the_weight_too():
    # MiniMax-M1's clip(rho, 1 - eps_low, 1 + eps_high) with eps_low 0.4, eps_high 3: eps_min 0.6, eps_max 4.
    # rho = [1, 6, 0.5] -> weight [1, 4, 0.6]; A = 2, logp = [-1, -2, -0.5] -> l = [2, 16, 0.6], grad [-2, -8, -1.2]
    logprobs = leaf([[-1.0, -2.0, -0.5]])
    old = torch.tensor([[-1.0, -2.0 - math.log(6.0), -0.5 + math.log(2.0)]], dtype=torch.float64)
    out = CispoLoss(eps_max=4.0, eps_min=0.6)(logprobs, old, torch.full((1, 3), 2.0, dtype=torch.float64),
                                              torch.ones(1, 3))
    torch.testing.assert_close(out.per_token_loss.detach(), torch.tensor([[2.0, 16.0, 0.6]], dtype=torch.float64))
    out.per_token_loss.sum().backward()
    torch.testing.assert_close(logprobs.grad, torch.tensor([[-2.0, -8.0, -1.2]], dtype=torch.float64))
    with pytest.raises(ValueError, match="eps_min"):
        CispoLoss(eps_max=4.0, eps_min=4.0)


def test_dapo_zero_gradient_on_tokens_clipped_on_the_advantage_side():
    # eps_low 0.2, eps_high 0.26. Row 0 has A = +1, row 1 has A = -1 and one padding token.
    # l = -min(rho A, clip(rho, 0.8, 1.26) A);  d rho / d logp = rho.
    #  row 0: rho 1.5 -> -min(1.5, 1.26) = -1.26, clipped (A > 0, rho > 1.26): grad 0
    #         rho 1.1 -> -1.1, grad -rho A = -1.1
    #         rho 0.5 -> -min(0.5, 0.8) = -0.5, not clipped (wrong side for A > 0): grad -0.5
    #  row 1: rho 0.5 -> -min(-0.5, -0.8) = 0.8, clipped (A < 0, rho < 0.8): grad 0
    #         rho 1.5 -> -min(-1.5, -1.26) = 1.5, not clipped: grad -rho A = +1.5
    rho = torch.tensor([[1.5, 1.1, 0.5], [0.5, 1.5, 1.0]], dtype=torch.float64)
    logprobs = leaf([[-1.0, -1.0, -1.0], [-1.0, -1.0, -1.0]])
    old = logprobs.detach() - rho.log()
    advantages = torch.tensor([[1.0] * 3, [-1.0] * 3], dtype=torch.float64)
    mask = torch.tensor([[1, 1, 1], [1, 1, 0]])
    out = DapoLoss(eps_low=0.2, eps_high=0.26)(logprobs, old, advantages, mask)
    expected = torch.tensor([[-1.26, -1.1, -0.5], [0.8, 1.5, 0.0]], dtype=torch.float64)
    torch.testing.assert_close(out.per_token_loss.detach(), expected)
    out.per_token_loss.sum().backward()
    torch.testing.assert_close(logprobs.grad, torch.tensor([[0.0, -1.1, -0.5], [0.0, 1.5, 0.0]], dtype=torch.float64))
    assert out.metrics["loss/clip_frac"] == pytest.approx(2 / 5)


def test_grpo_clips_symmetrically_where_dapo_clips_higher():
    # rho 1.25, A = +1: GRPO clips at 1.2 (loss -1.2, grad 0); DAPO's 1.26 does not (loss -1.25, grad -1.25).
    rho = torch.tensor([[1.25]], dtype=torch.float64)
    for loss, value, grad in ((GrpoLoss(eps=0.2), -1.2, 0.0), (DapoLoss(), -1.25, -1.25)):
        logprobs = leaf([[-1.0]])
        out = loss(logprobs, logprobs.detach() - rho.log(), torch.ones(1, 1, dtype=torch.float64), torch.ones(1, 1))
        out.per_token_loss.sum().backward()
        assert out.per_token_loss.item() == pytest.approx(value)
        assert logprobs.grad.item() == pytest.approx(grad)


def test_gspo_uses_one_ratio_per_sequence_the_mean_log_ratio():
    # Row 0: log rho = [0.003, -0.001, 0.004], mean 0.002 -> s = e^0.002 = 1.002002 inside
    #   [1 - 4e-3, 1 + 5e-3]; A = 1 -> l_0 = -s written on each of its 3 tokens. The sample mean of
    #   row 0 is l_0, and d l_0 / d logp_t = -A * s * d(mean_t log rho)/d logp_t = -s / 3 for every t.
    # Row 1: log rho mean 0.01 -> s = 1.01005 > 1.005 with A = 1: clipped -> l = -1.005, grad 0.
    log_rho = torch.tensor([[0.003, -0.001, 0.004], [0.01, 0.01, 0.01]], dtype=torch.float64)
    logprobs = leaf([[-1.0] * 3, [-1.0] * 3])
    out = GspoLoss(eps_low=4e-3, eps_high=5e-3)(
        logprobs, logprobs.detach() - log_rho, torch.ones(2, 3, dtype=torch.float64), torch.ones(2, 3)
    )
    s0 = math.exp(0.002)
    torch.testing.assert_close(
        out.per_token_loss.detach(), torch.tensor([[-s0] * 3, [-1.005] * 3], dtype=torch.float64)
    )
    out.per_token_loss[0].mean().backward()  # sample_mean of row 0 = l_0
    torch.testing.assert_close(logprobs.grad[0], torch.full((3,), -s0 / 3, dtype=torch.float64))
    assert out.metrics["loss/clip_frac"] == pytest.approx(0.5)


def test_log_ratios_are_clamped_before_exp_and_counted():
    logprobs = leaf([[0.0, 0.0, 0.0]])
    old = torch.tensor([[-100.0, 100.0, 0.0]], dtype=torch.float64)
    for loss in (CispoLoss(), DapoLoss(), GrpoLoss(), GspoLoss()):
        out = loss(logprobs, old, torch.ones(1, 3, dtype=torch.float64), torch.ones(1, 3))
        assert torch.isfinite(out.per_token_loss).all()
        assert out.metrics["loss/log_ratio_clamped"] == 2
    # CISPO's weight saturates at eps_max whatever the clamp: rho = e^20 -> weight 4.
    out = CispoLoss()(logprobs, old, torch.ones(1, 3, dtype=torch.float64), torch.ones(1, 3))
    assert out.per_token_loss[0, 0].item() == pytest.approx(0.0)  # logp = 0 -> l = 0 whatever w
    assert out.metrics["loss/ratio_max"] == pytest.approx(math.exp(LOG_RATIO_LIMIT))


@pytest.mark.parametrize("make", [lambda: CispoLoss(eps_max=0.0), lambda: DapoLoss(eps_low=1.5),
                                  lambda: GrpoLoss(eps=-0.1), lambda: GspoLoss(eps_high=0.0)])
def test_out_of_range_parameters_are_rejected(make):
    with pytest.raises(ValueError, match="expected"):
        make()
