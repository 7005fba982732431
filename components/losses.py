"""Policy losses: per-token loss from trainer logprobs, behaviour logprobs, advantages and a mask.

Shared signature, all tensors (B, T): `loss(logprobs, old_logprobs, advantages, mask) -> LossOutput`.
`old_logprobs` are the behaviour logprobs the generator recorded when it sampled each token (never
recomputed with "old" weights: in an asynchronous pipeline that would silently turn CISPO into
REINFORCE). rho_t = exp(logprobs_t - old_logprobs_t). The output is unreduced; reduction is the
`aggregation` axis, so loss and aggregation can be ablated apart.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from components.registry import Registry, require

if TYPE_CHECKING:
    import torch

# exp(20) ~ 4.9e8 is finite in fp32 and bf16. Larger |log rho| only comes from very stale or broken
# rollouts; clamping keeps the loss finite and the count says how often it happened.
LOG_RATIO_LIMIT = 20.0


@dataclass
class LossOutput:
    per_token_loss: "torch.Tensor"  # (B, T), exactly zero on padding
    metrics: dict[str, float]


class PolicyLoss:
    """Base of the `loss` axis: (logprobs, old_logprobs, advantages, mask) -> LossOutput."""

    def __call__(self, logprobs, old_logprobs, advantages, mask) -> LossOutput:
        raise NotImplementedError


LOSSES: Registry[PolicyLoss] = Registry("loss", PolicyLoss)


def masked_mean(values, mask) -> "torch.Tensor":
    return values.where(mask, 0).sum() / mask.sum().clamp_min(1)


def clamped_log_ratio(logprobs, old_logprobs, mask):
    """log rho clamped to [-LOG_RATIO_LIMIT, LOG_RATIO_LIMIT] on real tokens, 0 on padding.

    Returns (log_ratio (B, T), number of real tokens whose log-ratio was clamped).
    """
    raw = (logprobs - old_logprobs).where(mask, 0)
    log_ratio = raw.clamp(-LOG_RATIO_LIMIT, LOG_RATIO_LIMIT)
    clamped = (raw.detach().abs() > LOG_RATIO_LIMIT) & mask
    return log_ratio, float(clamped.sum())


def ratio_metrics(log_ratio, mask, clamped: float) -> dict[str, float]:
    ratio = log_ratio.detach().exp()
    real = ratio[mask]
    return {
        "loss/ratio_mean": float(real.mean()) if real.numel() else 1.0,
        "loss/ratio_max": float(real.max()) if real.numel() else 1.0,
        "loss/ratio_min": float(real.min()) if real.numel() else 1.0,
        "loss/log_ratio_clamped": clamped,
    }


def clipped_surrogate(ratio, advantages, eps_low: float, eps_high: float):
    """PPO surrogate -min(rho A, clip(rho, 1 - eps_low, 1 + eps_high) A) and where the clip binds.

    Where the clipped branch is the smaller one the loss is constant in rho: zero gradient.
    """
    unclipped = ratio * advantages
    clipped = ratio.clamp(1 - eps_low, 1 + eps_high) * advantages
    return -unclipped.minimum(clipped), clipped < unclipped


@LOSSES.register("cispo")
class CispoLoss(PolicyLoss):
    """l_t = -sg(clip(rho_t, eps_min, eps_max)) * A_i * logp_t (CISPO, MiniMax-M1; the ScaleRL loss).

    REINFORCE with a truncated, stop-gradient importance weight: a token with rho > eps_max keeps its
    gradient, scaled by eps_max instead of dropped. eps_max is the paper's absolute cap (4; 5 and 8
    behave the same), not verl's delta form clip(rho, 1-e, 1+e). MiniMax-M1's two-sided form
    clip(rho, 1 - eps_low, 1 + eps_high) is eps_min = 1 - eps_low, eps_max = 1 + eps_high; its eps_low is
    large ("no lower bound"), so eps_min = 0, the default: the one-sided form, ScaleRL's.
    Metrics: loss/truncated_frac (tokens with rho > eps_max) and ratio statistics.

    Args:
        eps_max: the cap on the importance weight rho, > 0 (default 4.0).
        eps_min: the floor on rho, in [0, eps_max) (default 0.0: none).
    """

    def __init__(self, eps_max: float = 4.0, eps_min: float = 0.0) -> None:
        require(eps_max > 0, "eps_max", eps_max, "> 0 (an absolute cap on rho, e.g. 4)")
        require(0 <= eps_min < eps_max, "eps_min", eps_min, f"in [0, eps_max) = [0, {eps_max}) (0: no floor)")
        self.eps_max = eps_max
        self.eps_min = eps_min

    def __call__(self, logprobs, old_logprobs, advantages, mask) -> LossOutput:
        mask = mask != 0
        log_ratio, clamped = clamped_log_ratio(logprobs, old_logprobs, mask)
        ratio = log_ratio.detach().exp()
        weight = ratio.clamp(min=self.eps_min, max=self.eps_max)
        per_token = -(weight * advantages * logprobs.where(mask, 0)).where(mask, 0)
        metrics = ratio_metrics(log_ratio, mask, clamped)
        metrics["loss/truncated_frac"] = float(masked_mean((ratio > self.eps_max).float(), mask))
        return LossOutput(per_token, metrics)


class ClippedSurrogateLoss(PolicyLoss):
    """Token-level PPO clipped surrogate shared by DAPO (asymmetric) and GRPO (symmetric)."""

    eps_low: float
    eps_high: float

    def __call__(self, logprobs, old_logprobs, advantages, mask) -> LossOutput:
        mask = mask != 0
        log_ratio, clamped = clamped_log_ratio(logprobs, old_logprobs, mask)
        per_token, clip_active = clipped_surrogate(log_ratio.exp(), advantages, self.eps_low, self.eps_high)
        metrics = ratio_metrics(log_ratio, mask, clamped)
        metrics["loss/clip_frac"] = float(masked_mean(clip_active.float(), mask))
        return LossOutput(per_token.where(mask, 0), metrics)


@LOSSES.register("dapo")
class DapoLoss(ClippedSurrogateLoss):
    """l_t = -min(rho_t A_i, clip(rho_t, 1 - eps_low, 1 + eps_high) A_i) (DAPO's clip-higher).

    Tokens clipped on the advantage's side (A > 0 and rho > 1 + eps_high, or A < 0 and
    rho < 1 - eps_low) get zero gradient. Metrics: loss/clip_frac and ratio statistics.

    Args:
        eps_low: the clip below 1, in (0, 1) (default 0.2).
        eps_high: the clip above 1, > 0 (default 0.26, as in ScaleRL's DAPO runs; 0.28 in the DAPO paper).
    """

    def __init__(self, eps_low: float = 0.2, eps_high: float = 0.26) -> None:
        require(0 < eps_low < 1, "eps_low", eps_low, "in (0, 1), e.g. 0.2")
        require(eps_high > 0, "eps_high", eps_high, "> 0, e.g. 0.26")
        self.eps_low = eps_low
        self.eps_high = eps_high


@LOSSES.register("grpo")
class GrpoLoss(ClippedSurrogateLoss):
    """l_t = -min(rho_t A_i, clip(rho_t, 1 - eps, 1 + eps) A_i) (GRPO/PPO, symmetric clip 0.2).

    Pair it with `advantage_norm: prompt` for GRPO's group-std advantages. No KL term: ScaleRL
    trains without a reference model. Metrics: loss/clip_frac and ratio statistics.

    Args:
        eps: the clip on both sides of 1, in (0, 1) (default 0.2).
    """

    def __init__(self, eps: float = 0.2) -> None:
        require(0 < eps < 1, "eps", eps, "in (0, 1), e.g. 0.2")
        self.eps = eps
        self.eps_low = eps
        self.eps_high = eps


@LOSSES.register("gspo")
class GspoLoss(PolicyLoss):
    """l_i = -min(s_i A_i, clip(s_i, 1 - eps_low, 1 + eps_high) A_i), s_i = exp(mean_t log rho_it) (GSPO).

    One importance ratio per sequence: the geometric mean of its token ratios, so the clip range is
    on the 1e-3 scale. l_i is written on every real token of sequence i, so `sample_mean`
    aggregation gives GSPO's (1/N) sum_i l_i. Metrics: loss/clip_frac (sequences).

    Args:
        eps_low: the clip below 1, in (0, 1) (default 4e-3).
        eps_high: the clip above 1, > 0 (default 5e-3).
    """

    def __init__(self, eps_low: float = 4e-3, eps_high: float = 5e-3) -> None:
        require(0 < eps_low < 1, "eps_low", eps_low, "in (0, 1), on the 1e-3 scale, e.g. 4e-3")
        require(eps_high > 0, "eps_high", eps_high, "> 0, on the 1e-3 scale, e.g. 5e-3")
        self.eps_low = eps_low
        self.eps_high = eps_high

    def __call__(self, logprobs, old_logprobs, advantages, mask) -> LossOutput:
        mask = mask != 0
        log_ratio, clamped = clamped_log_ratio(logprobs, old_logprobs, mask)
        lengths = mask.sum(dim=1).clamp_min(1)
        sequence_log_ratio = log_ratio.sum(dim=1) / lengths  # (B,)
        # A_i is constant over a sequence's tokens; its masked mean recovers it.
        sequence_advantage = advantages.where(mask, 0).sum(dim=1) / lengths
        sequence_loss, clip_active = clipped_surrogate(
            sequence_log_ratio.exp(), sequence_advantage, self.eps_low, self.eps_high
        )
        per_token = sequence_loss[:, None].expand_as(logprobs).where(mask, 0)
        has_tokens = mask.any(dim=1)
        metrics = ratio_metrics(log_ratio, mask, clamped)
        metrics["loss/clip_frac"] = float(masked_mean(clip_active.float(), has_tokens))
        metrics["loss/sequence_ratio_mean"] = float(masked_mean(sequence_log_ratio.detach().exp(), has_tokens))
        return LossOutput(per_token, metrics)
