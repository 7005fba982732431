"""Pruning rules for `sweep tune`: stop a trial from its fitted curve, never from its raw early values.

The paper shows early leaders can end lower (a higher early pass rate with a lower ceiling A), so
a rule here compares what the curves predict at the study's target compute, with their
uncertainty. At each poll the tuner fits a sigmoid to a trial's evaluations so far, bootstraps the
prediction at the target, and asks the rule whether to stop the trial, given the same estimate for
the best trial so far. It lives beside the tuner, not in components/: it is no recipe axis, it
changes which trials run to the end, never how a trial trains (its registry is still the generic one).
"""

from __future__ import annotations

from dataclasses import dataclass

from components.registry import Registry, require


@dataclass(frozen=True)
class CurveEstimate:
    """The objective a trial's curve predicts at the target, with its confidence interval."""

    value: float
    lower: float
    upper: float
    compute: float  # compute of the last evaluation the fit saw


class Pruner:
    """Base of the pruning rules: should_prune(trial, best, fit_at, maximize) -> bool."""

    min_compute_frac: float = 0.0

    def should_prune(self, trial: CurveEstimate, best: CurveEstimate | None, fit_at: float, maximize: bool) -> bool:
        raise NotImplementedError


PRUNERS: Registry[Pruner] = Registry("pruner", Pruner)


@PRUNERS.register("none")
class NoPruning(Pruner):
    """Every trial trains to the target."""

    def should_prune(self, trial, best, fit_at, maximize):
        return False


@PRUNERS.register("sigmoid_bound")
class SigmoidBoundPruner(Pruner):
    """Prune when even the trial's optimistic prediction loses to the best trial's pessimistic one.

    Maximizing: prune iff U_trial(target) < L_best(target), where [L, U] is the `level` interval of
    the sigmoid's prediction at the target, and only once the trial has spent at least
    min_compute_frac x fit_at compute (a fit over too little of the curve has no useful interval).
    Minimizing mirrors it: L_trial > U_best. The interval (sweeps.tune.estimate_objective) is the
    bootstrap's widened by run_sd, the run-to-run sd of one run's objective: each side becomes
    sqrt(side^2 + (z run_sd)^2). A fit whose ceiling is not determined yet (A at its bound, the
    window not past C_mid) gets [0, 1] and is never pruned.

    Args:
        min_compute_frac: the fraction of fit_at a trial spends before it can be pruned, in (0, 1] (default 0.5).
        level: the confidence of the intervals, in [0.5, 1) (default 0.9).
        n_boot: bootstrap refits per poll of each trial, in [20, 10000] (default 200).
        run_sd: the run-to-run sd of one run's objective, in [0, 1) (default 0.04: the same recipe reached
            0.846 and 0.905 in two tune studies on the embedded testbed, |diff| / sqrt 2 = 0.042).
    """

    def __init__(self, min_compute_frac: float = 0.5, level: float = 0.9, n_boot: int = 200,
                 run_sd: float = 0.04) -> None:
        require(0.0 < min_compute_frac <= 1.0, "min_compute_frac", min_compute_frac, "in (0, 1]: a fraction of fit_at")
        require(0.5 <= level < 1.0, "level", level, "in [0.5, 1): the confidence of the intervals")
        require(20 <= n_boot <= 10_000, "n_boot", n_boot, "in [20, 10000] bootstrap refits (each poll of each trial "
                "refits the curve n_boot times)")
        require(0.0 <= run_sd < 1.0, "run_sd", run_sd, "in [0, 1): the run-to-run sd of one run's objective")
        self.min_compute_frac = min_compute_frac
        self.level = level
        self.n_boot = n_boot
        self.run_sd = run_sd

    def should_prune(self, trial, best, fit_at, maximize):
        if best is None or trial.compute < self.min_compute_frac * fit_at:
            return False
        if maximize:
            return trial.upper < best.lower
        return trial.lower > best.upper
