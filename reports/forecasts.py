"""The sweep's forecasts: every run's and every row's prediction at the target, with the interval its back-tests give.

    forecasts = forecast_sweep(data, variants, fit_curve)   # reports.tables.fit_sweep calls it
    forecasts.runs[(variant, seed)], forecasts.rows[variant]   # fitting.Forecast
    forecasts.note()                                           # the back-test and the coverage, in a sentence

One calibration, over every run's back-tests (fitting.backtest says how a back-test is made). A table
row predicts from its seed-mean curve and gets the mean radius of its seeds' runs, not a run's radius /
sqrt(seeds): what the seeds share (the curves rising past the window's shoulder) does not average out,
and the seed-mean curves' own back-tests, too smooth to show it, gave rows intervals that held 4 of 9
observed ends where this held 8 (BENCHMARKS.md, "Predictions that know when they are wrong").
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np
import pandas as pd

from reports.sweep_data import SweepData

# fit_curve(curve, fit_until) -> FitResult: a curve (step, compute, pass_rate) fitted as the window fit is
FitCurve = Callable[[pd.DataFrame, float], object]


@dataclass
class SweepForecasts:
    """Back-tests, calibrations and forecasts of a sweep's runs and rows."""

    run_calibration: object  # fitting.Calibration over every run's back-tests
    runs: dict[tuple[str, int], object] = field(default_factory=dict)  # (variant, seed) -> fitting.Forecast
    rows: dict[str, object] = field(default_factory=dict)  # variant -> fitting.Forecast
    run_backtests: dict[tuple[str, int], list] = field(default_factory=dict)
    row_backtests: dict[str, list] = field(default_factory=dict)  # for the regime flag and the curves page
    observed: dict[tuple[str, int], float] = field(default_factory=dict)  # each run's observed end (NaN: not yet)

    def coverage(self) -> tuple[int, int]:
        """(runs whose observed end lies inside their interval, runs observed at the target with a finite
        interval: a [0, 1] that says nothing is not counted as holding)."""
        held = [self.runs[key].held(value) for key, value in self.observed.items() if key in self.runs]
        held = [h for h in held if h is not None]
        return sum(held), len(held)

    def flagged(self) -> int:
        return sum(bool(f.regime) for f in self.runs.values())

    def note(self) -> str:
        """The back-test's record and, once the runs reached the target, how often the intervals held."""
        calibration = self.run_calibration
        text = (f"predictions: {100 * calibration.level:.0f}% intervals calibrated on the sweep's own back-tests "
                f"(each run fitted to C / r and scored at C, its points C in the window's last doubling; "
                f"{calibration.describe()}); "
                f"{self.flagged()} of {len(self.runs)} runs flagged not yet predictable")
        covered, observed = self.coverage()
        if observed:
            text += (f"; at the target the intervals held {covered} of {observed} observed ends "
                     f"({100 * covered / observed:.0f}%)")
        return text


def _fit_to(fit_curve: FitCurve, curve: pd.DataFrame):
    return lambda fit_until: fit_curve(curve, fit_until)


def forecast_sweep(data: SweepData, variants: dict, fit_curve: FitCurve) -> SweepForecasts:
    """Back-test every run and every row, calibrate each kind over the sweep, forecast each at the target."""
    from fitting.backtest import backtest_curve, calibrate
    from fitting.forecast import Forecast, forecast_at, regime_reasons

    budget = data.budget
    halfwidth = {} if budget.observed_window is None else {"observed_halfwidth": budget.observed_window}

    def backtests(curve: pd.DataFrame) -> list:
        if not budget.target > budget.fit_at:  # a hand-written sweep.json: nothing lies beyond the window
            return []
        return backtest_curve(_fit_to(fit_curve, curve), curve["compute"].to_numpy(), curve["pass_rate"].to_numpy(),
                              fit_at=budget.fit_at, target=budget.target, **halfwidth)

    run_curves, run_tests, row_tests = {}, {}, {}
    for name, v in variants.items():
        row_tests[name] = backtests(v.curve)
        for seed, fit in v.prediction_seed_fits.items():
            if fit is not None:
                rows = data.evals[(data.evals["variant"] == name) & (data.evals["seed"] == seed)]
                run_curves[(name, seed)] = rows.sort_values("step")[["step", "compute", "pass_rate"]]
                run_tests[(name, seed)] = backtests(run_curves[(name, seed)])
    forecasts = SweepForecasts(run_calibration=calibrate(run_tests.values()), run_backtests=run_tests,
                               row_backtests=row_tests)
    for (name, seed), curve in run_curves.items():
        v = variants[name]
        forecasts.runs[(name, seed)] = forecast_at(_fit_to(fit_curve, curve), v.prediction_seed_fits[seed],
                                                   run_tests[(name, seed)], forecasts.run_calibration,
                                                   target=budget.target)
        forecasts.observed[(name, seed)] = v.seed_scores[seed].observed
    for name, v in variants.items():
        radii = [forecasts.runs[(name, seed)].radius for seed in v.seeds if (name, seed) in forecasts.runs]
        finite = [radius for radius in radii if math.isfinite(radius)]  # a seed without a scale has no say
        if finite:  # the row's radius is its seeds' (the module docstring says why): no scale of its own
            calibration = forecasts.run_calibration
            forecasts.rows[name] = Forecast(
                target=float(budget.target), predicted=float(v.prediction_fit.predict(budget.target)),
                scale=math.nan, radius=float(np.mean(finite)), level=calibration.level,
                regime=regime_reasons(v.prediction_fit, row_tests[name], calibration.margin),
                bias=calibration.bias)
        else:
            forecasts.rows[name] = forecast_at(_fit_to(fit_curve, v.curve), v.prediction_fit, row_tests[name],
                                               forecasts.run_calibration, target=budget.target)
    return forecasts
