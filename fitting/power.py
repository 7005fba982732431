"""Seed planning: what a sweep of V variants on n seeds can detect, and how many seeds an effect needs.

The noise model is the verdicts' own (fitting.seeds): per seed s a recipe r's quantity q (A, the pass
rate at the target, ln compute-to-reach) is q_rs = m_r + c_s + e_rs with e ~ N(0, sigma^2), and
s = sqrt(2) sigma is the sd of one seed's paired difference (variant - base). A finished sweep
measures s from its two-way residual (seeds.paired_difference_sd, df_pilot degrees of freedom); with
one seed only the within-run (bootstrap) noise is known and s >= sqrt(2) x that sd, a lower bound.

A planned table of V variants on n seeds estimates s with df = V (n - 1) (cells (V + 1) n less
V + n fitted means) and tests each effect at level_i = 1 - (1 - level) / (3 V) (seeds.table_level:
Bonferroni over A and the two reach levels of every variant). A variant whose true effect is
delta > margin m is called when its interval clears the margin, d - t_i s_hat / sqrt(n) > m with
t_i = t(df, (1 + level_i) / 2). In the two-way model the row mean d and the residual s_hat are
independent, so T = (d - m) / (s_hat / sqrt(n)) is noncentral t:
    power(delta, n) = P(T > t_i),   T ~ nct(df, (delta - m) sqrt(n) / s)
(calls in the wrong direction, P(T < -t_i - 2 m sqrt(n) / s_hat), are left out: < 1e-3 at any power
worth planning for). The MDE is the effect whose power is 80%, solved on that exact power
(seeds.detectable_effect, which the sweep's table prints too). The textbook approximation
    MDE(n) = m + (t_i + t(df, power)) s / sqrt(n)          (table_mde)
treats s_hat as known in the power term: at the df of small sweeps it is optimistic, its effect
is called 70% (V = 2, n = 2) to 79.5% (V = 8, n = 8) of the time, not 80%. An effect at the margin
has noncentrality 0 and power (1 - level_i) / 2 whatever n, so seeds_needed says "never" for it (the
margins are the smallest effects a verdict is made on: budget.min_a_shift, budget.min_compute_ratio).
Checked against simulated tables run through seeds.paired_effects (tests/fitting/test_power.py).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from scipy import stats

from fitting.seeds import LEVEL, POWER, detectable_effect, table_level
from fitting.validate import FitInputError

SEED_OPTIONS = (2, 3, 4, 6, 8)
MAX_SEEDS = 64  # seeds_needed searches up to here; beyond it a sweep is not the tool


@dataclass(frozen=True)
class QuantityNoise:
    """The run-to-run sd of one seed's paired difference in a quantity, as a sweep measured it."""

    quantity: str  # "A", "pred_at_target", "reach_50", "reach_90"
    s: float  # sd of one seed's paired difference (NaN: not measured)
    df: int  # its degrees of freedom (0: only the within-run noise was known)
    lower_bound: bool  # True when s comes from the within-run (bootstrap) noise of one seed alone
    within_run_s: float = math.nan  # sqrt(2) x the median within-run sd of one curve (what fit noise alone gives)

    def interval(self, level: float = 0.80) -> tuple[float, float]:
        """The `level` interval of s from its chi-square law (df from the pilot): how far the plan may be off."""
        if self.df < 1 or not math.isfinite(self.s):
            return math.nan, math.nan
        low_q, high_q = stats.chi2.ppf([(1 + level) / 2, (1 - level) / 2], self.df)
        return self.s * math.sqrt(self.df / low_q), self.s * math.sqrt(self.df / high_q)


def _check(seeds: int, variants: int) -> None:
    if seeds < 2:
        raise FitInputError(f"seeds must be >= 2 (one seed has no run-to-run variance); got {seeds}")
    if variants < 1:
        raise FitInputError(f"variants must be >= 1; got {variants}")


def plan_df(seeds: int, variants: int) -> int:
    """Degrees of freedom of the two-way residual of a full table: V (n - 1)."""
    return variants * (seeds - 1)


def critical_t(seeds: int, variants: int, level: float = LEVEL) -> float:
    """t(df, (1 + level_i) / 2) at the table's Bonferroni level for V variants (seeds.table_level)."""
    _check(seeds, variants)
    _, level_i = table_level(variants, level)
    return float(stats.t.ppf((1 + level_i) / 2, plan_df(seeds, variants)))


def table_mde(s: float, seeds: int, variants: int, *, margin: float = 0.0, level: float = LEVEL,
              power: float = POWER) -> float:
    """margin + (t_i + t(df, power)) s / sqrt(n): the textbook approximation of mde (optimistic at small df)."""
    df = plan_df(seeds, variants)
    return margin + (critical_t(seeds, variants, level) + float(stats.t.ppf(power, df))) * s / math.sqrt(seeds)


def mde(s: float, seeds: int, variants: int, *, margin: float = 0.0, level: float = LEVEL,
        power: float = POWER) -> float:
    """The effect a table of V variants on n seeds calls with probability `power` (detection_power = power):
    what the sweep's table prints (seeds.detectable_effect at the table's df and Bonferroni level)."""
    _check(seeds, variants)
    if not (math.isfinite(s) and s > 0):
        raise FitInputError(f"s must be a finite number > 0; got {s!r}")
    _, level_i = table_level(variants, level)
    return detectable_effect(s, seeds, plan_df(seeds, variants), level_i, power, margin)


def detection_power(effect: float, s: float, seeds: int, variants: int, *, margin: float = 0.0,
                    level: float = LEVEL) -> float:
    """P(the variant's interval clears the margin on the effect's side).

    = 1 - nct.cdf(t_i, df, (|effect| - m) sqrt(n) / s).
    """
    _check(seeds, variants)
    if not (math.isfinite(s) and s > 0):
        raise FitInputError(f"s must be a finite number > 0; got {s!r}")
    noncentrality = (abs(effect) - margin) * math.sqrt(seeds) / s
    return float(stats.nct.sf(critical_t(seeds, variants, level), plan_df(seeds, variants), noncentrality))


def seeds_needed(effect: float, s: float, variants: int, *, margin: float = 0.0, level: float = LEVEL,
                 power: float = POWER, max_seeds: int = MAX_SEEDS) -> int | None:
    """The fewest seeds (>= 2) whose table calls `effect` with probability >= power; None when no n up to
    max_seeds does (always so for an effect at or inside the margin)."""
    if abs(effect) <= margin:
        return None
    for seeds in range(2, max_seeds + 1):
        if detection_power(effect, s, seeds, variants, margin=margin, level=level) >= power:
            return seeds
    return None


__all__ = ["MAX_SEEDS", "QuantityNoise", "SEED_OPTIONS", "critical_t", "detection_power", "mde", "plan_df",
           "seeds_needed", "table_mde"]
