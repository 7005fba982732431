"""Pruning rules for `sweep tune`: decisions from fitted curves, not from raw early pass rates."""

import numpy as np
import pytest

from components.registry import ConfigError
from fitting import bootstrap_fit, fit_sigmoid, sigmoid_curve
from sweeps.pruning import PRUNERS, CurveEstimate

FIT_AT, TARGET = 100.0, 200.0


def estimate(a, b, c_mid, until, seed, r0=0.1):
    """A noisy evaluated curve up to `until`, fitted and bootstrapped at the target."""
    compute = np.arange(2.0, until + 1e-9, 2.0)
    rng = np.random.default_rng(seed)
    pass_rate = np.clip(sigmoid_curve(compute, a, b, c_mid, r0) + rng.normal(0, 0.01, compute.size), 0, 1)
    fit = fit_sigmoid(compute, pass_rate, r0=r0)
    boot = bootstrap_fit(fit, n_boot=200, target=TARGET, level=0.9, seed=seed)
    return CurveEstimate(float(fit.predict(TARGET)), *boot.prediction_ci, compute=float(compute[-1])), pass_rate


def test_a_slow_starter_with_a_higher_ceiling_is_kept_and_a_loser_is_pruned():
    rule = PRUNERS.build({"name": "sigmoid_bound", "min_compute_frac": 0.5})
    # The best so far: a fast starter with a low ceiling, finished (fit on its whole window).
    best, best_curve = estimate(a=0.55, b=3.0, c_mid=15.0, until=FIT_AT, seed=0)
    # A slow starter with a high ceiling: behind the best at every early point (a rule on raw
    # early values would stop it), ahead at the target.
    slow, slow_curve = estimate(a=0.9, b=1.5, c_mid=50.0, until=60.0, seed=1)
    assert (slow_curve < best_curve[: slow_curve.size]).mean() > 0.8
    assert not rule.should_prune(slow, best, FIT_AT, maximize=True)
    # A trial whose curve tops out low: its optimistic prediction is below the best's pessimistic one.
    loser, _ = estimate(a=0.3, b=2.0, c_mid=20.0, until=60.0, seed=2)
    assert loser.upper < best.lower
    assert rule.should_prune(loser, best, FIT_AT, maximize=True)
    # ... but not before it has spent min_compute_frac x fit_at, and never without a best trial.
    early, _ = estimate(a=0.3, b=2.0, c_mid=20.0, until=40.0, seed=2)
    assert not rule.should_prune(early, best, FIT_AT, maximize=True)
    assert not rule.should_prune(loser, None, FIT_AT, maximize=True)
    # Minimizing mirrors the rule.
    assert rule.should_prune(best, loser, FIT_AT, maximize=False)


def test_no_pruning_never_prunes_and_bad_parameters_are_refused():
    hopeless = CurveEstimate(0.0, 0.0, 0.0, compute=FIT_AT)
    champion = CurveEstimate(1.0, 1.0, 1.0, compute=FIT_AT)
    assert not PRUNERS.build("none").should_prune(hopeless, champion, FIT_AT, maximize=True)
    with pytest.raises((ConfigError, ValueError), match="min_compute_frac"):
        PRUNERS.build({"name": "sigmoid_bound", "min_compute_frac": 0})
    with pytest.raises((ConfigError, ValueError), match="level"):
        PRUNERS.build({"name": "sigmoid_bound", "level": 1.0})
