"""LOO comparison verdicts on synthetic variants and the log F slope points."""

import numpy as np
import pytest

from fitting import FitInputError, compare_loo, fit_sigmoid, sigmoid_curve

COMPUTE = np.arange(0.0, 16001.0, 100.0)
BASE = (0.61, 1.92, 2542.0)  # A, B, C_mid of the ScaleRL 8B row; R0 = 0.3


def fitted(a, b, c_mid, seed):
    pass_rate = sigmoid_curve(COMPUTE, a, b, c_mid, 0.3) + np.random.default_rng(seed).normal(0, 0.01, COMPUTE.size)
    return fit_sigmoid(COMPUTE, pass_rate, r0=0.3, burn_in=1500, fit_until=8000)


TRUTHS = {
    "base": BASE,
    "higher-ceiling": (0.69, 1.92, 2542.0),  # A + 0.08
    "steeper": (0.61, 2.60, 2542.0),  # same A and C_mid, higher B: less compute to 90% of the gain
    "identical": BASE,  # same truth, other noise
}


@pytest.fixture(scope="module")
def comparison():
    seed_fits = {name: {s: fitted(*truth, seed=1000 * i + s) for s in range(3)}
                 for i, (name, truth) in enumerate(TRUTHS.items())}
    fits = {name: by_seed[0] for name, by_seed in seed_fits.items()}
    return compare_loo(fits, base="base", n_boot=150, seed=0, seed_fits=seed_fits, fit_at=8000, target=16000)


def test_verdicts(comparison):
    verdicts = {name: (v.verdict, v.direction) for name, v in comparison.variants.items()}
    assert verdicts == {
        "base": ("base", None),
        "higher-ceiling": ("ceiling mover", "higher"),
        "steeper": ("efficiency shaper", "faster"),
        "identical": ("no detectable effect", None),
    }
    assert "MDE" in comparison.variants["identical"].reason


def test_the_comparison_counts_the_effects_its_intervals_were_tested_over(comparison):
    assert comparison.tested_effects == 3 * 3  # A and the two reach levels of each of the 3 variants


def test_a_base_whose_every_seed_fit_failed_gives_no_verdict_and_says_why():
    seed_fits = {name: {s: fitted(*truth, seed=100 * i + s) for s in range(2)} for i, (name, truth) in
                 enumerate(TRUTHS.items()) if name != "base"}
    seed_fits["base"] = {}
    fits = {name: fitted(*truth, seed=7 + i) for i, (name, truth) in enumerate(TRUTHS.items())}
    comparison = compare_loo(fits, base="base", n_boot=50, seed=0, seed_fits=seed_fits, fit_at=8000, target=16000)
    assert comparison.tested_effects == 0
    for name, v in comparison.variants.items():
        if name != "base":
            assert (v.verdict, v.reason) == ("no verdict", "no fitted seed of the base to pair with")


def test_one_curve_per_variant_gives_no_verdict():
    fits = {name: fitted(*truth, seed=5 + i) for i, (name, truth) in enumerate(TRUTHS.items())}
    comparison = compare_loo(fits, base="base", n_boot=50, seed=0)
    assert {v.verdict for name, v in comparison.variants.items() if name != "base"} == {"no verdict"}
    assert all("1 paired seed" in v.reason for name, v in comparison.variants.items() if name != "base")


def test_fixed_a_is_the_mean_without_ceiling_movers(comparison):
    expected = np.mean([comparison.variants[n].fit.a for n in ("base", "steeper", "identical")])
    assert comparison.fixed_a == pytest.approx(expected)
    assert all(v.fixed_a_fit.a == comparison.fixed_a for v in comparison.variants.values())
    assert comparison.variants["steeper"].delta_b > 0.4  # truth: 2.60 - 1.92 = 0.68


def test_log_f_points_lie_on_a_line_of_slope_b(comparison):
    # log F = B ln C on the fixed-A curve; on noisy data a least-squares line through the defined points
    # has a slope near the fixed-A B
    steeper = comparison.variants["steeper"]
    defined = np.isfinite(steeper.log_f)
    assert defined.sum() > 40
    slope = np.polyfit(steeper.log_c[defined], steeper.log_f[defined], 1)[0]
    assert slope == pytest.approx(steeper.fixed_a_fit.b, rel=0.2)


def test_ceiling_mover_has_undefined_log_f_points_at_a_lower_common_a(comparison):
    # its pass rate passes the common A (~0.61) inside the window, where F has no value
    mover = comparison.variants["higher-ceiling"]
    assert np.isnan(mover.log_f).any()


def test_unknown_base_is_rejected():
    with pytest.raises(FitInputError, match=r"base 'scalerl' is not among the fits; got 'a'"):
        compare_loo({"a": fitted(*BASE, seed=1)}, base="scalerl", n_boot=10)


def test_a_ceiling_whose_interval_reaches_the_bound_makes_no_ceiling_claim():
    # A variant at A = 0.97 fitted to 4000 (1.6 x C_mid): each seed's A lands just under 1 (not at its
    # bound) but the bootstrap draws of the seed-mean curve reach 1: the window cannot place the
    # ceiling below the bound, so the clear gain is claimed as speed, not as a higher A.
    def early(a, seed):
        noise = np.random.default_rng(seed).normal(0, 0.01, COMPUTE.size)
        pass_rate = sigmoid_curve(COMPUTE, a, 1.92, 2542.0, 0.3) + noise
        return fit_sigmoid(COMPUTE, pass_rate, r0=0.3, burn_in=0, fit_until=4000)

    seed_fits = {"base": {s: early(0.61, 12 + s) for s in range(3)}, "high": {s: early(0.97, s) for s in range(3)}}
    assert all(not fit.flags for by_seed in seed_fits.values() for fit in by_seed.values())  # every seed identifiable
    fits = {name: by_seed[1] for name, by_seed in seed_fits.items()}
    comparison = compare_loo(fits, base="base", n_boot=150, seed=0, seed_fits=seed_fits, fit_at=4000, target=8000)
    high = comparison.variants["high"]
    assert high.a_ci[1] == pytest.approx(1.0) and high.fit.a < 0.999
    assert high.effects["A"].significant and high.effects["A"].estimate > 0.2
    assert not high.ceiling_identifiable and high.verdict != "ceiling mover"
    assert "A looks higher but is not identifiable (its A interval reaches a bound)" in high.reason
