"""Block bootstrap intervals and the spread across seeds."""

import numpy as np
import pytest

from fitting import FitInputError, bootstrap_fit, fit_sigmoid, seed_spread, sigmoid_curve
from fitting.uncertainty import _block_indices, default_block_length

COMPUTE = np.arange(0.0, 16001.0, 100.0)
TRUTH = {"a": 0.61, "b": 1.92, "c_mid": 2542.0, "r0": 0.3}


def noisy(seed, **truth):
    params = {**TRUTH, **truth}
    clean = sigmoid_curve(COMPUTE, params["a"], params["b"], params["c_mid"], params["r0"])
    return clean + np.random.default_rng(seed).normal(0, 0.01, COMPUTE.size)


def test_block_indices_are_circular_runs_of_consecutive_points():
    # n = 7, L = 3: ceil(7/3) = 3 blocks, each start s gives s, s+1, s+2 (mod 7); cut to 7 indices
    indices = _block_indices(np.random.default_rng(0), 7, 3)
    assert indices.shape == (7,)
    for block in (indices[0:3], indices[3:6]):
        assert np.array_equal(block, (block[0] + np.arange(3)) % 7)


def test_default_block_length_is_cube_root():
    assert [default_block_length(n) for n in (1, 8, 66, 200)] == [1, 2, 4, 6]


def test_bootstrap_intervals_contain_the_truth():
    fit = fit_sigmoid(COMPUTE, noisy(seed=1), r0=0.3, burn_in=1500, fit_until=8000)
    boot = bootstrap_fit(fit, n_boot=200, target=16000, seed=0)
    assert boot.n_failed == 0 and boot.samples.shape == (200, 4)
    assert boot.a_ci[0] <= TRUTH["a"] <= boot.a_ci[1]
    assert boot.b_ci[0] <= TRUTH["b"] <= boot.b_ci[1]
    assert boot.c_mid_ci[0] <= TRUTH["c_mid"] <= boot.c_mid_ci[1]
    truth_16k = float(sigmoid_curve(16000, 0.61, 1.92, 2542, 0.3))
    assert boot.prediction_ci[0] <= truth_16k <= boot.prediction_ci[1]
    # intervals bracket the point estimate and are not degenerate
    assert boot.a_ci[0] < fit.a < boot.a_ci[1] and boot.a_ci[1] - boot.a_ci[0] > 0.005


def test_bootstrap_is_reproducible_and_seeded():
    fit = fit_sigmoid(COMPUTE, noisy(seed=2), r0=0.3, burn_in=1500, fit_until=8000)
    first, again = (bootstrap_fit(fit, n_boot=50, seed=7) for _ in range(2))
    other = bootstrap_fit(fit, n_boot=50, seed=8)
    assert np.array_equal(first.samples, again.samples)
    assert not np.array_equal(first.samples, other.samples)


def test_bootstrap_flags_a_c_mid_interval_beyond_the_window():
    # 32k-gen row of Table 1: C_mid = 11272 lies beyond the window's end (8000)
    fit = fit_sigmoid(COMPUTE, noisy(seed=0, a=0.645, b=1.89, c_mid=11272), r0=0.3, burn_in=1500, fit_until=8000)
    boot = bootstrap_fit(fit, n_boot=100, seed=0)
    assert boot.c_mid_ci[1] > 8000 and "c_mid_ci_beyond_window" in boot.flags


def test_bootstrap_flags_an_a_interval_that_reaches_its_bound():
    # A = 0.97 seen to 4000 (1.6 x C_mid): the fit's A (0.977) is inside its bound 1 and unflagged,
    # but its bootstrap draws reach 1; a well-determined A (the ScaleRL row fitted to 8000) is not flagged
    near = fit_sigmoid(COMPUTE, noisy(seed=1, a=0.97), r0=0.3, burn_in=0, fit_until=4000)
    boot = bootstrap_fit(near, n_boot=100, seed=0)
    assert near.a < 0.99 and "a_at_bound" not in near.flags
    assert boot.a_ci[1] == pytest.approx(1.0) and "a_ci_at_bound" in boot.flags
    clear = bootstrap_fit(fit_sigmoid(COMPUTE, noisy(seed=1), r0=0.3, burn_in=1500, fit_until=8000), n_boot=100, seed=0)
    assert "a_ci_at_bound" not in clear.flags


def test_paper_method_bootstrap_stays_on_the_grid():
    fit = fit_sigmoid(COMPUTE, noisy(seed=1), r0=0.3, burn_in=1500, fit_until=8000, method="paper")
    boot = bootstrap_fit(fit, n_boot=50, seed=0)
    np.testing.assert_allclose(boot.samples[:, 0] / 0.005, np.round(boot.samples[:, 0] / 0.005), atol=1e-9)


def test_fixed_a_bootstrap_keeps_a():
    fit = fit_sigmoid(COMPUTE, noisy(seed=1), r0=0.3, a=0.61, burn_in=1500, fit_until=8000)
    boot = bootstrap_fit(fit, n_boot=50, seed=0)
    assert boot.a_ci == (0.61, 0.61) and boot.b_ci[0] < boot.b_ci[1]


@pytest.mark.parametrize(("options", "message"), [
    ({"n_boot": 1}, r"n_boot must be an integer >= 2"),
    ({"level": 1.0}, r"level must be in \(0, 1\)"),
    ({"block_length": 0}, r"block_length must be in \[1, 66\]"),
    ({"target": -1.0}, r"target must be a compute value > 0"),
])
def test_bad_bootstrap_arguments(options, message):
    fit = fit_sigmoid(COMPUTE, noisy(seed=1), r0=0.3, burn_in=1500, fit_until=8000)
    with pytest.raises(FitInputError, match=message):
        bootstrap_fit(fit, **options)


def test_seed_spread_hand_values():
    # A of three seeds: 0.60, 0.61, 0.62 -> mean 0.61, sample sd sqrt((0.01^2 + 0 + 0.01^2) / 2) = 0.01
    fits = [fit_sigmoid(COMPUTE, sigmoid_curve(COMPUTE, a, 1.92, 2542, 0.3), r0=0.3, burn_in=1500, fit_until=8000)
            for a in (0.60, 0.61, 0.62)]
    spread = seed_spread(fits, target=16000)
    assert spread.n_seeds == 3
    assert spread.mean["a"] == pytest.approx(0.61, abs=1e-6) and spread.std["a"] == pytest.approx(0.01, abs=1e-6)
    assert spread.low["a"] == pytest.approx(0.60, abs=1e-6) and spread.high["a"] == pytest.approx(0.62, abs=1e-6)
    assert spread.std["b"] == pytest.approx(0.0, abs=1e-5) and "prediction" in spread.mean
    with pytest.raises(FitInputError, match=r"at least 2 seeds"):
        seed_spread(fits[:1])
