"""The seed planner's report: from the noise a finished sweep measured, what V variants on n seeds detect and cost.

    noise = sweep_noise(fit_sweep(load_sweep("runs/scalerl-loo-embedded")))   # the pilot's measured noise
    print(format_power_plan(noise, variants=8, budget=budget, pilot="runs/..."))

`sweep plan SPEC --power [--pilot DIR]` prints it for the spec's own variants (the pilot: DIR, else the
spec's finished output directory); the report of a sweep has it as a page, planned from its own noise.
The numbers are fitting/power.py's (noncentral t at the table's Bonferroni level and margins).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from fitting.power import MAX_SEEDS, SEED_OPTIONS, QuantityNoise, mde, seeds_needed
from fitting.seeds import MIN_A_SHIFT, MIN_COMPUTE_RATIO, a_pinned, paired_difference_sd, seed_quantities, table_level
from reports import schema

QUANTITIES = {"A": "A", "pred_at_target": "pass rate at target", "reach_50": "compute to 50% of the gain (ln ratio)",
              "reach_90": "compute to 90% of the gain (ln ratio)"}
DEFAULT_EFFECTS_A = (0.02, 0.05)
DEFAULT_EFFECTS_RATIO = (1.10, 1.25)


@dataclass(frozen=True)
class SweepNoise:
    """What a finished sweep measured: per quantity the run-to-run sd of a paired seed, and the sweep's shape."""

    quantities: dict[str, QuantityNoise]
    seeds: int
    variants: int  # variants against the base
    unit: str
    target: float
    wall_seconds_per_job: float | None  # the sweep's wall-clock per job (harness.json), for the cost column


def sweep_noise(fits, wall_seconds: float | None = None) -> SweepNoise:
    """The noise of a fitted sweep (reports.tables.SweepFits): the two-way residual sd of every tested quantity,
    and the within-run sd of one curve (its bootstrap: 95% half-width / 1.96, x sqrt(seeds) for a seed-mean curve).

    With one seed there is no residual: s is sqrt(2) x the within-run sd, marked a lower bound (reach ratios have
    no within-run sd and stay unknown).
    """
    budget = fits.data.budget
    seed_fits = {name: {s: f for s, f in v.seed_fits.items() if f is not None} for name, v in fits.variants.items()}
    seed_fits = {name: by_seed for name, by_seed in seed_fits.items() if by_seed}
    within = {"A": [], "pred_at_target": []}
    for v in fits.variants.values():
        scale = math.sqrt(len(v.seeds)) / 1.96 / 2
        within["A"].append((v.boot.a_ci[1] - v.boot.a_ci[0]) * scale)
        if v.boot.prediction_ci is not None:
            within["pred_at_target"].append((v.boot.prediction_ci[1] - v.boot.prediction_ci[0]) * scale)
    quantities = {}
    values = seed_quantities(seed_fits, schema.BASE, fit_at=budget.verdict_until, target=budget.target) \
        if schema.BASE in seed_fits else {}
    for quantity in QUANTITIES:
        by_variant = values.get(quantity, {})
        base = by_variant[schema.BASE]
        differences = {name: {seed: value - base[seed] for seed, value in by_seed.items()
                              if seed in base and math.isfinite(value - base[seed])}
                       for name, by_seed in by_variant.items() if name != schema.BASE}
        if quantity == "A":  # as the verdicts do: an A pinned at a bound has no spread of its own (a_pinned)
            pinned = a_pinned(seed_fits, schema.BASE)
            differences = {name: d for name, d in differences.items() if name not in pinned}
        s, df = paired_difference_sd(differences) if differences else (math.nan, 0)
        within_s = math.sqrt(2) * float(np.median(within[quantity])) if within.get(quantity) else math.nan
        if df < 1:
            quantities[quantity] = QuantityNoise(quantity, within_s, 0, True, within_s)
        else:
            quantities[quantity] = QuantityNoise(quantity, s, df, False, within_s)
    jobs = len(fits.data.runs)
    return SweepNoise(quantities, seeds=int(fits.data.runs["seed"].nunique()),
                      variants=max(0, fits.data.runs["variant"].nunique() - 1), unit=budget.unit, target=budget.target,
                      wall_seconds_per_job=wall_seconds / jobs if wall_seconds and jobs else None)


def quantity_margin(quantity: str, min_a_shift: float, min_compute_ratio: float) -> float:
    return {"A": min_a_shift, "pred_at_target": 0.0}.get(quantity, math.log(min_compute_ratio))


def _measured(noise: QuantityNoise) -> bool:
    """Whether there is run-to-run noise to plan from: s = 0 (seeds' curves that agree exactly, e.g. flat
    at 0) sizes nothing, and the power formulas need s > 0."""
    return math.isfinite(noise.s) and noise.s > 0


