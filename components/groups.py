"""Per-group reductions over a flat batch: rows that share a group id are samples of one prompt."""

from __future__ import annotations


def group_index(group_ids):
    """Map arbitrary group ids (N,) to dense indices 0..P-1; returns (index (N,), P)."""
    unique, index = group_ids.unique(return_inverse=True)
    return index, unique.numel()


def group_sum(values, index, num_groups):
    """sum_{i in g} values_i for every group g, shape (P,)."""
    return values.new_zeros(num_groups).index_add(0, index, values)


def group_mean(values, index, num_groups):
    """Mean of `values` over each row's group, gathered back to rows: (N,)."""
    counts = group_sum(values.new_ones(values.shape), index, num_groups)
    return (group_sum(values, index, num_groups) / counts)[index]


def group_std(values, index, num_groups):
    """Population standard deviation of `values` within each row's group, gathered to rows: (N,)."""
    centred = values - group_mean(values, index, num_groups)
    return group_mean(centred * centred, index, num_groups).sqrt()


def group_range(values, index, num_groups):
    """max - min of `values` within each row's group, gathered to rows: (N,). Exact for ties."""
    high = values.new_empty(num_groups).scatter_reduce(0, index, values, "amax", include_self=False)
    low = values.new_empty(num_groups).scatter_reduce(0, index, values, "amin", include_self=False)
    return (high - low)[index]
