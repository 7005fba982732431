"""Loss aggregation: how per-token losses of a batch are reduced to the scalar that is differentiated.

Shared signature: `aggregation(per_token_loss (B, T), mask (B, T), group_ids (B,)) -> scalar`, where
rows with the same group id are the G samples of one prompt. Each aggregation is a set of per-token
weights w with loss = sum_bt w_bt l_bt (`token_weights`), so a trainer that splits a batch into
micro-batches computes the weights once for the whole batch and gets the same gradient.
Rows (and groups) without any real token are not counted.
"""

from __future__ import annotations

from components.groups import group_index, group_sum
from components.registry import Registry


class LossAggregation:
    """Base of the `aggregation` axis."""

    def token_weights(self, mask, group_ids):
        raise NotImplementedError

    def __call__(self, per_token_loss, mask, group_ids):
        mask = mask != 0
        weights = self.token_weights(mask, group_ids)
        return (weights * per_token_loss.where(mask, 0)).sum()


AGGREGATIONS: Registry[LossAggregation] = Registry("aggregation", LossAggregation)


@AGGREGATIONS.register("prompt_mean")
class PromptMeanAggregation(LossAggregation):
    """L = (1/P) sum_p (1/T_p) sum_{i in p} sum_t m_it l_it, T_p = real tokens of all samples of p.

    Every prompt weighs the same whatever its samples' lengths; within a prompt, tokens weigh the
    same (ScaleRL's choice).
    """

    def token_weights(self, mask, group_ids):
        mask = (mask != 0).float()
        index, num_groups = group_index(group_ids)
        tokens_per_group = group_sum(mask.sum(dim=1), index, num_groups)  # T_p, (P,)
        prompts = (tokens_per_group > 0).sum().clamp_min(1)
        return mask / (prompts * tokens_per_group.clamp_min(1))[index][:, None]


@AGGREGATIONS.register("sample_mean")
class SampleMeanAggregation(LossAggregation):
    """L = (1/N) sum_i (sum_t m_it l_it / sum_t m_it): every sample weighs the same (GRPO's)."""

    def token_weights(self, mask, group_ids):
        mask = (mask != 0).float()
        lengths = mask.sum(dim=1)
        samples = (lengths > 0).sum().clamp_min(1)
        return mask / (samples * lengths.clamp_min(1))[:, None]


@AGGREGATIONS.register("token_mean")
class TokenMeanAggregation(LossAggregation):
    """L = sum_bt m_bt l_bt / sum_bt m_bt: every token of the batch weighs the same (DAPO's)."""

    def token_weights(self, mask, group_ids):
        mask = (mask != 0).float()
        return mask / mask.sum().clamp_min(1)
