"""Hand-derived values of the sigmoid, the power law and the log F transform."""

import math

import numpy as np
import pytest

from fitting.curve import log_f, power_law_curve, sigmoid_curve


def test_sigmoid_hand_values():
    # A = 0.6, R0 = 0.2, C_mid = 1000, B = 2:
    #   C = C_mid:      (C_mid/C)^B = 1     -> R = 0.2 + 0.4 / 2   = 0.4
    #   C = 2 C_mid:    (1/2)^2 = 0.25      -> R = 0.2 + 0.4 / 1.25 = 0.52
    #   C = C_mid / 2:  2^2 = 4             -> R = 0.2 + 0.4 / 5    = 0.28
    #   C = 0: R0 exactly (no division by zero)
    values = sigmoid_curve([1000.0, 2000.0, 500.0, 0.0], a=0.6, b=2.0, c_mid=1000.0, r0=0.2)
    np.testing.assert_allclose(values, [0.4, 0.52, 0.28, 0.2], rtol=0, atol=1e-15)


def test_sigmoid_extremes_do_not_overflow():
    # B = 10, C_mid / C = 1e6 -> (C_mid/C)^B = 1e60, and C / C_mid = 1e6 -> 1e-60: R0 and A to double precision
    values = sigmoid_curve([1e-3, 1e9], a=0.7, b=10.0, c_mid=1e3, r0=0.3)
    np.testing.assert_allclose(values, [0.3, 0.7], rtol=0, atol=1e-15)
    assert np.all(np.isfinite(values))


def test_power_law_hand_values():
    # A = 0.7, D = 2, B = 0.5: C = 100 -> 0.7 - 2/10 = 0.5; C = 10000 -> 0.7 - 2/100 = 0.68
    np.testing.assert_allclose(power_law_curve([100.0, 10000.0], a=0.7, d=2.0, b=0.5), [0.5, 0.68], atol=1e-15)


def test_log_f_hand_value():
    # A = 0.6, R0 = 0.2, R = 0.4: (A - R0)/(R - R0) - 1 = 0.4/0.2 - 1 = 1, so log F = B log C_mid = 2 ln 1000
    value = log_f(1000.0, np.array([0.4]), a=0.6, b=2.0, c_mid=1000.0, r0=0.2)
    assert value[0] == pytest.approx(2 * math.log(1000.0), rel=1e-14)


def test_log_f_is_b_log_c_on_the_curve():
    # F(R(C)) = C^B for points on the fitted curve: log F = B ln C
    compute = np.array([300.0, 2542.0, 9000.0])
    pass_rate = sigmoid_curve(compute, a=0.61, b=1.92, c_mid=2542.0, r0=0.3)
    np.testing.assert_allclose(log_f(compute, pass_rate, 0.61, 1.92, 2542.0, 0.3), 1.92 * np.log(compute), rtol=1e-12)


def test_log_f_undefined_outside_r0_a_is_nan():
    # R <= R0 and R >= A have no F: NaN, never a clipped number
    values = log_f(np.ones(4), np.array([0.2, 0.1, 0.6, 0.7]), a=0.6, b=2.0, c_mid=1000.0, r0=0.2)
    assert np.isnan(values).all()
