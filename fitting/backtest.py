"""Back-tests: the sweep's own record of how far its fits extrapolate, and the intervals it calibrates.

A prediction fits the window [burn_in, fit_at] and extrapolates to target = r * fit_at. Every run has
already answered smaller copies of that question: fitted to C / r, predicted at C, for its evaluation
points C in the window's last doubling, and compared with the curve observed there (inside the window
but for the observed value's +-3% at fit_at itself: nothing the forward prediction lacks). Each
back-test's score is |e - b| / sqrt(s m), e = predicted - observed, b the back-tests' mean error, s its window
sensitivity (window_sensitivity: how far the prediction moves when its window is cut short, plus the fit's
rmse) and m the sweep's median s (pooled_scale says why the two are pooled). Pooled over the sweep's runs
the scores calibrate the forward interval as split-conformal prediction does (Vovk et al. 2005; Lei et al.
2018; scaled scores as in its locally weighted form):

    b = the back-tests' mean error (their bias);  m = their median scale;
    q = the k-th smallest score |e - b| / sqrt(s m), k = ceil((n + 1) * level), over n back-tests;
    interval = (predicted - b) +- q * sqrt(s_forward m),

which covers the observed end with probability >= level when the forward score is exchangeable with
the back-tests' (nearly so here: a run's up to three back-tests are correlated, and an earlier stretch
of a curve is not its later one; hence the coverage measured in BENCHMARKS.md). Nothing assumes the
bootstrap's independent points or the sigmoid's shape: a curve that rises past its window's shoulder
made its back-tests miss too, so q widens with it. Too few back-tests for the level (k > n) give
q = inf: "cannot tell yet", not a number. The bias the back-tests share is taken off the interval's centre
(the fit's own prediction is left as it is). Chosen on the demo's seeds 0-2 and 12-14 (89% held on each) and
synthetic curves; the hold-out seeds 15-17 held 96%. One bias for every variant misleads a sweep whose variants
sit in different regimes (53% on one recipes sweep): BENCHMARKS.md, "Predictions that know when they are wrong".
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field

import numpy as np

from fitting.extrapolation import DEFAULT_MARGIN, DEFAULT_OBSERVED_HALFWIDTH, observed_at
from fitting.fit import FitResult
from fitting.validate import FitInputError, check_curve

LEVEL = 0.90
# Back-tests are scored at the run's own evaluation points in [EARLIEST * fit_at, fit_at], the latest
# MAX_BACKTESTS of them: one doubling of the window, two or three points at the demo's schedule.
EARLIEST = 0.5
MAX_BACKTESTS = 3
# A prediction's scale compares its window with one ending SHORTER times as far (0.6-0.75 measured; 0.75
# kept: BENCHMARKS.md, "Predictions that know when they are wrong").
SHORTER = 0.75
MIN_SCALE = 1e-6  # a noiseless curve that no window moves: keep the score finite

FitTo = Callable[[float], FitResult]  # fit_to(fit_until): the curve's fit, made as the forward one, to fit_until


@dataclass(frozen=True)
class Backtest:
    """One back-test: a fit to `origin`, its prediction at `scored_at` = r * origin, the curve observed there."""

    origin: float
    scored_at: float
    predicted: float
    observed: float
    a: float  # the back-test fit's A, beside the forward fit's: a ceiling still moving shows here
    scale: float  # window_sensitivity of the back-test's prediction
    fit: FitResult = field(repr=False, compare=False)  # the back-test's fit, drawn faintly on the curves page

    @property
    def error(self) -> float:
        return self.predicted - self.observed

    def score(self, bias: float, typical_scale: float) -> float:
        """|error - bias| / pooled_scale(scale, typical_scale): the miss, less the sweep's shared bias, in units of
        how much the prediction's own window moves it, pooled with the sweep's typical movement."""
        return abs(self.error - bias) / pooled_scale(self.scale, typical_scale)


def pooled_scale(scale: float, typical_scale: float) -> float:
    """sqrt(s * m): a prediction's window sensitivity s moved halfway, in log, toward the sweep's median m.

    A miss grows with s far less than in proportion where a curve wanders (the log-log slope of |e - b| on s
    is 0.1-0.4 over the demo's back-tests), yet a settled curve's small s is what keeps its interval
    narrow: s alone covered 67% on the demo's seeds 12-14, m alone 100% of settled sigmoids
    (BENCHMARKS.md, "Predictions that know when they are wrong")."""
    return math.sqrt(scale * typical_scale)


def window_sensitivity(fit_to: FitTo, fit: FitResult, at: float, shorter: float = SHORTER) -> float:
    """s = |R_w(at) - R_w'(at)| + rmse_w: how far the prediction at `at` moves when the window w is cut to end
    at `shorter` times its last point (w'), plus the fit's own noise. A curve that has settled into its sigmoid moves
    its prediction little; one still changing regime moves it much, and misses further (the scaled score
    keeps a sweep of both honest at once: a plain |error| gave 99% coverage on settled curves and 87% on late
    risers)."""
    cut = fit_to(shorter * fit.window[1])
    scale = abs(float(fit.predict(at)) - float(cut.predict(at))) + fit.rmse
    if not math.isfinite(scale):
        raise FitInputError(f"the prediction at {at:g} is not finite for this window or its cut one")
    return max(MIN_SCALE, scale)


def backtest_curve(fit_to: FitTo, compute, pass_rate, *, fit_at: float, target: float, earliest: float = EARLIEST,
                   max_tests: int = MAX_BACKTESTS,
                   observed_halfwidth: float = DEFAULT_OBSERVED_HALFWIDTH) -> list[Backtest]:
    """The back-tests of one curve, scored at its evaluation points C_j in [earliest * fit_at, fit_at] (the
    latest `max_tests`): the fit fit_to(C_j / r), r = target / fit_at, predicted at C_j against the curve's
    mean within C_j * (1 +- observed_halfwidth), as the forward prediction is scored at the target.
    An origin whose window (or cut window) cannot be fitted gives no back-test.
    """
    if not target > fit_at > 0:
        raise FitInputError(f"a back-test needs target > fit_at > 0; got fit_at={fit_at!r}, target={target!r}")
    compute, pass_rate = check_curve(compute, pass_rate)
    reach = target / fit_at
    tests = []
    for scored_at in compute[(compute >= earliest * fit_at) & (compute <= fit_at)][::-1][:max_tests]:
        try:
            fit = fit_to(scored_at / reach)
            scale = window_sensitivity(fit_to, fit, scored_at)
        except FitInputError:
            continue
        observed, _, _ = observed_at(compute, pass_rate, scored_at, observed_halfwidth)
        tests.append(Backtest(origin=float(scored_at / reach), scored_at=float(scored_at),
                              predicted=float(fit.predict(scored_at)), observed=observed, a=fit.a, scale=scale,
                              fit=fit))
    return tests


def conformal_quantile(scores: Sequence[float], level: float = LEVEL) -> float:
    """The k-th smallest score, k = ceil((n + 1) * level); inf when k > n (too few scores for the level)."""
    if not 0 < level < 1:
        raise FitInputError(f"level must lie in (0, 1); got {level!r}")
    ordered = np.sort(np.asarray(scores, dtype=float))
    k = math.ceil(round((ordered.size + 1) * level, 9))  # round: 10 * 0.9 is 9.000000000000002 in floats
    return float(ordered[k - 1]) if k <= ordered.size else math.inf


def min_tests(level: float) -> int:
    """The fewest scores with a finite quantile at `level`: the least n with ceil((n + 1) * level) <= n."""
    n = 1
    while math.ceil(round((n + 1) * level, 9)) > n:
        n += 1
    return n


@dataclass(frozen=True)
class Calibration:
    """A sweep's back-tests pooled: the conformal quantile of their scores, their hit rate and bias."""

    level: float
    n_tests: int
    n_runs: int
    quantile: float  # of |error - mean_error| / pooled_scale; inf: too few back-tests for the level
    mean_error: float  # the back-tests' bias (pred - obs), taken off each interval's centre
    typical_scale: float  # the back-tests' median window sensitivity, m in pooled_scale
    within_margin: float  # share of back-tests within `margin` of what was observed
    margin: float

    @property
    def bounded(self) -> bool:
        return math.isfinite(self.quantile)

    @property
    def bias(self) -> float:
        """What each interval's centre is moved by: the back-tests' mean error (0 without back-tests)."""
        return self.mean_error if math.isfinite(self.mean_error) else 0.0

    def radius(self, scale: float) -> float:
        """quantile * pooled_scale(scale, typical_scale): the interval's half-width for a prediction of scale s."""
        if not (self.bounded and math.isfinite(scale)):
            return math.inf
        return self.quantile * pooled_scale(scale, self.typical_scale)

    def describe(self) -> str:
        if not self.n_tests:
            return ("no back-tests: no run has evaluation points in its window's last doubling, or the target "
                    "lies inside the window; no interval")
        return (f"{self.n_tests} back-tests of {self.n_runs} runs: {100 * self.within_margin:.0f}% within "
                f"{self.margin:g}, mean error {self.mean_error:+.3f} (taken off the intervals' centres)"
                + ("" if self.bounded else f"; too few for a {100 * self.level:.0f}% interval "
                   f"(needs {min_tests(self.level)}): add runs or evaluate more often"))


def calibrate(backtests: Iterable[Sequence[Backtest]], *, level: float = LEVEL,
              margin: float = DEFAULT_MARGIN) -> Calibration:
    """Pool the back-tests of a sweep's runs (one sequence per run) into the score quantile at `level`."""
    runs = [[t for t in tests if math.isfinite(t.error)] for tests in backtests]
    tests = [t for run in runs for t in run]
    errors = np.array([t.error for t in tests])
    bias = float(errors.mean()) if tests else 0.0
    typical = float(np.median([t.scale for t in tests])) if tests else math.nan
    return Calibration(level=level, n_tests=len(tests), n_runs=sum(1 for run in runs if run),
                       quantile=conformal_quantile([t.score(bias, typical) for t in tests], level),
                       margin=margin, mean_error=bias if tests else math.nan, typical_scale=typical,
                       within_margin=float(np.mean(np.abs(errors) <= margin)) if tests else math.nan)
