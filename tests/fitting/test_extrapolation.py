"""Extrapolation scores: predicted against observed at the target, with the observed window stated."""

import math

import numpy as np
import pytest

from fitting import FitInputError, fit_sigmoid, observed_at, score_extrapolation, sigmoid_curve

COMPUTE = np.arange(0.0, 16001.0, 100.0)


def test_observed_is_the_mean_over_the_stated_window():
    # pass rate = C / 100000 -> points 15600..16000 lie within 16000 * (1 +- 0.03) = [15520, 16480];
    # their mean is 15800 / 100000 = 0.158
    observed, count, window = observed_at(COMPUTE, COMPUTE / 100000, 16000.0, 0.03)
    assert window == pytest.approx((15520.0, 16480.0)) and count == 5
    assert observed == pytest.approx(0.158, abs=1e-12)


def test_score_within_and_outside_the_margin():
    truth = sigmoid_curve(COMPUTE, 0.61, 1.92, 2542, 0.3)
    fit = fit_sigmoid(COMPUTE, truth, r0=0.3, burn_in=1500, fit_until=8000)
    score = score_extrapolation(fit, COMPUTE, truth, target=16000)
    assert score.within_margin and abs(score.error) < 1e-3 and score.n_observed == 5
    assert score.error == pytest.approx(score.predicted - score.observed)
    # the run actually ends 0.05 higher than the fit predicts: error -0.05, outside the 0.02 margin
    lifted = np.where(COMPUTE > 8000, truth + 0.05, truth)
    score = score_extrapolation(fit, COMPUTE, lifted, target=16000)
    assert score.error == pytest.approx(-0.05, abs=1e-3) and score.within_margin is False
    assert score_extrapolation(fit, COMPUTE, lifted, target=16000, margin=0.06).within_margin is True


def test_unobserved_target_is_flagged_not_invented():
    truth = sigmoid_curve(COMPUTE, 0.61, 1.92, 2542, 0.3)
    fit = fit_sigmoid(COMPUTE, truth, r0=0.3, burn_in=1500, fit_until=8000)
    score = score_extrapolation(fit, COMPUTE, truth, target=50000)
    assert math.isnan(score.observed) and math.isnan(score.error) and score.within_margin is None
    assert "no_observation_at_target" in score.flags
    assert score.predicted == pytest.approx(float(sigmoid_curve(50000, 0.61, 1.92, 2542, 0.3)), abs=1e-6)


@pytest.mark.parametrize(("options", "message"), [
    ({"target": 0.0}, r"target must be a compute value > 0"),
    ({"target": math.nan}, r"target must be a compute value > 0"),
    ({"target": 16000, "margin": 0.0}, r"margin must be > 0"),
    ({"target": 16000, "observed_halfwidth": 1.5}, r"observed_halfwidth must be in \[0, 1\)"),
])
def test_bad_score_arguments(options, message):
    truth = sigmoid_curve(COMPUTE, 0.61, 1.92, 2542, 0.3)
    fit = fit_sigmoid(COMPUTE, truth, r0=0.3, burn_in=1500, fit_until=8000)
    with pytest.raises(FitInputError, match=message):
        score_extrapolation(fit, COMPUTE, truth, **options)
