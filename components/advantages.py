"""Advantage normalization: rewards of G samples per prompt -> one advantage per sample.

Shared signature: `normalization(rewards (N,), group_ids (N,)) -> advantages (N,)`. Every choice
subtracts the group mean (the prompt's baseline); they differ in the scale. Apply it AFTER the batch
filter, so `batch` measures the spread of the groups that are actually trained on.
"""

from __future__ import annotations

from components.groups import group_index, group_mean, group_std
from components.registry import Registry

# Guards the division when every centred reward is 0 (one sample, or all groups uniform).
STD_EPS = 1e-6


class AdvantageNormalization:
    """Base of the `advantage_norm` axis."""

    def __call__(self, rewards, group_ids):
        raise NotImplementedError


ADVANTAGE_NORMS: Registry[AdvantageNormalization] = Registry("advantage_norm", AdvantageNormalization)


def centred_rewards(rewards, group_ids):
    index, num_groups = group_index(group_ids)
    return rewards - group_mean(rewards, index, num_groups)


@ADVANTAGE_NORMS.register("batch")
class BatchNormalization(AdvantageNormalization):
    """A_i = (r_i - mean_group(r)) / (std_batch(r - mean_group(r)) + 1e-6) (ScaleRL's).

    The standard deviation (population) is over all centred rewards of the batch, so prompts with a
    small spread are not blown up to unit scale as per-prompt normalization does.
    """

    def __call__(self, rewards, group_ids):
        centred = centred_rewards(rewards, group_ids)
        return centred / (centred.std(correction=0) + STD_EPS)


@ADVANTAGE_NORMS.register("prompt")
class PromptNormalization(AdvantageNormalization):
    """A_i = (r_i - mean_group(r)) / (std_group(r) + 1e-6) (GRPO's group-std normalization)."""

    def __call__(self, rewards, group_ids):
        index, num_groups = group_index(group_ids)
        centred = rewards - group_mean(rewards, index, num_groups)
        return centred / (group_std(rewards, index, num_groups) + STD_EPS)


@ADVANTAGE_NORMS.register("none")
class NoNormalization(AdvantageNormalization):
    """A_i = r_i - mean_group(r): the group-mean baseline only, no scaling (Dr. GRPO)."""

    def __call__(self, rewards, group_ids):
        return centred_rewards(rewards, group_ids)