def _mde_text(noise: QuantityNoise, seeds: int, variants: int, margin: float, ratio: bool) -> str:
    if not _measured(noise):
        return "?"
    value = mde(noise.s, seeds, variants, margin=margin)
    text = f"x{math.exp(value):.2f}" if ratio else f"{value:.3f}"
    return (">=" if noise.lower_bound else "") + text


def _needed_text(noise: QuantityNoise, effect: float, variants: int, margin: float, cost) -> str:
    if not _measured(noise):
        return "? (no run-to-run noise measured)"
    if abs(effect) <= margin + 1e-12:
        return "never: a verdict needs an effect beyond the margin"
    n = seeds_needed(effect, noise.s, variants, margin=margin)
    if n is None:
        return f"more than {MAX_SEEDS} seeds"
    return f"{'>=' if noise.lower_bound else ''}{n} seeds ({cost(n)})"


def format_power_plan(noise: SweepNoise, *, variants: int, target: float, unit: str, pilot: str,
                      min_a_shift: float = MIN_A_SHIFT, min_compute_ratio: float = MIN_COMPUTE_RATIO,
                      effects_a: Sequence[float] = DEFAULT_EFFECTS_A,
                      effects_ratio: Sequence[float] = DEFAULT_EFFECTS_RATIO, seed_options=SEED_OPTIONS) -> str:
    """The planner's text: the measured noise, then per seed count the MDEs and the cost, then seeds per effect."""
    tests, level = table_level(variants)
    lines = [f"noise measured by {pilot} ({noise.seeds} seed(s), {noise.variants} variant(s) against the base):"]
    for quantity, label in QUANTITIES.items():
        q = noise.quantities[quantity]
        if not math.isfinite(q.s):
            lines.append(f"  {label}: not measured")
            continue
        if q.s <= 0:
            lines.append(f"  {label}: s = 0 (the seeds agree exactly, e.g. flat curves: no noise to plan from)")
            continue
        if q.lower_bound:
            lines.append(f"  {label}: s >= {q.s:.4f} (one seed: within-run noise only, a lower bound)")
            continue
        low, high = q.interval()
        within = f"; fit noise alone {q.within_run_s:.4f}" if math.isfinite(q.within_run_s) else ""
        lines.append(f"  {label}: s = {q.s:.4f} per paired seed (two-way residual, df {q.df}; 80% interval "
                     f"[{low:.4f}, {high:.4f}]{within})")
    per_job = target
    wall = noise.wall_seconds_per_job * target / noise.target if noise.wall_seconds_per_job and unit == noise.unit \
        else None

    def cost(seeds: int) -> str:
        jobs = (variants + 1) * seeds
        text = f"{jobs} jobs, {jobs * per_job:,.0f} {unit}"
        return text + (f", ~{jobs * wall / 60:.0f} min as the pilot ran" if wall else "")

    lines += ["", f"plan: {variants} variant(s) against the base; intervals at {level:.2%} each (Bonferroni over the "
                  f"table's {tests} tests), margins dA {min_a_shift:g} and x{min_compute_ratio:.2f}; MDE at 80% power",
              ""]
    header = ["seeds", "MDE A", "MDE pass rate", "MDE ratio 50%", "MDE ratio 90%", "cost"]
    rows = [[str(n)] + [_mde_text(noise.quantities[q], n, variants, quantity_margin(q, min_a_shift, min_compute_ratio),
                                  q.startswith("reach")) for q in QUANTITIES] + [cost(n)] for n in seed_options]
    widths = [max(len(row[i]) for row in [header, *rows]) for i in range(len(header))]
    lines += ["  ".join(cell.ljust(w) for cell, w in zip(row, widths)).rstrip() for row in [header, *rows]]
    lines += ["", "seeds needed to call an effect 80% of the time:"]
    for effect in effects_a:
        q = noise.quantities["A"]
        lines.append(f"  dA {effect:g}: {_needed_text(q, effect, variants, min_a_shift, cost)}")
    for ratio in effects_ratio:
        parts = [f"to {q.removeprefix('reach_')}% " + _needed_text(noise.quantities[q], math.log(ratio), variants,
                                                                    math.log(min_compute_ratio), cost)
                 for q in ("reach_50", "reach_90")]
        lines.append(f"  compute ratio x{ratio:.2f}: " + "; ".join(parts))
    lines.append("(power from the noncentral t with the measured s taken as true: the interval of s above bounds "
                 "how far that may be off; the table's printed MDE uses the (t + t) approximation, a little smaller)")
    return "\n".join(lines)


__all__ = ["DEFAULT_EFFECTS_A", "DEFAULT_EFFECTS_RATIO", "SweepNoise", "format_power_plan", "sweep_noise"]
