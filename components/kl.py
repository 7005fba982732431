"""KL penalties: a per-token pull of the policy toward a frozen reference model, added to the policy loss.

Shared interface: `penalty(logprobs (B, T), ref_logprobs (B, T)) -> kl (B, T)`, the estimate of
KL(pi || pi_ref) at each sampled token, whose gradient the trainer adds at `coef` times the policy
loss's per-token weight: l_t += coef * kl_t, then the aggregation as for the loss. `reference` says
whether the trainer must keep a reference model at all; `reset_every` (steps, 0: never) when it
replaces the reference with the current policy (DeepSeek-R1's reset). Only DeepSeek's recipes use one
(DeepSeekMath: 0.04; R1: 0.001, reset every 400 steps); ScaleRL, DAPO, Magistral and MiniMax-M1 do not.
"""

from __future__ import annotations

from components.registry import Registry, require


class KlPenalty:
    """Base of the `kl_penalty` axis: no penalty, no reference model."""

    coef: float = 0.0
    reference: bool = False
    reset_every: int = 0

    def penalty(self, logprobs, ref_logprobs):
        raise NotImplementedError

    def reset_due(self, step: int) -> bool:
        """Whether the reference becomes the current policy after optimizer step `step` (1, 2, ...)."""
        return self.reference and self.reset_every > 0 and step > 0 and step % self.reset_every == 0


KL_PENALTIES: Registry[KlPenalty] = Registry("kl_penalty", KlPenalty)


@KL_PENALTIES.register("none")
class NoKlPenalty(KlPenalty):
    """l_t unchanged: no reference model is kept or run (every published recipe here but DeepSeek's)."""

    def penalty(self, logprobs, ref_logprobs):
        return logprobs.new_zeros(logprobs.shape)


@KL_PENALTIES.register("reference")
class ReferenceKlPenalty(KlPenalty):
    """kl_t = k1 or k3 of the sampled token (Schulman 2020, "Approximating KL divergence"), d = log pi_ref - log pi:

        k1 = -d = log pi(y_t) - log pi_ref(y_t)      unbiased, can be negative, gradient that of log pi;
        k3 = exp(d) - d - 1                            unbiased under samples from pi, >= 0 (DeepSeekMath eq. 4).

    The reference is the run's starting model, frozen; with reset_every N it is replaced by the current
    policy after every N optimizer steps (DeepSeek-R1). Its forward is charged to compute (one forward
    pass of the trained rows a step: recipe/compute.py).

    Args:
        coef: beta, the penalty's weight, in (0, 10] (default 0.04, DeepSeekMath's).
        estimator: "k3" (default, DeepSeekMath's and TRL's) or "k1".
        reset_every: optimizer steps between reference resets, >= 0 (default 0: never).
    """

    reference = True

    def __init__(self, coef: float = 0.04, estimator: str = "k3", reset_every: int = 0) -> None:
        require(0 < coef <= 10, "coef", coef, "in (0, 10]")
        require(estimator in ("k1", "k3"), "estimator", estimator, '"k1" or "k3"')
        require(reset_every >= 0, "reset_every", reset_every, ">= 0 steps (0: never reset)")
        self.coef = coef
        self.estimator = estimator
        self.reset_every = reset_every

    def penalty(self, logprobs, ref_logprobs):
        d = ref_logprobs - logprobs
        if self.estimator == "k1":
            return -d
        return d.exp() - d - 1.0
