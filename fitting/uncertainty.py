"""Uncertainty of a fit: moving-block residual bootstrap intervals and the spread across seeds."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np

from fitting.curve import sigmoid_curve
from fitting.fit import FitResult
from fitting.flags import at_bound
from fitting.validate import FitInputError

PARAMETERS = ("a", "b", "c_mid")


@dataclass(frozen=True)
class BootstrapResult:
    """Percentile intervals at `level` for A, B, C_mid (and the prediction at `target` when given)."""

    fit: FitResult
    level: float
    n_boot: int
    n_failed: int  # refits that raised; their draws are left out of the intervals
    block_length: int
    a_ci: tuple[float, float]
    b_ci: tuple[float, float]
    c_mid_ci: tuple[float, float]
    target: float | None
    prediction_ci: tuple[float, float] | None
    flags: tuple[str, ...]  # the fit's flags, plus c_mid_ci_beyond_window and a_ci_at_bound
    samples: np.ndarray = field(repr=False, compare=False)  # (draws, 4): a, b, c_mid, r0
    predictions: np.ndarray | None = field(repr=False, compare=False)


def default_block_length(n_points: int) -> int:
    """round(n^(1/3)), at least 1: the usual order for moving-block bootstraps (Hall, Horowitz, Jing 1995)."""
    return max(1, round(n_points ** (1 / 3)))


def _block_indices(rng: np.random.Generator, n: int, block_length: int) -> np.ndarray:
    """Indices of one circular moving-block resample: ceil(n / L) blocks of L consecutive residuals."""
    n_blocks = -(-n // block_length)
    starts = rng.integers(0, n, size=n_blocks)
    return ((starts[:, None] + np.arange(block_length)[None, :]) % n).ravel()[:n]


def bootstrap_fit(fit: FitResult, *, n_boot: int = 1000, target: float | None = None, level: float = 0.95,
                  block_length: int | None = None, seed: int = 0) -> BootstrapResult:
    """Bootstrap intervals for a fit by resampling blocks of its residuals.

    Evaluation points of one run are correlated (consecutive checkpoints share most of their
    training), so independent resampling of points would understate the uncertainty. Instead:
    residuals e = R - R_fit over the window are centred, each draw concatenates blocks of
    `block_length` consecutive residuals (circular, random starts), R* = R_fit + e*, and the fit is
    redone with the same settings (default method: warm-started from the original fit; paper method:
    its full grid). Intervals are the (1 - level)/2 and (1 + level)/2 quantiles of the draws.
    This captures evaluation noise within one run, not run-to-run variation: use seed_spread for that.
    """
    if not (isinstance(n_boot, (int, np.integer)) and n_boot >= 2):
        raise FitInputError(f"n_boot must be an integer >= 2; got {n_boot!r}")
    if not 0 < level < 1:
        raise FitInputError(f"level must be in (0, 1); got {level!r}")
    n = fit.n_points
    block_length = default_block_length(n) if block_length is None else int(block_length)
    if not 1 <= block_length <= n:
        raise FitInputError(f"block_length must be in [1, {n}] (points in the window); got {block_length!r}")
    if target is not None and not (math.isfinite(target) and target > 0):
        raise FitInputError(f"target must be a compute value > 0; got {target!r}")

    fitted = fit.predict(fit.compute)
    residuals = fit.pass_rate - fitted
    residuals = residuals - residuals.mean()
    solver = fit.settings.make_solver(fit.compute)
    start = fit.solution()
    rng = np.random.default_rng(seed)
    draws, failed = [], 0
    for _ in range(n_boot):
        y_star = fitted + residuals[_block_indices(rng, n, block_length)]
        try:
            solution = solver.solve(y_star, start=start)
        except (ValueError, np.linalg.LinAlgError):
            failed += 1
            continue
        draws.append((solution.a, solution.b, solution.c_mid, solution.r0))
    if len(draws) < 2:
        raise FitInputError(f"only {len(draws)} of {n_boot} bootstrap refits succeeded; the fit is unstable")
    samples = np.array(draws)
    quantiles = ((1 - level) / 2, (1 + level) / 2)

    def interval(values):
        low, high = np.quantile(values, quantiles)
        return float(low), float(high)

    predictions = None
    if target is not None:
        predictions = sigmoid_curve(target, samples[:, 0], samples[:, 1], samples[:, 2], samples[:, 3])
    c_mid_ci = interval(samples[:, 2])
    a_ci = interval(samples[:, 0])
    flags = fit.flags
    if c_mid_ci[1] > fit.window[1] and "c_mid_ci_beyond_window" not in flags:
        flags = flags + ("c_mid_ci_beyond_window",)
    # A point estimate just inside its bound (0.988 with the bound 1) passes the fit's a_at_bound flag,
    # yet draws that reach the bound say the window cannot place the ceiling below it.
    if fit.settings.a is None and any(at_bound(end, bound) for end, bound in zip(a_ci, fit.settings.a_bounds(fit.r0))):
        flags = flags + ("a_ci_at_bound",)
    return BootstrapResult(fit=fit, level=level, n_boot=n_boot, n_failed=failed, block_length=block_length,
                           a_ci=a_ci, b_ci=interval(samples[:, 1]), c_mid_ci=c_mid_ci,
                           target=target, prediction_ci=interval(predictions) if predictions is not None else None,
                           flags=flags, samples=samples, predictions=predictions)


@dataclass(frozen=True)
class SeedSpread:
    """Across-seed statistics per quantity (a, b, c_mid, and prediction when a target is given)."""

    n_seeds: int
    mean: dict[str, float]
    std: dict[str, float]  # sample standard deviation (ddof = 1)
    low: dict[str, float]  # smallest value over seeds
    high: dict[str, float]  # largest value over seeds


def seed_spread(fits: Sequence[FitResult], target: float | None = None) -> SeedSpread:
    """Mean, sample sd, min and max over fits of the same run with different seeds.

    The paper's independent runs of one recipe gave an error margin of about +-0.02 on A (arXiv
    2510.13786, Figure 8a), the margin the LOO verdicts use; the spread measured here is the number
    to compare with it, and it is usually larger than a single run's bootstrap interval.
    """
    if len(fits) < 2:
        raise FitInputError(f"seed_spread needs fits of at least 2 seeds; got {len(fits)}")
    values = {name: np.array([getattr(f, name) for f in fits]) for name in PARAMETERS}
    if target is not None:
        values["prediction"] = np.array([float(f.predict(target)) for f in fits])
    return SeedSpread(
        n_seeds=len(fits),
        mean={k: float(v.mean()) for k, v in values.items()},
        std={k: float(v.std(ddof=1)) for k, v in values.items()},
        low={k: float(v.min()) for k, v in values.items()},
        high={k: float(v.max()) for k, v in values.items()},
    )
