"""Leave-one-out comparison: fixed-A refits, B against the base, log F slope points and a verdict per variant."""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field

import numpy as np

from fitting.curve import log_f
from fitting.extrapolation import DEFAULT_MARGIN
from fitting.fit import FitResult, refit_fixed_a
from fitting.uncertainty import bootstrap_fit
from fitting.validate import FitInputError

BASE, CEILING_MOVER, EFFICIENCY_SHAPER, NO_EFFECT = "base", "ceiling mover", "efficiency shaper", "no detectable effect"


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
    verdict: str  # base, ceiling mover, efficiency shaper, no detectable effect
    direction: str | None  # "higher" / "lower": of A for a ceiling mover, of B for an efficiency shaper
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


def _half_width(interval: tuple[float, float]) -> float:
    return (interval[1] - interval[0]) / 2


def compare_loo(fits: Mapping[str, FitResult], base: str, *, margin: float = DEFAULT_MARGIN,
                fixed_a: float | None = None, n_boot: int = 500, level: float = 0.95,
                seed: int = 0) -> LooComparison:
    """Compare every run in `fits` (free-A fits of the same protocol) with fits[base].

    Verdict per variant v, with h(x) the half-width of x's bootstrap interval at `level`:
      ceiling mover        if |A_v - A_base| > margin + sqrt(h(A_v)^2 + h(A_base)^2)
                           (the A difference exceeds the noise margin beyond the fits' uncertainty);
      efficiency shaper    else if |B*_v - B*_base| > sqrt(h(B*_v)^2 + h(B*_base)^2), where B* is B
                           refitted with A fixed to the common fixed_a (direction: B higher or lower);
      no detectable effect otherwise.
    fixed_a: given, or the mean free-fit A of the base and every variant that is not a ceiling mover
    (the paper uses the mean over all runs; a run with another ceiling would drag the common A away from
    the runs whose B is being compared). Each run's log F points use its fixed-A refit (curve.log_f).
    """
    if base not in fits:
        raise FitInputError(f"base {base!r} is not among the fits; got {', '.join(map(repr, fits))}")
    if not (math.isfinite(margin) and margin >= 0):
        raise FitInputError(f"margin must be >= 0; got {margin!r}")
    boot = {name: bootstrap_fit(fit, n_boot=n_boot, level=level, seed=seed) for name, fit in fits.items()}
    base_fit = fits[base]

    def moves_ceiling(name: str) -> bool:
        noise_a = math.hypot(_half_width(boot[name].a_ci), _half_width(boot[base].a_ci))
        return abs(fits[name].a - base_fit.a) > margin + noise_a

    movers = {name for name in fits if name != base and moves_ceiling(name)}
    if fixed_a is None:
        fixed_a = float(np.mean([fit.a for name, fit in fits.items() if name not in movers]))
    fixed = {name: refit_fixed_a(fit, fixed_a) for name, fit in fits.items()}
    fixed_boot = {name: bootstrap_fit(fit, n_boot=n_boot, level=level, seed=seed) for name, fit in fixed.items()}

    variants = {}
    for name, fit in fits.items():
        delta_a = fit.a - base_fit.a
        delta_b = fixed[name].b - fixed[base].b
        noise_b = math.hypot(_half_width(fixed_boot[name].b_ci), _half_width(fixed_boot[base].b_ci))
        if name == base:
            verdict, direction = BASE, None
        elif name in movers:
            verdict, direction = CEILING_MOVER, "higher" if delta_a > 0 else "lower"
        elif abs(delta_b) > noise_b:
            verdict, direction = EFFICIENCY_SHAPER, "higher" if delta_b > 0 else "lower"
        else:
            verdict, direction = NO_EFFECT, None
        refit = fixed[name]
        variants[name] = VariantComparison(
            name=name, fit=fit, a_ci=boot[name].a_ci, fixed_a_fit=refit, b_fixed_ci=fixed_boot[name].b_ci,
            delta_a=delta_a, delta_b=delta_b, verdict=verdict, direction=direction,
            log_c=np.log(refit.compute),
            log_f=log_f(refit.compute, refit.pass_rate, refit.a, refit.b, refit.c_mid, refit.r0),
        )
    return LooComparison(base=base, fixed_a=fixed_a, margin=margin, level=level, variants=variants)
