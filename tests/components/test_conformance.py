"""Conformance suite run over every registered component of every axis.

What each axis promises whatever the implementation: shapes, padding ignored, zero advantages give
zero gradient, finite outputs for extreme log-ratios (+-50), determinism, resumable state.
"""

import json

import numpy as np
import pytest
import torch

from components import REGISTRIES

B, T = 6, 5


def names(axis):
    return [pytest.param(name, id=f"{axis}-{name}") for name in REGISTRIES[axis].names()]


def build(axis, name):
    return REGISTRIES[axis].build({"name": name})


def loss_inputs(seed=0, log_ratio_scale=0.3):
    generator = torch.Generator().manual_seed(seed)
    lengths = torch.tensor([5, 3, 1, 4, 5, 2])
    mask = torch.arange(T)[None, :] < lengths[:, None]
    logprobs = (-torch.rand(B, T, generator=generator, dtype=torch.float64) * 3).requires_grad_()
    old = logprobs.detach() + torch.randn(B, T, generator=generator, dtype=torch.float64) * log_ratio_scale
    advantages = torch.randn(B, 1, generator=generator, dtype=torch.float64).expand(B, T).clone()
    return logprobs, old, advantages, mask


def with_garbage_padding(tensor, mask, value):
    return tensor.detach().where(mask, torch.full_like(tensor, value))


@pytest.mark.parametrize("name", names("loss"))
class TestLossConformance:
    def test_shape_and_zero_on_padding(self, name):
        logprobs, old, advantages, mask = loss_inputs()
        out = build("loss", name)(logprobs, old, advantages, mask)
        assert out.per_token_loss.shape == (B, T)
        assert (out.per_token_loss[~mask] == 0).all()
        assert all(isinstance(value, float) for value in out.metrics.values())

    def test_padding_values_are_ignored(self, name):
        logprobs, old, advantages, mask = loss_inputs()
        loss = build("loss", name)
        reference = loss(logprobs, old, advantages, mask)
        reference.per_token_loss.sum().backward()
        reference_grad = logprobs.grad.clone()
        for garbage in (float("nan"), float("inf"), -1e9):
            noisy = with_garbage_padding(logprobs, mask, garbage).requires_grad_()
            noisy_old = with_garbage_padding(old, mask, -garbage)
            out = loss(noisy, noisy_old, with_garbage_padding(advantages, mask, garbage), mask)
            out.per_token_loss.sum().backward()
            torch.testing.assert_close(out.per_token_loss, reference.per_token_loss.detach())
            torch.testing.assert_close(noisy.grad, reference_grad)

    def test_zero_advantages_give_zero_gradient(self, name):
        logprobs, old, advantages, mask = loss_inputs()
        out = build("loss", name)(logprobs, old, torch.zeros_like(advantages), mask)
        out.per_token_loss.sum().backward()
        assert (logprobs.grad == 0).all()

    @pytest.mark.parametrize("extreme", [50.0, -50.0])
    def test_finite_for_extreme_log_ratios(self, name, extreme):
        logprobs, old, advantages, mask = loss_inputs()
        out = build("loss", name)(logprobs, logprobs.detach() - extreme, advantages, mask)
        out.per_token_loss.sum().backward()
        assert torch.isfinite(out.per_token_loss).all() and torch.isfinite(logprobs.grad).all()
        assert all(np.isfinite(value) for value in out.metrics.values())
        assert out.metrics["loss/log_ratio_clamped"] == float(mask.sum())

    def test_deterministic(self, name):
        loss = build("loss", name)
        first = loss(*loss_inputs(seed=4)).per_token_loss
        second = loss(*loss_inputs(seed=4)).per_token_loss
        assert torch.equal(first, second)

    def test_on_policy_gradient_is_the_policy_gradient(self, name):
        # With rho = 1 every loss reduces to -A * logp in gradient (clips inactive at rho = 1):
        # d l_t / d logp_t = -A_t, for token losses; GSPO spreads -A_i over the sequence's mean.
        logprobs, _, advantages, mask = loss_inputs()
        out = build("loss", name)(logprobs, logprobs.detach(), advantages, mask)
        lengths = mask.sum(dim=1, keepdim=True)
        per_sample_mean = (out.per_token_loss / lengths).sum()  # sample-mean aggregation
        per_sample_mean.backward()
        expected = (-advantages / lengths).where(mask, 0)
        torch.testing.assert_close(logprobs.grad, expected)


GROUPS = torch.tensor([0, 0, 1, 1, 2, 2])


