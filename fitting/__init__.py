"""Sigmoid compute-performance fits, extrapolation scores with uncertainty, and LOO comparisons (numpy/scipy only).

Public API (the curve: R(C) = R0 + (A - R0) / (1 + (C_mid / C)^B), Eq. 1 of arXiv 2510.13786):
    fit = fit_sigmoid(compute, pass_rate, r0=0.35, burn_in=1500, fit_until=8000)   # -> FitResult
    boot = bootstrap_fit(fit, n_boot=1000, target=16000, seed=0)                     # -> BootstrapResult
    score = score_extrapolation(fit, compute, pass_rate, target=16000)               # -> ExtrapolationScore
    spread = seed_spread([fit_seed0, fit_seed1, fit_seed2], target=16000)            # -> SeedSpread
    loo = compare_loo({"base": fit, "loo-dapo": fit_dapo}, base="base")              # -> LooComparison
    shape = window_end_check([fit_run0, fit_run1, ...])                               # -> ShapeCheck (sweep-level)
    miss = target_miss_check([score_run0.error, score_run1.error, ...])              # -> TargetMissCheck (sweep-level)
    noise = evaluation_noise_check(evals["pass_rate_se"])                             # -> EvaluationNoise (sweep-level)
    baseline = fit_power_law(compute, pass_rate, burn_in=1500, fit_until=8000)       # -> PowerLawFit
Bad input raises FitInputError (a ValueError) naming the argument, the value and the fix; fits that
should not be trusted carry flags (FLAG_MEANINGS). This package never imports torch.
"""

from fitting.compare import LooComparison, VariantComparison, compare_loo
from fitting.curve import log_f, power_law_curve, sigmoid_curve
from fitting.extrapolation import ExtrapolationScore, observed_at, score_extrapolation
from fitting.fit import FitResult, FitSettings, PowerLawFit, fit_power_law, fit_sigmoid, refit_fixed_a
from fitting.flags import FLAG_MEANINGS
from fitting.noise import EvaluationNoise, evaluation_noise_check
from fitting.shape import ShapeCheck, TargetMissCheck, target_miss_check, window_end_check
from fitting.uncertainty import BootstrapResult, SeedSpread, bootstrap_fit, seed_spread
from fitting.validate import FitInputError

__all__ = [
    "FLAG_MEANINGS",
    "BootstrapResult",
    "EvaluationNoise",
    "ExtrapolationScore",
    "FitInputError",
    "FitResult",
    "FitSettings",
    "LooComparison",
    "PowerLawFit",
    "SeedSpread",
    "ShapeCheck",
    "TargetMissCheck",
    "VariantComparison",
    "bootstrap_fit",
    "compare_loo",
    "evaluation_noise_check",
    "fit_power_law",
    "fit_sigmoid",
    "log_f",
    "observed_at",
    "power_law_curve",
    "refit_fixed_a",
    "score_extrapolation",
    "seed_spread",
    "sigmoid_curve",
    "target_miss_check",
    "window_end_check",
]
