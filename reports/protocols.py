"""What the other verdict protocol would have said: each run's whole-run fit against the paper's window fit.

budget.verdicts_from picks the fits the verdicts rest on: "window" (the paper's LOO protocol: fit to
fit_at, the same fits the predictions extrapolate) or "run" (fit to the target, every point the runs
observed). A table made one way says, in one note, whether the other way would have called any variant
differently, so a reader who trusts the other protocol need not rerun anything.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace

from reports import schema
from reports.sweep_data import Budget, SweepData

PROTOCOL_WORDS = {"window": "the paper's window protocol (fits to fit_at)",
                  "run": "each run's fit to the target (the whole run)"}


def verdict_words(comparison, name: str) -> str:
    c = comparison.variants[name]
    return c.verdict + (f" ({c.direction})" if c.direction else "")


def other_fits(data: SweepData, variants: dict, fit_curve: Callable, other: Budget) -> tuple[dict, dict]:
    """(row fits, seed fits) of the other protocol: the window fits already made, or fits to the target."""
    if other.verdicts_from == "window":
        return ({n: v.prediction_fit for n, v in variants.items()},
                {n: {s: f for s, f in v.prediction_seed_fits.items() if f is not None} for n, v in variants.items()})
    from fitting import FitInputError

    rows, seeds = {}, {}
    for name, v in variants.items():
        try:
            rows[name] = fit_curve(v.curve, other.verdict_fit_until)
        except FitInputError:  # the variant sits out the other protocol, as fit_sweep leaves out what fails
            continue
        seeds[name] = {}
        for seed, curve in data.evals[data.evals["variant"] == name].groupby("seed"):
            try:
                seeds[name][seed] = fit_curve(curve.sort_values("step"), other.verdict_fit_until)
            except FitInputError:
                continue
    return rows, seeds


def protocol_note(data: SweepData, variants: dict, comparison, fit_curve: Callable, *, n_boot: int,
                  seed: int) -> str:
    """One sentence: which protocol the verdicts used, and where the other one's verdicts differ."""
    from fitting import FitInputError, compare_loo

    budget = data.budget
    other = replace(budget, verdicts_from="window" if budget.verdicts_from == "run" else "run")
    try:
        fits, seed_fits = other_fits(data, variants, fit_curve, other)
        theirs = compare_loo(fits, base=schema.BASE, n_boot=n_boot, seed=seed, seed_fits=seed_fits,
                             fit_at=other.verdict_until, target=budget.target,
                             min_compute_ratio=budget.min_compute_ratio, min_a_shift=budget.min_a_shift)
    except FitInputError as error:
        return (f"verdicts: from {PROTOCOL_WORDS[budget.verdicts_from]}; {PROTOCOL_WORDS[other.verdicts_from]} "
                f"could not be fitted ({error})")
    changed = [f"{name}: {verdict_words(comparison, name)} -> {verdict_words(theirs, name)}"
               for name in comparison.variants if name != schema.BASE
               and verdict_words(comparison, name) != verdict_words(theirs, name)]
    head = (f"verdicts: from {PROTOCOL_WORDS[budget.verdicts_from]} (budget.verdicts_from: {budget.verdicts_from}); "
            f"{PROTOCOL_WORDS[other.verdicts_from]} ")
    return head + ("gives the same verdicts" if not changed else "would have said " + "; ".join(changed))
