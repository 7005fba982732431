"""Does the sigmoid bend where the curves do? A sweep-level check of the fits at the window's end.

A fit extrapolates from the last points of its window, so that is where a wrong shape shows first.
Each run's fit leaves residuals r_i = R_i - R(C_i); over the window's last LAST_POINTS points their
mean is above or below zero. When the sigmoid describes the curves, each run's sign is a coin flip
(evaluation noise); when (nearly) every run ends its window on the same side of its fit, the
sigmoid does not follow the curves' shape there. One run cannot tell (3 noisy points), a sweep can:
a two-sided sign test over its runs,
    p = P(|Binomial(n, 1/2) - n/2| >= |above - n/2|),
and at p < ALPHA the report says that single-run predictions carry a shape error (one the within-run
bootstrap does not see). It does not say the error's sign: the embedded testbed's curves ended above
their fits in both of its versions, and its predictions came out too low by 0.04 in the first and
right on average (sd 0.04) in the second (BENCHMARKS.md, validation studies). It needs at least 8
runs to ever fire at ALPHA = 0.01 (7 runs of one sign give p = 0.016).

The same residuals size a term the intervals lacked: rms_residual = sqrt(mean over runs of r_end^2),
r_end a run's mean residual over its last points, is how far the sigmoid misses its own window's end.
A prediction at the target extrapolates further, so it misses by at least that much
(fitting.seeds.held_out_interval adds it; the table's intervals come from back-tests, fitting.backtest).
A lower bound, not the error: in the two validation studies of the shipped code the mean error at
the target was 1.9-2.3x the mean window-end residual (BENCHMARKS.md).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Iterable

LAST_POINTS = 3
ALPHA = 0.01


@dataclass(frozen=True)
class ShapeCheck:
    """Runs whose last window points lie above / below their own fit, and the sign test's p-value."""

    runs: int
    above: int
    p_value: float
    rms_residual: float = 0.0  # sqrt(mean r_end^2) over the runs counted: the fits' miss at their window's end

    @property
    def departs(self) -> bool:
        """The curves' shape departs from the sigmoid at the window's end (the sign test at ALPHA)."""
        return self.p_value < ALPHA

    def note(self) -> str:
        side, count = ("above", self.above) if 2 * self.above > self.runs else ("below", self.runs - self.above)
        return (f"fit shape: {count} of {self.runs} runs end their fit window {side} their own sigmoid fit "
                f"(last {LAST_POINTS} points; sign test p = {self.p_value:.1g}): the sigmoid does not follow these "
                f"curves' shape there, so each run's prediction at the target carries a shape error, of a sign "
                f"this check cannot tell (rms {self.rms_residual:.3f} at the window's end, a lower bound "
                f"on it at the target; the back-tests size it). Trust the seed-mean rows and the "
                f"paired comparisons more than any single run's prediction, or fit a longer window.")


def window_end_check(fits: Iterable, last_points: int = LAST_POINTS) -> ShapeCheck | None:
    """The sign test over `fits` (fitting.FitResult, one per run); None when no fit has enough points.

    A fit counts when its window holds more points than its free parameters plus `last_points`;
    a mean residual of exactly 0 counts for neither side.
    """
    from scipy.stats import binomtest

    residuals = [r for r in (window_end_residual(fit, last_points) for fit in fits) if r is not None]
    signs = [r > 0 for r in residuals if r != 0.0]
    if not signs:
        return None
    above = sum(signs)
    return ShapeCheck(runs=len(signs), above=above, p_value=float(binomtest(above, len(signs), 0.5).pvalue),
                      rms_residual=math.sqrt(sum(r * r for r in residuals) / len(residuals)))


def window_end_residual(fit, last_points: int = LAST_POINTS) -> float | None:
    """r_end = mean of R_i - R(C_i) over the window's last `last_points` points (None: too few points)."""
    if fit is None or fit.n_points < fit.settings.n_params + last_points + 1:
        return None
    return float((fit.pass_rate[-last_points:] - fit.predict(fit.compute[-last_points:])).mean())


@dataclass(frozen=True)
class TargetMissCheck:
    """Runs whose observed pass rate at the target lies above / below their own prediction, and the sign test.

    The window-end check above can only say that the sigmoid bends differently from the curves; once a sweep
    has trained to its target the miss itself is observed: error_i = pred_i - obs_i per run. Evaluation noise
    gives each error either sign; when nearly every run misses on the same side (the same two-sided sign test,
    p < ALPHA) the window's fits are biased at the target. The prediction intervals carry no bias term, so
    they then cover less than they say, and a prediction further out is likely off the same way.
    """

    runs: int
    above: int  # runs observed above their prediction (the prediction too low)
    p_value: float
    mean_error: float  # mean of pred - obs over the runs

    @property
    def departs(self) -> bool:
        """The window's predictions miss the target on one side more often than noise allows (sign test at ALPHA)."""
        return self.p_value < ALPHA

    def note(self) -> str:
        low = 2 * self.above > self.runs
        count = self.above if low else self.runs - self.above
        return (f"predictions at the target: {count} of {self.runs} runs were observed {'above' if low else 'below'} "
                f"their window fit's prediction (mean error {self.mean_error:+.3f}; sign test p = {self.p_value:.1g}): "
                f"the curves keep {'rising past' if low else 'falling short of'} the sigmoid fitted to the window, so "
                f"these predictions are biased {'low' if low else 'high'} and their bootstrap intervals, which hold no "
                f"bias term, cover less than they say (the back-test intervals take the bias off); a prediction "
                f"further out is likely {'low' if low else 'high'} too. "
                f"Paired differences between variants share most of the bias; a longer window shrinks it.")


def target_miss_check(errors: Iterable[float]) -> TargetMissCheck | None:
    """The sign test over per-run prediction errors at the target (pred - obs; NaN: unobserved, skipped; an
    error of exactly 0 counts for neither side). None when no run was observed at its target."""
    from scipy.stats import binomtest

    observed = [float(e) for e in errors if e is not None and math.isfinite(float(e))]
    signs = [e < 0 for e in observed if e != 0.0]
    if not signs:
        return None
    above = sum(signs)
    return TargetMissCheck(runs=len(signs), above=above, p_value=float(binomtest(above, len(signs), 0.5).pvalue),
                           mean_error=sum(observed) / len(observed))
