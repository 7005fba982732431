"""Batch filters: which sampled groups of an assembled batch are trained on.

Shared signature: `batch_filter(rewards (N,), group_ids (N,)) -> keep (N,) bool`. Filtering happens
after the batch is assembled and the batch is NOT refilled: refilling to a fixed size is DAPO's
dynamic sampling, a different method.
"""

from __future__ import annotations

from components.groups import group_index, group_range
from components.registry import Registry


class BatchFilter:
    """Base of the `batch_filter` axis."""

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
