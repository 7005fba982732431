"""A forward prediction with the interval its sweep's back-tests calibrate, and the reasons not to trust it yet.

    tests = {run: backtest_curve(fit_to[run], c[run], y[run], fit_at=F, target=T) for run in runs}
    calibration = calibrate(tests.values())
    forecast = forecast_at(fit_to[run], fit[run], tests[run], calibration, target=T)
    forecast.interval, forecast.regime      # (lo, hi) at calibration.level; () or the reasons, in REGIME_MEANINGS

The regime flag says when a curve is not yet where a sigmoid extrapolates. Its rules look where a
sigmoid's misses come from, a curve rising past the shoulder its window saw, and were set on
synthetic curves (settled sigmoids with autocorrelated noise flagged ~14%; curves whose second rise
starts inside the window flagged 55%, covered or flagged 83%; BENCHMARKS.md, "Predictions that know
when they are wrong"). A curve that falls (a collapse) is the stability diagnostics' to name.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from fitting.backtest import Backtest, Calibration, FitTo, window_sensitivity
from fitting.fit import FitResult
from fitting.validate import FitInputError

# In units of the margin (0.02: 0.07 and 0.03), the thresholds the synthetic study set.
CEILING_RISE = 3.5
SHORTFALL = 1.5

REGIME_MEANINGS: dict[str, str] = {
    "window_before_shoulder": "the window ends before the fitted C_mid: less than half the gain is seen; "
                              "train further before predicting (raise budget.fit_at; sweep fit: --fit-until)",
    "ceiling_still_rising": "the fitted A rose by more than 3.5x the margin between the nearest back-test's "
                            "window (1/r as far, r = target / fit_at) and the forward one: the curve has not "
                            "settled; fit a longer window or predict less far",
    "backtest_fell_short": "the nearest back-test (its window 1/r as far) fell short of the curve by more than "
                           "1.5x the margin: the curve rises faster than a sigmoid there; fit a longer window "
                           "or start it later (budget.burn_in)",
}


@dataclass(frozen=True)
class Forecast:
    """The prediction at `target` +- radius, and the regime reasons (empty: none). A run's radius is the
    calibration's for its scale (Calibration.radius); a table row's is its seeds' mean radius (reports.forecasts)."""

    target: float
    predicted: float  # the fit's own prediction at the target
    scale: float  # inf when the fit's cut window could not be fitted: no interval; nan for a row (seeds' radius)
    radius: float
    level: float
    regime: tuple[str, ...]
    bias: float = 0.0  # the back-tests' mean error, taken off the interval's centre

    @property
    def centre(self) -> float:
        """The interval's centre: the prediction less the back-tests' bias."""
        return self.predicted - self.bias

    @property
    def interval(self) -> tuple[float, float]:
        """centre +- radius, each end clipped to pass rates [0, 1] (a centre past 1 by more than the radius: (1, 1))."""
        return (min(1.0, max(0.0, self.centre - self.radius)), max(0.0, min(1.0, self.centre + self.radius)))

    def covers(self, observed: float) -> bool:
        return self.interval[0] <= observed <= self.interval[1]

    def held(self, observed: float) -> bool | None:
        """Whether the interval held an observed end; None when there is none yet, or the interval is [0, 1] for
        want of a radius (it always holds, and says nothing)."""
        if not (math.isfinite(observed) and math.isfinite(self.radius)):
            return None
        return self.covers(observed)


def regime_reasons(fit: FitResult, backtests: Sequence[Backtest], margin: float) -> tuple[str, ...]:
    """The REGIME_MEANINGS that hold for a forward fit and its back-tests (the nearest back-test, the first)."""
    reasons = []
    if "window_ends_before_c_mid" in fit.flags:
        reasons.append("window_before_shoulder")
    if backtests and fit.a - backtests[0].a > CEILING_RISE * margin:
        reasons.append("ceiling_still_rising")
    if backtests and backtests[0].error < -SHORTFALL * margin:
        reasons.append("backtest_fell_short")
    return tuple(reasons)


def forecast_at(fit_to: FitTo, fit: FitResult, backtests: Sequence[Backtest], calibration: Calibration, *,
                target: float) -> Forecast:
    """The forward fit's prediction at `target`, less the back-tests' bias, +- calibration.radius(its window
    sensitivity).

    A fit whose cut window (fitting.backtest.SHORTER) cannot be fitted has no scale: its interval is [0, 1].
    """
    predicted = float(fit.predict(target))
    try:
        scale = window_sensitivity(fit_to, fit, target)
    except FitInputError:
        scale = float("inf")
    return Forecast(target=float(target), predicted=predicted, scale=scale, radius=calibration.radius(scale),
                    level=calibration.level, regime=regime_reasons(fit, backtests, calibration.margin),
                    bias=calibration.bias)
