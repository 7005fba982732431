"""Bad input never crashes and never returns silent garbage: a clear FitInputError or a flagged result."""

import math

import numpy as np
import pytest

from fitting import FitInputError, fit_power_law, fit_sigmoid, sigmoid_curve

COMPUTE = np.arange(0.0, 16001.0, 100.0)
PASS_RATE = sigmoid_curve(COMPUTE, 0.61, 1.92, 2542, 0.3)
WINDOW = {"burn_in": 1500.0, "fit_until": 8000.0}


def fit(compute=COMPUTE, pass_rate=PASS_RATE, **options):
    options = {"r0": 0.3, **WINDOW, **options}
    return fit_sigmoid(compute, pass_rate, **options)


def with_value(array, index, value):
    array = np.array(array, dtype=float)
    array[index] = value
    return array


@pytest.mark.parametrize(("column", "value"), [("compute", math.nan), ("compute", math.inf),
                                               ("pass_rate", math.nan), ("pass_rate", -math.inf)])
def test_non_finite_values_are_rejected_with_their_index(column, value):
    arrays = {"compute": COMPUTE, "pass_rate": PASS_RATE}
    arrays[column] = with_value(arrays[column], 20, value)
    with pytest.raises(FitInputError, match=rf"{column} has 1 non-finite value.*index 20"):
        fit(arrays["compute"], arrays["pass_rate"])


def test_negative_compute_is_rejected():
    with pytest.raises(FitInputError, match=r"compute must be >= 0; got -5"):
        fit(with_value(COMPUTE, 0, -5.0))


def test_zero_compute_is_only_the_r0_point():
    # C = 0 is the step-0 evaluation: never inside the window even with burn_in = 0
    result = fit(burn_in=0.0)
    assert result.window[0] == 100.0 and result.n_points == 80


@pytest.mark.parametrize(("compute", "message"), [
    (with_value(COMPUTE, 30, 2900.0), r"duplicate value 2900 at indices 29 and 30.*seed"),
    (with_value(COMPUTE, 30, 2000.0), r"must be increasing; got 2000 after 2900 at index 30.*sort"),
])
def test_duplicated_or_unsorted_compute_is_rejected(compute, message):
    with pytest.raises(FitInputError, match=message):
        fit(compute)


def test_pass_rate_outside_unit_interval_is_rejected_with_a_percent_hint():
    # every value x100: the first bad one is R0 = 0.3 -> 30 at index 0, the message lists three indices
    expected = r"pass_rate must lie in \[0, 1\]; got 30 at index 0, 1, 2 \(and 158 more\); percentages\? divide by 100"
    with pytest.raises(FitInputError, match=expected):
        fit(pass_rate=PASS_RATE * 100)
    with pytest.raises(FitInputError, match=r"got -0.1 at index 3"):
        fit(pass_rate=with_value(PASS_RATE, 3, -0.1))


def test_fewer_points_than_parameters_is_rejected():
    # [1500, 1600] holds 2 points, the fit has 3 free parameters (A, B, C_mid)
    with pytest.raises(FitInputError, match=r"holds 2 point\(s\).*3 free parameters"):
        fit(burn_in=1500.0, fit_until=1600.0)
    with pytest.raises(FitInputError, match=r"holds 2 point"):
        fit_power_law(COMPUTE, PASS_RATE, burn_in=1500.0, fit_until=1600.0)


def test_few_points_are_flagged():
    # 4 points for 3 parameters: fitted, but fewer than 3 per parameter
    assert "too_few_points" in fit(burn_in=1500.0, fit_until=1800.0).flags


def test_flat_curve_is_flagged_not_crashed():
    flat = np.full(COMPUTE.size, 0.5)
    for method in ("default", "paper"):
        result = fit(pass_rate=flat, method=method)
        assert {"flat_curve", "not_increasing"} <= set(result.flags)
        assert np.isfinite([result.a, result.b, result.c_mid]).all()
    noisy_flat = 0.5 + np.random.default_rng(0).normal(0, 0.01, COMPUTE.size)
    assert "flat_curve" in fit(pass_rate=noisy_flat).flags


def test_decreasing_curve_is_flagged():
    decreasing = 0.6 - 0.2 * COMPUTE / COMPUTE[-1]
    assert "not_increasing" in fit(pass_rate=decreasing).flags
    assert "not_increasing" in fit(pass_rate=decreasing, r0=None, fit_r0=True).flags


def test_r0_must_be_known_and_valid():
    with pytest.raises(FitInputError, match=r"R0 is unknown.*fit_r0=True"):
        fit(COMPUTE[1:], PASS_RATE[1:], r0=None)
    for bad in (1.0, -0.1, math.nan):
        with pytest.raises(FitInputError, match=r"r0 must be a pass rate in \[0, 1\)"):
            fit(r0=bad)
    with pytest.raises(FitInputError, match=r"either r0 .* or fit_r0=True"):
        fit(fit_r0=True)
    with pytest.raises(FitInputError, match=r"method='paper' takes R0 as given"):
        fit(r0=None, fit_r0=True, method="paper")


@pytest.mark.parametrize(("options", "message"), [
    ({"burn_in": 8000.0, "fit_until": 1500.0}, r"fit_until must exceed burn_in"),
    ({"burn_in": -1.0}, r"burn_in must be a finite compute value >= 0"),
    ({"method": "grid"}, r"method must be one of default, paper; got 'grid'"),
    ({"b_bounds": (2.0, 1.0)}, r"b_bounds must be finite with 0 < low < high"),
    ({"c_mid_bounds": (0.0, 10.0)}, r"c_mid_bounds must be finite with 0 < low < high"),
    ({"a": 0.2}, r"a \(fixed asymptote\) must exceed r0"),
    ({"method": "paper", "paper_a_step": 0.0}, r"paper_a_step must be > 0"),
])
def test_bad_arguments_are_named(options, message):
    with pytest.raises(FitInputError, match=message):
        fit(**options)


def test_mismatched_lengths_and_shapes_are_rejected():
    with pytest.raises(FitInputError, match=r"compute has 161 values but pass_rate has 160"):
        fit(COMPUTE, PASS_RATE[:-1])
    with pytest.raises(FitInputError, match=r"must be 1-D"):
        fit(COMPUTE.reshape(7, 23), PASS_RATE.reshape(7, 23))


def test_fit_input_error_is_a_value_error():
    assert issubclass(FitInputError, ValueError)
