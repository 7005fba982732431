"""Leave-one-out comparison: fixed-A refits, B against the base, log F slope points and a verdict per variant.

The verdicts come from the paired seeds (fitting.seeds.seed_verdicts): one curve per variant gives
effect estimates but no verdict. The fixed-A refits and log F points are the paper's Figure 7 view
of the same fits.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field

import numpy as np

from fitting.curve import log_f
from fitting.extrapolation import DEFAULT_MARGIN
from fitting.fit import FitResult, refit_fixed_a
from fitting.seeds import (BASE_VERDICT as BASE, CEILING_MOVER, EFFICIENCY_SHAPER, LEVEL, MIN_A_SHIFT,
                           MIN_COMPUTE_RATIO, NO_EFFECT, NO_VERDICT, PairedEffect, seed_verdicts, table_level)
from fitting.uncertainty import bootstrap_fit
from fitting.validate import FitInputError

__all__ = ["BASE", "CEILING_MOVER", "EFFICIENCY_SHAPER", "NO_EFFECT", "NO_VERDICT", "LooComparison",
           "VariantComparison", "compare_loo"]


@dataclass(frozen=True)
class VariantComparison:
    """One run of a LOO comparison: its free fit, its fixed-A refit and its verdict against the base."""

    name: str
    fit: FitResult
    a_ci: tuple[float, float]
    fixed_a_fit: FitResult
    b_fixed_ci: tuple[float, float]
    delta_a: float  # A - A_base (free fits)
    delta_b: float  # B - B_base (fixed-A refits)
    verdict: str  # base, ceiling mover, efficiency shaper, no detectable effect, no verdict
    direction: str | None  # ceiling mover: "higher" / "lower" A; efficiency shaper: "faster" / "slower" / "mixed"
    reason: str  # why, in one line (the effect and its interval, or the MDE, or "1 seed")
    effects: dict[str, PairedEffect]  # paired over seeds: "A", "pred_at_target", "reach_50", "reach_90"
    ceiling_identifiable: bool
    ceiling_budget: float  # the fit_at a ceiling claim would need (3 x C_mid's upper bound)
    log_c: np.ndarray = field(repr=False, compare=False)  # ln C of the window points
    log_f: np.ndarray = field(repr=False, compare=False)  # log F(R) at the fixed A; NaN where undefined


@dataclass(frozen=True)
class LooComparison:
    """Every run against `base` at the common fixed asymptote `fixed_a` (the paper's Figure 7)."""

    base: str
    fixed_a: float
    margin: float
    level: float
    variants: dict[str, VariantComparison]
    tested_effects: int = 0  # the Bonferroni count the intervals used (fitting.seeds.table_level); 0: no verdicts


def _half_width(interval: tuple[float, float]) -> float:
    return (interval[1] - interval[0]) / 2


def compare_loo(fits: Mapping[str, FitResult], base: str, *, margin: float = DEFAULT_MARGIN,
                fixed_a: float | None = None, n_boot: int = 500, level: float = LEVEL, seed: int = 0,
                seed_fits: Mapping[str, Mapping[int, FitResult]] | None = None, fit_at: float | None = None,
                target: float | None = None, min_compute_ratio: float = MIN_COMPUTE_RATIO,
                min_a_shift: float = MIN_A_SHIFT) -> LooComparison:
    """Compare every run in `fits` (free-A fits of the same protocol, seed-mean curves) with fits[base].

    Verdicts: fitting.seeds.seed_verdicts on seed_fits[variant][seed] (the per-seed fits; default: the
    one curve in `fits` as a single seed, which gives no verdict), at fit_at (default: the end of the
    base's window) and target (default: 2 x fit_at), with the smallest effects a verdict is made on
    (min_compute_ratio, min_a_shift: seed_verdicts).
    fixed_a: given, or the mean free-fit A of the base and every variant that is not a ceiling mover
    (the paper uses the mean over all runs; a run with another ceiling would drag the common A away from
    the runs whose B is being compared). B* is each run's B refitted at that A, with the bootstrap
    interval of its curve (a_ci, b_fixed_ci: within-run noise only). Each run's log F points use its
    fixed-A refit (curve.log_f). `margin` is the +-0.02 the prediction check uses, kept for the figures.
    """
    if base not in fits:
        raise FitInputError(f"base {base!r} is not among the fits; got {', '.join(map(repr, fits))}")
    if not (math.isfinite(margin) and margin >= 0):
        raise FitInputError(f"margin must be >= 0; got {margin!r}")
    base_fit = fits[base]
    fit_at = base_fit.window[1] if fit_at is None else fit_at
    target = 2.0 * fit_at if target is None else target
    boot = {name: bootstrap_fit(fit, n_boot=n_boot, level=level, seed=seed, target=target)
            for name, fit in fits.items()}
    if seed_fits is None:
        seed_fits = {name: {0: fit} for name, fit in fits.items()}
    noise = {  # one-seed MDE: the within-run bootstrap sd (95% half-width / 1.96)
        name: {"A": _half_width(boot[name].a_ci) / 1.96, "pred_at_target": _half_width(boot[name].prediction_ci) / 1.96}
        for name in fits if len(seed_fits.get(name, {})) == 1}
    paired = {name: seed_fits[name] for name in fits if seed_fits.get(name)}
    if base in paired:
        verdicts = seed_verdicts(paired, base, fit_at=fit_at, target=target, within_run_sd=noise, level=level,
                                 a_interval_at_bound={name for name, b in boot.items() if "a_ci_at_bound" in b.flags},
                                 min_compute_ratio=min_compute_ratio, min_a_shift=min_a_shift)
    else:  # every seed fit of the base failed: no variant has a seed to pair with
        verdicts = {}
    unpaired = "no fitted seed" if base in paired else "no fitted seed of the base to pair with"
    tests, _ = table_level(sum(1 for name in paired if name != base), level)
    movers = {name for name, v in verdicts.items() if v.verdict == CEILING_MOVER}
    if fixed_a is None:
        fixed_a = float(np.mean([fit.a for name, fit in fits.items() if name not in movers]))
    fixed = {name: refit_fixed_a(fit, fixed_a) for name, fit in fits.items()}
    fixed_boot = {name: bootstrap_fit(fit, n_boot=n_boot, level=level, seed=seed) for name, fit in fixed.items()}

    variants = {}
    for name, fit in fits.items():
        refit = fixed[name]
        v = verdicts.get(name)
        variants[name] = VariantComparison(
            name=name, fit=fit, a_ci=boot[name].a_ci, fixed_a_fit=refit, b_fixed_ci=fixed_boot[name].b_ci,
            delta_a=fit.a - base_fit.a, delta_b=refit.b - fixed[base].b,
            verdict=v.verdict if v else NO_VERDICT, direction=v.direction if v else None,
            reason=v.reason if v else unpaired, effects=v.effects if v else {},
            ceiling_identifiable=v.ceiling_identifiable if v else False,
            ceiling_budget=v.ceiling_budget if v else math.nan,
            log_c=np.log(refit.compute),
            log_f=log_f(refit.compute, refit.pass_rate, refit.a, refit.b, refit.c_mid, refit.r0),
        )
    return LooComparison(base=base, fixed_a=fixed_a, margin=margin, level=level, variants=variants,
                         tested_effects=tests if verdicts else 0)
