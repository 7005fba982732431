"""Loss aggregation: how per-token losses of a batch are reduced to the scalar that is differentiated.

Shared signature: `aggregation(per_token_loss (B, T), mask (B, T), group_ids (B,)) -> scalar`, where
rows with the same group id are the G samples of one prompt. Each aggregation is a set of per-token
weights w with loss = sum_bt w_bt l_bt (`token_weights`), so a trainer that splits a batch into
micro-batches computes the weights once for the whole batch and gets the same gradient.
Rows (and groups) without any real token are not counted.

Names: the ScaleRL paper (arXiv 2510.13786, loss aggregation ablation) compares a "sample average",
a "prompt average" (ScaleRL's choice, which it attributes to DAPO) and a "token average"; here they
are sample_mean, prompt_mean and token_mean. DAPO's own paper calls its loss "token-level": its
formula normalizes by the tokens of one prompt's G samples (prompt_mean, averaged over prompts),
while implementations of it commonly divide by every token of the batch (token_mean). The two agree
only when a batch holds one prompt, or prompts of equal total length.
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
    """L = (1/P) sum_p (1/T_p) sum_{i in p} sum_t m_it l_it: the paper's "prompt average" (ScaleRL's).

    T_p = real tokens of all samples of prompt p, P = prompts with at least one real token.
    Every prompt weighs the same whatever its samples' lengths; within a prompt, tokens weigh the same.
    ScaleRL (arXiv 2510.13786) uses it, calls it "prompt average" and attributes it to DAPO: it is
    DAPO's "token-level" loss as DAPO's paper writes it (normalized by the tokens of one prompt's G
    samples), averaged over the prompts of the batch.
    """

    def token_weights(self, mask, group_ids):
        mask = (mask != 0).float()
        index, num_groups = group_index(group_ids)
        tokens_per_group = group_sum(mask.sum(dim=1), index, num_groups)  # T_p, (P,)
        prompts = (tokens_per_group > 0).sum().clamp_min(1)
        return mask / (prompts * tokens_per_group.clamp_min(1))[index][:, None]


@AGGREGATIONS.register("sample_mean")
class SampleMeanAggregation(LossAggregation):
    """L = (1/N) sum_i (sum_t m_it l_it / sum_t m_it): the paper's "sample average" (GRPO's).

    N = samples with at least one real token. Every sample weighs the same whatever its length, so a
    token of a short sample weighs more than one of a long sample. GRPO's per-sample mean: its loss
    averages tokens within each sample, then samples (the loo-savg alternative in ScaleRL,
    arXiv 2510.13786).
    """

    def token_weights(self, mask, group_ids):
        mask = (mask != 0).float()
        lengths = mask.sum(dim=1)
        samples = (lengths > 0).sum().clamp_min(1)
        return mask / (samples * lengths.clamp_min(1))[:, None]


@AGGREGATIONS.register("token_mean")
class TokenMeanAggregation(LossAggregation):
    """L = sum_bt m_bt l_bt / sum_bt m_bt over the whole batch: the paper's "token average".

    Every real token of the batch weighs the same, with no grouping by sample or prompt, so a prompt
    whose samples are long weighs more than one whose samples are short. ScaleRL (arXiv 2510.13786)
    calls it "token average". It is how DAPO's "token-level" loss is commonly implemented (e.g.
    verl's token-mean), but DAPO's paper writes that loss per prompt, which is prompt_mean; the two
    agree only when the batch holds one prompt or prompts of equal total length.
    """

    def token_weights(self, mask, group_ids):
        mask = (mask != 0).float()
        return mask / mask.sum().clamp_min(1)
