"""Fitter recovery on synthetic curves from the paper's Table 1, the paper-method grid, the power-law baseline."""

import math

import numpy as np
import pytest
from scipy.optimize import curve_fit

from fitting import fit_power_law, fit_sigmoid, refit_fixed_a, sigmoid_curve

# Table 1 of the paper: (run, C_mid in GPU-hours, B, A). R0 is not published; 0.30 is our choice.
TABLE_1 = [
    ("scalerl-8b", 2542, 1.92, 0.610),
    ("scalerl-32k-gen", 11272, 1.89, 0.645),
    ("scalerl-8gen", 2542, 2.44, 0.585),
    ("scalerl-24gen", 3054, 2.22, 0.590),
    ("scalerl-32gen", 2936, 2.07, 0.595),
    ("scalerl-scout", 4242, 1.65, 0.710),
    ("scalerl-bs512", 2818, 1.77, 0.605),
    ("scalerl-bs2048", 10909, 1.70, 0.645),
    ("math-code-math", 2896, 2.05, 0.595),
    ("math-code-code", 1675, 1.09, 0.615),
]
R0 = 0.30
COMPUTE = np.arange(0.0, 16001.0, 100.0)  # an evaluation every 100 GPU-hours, step 0 included
BURN_IN, FIT_UNTIL, TARGET = 1500.0, 8000.0, 16000.0
ROW_IDS = [row[0] for row in TABLE_1]


def noisy_curve(c_mid, b, a, seed=0, sd=0.01):
    return sigmoid_curve(COMPUTE, a, b, c_mid, R0) + np.random.default_rng(seed).normal(0.0, sd, COMPUTE.size)


@pytest.mark.parametrize(("name", "c_mid", "b", "a"), TABLE_1, ids=ROW_IDS)
def test_recovers_table_1_rows_from_noisy_curves(name, c_mid, b, a):
    # Acceptance: noise sd 0.01 (seed 0), fit on [1500, 8000]. Rows with C_mid inside the window: A within
    # 0.02 and the 16k prediction within 0.02 of the noiseless truth, no flag. Rows with C_mid beyond 8000
    # (32k gen, bs2048): flagged window_ends_before_c_mid. At this noise the fitted A of the scout and code
    # rows scatters with sd ~0.022 across seeds (their window sees 74% and 85% of the gain), so 0.02 is
    # about one sd there: a limit of the data, which the paper method does not beat either.
    fit = fit_sigmoid(COMPUTE, noisy_curve(c_mid, b, a), r0=R0, burn_in=BURN_IN, fit_until=FIT_UNTIL)
    if c_mid < FIT_UNTIL:
        assert abs(fit.a - a) <= 0.02
        assert abs(float(fit.predict(TARGET)) - float(sigmoid_curve(TARGET, a, b, c_mid, R0))) <= 0.02
        assert fit.flags == ()
    else:
        assert "window_ends_before_c_mid" in fit.flags


@pytest.mark.parametrize(("name", "c_mid", "b", "a"), TABLE_1, ids=ROW_IDS)
def test_default_method_recovers_noiseless_parameters(name, c_mid, b, a):
    fit = fit_sigmoid(COMPUTE, sigmoid_curve(COMPUTE, a, b, c_mid, R0), r0=R0, burn_in=BURN_IN, fit_until=FIT_UNTIL)
    assert fit.a == pytest.approx(a, rel=1e-3)
    assert fit.b == pytest.approx(b, rel=1e-3)
    assert fit.c_mid == pytest.approx(c_mid, rel=1e-3)
    assert fit.window == (1500.0, 8000.0) and fit.n_points == 66  # 1500, 1600, ..., 8000


def test_r0_from_the_compute_0_point_and_fitted_r0():
    pass_rate = sigmoid_curve(COMPUTE, 0.61, 1.92, 2542, R0)
    from_point = fit_sigmoid(COMPUTE, pass_rate, burn_in=BURN_IN, fit_until=FIT_UNTIL)
    assert from_point.r0_source == "compute_0" and from_point.r0 == pytest.approx(R0, abs=1e-15)
    fitted = fit_sigmoid(COMPUTE, pass_rate, fit_r0=True, burn_in=BURN_IN, fit_until=FIT_UNTIL)
    assert fitted.r0_source == "fitted"
    np.testing.assert_allclose([fitted.a, fitted.b, fitted.c_mid, fitted.r0], [0.61, 1.92, 2542, R0], rtol=1e-3)


def test_fixed_a_refit_keeps_a_and_recovers_b():
    pass_rate = sigmoid_curve(COMPUTE, 0.61, 1.92, 2542, R0)
    free = fit_sigmoid(COMPUTE, pass_rate, r0=R0, burn_in=BURN_IN, fit_until=FIT_UNTIL)
    fixed = refit_fixed_a(free, 0.61)
    assert fixed.a == 0.61 and fixed.a_fixed and fixed.window == free.window
    assert fixed.b == pytest.approx(1.92, rel=1e-3) and fixed.c_mid == pytest.approx(2542, rel=1e-3)
    # a wrong fixed A forces the other parameters to compensate: B moves
    assert abs(refit_fixed_a(free, 0.66).b - 1.92) > 0.05


