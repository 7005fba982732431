"""Hand-derived numbers for advantage normalization and the batch filters, and their order."""

import math

import pytest
import torch

from components.advantages import BatchNormalization, NoNormalization, PromptNormalization
from components.filters import NoFilter, ZeroVarianceFilter
from recipe.advantages import filter_and_normalize

REWARDS = torch.tensor([1.0, -1, -1, -1, 1, 1, -1, -1])
GROUPS = torch.tensor([0, 0, 0, 0, 1, 1, 1, 1])
# group means -0.5 and 0 -> centred rewards:
CENTRED = torch.tensor([1.5, -0.5, -0.5, -0.5, 1, 1, -1, -1])


def test_none_subtracts_the_group_mean_only():
    torch.testing.assert_close(NoNormalization()(REWARDS, GROUPS), CENTRED)


def test_batch_divides_by_the_std_of_all_centred_rewards():
    # mean of CENTRED is 0; mean of squares (2.25 + 3 * 0.25 + 4 * 1) / 8 = 0.875; std = 0.935414
    expected = CENTRED / (math.sqrt(0.875) + 1e-6)
    torch.testing.assert_close(BatchNormalization()(REWARDS, GROUPS), expected)


def test_prompt_divides_by_each_group_std():
    # group 0: population std of [1, -1, -1, -1] = sqrt(0.75); group 1: std of [1, 1, -1, -1] = 1
    expected = torch.cat([CENTRED[:4] / (math.sqrt(0.75) + 1e-6), CENTRED[4:] / (1 + 1e-6)])
    torch.testing.assert_close(PromptNormalization()(REWARDS, GROUPS), expected)


def test_zero_variance_filter_drops_whole_uniform_groups_without_refill():
    # group 2 all +1, group 3 all 0.4 (e.g. a length penalty), group 4 a single sample: all dropped
    rewards = torch.cat([REWARDS, torch.tensor([1.0, 1, 1, 1, 0.4, 0.4, 0.3])])
    groups = torch.cat([GROUPS, torch.tensor([2, 2, 2, 2, 3, 3, 4])])
    keep = ZeroVarianceFilter()(rewards, groups)
    assert keep.tolist() == [True] * 8 + [False] * 7
    assert keep.shape == rewards.shape  # the batch shrinks by masking; nothing is resampled
    assert NoFilter()(rewards, groups).all()


def test_batch_normalization_is_computed_after_zero_variance_filtering():
    # Adding an all-correct group must not change the kept advantages: filtered first, the batch std
    # is still sqrt(0.875). Normalizing before filtering would include 4 extra zeros in the std
    # (sqrt(7 / 12) = 0.7638) and inflate every advantage by 22%.
    rewards = torch.cat([REWARDS, torch.ones(4)])
    groups = torch.cat([GROUPS, torch.full((4,), 2)])
    keep, advantages = filter_and_normalize(rewards, groups, ZeroVarianceFilter(), BatchNormalization())
    torch.testing.assert_close(advantages[:8], CENTRED / (math.sqrt(0.875) + 1e-6))
    assert keep[8:].logical_not().all() and (advantages[8:] == 0).all()
    wrong_order = BatchNormalization()(rewards, groups)[:8]
    assert not torch.allclose(wrong_order, advantages[:8])


def test_everything_filtered_gives_zero_advantages():
    keep, advantages = filter_and_normalize(torch.ones(4), torch.tensor([0, 0, 1, 1]),
                                            ZeroVarianceFilter(), BatchNormalization())
    assert not keep.any() and (advantages == 0).all()


@pytest.mark.parametrize("norm", [BatchNormalization(), PromptNormalization(), NoNormalization()])
def test_uniform_groups_get_zero_advantage(norm):
    assert (norm(torch.tensor([1.0, 1.0, -1.0, -1.0]), torch.tensor([0, 0, 1, 1])) == 0).all()
