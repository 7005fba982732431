"""Length control: interruption budgets at generation time, the DAPO length penalty on rewards."""

import numpy as np
import pytest
import torch

from components.length_control import (
    INTERRUPTION_PHRASE,
    InterruptionLengthControl,
    LengthPenaltyControl,
    NoLengthControl,
)


def test_length_penalty_hand_values():
    # max_length 20, cache 5: R_len = clip((20 - L) / 5 - 1, -1, 0)
    #   L = 10 -> clip(1) = 0;  L = 17 -> 0.6 - 1 = -0.4;  L = 20 -> -1;  L = 25 -> -2 -> -1
    # The last sample is incorrect (reward -1): no penalty is added.
    control = LengthPenaltyControl(max_length=20, cache_length=5)
    rewards = torch.tensor([1.0, 1.0, 1.0, 1.0, -1.0])
    lengths = torch.tensor([10, 17, 20, 25, 25])
    correct = torch.tensor([True, True, True, True, False])
    torch.testing.assert_close(control.shape_rewards(rewards, lengths, correct),
                               torch.tensor([1.0, 0.6, 0.0, 0.0, -1.0]))
    assert control.thinking_budgets(3, np.random.default_rng(0)) is None


def test_length_penalty_depth_scales_the_ramp_by_hand():
    # Magistral's ramp (depth 0.1): the same lengths lose 0.1 x what DAPO's (depth 1) loses
    #   L = 17 -> 0.1 x -0.4 = -0.04;  L = 20 and 25 -> -0.1
    control = LengthPenaltyControl(max_length=20, cache_length=5, depth=0.1)
    rewards, lengths = torch.ones(4), torch.tensor([10, 17, 20, 25])
    torch.testing.assert_close(control.shape_rewards(rewards, lengths, torch.ones(4, dtype=torch.bool)),
                               torch.tensor([1.0, 0.96, 0.9, 0.9]))
    with pytest.raises(ValueError, match="depth"):
        LengthPenaltyControl(depth=0)


def test_a_length_penalty_without_depth_keeps_its_run_id():
    from recipe.config import load_recipe, run_id

    dapo = load_recipe(None, ["length_control=length_penalty"])
    assert dapo.length_control["depth"] == 1.0
    assert run_id(dapo) == run_id(load_recipe(None, ["length_control=length_penalty", "length_control.depth=1"]))
    assert run_id(dapo) != run_id(load_recipe(None, ["length_control=length_penalty", "length_control.depth=0.1"]))


def test_interruption_budgets_come_from_the_window_and_rewards_are_unchanged():
    control = InterruptionLengthControl(min_thinking=10, max_thinking=12, answer_budget=4)
    budgets = control.thinking_budgets(1000, np.random.default_rng(0))
    assert set(budgets.tolist()) == {10, 11, 12}  # both ends of the window are reachable
    # the law it states is the one it draws from (the evaluation's control variate sums over it)
    law = control.budget_distribution()
    assert law == pytest.approx({10: 1 / 3, 11: 1 / 3, 12: 1 / 3})
    for budget, probability in law.items():
        assert abs(float((budgets == budget).mean()) - probability) < 0.05
    assert control.answer_budget == 4
    assert control.interruption_phrase == INTERRUPTION_PHRASE
    # ScaleRL (arXiv 2510.13786) appendix A.10, word for word
    assert INTERRUPTION_PHRASE == "Okay, time is up. Let me stop thinking and formulate a final answer</think>"
    rewards = torch.tensor([1.0, -1.0])
    assert torch.equal(control.shape_rewards(rewards, torch.tensor([3, 99]), torch.tensor([True, False])), rewards)


def test_none_neither_interrupts_nor_shapes():
    control = NoLengthControl()
    assert control.thinking_budgets(4, np.random.default_rng(0)) is None
    assert control.budget_distribution() is None
    assert control.interruption_phrase is None


@pytest.mark.parametrize("kwargs", [dict(min_thinking=0), dict(min_thinking=10, max_thinking=5),
                                    dict(answer_budget=0), dict(phrase="no closing tag")])
def test_interruption_rejects_bad_windows(kwargs):
    with pytest.raises(ValueError, match="expected"):
        InterruptionLengthControl(**kwargs)
