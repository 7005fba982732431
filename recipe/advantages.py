"""From scored samples to trainable advantages: batch filter first, then advantage normalization.

The order matters: `batch` normalization divides by the spread of the groups that are trained on,
so zero-variance groups must be gone before it is computed (ScaleRL, arXiv 2510.13786: batch-level
advantage normalization after zero-variance filtering).
"""

from __future__ import annotations


def filter_and_normalize(rewards, group_ids, batch_filter, advantage_norm):
    """rewards (N,), group_ids (N,) -> (keep (N,) bool, advantages (N,), zero where dropped)."""
    keep = batch_filter(rewards, group_ids)
    advantages = rewards.new_zeros(rewards.shape)
    if keep.any():
        advantages[keep] = advantage_norm(rewards[keep], group_ids[keep])
    return keep, advantages
