"""The sweep-level fit-shape check: the sign of each run's residuals at the end of its fit window."""

from __future__ import annotations

import numpy as np
import pytest

from fitting import fit_sigmoid, sigmoid_curve, window_end_check
from fitting.shape import ShapeCheck

COMPUTE = np.concatenate([[0.0], np.geomspace(1.0, 180.0, 30)])  # log-spaced evaluations, as runs make them


def run_fit(truth, rng, noise=0.012):
    """One run: the true curve at COMPUTE plus evaluation noise, fitted on C <= 90 as a sweep does."""
    rate = np.clip(truth(COMPUTE) + rng.normal(0.0, noise, COMPUTE.size), 0.0, 1.0)
    return fit_sigmoid(COMPUTE, rate, r0=float(truth(np.array([0.0]))[0]), fit_until=90.0)


def sigmoid_truth(a=0.9, b=1.6, c_mid=25.0):
    return lambda c: sigmoid_curve(c, a, b, c_mid, 0.09)


def late_riser(c):
    """Slow at first, then faster than any one sigmoid: a fast easy half and a steep late hard half."""
    return 0.09 + 0.45 / (1 + (10.0 / np.maximum(c, 1e-9)) ** 1.2) + 0.45 / (1 + (70.0 / np.maximum(c, 1e-9)) ** 3.0)


def test_curves_the_sigmoid_describes_rarely_raise_it():
    rng = np.random.default_rng(0)
    checks = [window_end_check([run_fit(sigmoid_truth(), rng) for _ in range(12)]) for _ in range(15)]
    assert all(check.runs == 12 for check in checks)
    assert sum(check.departs for check in checks) <= 1  # the sign test's level is 1%
    assert 0.3 < np.mean([check.above / check.runs for check in checks]) < 0.7  # a coin flip per run


def test_curves_that_keep_rising_past_their_fits_are_named():
    rng = np.random.default_rng(1)
    fits = [run_fit(late_riser, rng) for _ in range(12)]
    check = window_end_check(fits)
    assert check.departs and check.above >= 11
    assert "of 12 runs end their fit window above" in check.note()
    assert "does not follow these curves' shape" in check.note() and "sign this check cannot tell" in check.note()
    # the fits do miss this curve at twice the window (here low); the check claims only that they miss
    assert np.mean([float(fit.predict(180.0)) for fit in fits]) < late_riser(np.array([180.0]))[0] - 0.02


def test_the_note_names_the_side_the_curves_end_on():
    check = ShapeCheck(runs=10, above=0, p_value=0.002)
    assert check.departs
    assert "10 of 10 runs end their fit window below" in check.note()


def test_too_few_runs_never_raise_it_and_short_fits_do_not_count():
    rng = np.random.default_rng(2)
    seven = window_end_check([run_fit(late_riser, rng) for _ in range(7)])
    assert seven.runs == 7 and not seven.departs  # 7 of one sign: p = 0.016 > 0.01
    assert window_end_check([None]) is None
    short = fit_sigmoid(COMPUTE[:6], sigmoid_truth()(COMPUTE[:6]) + 0.001, r0=0.09)
    assert window_end_check([short]) is None  # 5 window points: 3 free parameters + 3 needed


def test_the_sign_test_p_value():
    check = ShapeCheck(runs=8, above=8, p_value=0.0)
    assert check.departs
    from scipy.stats import binomtest

    assert binomtest(8, 8, 0.5).pvalue == pytest.approx(2 / 256)


def test_the_rms_residual_sizes_the_miss_and_bounds_the_miss_at_the_target_from_below():
    from fitting.shape import window_end_residual

    rng = np.random.default_rng(3)
    fits = [run_fit(late_riser, rng) for _ in range(12)]
    check = window_end_check(fits)
    by_hand = [float((f.pass_rate[-3:] - f.predict(f.compute[-3:])).mean()) for f in fits]
    assert [window_end_residual(f) for f in fits] == pytest.approx(by_hand)
    assert check.rms_residual == pytest.approx(np.sqrt(np.mean(np.square(by_hand))))
    assert f"rms {check.rms_residual:.3f}" in check.note()
    # A curve that keeps rising past its fits: the miss at twice the window is larger than at its end.
    truth = late_riser(np.array([180.0]))[0]
    assert np.sqrt(np.mean([(float(f.predict(180.0)) - truth) ** 2 for f in fits])) > check.rms_residual > 0.005
    # Curves the sigmoid describes: the residual is evaluation noise averaged over 3 points (sd 0.012 / sqrt 3).
    calm = window_end_check([run_fit(sigmoid_truth(), rng) for _ in range(12)])
    assert calm.rms_residual < 0.012
    short = fit_sigmoid(COMPUTE[:6], sigmoid_truth()(COMPUTE[:6]) + 0.001, r0=0.09)
    assert window_end_residual(short) is None and window_end_residual(None) is None


# ----------------------------------------------------------------------------- the observed miss at the target

def run_error(truth, rng, noise=0.012, target=180.0):
    """One run fitted on C <= 90 as a sweep does, scored where it was observed: pred - obs at the target."""
    from fitting import score_extrapolation

    rate = np.clip(truth(COMPUTE) + rng.normal(0.0, noise, COMPUTE.size), 0.0, 1.0)
    fit = fit_sigmoid(COMPUTE, rate, r0=float(truth(np.array([0.0]))[0]), fit_until=90.0)
    return score_extrapolation(fit, COMPUTE, rate, target=target).error


def test_predictions_that_fall_short_at_the_target_on_most_runs_are_named_biased_low():
    from fitting import target_miss_check

    rng = np.random.default_rng(3)
    miss = target_miss_check([run_error(late_riser, rng) for _ in range(27)])
    assert miss.runs == 27 and miss.above >= 24 and miss.departs
    assert miss.mean_error < -0.02
    note = miss.note()
    assert "observed above their window fit's prediction" in note and "biased low" in note


def test_predictions_of_curves_the_sigmoid_describes_rarely_raise_it():
    from fitting import target_miss_check

    rng = np.random.default_rng(4)
    raised = sum(target_miss_check([run_error(sigmoid_truth(), rng) for _ in range(27)]).departs for _ in range(12))
    assert raised <= 2  # ALPHA = 0.01 a sweep, 12 sweeps


def test_the_miss_check_counts_observed_runs_only_and_names_a_high_bias():
    from fitting import target_miss_check
    from fitting.shape import TargetMissCheck

    assert target_miss_check([]) is None
    assert target_miss_check([float("nan"), None]) is None
    miss = target_miss_check([0.03] * 9 + [0.0, float("nan")])  # nine too high; the zero and the NaN count for neither
    assert (miss.runs, miss.above) == (9, 0) and miss.mean_error == pytest.approx(0.03 * 9 / 10)
    assert miss.p_value == pytest.approx(2 * 0.5 ** 9) and miss.departs
    assert "observed below" in miss.note() and "biased high" in miss.note()
    assert not TargetMissCheck(runs=7, above=7, p_value=2 * 0.5 ** 7, mean_error=-0.03).departs