@pytest.mark.parametrize("name", names("aggregation"))
class TestAggregationConformance:
    def test_scalar_finite_and_padding_ignored(self, name):
        _, _, _, mask = loss_inputs()
        loss = torch.rand(B, T)
        aggregation = build("aggregation", name)
        value = aggregation(loss, mask, GROUPS)
        assert value.shape == () and torch.isfinite(value)
        assert aggregation(with_garbage_padding(loss, mask, float("nan")), mask, GROUPS) == value

    def test_weights_are_zero_on_padding_non_negative_and_normalised(self, name):
        _, _, _, mask = loss_inputs()
        weights = build("aggregation", name).token_weights(mask, GROUPS)
        assert weights.shape == (B, T) and (weights[~mask] == 0).all() and (weights >= 0).all()
        # a constant per-token loss c aggregates to c under every choice (weights sum to 1)
        assert weights.sum().item() == pytest.approx(1.0)

    def test_zero_loss_gives_zero_and_row_order_does_not_matter(self, name):
        _, _, _, mask = loss_inputs()
        aggregation = build("aggregation", name)
        assert aggregation(torch.zeros(B, T), mask, GROUPS) == 0
        loss = torch.rand(B, T, dtype=torch.float64)
        order = torch.randperm(B, generator=torch.Generator().manual_seed(0))
        torch.testing.assert_close(aggregation(loss[order], mask[order], GROUPS[order]),
                                   aggregation(loss, mask, GROUPS))


@pytest.mark.parametrize("name", names("advantage_norm"))
class TestAdvantageConformance:
    def test_shape_finite_deterministic_and_order_equivariant(self, name):
        rewards = torch.tensor([1.0, -1.0, 1.0, 1.0, -1.0, 0.5])
        norm = build("advantage_norm", name)
        advantages = norm(rewards, GROUPS)
        assert advantages.shape == rewards.shape and torch.isfinite(advantages).all()
        assert torch.equal(advantages, norm(rewards, GROUPS))
        order = torch.tensor([5, 3, 1, 0, 2, 4])
        torch.testing.assert_close(norm(rewards[order], GROUPS[order]), advantages[order])

    def test_advantages_sum_to_zero_within_each_group(self, name):
        rewards = torch.tensor([1.0, -1.0, 0.3, 1.0, -1.0, -1.0], dtype=torch.float64)
        advantages = build("advantage_norm", name)(rewards, GROUPS)
        for group in range(3):
            assert advantages[GROUPS == group].sum().item() == pytest.approx(0.0, abs=1e-9)


@pytest.mark.parametrize("name", names("batch_filter"))
def test_batch_filter_conformance(name):
    rewards = torch.tensor([1.0, -1.0, 1.0, 1.0, -1.0, 0.5])
    keep = build("batch_filter", name)(rewards, GROUPS)
    assert keep.dtype == torch.bool and keep.shape == rewards.shape
    for group in range(3):  # groups are kept or dropped whole
        assert keep[GROUPS == group].all() or not keep[GROUPS == group].any()
    assert keep[0] and keep[4]  # groups with a reward spread are always trained on


@pytest.mark.parametrize("name", names("curriculum"))
def test_curriculum_conformance(name):
    def run(resume_after):
        curriculum = build("curriculum", name)
        curriculum.reset(pool_size=50, seed=7)
        draws = []
        for step in range(6):
            if step == resume_after:
                state = json.loads(json.dumps(curriculum.state_dict()))
                curriculum = build("curriculum", name)
                curriculum.load_state_dict(state)
            prompts = curriculum.sample(8)
            assert len(prompts) == 8 and all(0 <= p < 50 for p in prompts)
            curriculum.update(prompts, [1.0 if p % 3 == 0 else 0.5 for p in prompts])
            draws.append(prompts)
        return draws

    assert run(resume_after=-1) == run(resume_after=3)  # deterministic, and resumable exactly


@pytest.mark.parametrize("name", names("length_control"))
def test_length_control_conformance(name):
    control = build("length_control", name)
    rewards = torch.tensor([1.0, -1.0, 1.0, -1.0])
    lengths, correct = torch.tensor([1, 10**6, 10**6, 3]), torch.tensor([True, False, True, False])
    shaped = control.shape_rewards(rewards, lengths, correct)
    assert shaped.shape == rewards.shape and torch.isfinite(shaped).all()
    assert (shaped[~torch.tensor([True, False, True, False])] == rewards[1::2]).all()  # wrong stays wrong
    budgets = control.thinking_budgets(16, np.random.default_rng(0))
    if budgets is None:
        assert control.interruption_phrase is None
    else:
        assert budgets.shape == (16,) and (budgets >= 1).all()
        assert np.array_equal(budgets, control.thinking_budgets(16, np.random.default_rng(0)))
        assert control.interruption_phrase.endswith("</think>") and control.answer_budget >= 1


@pytest.mark.parametrize("name", names("off_policy"))
def test_off_policy_conformance(name):
    mode = build("off_policy", name)
    assert mode.k >= 1 and 0 <= mode.max_staleness <= mode.k
    assert isinstance(mode.asynchronous, bool)


@pytest.mark.parametrize("name", names("precision"))
@pytest.mark.parametrize("fp32_head", [True, False])
def test_precision_conformance(name, fp32_head):
    precision = REGISTRIES["precision"].build({"name": name, "fp32_head": fp32_head})
    logits = precision.head_logits(torch.randn(2, 4, 8), torch.randn(10, 8), torch.zeros(10))
    assert logits.shape == (2, 4, 10) and logits.dtype == precision.head_dtype
    assert torch.isfinite(logits).all()
