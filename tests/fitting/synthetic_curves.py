"""Synthetic compute-performance curves for the back-test tests: settled sigmoids and late risers, with
evaluation noise correlated from point to point (tests/fitting/test_backtest.py, tests/sweeps/test_fit_command.py)."""

from __future__ import annotations

import math

import numpy as np

from fitting import sigmoid_curve

FIT_AT, TARGET = 100.0, 200.0
COMPUTE = np.concatenate([[0.0], np.geomspace(1.0, TARGET, 34)])  # log-spaced, as the demo evaluates


def ar1_noise(rng, n: int, sd: float = 0.01, rho: float = 0.6) -> np.ndarray:
    """Evaluation noise correlated from point to point as a run's checkpoints are."""
    noise = np.empty(n)
    noise[0] = rng.normal(0.0, sd)
    for i in range(1, n):
        noise[i] = rho * noise[i - 1] + rng.normal(0.0, sd * math.sqrt(1 - rho ** 2))
    return noise


def settled_sigmoid(rng):
    """A sigmoid whose C_mid lies at 1/8 - 1/3 of the window: past its shoulder by fit_at."""
    a, b, c_mid = rng.uniform(0.6, 0.8), rng.uniform(1.0, 2.5), rng.uniform(FIT_AT / 8, FIT_AT / 3)
    return lambda c: sigmoid_curve(c, a, b, c_mid, 0.3)


def late_rise(rng):
    """A settled sigmoid plus a second rise of 0.08-0.15 whose midpoint lies at 0.7-1.5x fit_at."""
    first, amplitude, middle = settled_sigmoid(rng), rng.uniform(0.08, 0.15), rng.uniform(0.7, 1.5) * FIT_AT
    return lambda c: first(c) + amplitude / (1 + (middle / np.maximum(c, 1e-9)) ** 4)


def two_halves(rng):
    """tests/fitting/test_shape.py's late riser, its midpoints and heights drawn: a fast easy half, a steep hard one."""
    a1, a2 = rng.uniform(0.35, 0.5), rng.uniform(0.35, 0.5)
    m1, m2 = rng.uniform(6, 14) * FIT_AT / 90, rng.uniform(50, 90) * FIT_AT / 90
    return lambda c: 0.09 + a1 / (1 + (m1 / np.maximum(c, 1e-9)) ** 1.2) + a2 / (1 + (m2 / np.maximum(c, 1e-9)) ** 3)