def test_paper_method_lands_on_its_grid_for_an_off_grid_truth():
    # truth A = 0.6123, C_mid = 2700: neither is on the paper grid (A step 0.005; C_mid = 100 + k * 403.03)
    pass_rate = sigmoid_curve(COMPUTE, 0.6123, 1.92, 2700, R0)
    paper = fit_sigmoid(COMPUTE, pass_rate, r0=R0, burn_in=BURN_IN, fit_until=FIT_UNTIL, method="paper")
    assert paper.a / 0.005 == pytest.approx(round(paper.a / 0.005), abs=1e-9)
    assert paper.c_mid in np.linspace(100, 40000, 100)
    # Grid artefact: C_mid is forced to 2921 (the grid's 403 GPU-hour spacing), B and A compensate;
    # on this noiseless curve A lands at 0.630, 0.018 off the truth: close to the whole 0.02 margin.
    assert paper.a == pytest.approx(0.630, abs=1e-9) and paper.c_mid == pytest.approx(100 + 7 * 39900 / 99)
    default = fit_sigmoid(COMPUTE, pass_rate, r0=R0, burn_in=BURN_IN, fit_until=FIT_UNTIL)
    # the default method has no grid artefact: exact on noiseless data
    assert abs(default.a - 0.6123) < 1e-4
    assert abs(default.c_mid - 2700) < 1 < abs(paper.c_mid - 2700)


def test_paper_method_matches_a_brute_force_curve_fit_grid():
    # The paper's procedure literally: for every (A, C_mid) pair fit B with scipy curve_fit, keep the pair
    # with the smallest SSR. A reduced grid (A 0.58..0.66, 12 C_mid values) keeps this test fast.
    pass_rate = noisy_curve(11272, 1.89, 0.645, seed=3)
    window = (COMPUTE >= BURN_IN) & (COMPUTE <= FIT_UNTIL)
    c_w, y_w = COMPUTE[window], pass_rate[window]
    best = (math.inf, None, None, None)
    for a in np.round(np.arange(0.58, 0.66 + 1e-9, 0.005), 3):
        for c_mid in np.linspace(5000, 20000, 12):
            def model(c, b, a=a, c_mid=c_mid):
                return R0 + (a - R0) / (1 + (c_mid / c) ** b)
            (b,), _ = curve_fit(model, c_w, y_w, p0=[1.5], bounds=(0.1, 10.0))
            ssr = float(np.sum((model(c_w, b) - y_w) ** 2))
            if ssr < best[0]:
                best = (ssr, a, c_mid, b)
    paper = fit_sigmoid(COMPUTE, pass_rate, r0=R0, burn_in=BURN_IN, fit_until=FIT_UNTIL, method="paper",
                        paper_a_range=(0.58, 0.66), paper_c_mid_range=(5000, 20000), paper_n_c_mid=12)
    assert (paper.a, paper.c_mid) == pytest.approx((best[1], best[2]), rel=1e-12)
    assert paper.b == pytest.approx(best[3], rel=1e-4)
    assert paper.ssr <= best[0] * (1 + 1e-9)


def test_paper_grid_from_data_reproduces_the_papers_bounds_for_its_window():
    # (first C / 15, last C * 5) = (1500 / 15, 8000 * 5) = (100, 40000)
    pass_rate = sigmoid_curve(COMPUTE, 0.61, 1.92, 2542, R0)
    fit = fit_sigmoid(COMPUTE, pass_rate, r0=R0, burn_in=BURN_IN, fit_until=FIT_UNTIL, method="paper",
                      paper_c_mid_range=None, paper_a_range=None)
    assert fit.settings.c_mid_bounds == (100.0, 40000.0)
    assert fit.settings.paper_a_grid[0] == 0.305 and fit.settings.paper_a_grid[-1] == 1.0


def test_power_law_misjudges_the_ceiling_of_a_saturating_curve():
    # The paper's flagship protocol: fit 1.5k..50k of a curve saturating at A = 0.645 (B = 1.70) run to 100k.
    # The sigmoid finds the ceiling; the power law runs to its bound A = 1 (the paper reports A = 1.0).
    compute = np.arange(0.0, 100001.0, 500.0)
    pass_rate = sigmoid_curve(compute, 0.645, 1.70, 10909, R0) + np.random.default_rng(0).normal(0, 0.01, compute.size)
    sigmoid = fit_sigmoid(compute, pass_rate, r0=R0, burn_in=1500, fit_until=50000)
    power = fit_power_law(compute, pass_rate, burn_in=1500, fit_until=50000)
    assert abs(sigmoid.a - 0.645) <= 0.02
    assert power.a > 0.645 + 0.2 and power.a_at_bound
    # and it extrapolates worse: at 100k the truth is 0.645 + (0.3 - 0.645) / (1 + (100000/10909)^1.7) ~ 0.634
    truth = float(sigmoid_curve(100000.0, 0.645, 1.70, 10909, R0))
    assert abs(float(power.predict(100000.0)) - truth) > abs(float(sigmoid.predict(100000.0)) - truth)


def test_result_predict_matches_the_curve():
    pass_rate = sigmoid_curve(COMPUTE, 0.61, 1.92, 2542, R0)
    fit = fit_sigmoid(COMPUTE, pass_rate, r0=R0, burn_in=BURN_IN, fit_until=FIT_UNTIL)
    np.testing.assert_allclose(fit.predict(COMPUTE), pass_rate, atol=1e-9)
    assert fit.ssr < 1e-15 and fit.method == "default"
