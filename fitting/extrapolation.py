"""Extrapolation scoring: a fit's prediction at a target compute against the curve observed there."""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from fitting.fit import FitResult
from fitting.validate import FitInputError, check_curve

# The paper's noise margin on A: independent runs of one recipe gave an error margin of about +-0.02 on A
# (arXiv 2510.13786, Figure 8a).
DEFAULT_MARGIN = 0.02
DEFAULT_OBSERVED_HALFWIDTH = 0.03  # relative: the observed value is the mean over target * (1 +- 0.03)


@dataclass(frozen=True)
class ExtrapolationScore:
    """Predicted and observed pass rate at `target`; error = predicted - observed."""

    target: float
    predicted: float
    observed: float  # NaN when no evaluation point lies in observed_window
    error: float  # NaN when unobserved
    margin: float
    within_margin: bool | None  # None when unobserved
    observed_window: tuple[float, float]  # compute interval whose points were averaged
    n_observed: int
    flags: tuple[str, ...]  # the fit's flags, plus no_observation_at_target


def observed_at(compute, pass_rate, target: float,
                halfwidth: float = DEFAULT_OBSERVED_HALFWIDTH) -> tuple[float, int, tuple[float, float]]:
    """Mean pass rate of the evaluation points with |C - target| <= halfwidth * target.

    One evaluation carries the noise of a finite validation set (and of the checkpoint), so the mean
    over a few neighbours is the observed value. Returns (mean or NaN, number of points, window).
    """
    c, y = check_curve(compute, pass_rate)
    window = (target * (1 - halfwidth), target * (1 + halfwidth))
    inside = (c >= window[0]) & (c <= window[1])
    count = int(inside.sum())
    return (float(y[inside].mean()) if count else math.nan), count, window


def score_extrapolation(fit: FitResult, compute, pass_rate, *, target: float, margin: float = DEFAULT_MARGIN,
                        observed_halfwidth: float = DEFAULT_OBSERVED_HALFWIDTH) -> ExtrapolationScore:
    """Score `fit` (made on [burn_in, fit_until]) at `target` against the full curve (compute, pass_rate).

    observed = mean of the curve's points within target * (1 +- observed_halfwidth) (default +-3%:
    at 16k GPU-hours with an evaluation every 100, the 5 points 15.6k..16k when the run ends at 16k);
    error = predicted - observed; within_margin = |error| <= margin (default 0.02). A curve that has
    not reached the target yet still gets its prediction, with observed NaN and the flag
    no_observation_at_target.
    """
    if not (isinstance(target, (int, float, np.floating, np.integer)) and math.isfinite(target) and target > 0):
        raise FitInputError(f"target must be a compute value > 0; got {target!r}")
    if not (math.isfinite(margin) and margin > 0):
        raise FitInputError(f"margin must be > 0; got {margin!r}")
    if not (math.isfinite(observed_halfwidth) and 0 <= observed_halfwidth < 1):
        raise FitInputError(f"observed_halfwidth must be in [0, 1) (relative to target); got {observed_halfwidth!r}")
    predicted = float(fit.predict(target))
    observed, count, window = observed_at(compute, pass_rate, target, observed_halfwidth)
    flags = fit.flags
    if count == 0:
        flags = flags + ("no_observation_at_target",)
        return ExtrapolationScore(target=float(target), predicted=predicted, observed=math.nan, error=math.nan,
                                  margin=margin, within_margin=None, observed_window=window, n_observed=0,
                                  flags=flags)
    error = predicted - observed
    return ExtrapolationScore(target=float(target), predicted=predicted, observed=observed, error=error,
                              margin=margin, within_margin=bool(abs(error) <= margin), observed_window=window,
                              n_observed=count, flags=flags)
