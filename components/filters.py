"""Batch filters: which sampled groups of an assembled batch are trained on.

Shared signature: `batch_filter(rewards (N,), group_ids (N,)) -> keep (N,) bool`. Filtering happens
after the batch is assembled. `zero_variance` and `none` do not refill the batch; `dynamic_sampling`
(DAPO's) has the engine sample more prompts until the batch holds its number of groups
(recipe/dynamic_sampling.py), then filters as `zero_variance` does.
"""

from __future__ import annotations

from components.groups import group_index, group_range
from components.registry import Registry, require


class BatchFilter:
    """Base of the `batch_filter` axis. `max_rounds` > 1: the engine refills the batch (dynamic sampling)."""

    max_rounds: int = 1

    def __call__(self, rewards, group_ids):
        raise NotImplementedError


BATCH_FILTERS: Registry[BatchFilter] = Registry("batch_filter", BatchFilter)


@BATCH_FILTERS.register("zero_variance")
class ZeroVarianceFilter(BatchFilter):
    """keep_i = max_{j in g(i)} r_j != min_{j in g(i)} r_j: drop groups whose rewards are all equal.

    Such groups have zero advantage under any group-mean baseline and only dilute the batch; the
    batch shrinks and is not refilled (ScaleRL's choice).
    """

    def __call__(self, rewards, group_ids):
        index, num_groups = group_index(group_ids)
        return group_range(rewards, index, num_groups) > 0


@BATCH_FILTERS.register("none")
class NoFilter(BatchFilter):
    """keep_i = True: zero-variance groups stay in the batch, count toward its size, add no gradient."""

    def __call__(self, rewards, group_ids):
        return rewards.new_ones(rewards.shape, dtype=bool)


@BATCH_FILTERS.register("dynamic_sampling")
class DynamicSamplingFilter(ZeroVarianceFilter):
    """DAPO's dynamic sampling: drop zero-variance groups, then sample groups of more prompts (P at a time, the
    same frozen weights) until the minibatch holds its P groups; surplus groups are dropped too.

    Every generated token is charged to compute, the dropped groups' included (verl, SkyRL and slime do not
    charge them). After max_rounds generation rounds the minibatch trains on the groups it has (fewer than P,
    logged as rollout/dynamic_capped 1): a run whose policy solves nearly every prompt slows, it does not
    stop (verl raises at its cap, max_num_gen_batches 10).

    Args:
        max_rounds: generation rounds a minibatch may take, the first included, in [2, 100] (default 10, verl's).
    """

    def __init__(self, max_rounds: int = 10) -> None:
        require(2 <= max_rounds <= 100, "max_rounds", max_rounds, "in [2, 100] generation rounds a minibatch")
        self.max_rounds = max_rounds
