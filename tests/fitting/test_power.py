"""The seed planner's power against simulated sweeps run through the verdicts' own paired machinery."""

from __future__ import annotations

import math

import numpy as np
import pytest

from fitting.power import detection_power, mde, plan_df, seeds_needed, table_mde
from fitting.seeds import paired_effects, table_level

TOLERANCE = 0.03  # predicted vs simulated power; the simulation's own se is <= 0.011 at 2,000 tables
REPS = 2000


def simulated_power(effect: float, s: float, seeds: int, variants: int, margin: float, reps: int = REPS,
                    rng_seed: int = 0) -> float:
    """Share of simulated tables whose first variant gets an interval clear of +margin (a verdict).

    Each table: q_rs = m_r + c_s + e_rs, e ~ N(0, (s / sqrt 2)^2), variant 1's m = effect, the others' 0, a
    seed effect c_s shared by every recipe of the seed (the design's blocks); read by seeds.paired_effects at
    the table's Bonferroni level, as seed_verdicts does.
    """
    rng = np.random.default_rng(rng_seed)
    _, level = table_level(variants)
    sigma = s / math.sqrt(2)
    names = ["base"] + [f"v{i}" for i in range(1, variants + 1)]
    means = {name: (effect if name == "v1" else 0.0) for name in names}
    called = 0
    for _ in range(reps):
        seed_effects = rng.normal(0, 0.05, seeds)
        values = {name: {s_: float(means[name] + seed_effects[s_] + rng.normal(0, sigma)) for s_ in range(seeds)}
                  for name in names}
        found = paired_effects(values, "base", "A", level=level, margin=margin)["v1"]
        called += found.significant and found.estimate > 0
    return called / reps


@pytest.mark.parametrize("variants, seeds, effect, s, margin", [
    (8, 2, 0.20, 0.05, 0.02),   # the demo LOO's shape: 8 variants on 2 seeds
    (8, 3, 0.10, 0.05, 0.02),
    (2, 3, 0.15, 0.05, 0.02),   # the shipped batch scan: 2 values against the reference on 3 seeds
    (2, 6, 0.03, 0.02, 0.0),    # no margin (budget.min_a_shift: 0)
    (4, 4, math.log(1.25), 0.08, math.log(1.10)),  # a compute ratio beyond the x1.10 margin
])
def test_predicted_power_matches_simulated_tables(variants, seeds, effect, s, margin):
    predicted = detection_power(effect, s, seeds, variants, margin=margin)
    assert 0.2 < predicted < 0.95, "pick cases where power is informative"
    assert abs(simulated_power(effect, s, seeds, variants, margin) - predicted) <= TOLERANCE


def test_the_mde_is_called_80_percent_of_the_time_and_the_tables_formula_less():
    # V = 2, n = 3: df 4, where the textbook (t + t) formula is optimistic (fitting/power.py)
    exact, printed = mde(0.05, 3, 2, margin=0.02), table_mde(0.05, 3, 2, margin=0.02)
    assert abs(detection_power(exact, 0.05, 3, 2, margin=0.02) - 0.80) < 1e-6
    assert abs(simulated_power(exact, 0.05, 3, 2, 0.02, rng_seed=1) - 0.80) <= TOLERANCE
    assert printed < exact and simulated_power(printed, 0.05, 3, 2, 0.02, rng_seed=2) < 0.80 - TOLERANCE / 3


def test_the_planners_mde_is_the_mde_the_sweeps_table_prints():
    rng = np.random.default_rng(3)
    values = {name: {seed: float(rng.normal(0, 0.03)) for seed in range(3)} for name in ["base", "a", "b", "c"]}
    _, level = table_level(3)
    effects = paired_effects(values, "base", "A", level=level, margin=0.02)
    # the table's s is its own two-way estimate; from it the planner's formula gives the table's MDE
    from fitting.seeds import paired_difference_sd

    s, df = paired_difference_sd({name: {seed: v - values["base"][seed] for seed, v in by.items()}
                                  for name, by in values.items() if name != "base"})
    assert df == plan_df(3, 3) == 6
    assert effects["a"].mde == pytest.approx(mde(s, 3, 3, margin=0.02), rel=1e-9)


def test_seeds_needed_is_the_first_n_at_80_percent_and_never_at_the_margin():
    n = seeds_needed(0.05, 0.03, 8, margin=0.02)
    assert n is not None and detection_power(0.05, 0.03, n, 8, margin=0.02) >= 0.8
    assert detection_power(0.05, 0.03, n - 1, 8, margin=0.02) < 0.8
    assert seeds_needed(0.02, 0.03, 8, margin=0.02) is None  # an effect at the margin is never called
    assert seeds_needed(0.021, 0.03, 8, margin=0.02, max_seeds=8) is None


def test_the_plan_says_when_a_pilot_measured_no_noise_instead_of_failing():
    """Seeds whose curves agree exactly (flat at 0 on an untrained model) give s = 0 for a quantity: the plan
    prints that it has nothing to size from, for that quantity only, and the report it is part of still builds."""
    from fitting.power import QuantityNoise
    from reports.power import QUANTITIES, SweepNoise, format_power_plan

    quantities = {q: QuantityNoise(q, 0.0 if q == "A" else 0.05, 2, False) for q in QUANTITIES}
    text = format_power_plan(SweepNoise(quantities, seeds=2, variants=1, unit="device_seconds", target=180.0,
                                        wall_seconds_per_job=None), variants=1, target=180.0, unit="device_seconds",
                             pilot="a pilot")
    assert "A: s = 0 (the seeds agree exactly" in text
    assert "dA 0.02: ? (no run-to-run noise measured)" in text
    assert "pass rate at target: s = 0.0500" in text
