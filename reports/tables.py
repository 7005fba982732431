"""The LOO table: fits of every variant, their extrapolation scores and verdicts against the base, computed once.

    fits = fit_sweep(load_sweep("runs/scalerl-loo"))
    fits.table       # one row per variant (schema.LOO_COLUMNS), what loo_table.csv holds
    fits.run_table   # one row per job: that seed's own fit (what goes onto its MLflow run)
    print(format_loo_table(fits.table))   # reports.table_text

Protocol (arXiv 2510.13786: the fit of Eq. 1, section 2, and the LOO runs' fit-then-extrapolate
protocol of section 4): each curve is fitted on burn_in <= C <= fit_at with R0 the step-0
evaluation, C_mid bounds derived from the window (fitting's default: first C / 100 .. last C * 100,
in whatever unit budget.unit is), scored at target against the mean of the points within
target * (1 +- observed_window). With several seeds the table row is the fit of the seed-mean curve
(pass rate and compute averaged per evaluation step over the seeds that reached it) and A_seed_sd is
the spread of the per-seed fits' A. Verdicts come from fitting.compare_loo on those fits.

With budget.verdicts_from "run" the table's A, B, C_mid and the verdicts come from fits on burn_in <= C <=
target instead (every point the runs observed: a ceiling extrapolated from 9x C_mid rather than 4x), while
the prediction columns and the curves page still show the window's fits, extrapolated to the target and
scored there.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace

import numpy as np
import pandas as pd

from reports import schema
from reports.forecasts import forecast_sweep
from reports.protocols import protocol_note
from reports.sweep_data import SweepData
from reports.verdicts import verdict_why

DEFAULT_N_BOOT = 500  # bootstrap draws per interval: ~1 s per variant on the 2-core reference machine


@dataclass
class VariantFit:
    """One variant's fitted curve (seed mean when several seeds) with its bootstrap, score and seed fits."""

    variant: str
    axis: str
    choice: str
    seeds: list[int]
    curve: pd.DataFrame  # step, compute, pass_rate of the fitted curve
    fit: object  # fitting.FitResult
    boot: object  # fitting.BootstrapResult, with the prediction at target
    score: object  # fitting.ExtrapolationScore
    seed_fits: dict[int, object] = field(default_factory=dict)  # seed -> FitResult (None when it failed)
    seed_scores: dict[int, object] = field(default_factory=dict)
    spread: object | None = None  # fitting.SeedSpread when >= 2 seeds fitted
    # The window's fits, whose predictions at the target `score` and `seed_scores` hold: the same objects as
    # fit / boot / seed_fits unless budget.verdicts_from is "run" (then those are fitted to the target).
    prediction_fit: object | None = None
    prediction_boot: object | None = None
    prediction_seed_fits: dict[int, object] = field(default_factory=dict)

    def __post_init__(self):
        if self.prediction_fit is None:
            self.prediction_fit, self.prediction_boot = self.fit, self.boot
            self.prediction_seed_fits = dict(self.seed_fits)


@dataclass
class SweepFits:
    """Every fit of a sweep and the LOO comparison; `table` and `run_table` are derived from it."""

    data: SweepData
    variants: dict[str, VariantFit]  # in report order; variants that could not be fitted are absent
    failures: dict[str, str]  # variant -> why it was not fitted
    comparison: object | None  # fitting.LooComparison; None without a fitted base
    notes: list[str]
    n_boot: int
    shape: object | None = None  # fitting.ShapeCheck over every run's own fit (None: too few points)
    noise: object | None = None  # fitting.EvaluationNoise over every evaluation point (None: no se logged)
    target_miss: object | None = None  # fitting.TargetMissCheck over every run's prediction error at the target
    forecasts: object | None = None  # reports.forecasts.SweepForecasts: the calibrated intervals and regime flags
    protocol_note: str = ""  # reports.protocols: where the other budget.verdicts_from would call differently

    @property
    def table(self) -> pd.DataFrame:
        return _loo_frame(self)

    @property
    def run_table(self) -> pd.DataFrame:
        return _run_frame(self)

    def caption(self) -> str:
        """What the table shows, in one sentence (the report and the printed table use it)."""
        budget, seeds = self.data.budget, self.data.runs["seed"].nunique()
        window = (f"fit on {budget.burn_in:g} <= C <= {budget.fit_at:g} {budget.unit}, predicted at {budget.target:g}"
                  if budget.verdicts_from != "run" else
                  f"A, B, C_mid and verdicts fit on {budget.burn_in:g} <= C <= {budget.target:g} {budget.unit} (the "
                  f"whole run); predictions fit on C <= {budget.fit_at:g}, scored at {budget.target:g}")
        window += ((" (the paper's grid fit)" if budget.fit_method == "paper" else "")
                   + (", points weighted equally" if budget.fit_weights == "equal" else ""))
        if budget.metric != schema.WHOLE:
            window = f"{schema.pass_rate_keys(budget.metric)[0]} (a mixture's set, not the whole): {window}"
        if seeds > 1:
            return (f"{window}; each row fits the seed-mean curve over {seeds} seeds "
                    "(A_seed_sd: sd of the per-seed fits' A)")
        return f"{window}; one seed per variant"


def _r0_options(curve: pd.DataFrame) -> tuple[dict, str | None]:
    """R0 = the step-0 evaluation; without one, R0 is fitted (and the caller gets a note)."""
    first = curve[curve["step"] == 0]
    if len(first):
        return {"r0": float(first["pass_rate"].iloc[0])}, None
    return {"fit_r0": True}, "no step-0 evaluation: R0 fitted"


def _fit_curve(curve: pd.DataFrame, budget, fit_until: float | None = None):
    """(fit on [burn_in, fit_until (default budget.fit_at)], its score at the target, R0 note)."""
    from fitting import fit_sigmoid, score_extrapolation
    from fitting.fit import window_method_options

    options, note = _r0_options(curve)
    compute, pass_rate = curve["compute"].to_numpy(), curve["pass_rate"].to_numpy()
    fit = fit_sigmoid(compute, pass_rate, burn_in=budget.burn_in,
                      fit_until=budget.fit_at if fit_until is None else fit_until,
                      **window_method_options(budget.fit_method), weights=budget.fit_weights,
                      **options)
    halfwidth = {} if budget.observed_window is None else {"observed_halfwidth": budget.observed_window}
    score = score_extrapolation(fit, compute, pass_rate, target=budget.target, **halfwidth)
    return fit, score, note


def _verdict_fit(curve: pd.DataFrame, budget, window_fit):
    """The fit the verdicts use: the window's own fit, or (verdicts_from "run") one on [burn_in, target]."""
    if budget.verdicts_from != "run":
        return window_fit
    return _fit_curve(curve, budget, fit_until=budget.verdict_fit_until)[0]


def seed_mean_curve(evals: pd.DataFrame) -> tuple[pd.DataFrame, int]:
    """Mean (compute, pass_rate) per step over seeds, on the steps every seed reached; (curve, steps dropped)."""
    seeds = evals["seed"].nunique()
    grouped = evals.groupby("step").agg(compute=("compute", "mean"), pass_rate=("pass_rate", "mean"),
                                        n=("seed", "nunique"))
    kept = grouped[grouped["n"] == seeds].reset_index()
    return kept[["step", "compute", "pass_rate"]], int((grouped["n"] < seeds).sum())


def observed_over_seeds(score, seed_scores: dict, seeds: int):
    """The seed-mean row's score against the mean of its seeds' own observed values at the target.

    The seed-mean curve keeps only the steps every seed reached, and seeds of one recipe can run
    different numbers of steps in the same compute (the length penalty's seeds: 361-421 steps in
    200 CPU-seconds), so the mean curve can stop short of the target and leave the row unscored
    although every seed was observed there. Each seed's observed value is the mean of its own
    points within the target's window; the row's is their mean (the score as it was where a seed
    has none or was not fitted).
    """
    observed = [s.observed for s in seed_scores.values()]
    if seeds < 2 or len(observed) < seeds or any(math.isnan(value) for value in observed):
        return score
    value = float(np.mean(observed))
    error = score.predicted - value
    return replace(score, observed=value, error=error, within_margin=bool(abs(error) <= score.margin),
                               n_observed=sum(s.n_observed for s in seed_scores.values()),
                               flags=tuple(f for f in score.flags if f != "no_observation_at_target"))


def fit_sweep(data: SweepData, *, n_boot: int = DEFAULT_N_BOOT, seed: int = 0) -> SweepFits:
    """Fit every variant (each seed, and the seed mean), bootstrap, score at target, compare with the base."""
    from fitting import (FitInputError, bootstrap_fit, compare_loo, evaluation_noise_check, seed_spread,
                         target_miss_check, window_end_check)

    budget, notes, failures, variants = data.budget, list(data.notes), {}, {}
    for name in data.variants():
        rows = data.evals[data.evals["variant"] == name]
        job = data.runs[data.runs["variant"] == name].iloc[0]
        if rows.empty:
            failures[name] = "no evaluation points"
            continue
        # Each seed's window fit (its prediction, scored at the target) and the fit its verdicts use.
        seed_fits, seed_scores, window_seed_fits = {}, {}, {}
        for run_seed, seed_rows in rows.groupby("seed"):
            seed_rows = seed_rows.sort_values("step")
            try:
                window_seed_fits[run_seed], seed_scores[run_seed], _ = _fit_curve(seed_rows, budget)
            except FitInputError as error:
                notes.append(f"{name} seed {run_seed}: not fitted: {error}")
                continue
            try:
                seed_fits[run_seed] = _verdict_fit(seed_rows, budget, window_seed_fits[run_seed])
            except FitInputError as error:  # its prediction stands; no verdict rests on it
                notes.append(f"{name} seed {run_seed}: the fit to the target (budget.verdicts_from: run) failed: "
                             f"{error}")
        curve, dropped = seed_mean_curve(rows) if rows["seed"].nunique() > 1 else (
            rows.sort_values("step")[["step", "compute", "pass_rate"]].reset_index(drop=True), 0)
        if dropped:
            notes.append(f"{name}: {dropped} evaluation step(s) not reached by every seed left out of the seed mean")
        try:
            window_fit, score, r0_note = _fit_curve(curve, budget)
            window_boot = bootstrap_fit(window_fit, n_boot=n_boot, target=budget.target, seed=seed)
        except FitInputError as error:
            failures[name] = str(error)
            continue
        try:
            fit = _verdict_fit(curve, budget, window_fit)
            boot = window_boot if fit is window_fit else bootstrap_fit(fit, n_boot=n_boot, target=budget.target,
                                                                         seed=seed)
        except FitInputError as error:
            failures[name] = f"the fit to the target (budget.verdicts_from: run) failed: {error}"
            continue
        if r0_note:
            notes.append(f"{name}: {r0_note}")
        fitted = [f for f in seed_fits.values() if f is not None]
        variants[name] = VariantFit(
            variant=name, axis=str(job["axis"]), choice=str(job["choice"]), seeds=sorted(rows["seed"].unique()),
            curve=curve, fit=fit, boot=boot, score=observed_over_seeds(score, seed_scores, rows["seed"].nunique()),
            seed_fits=seed_fits, seed_scores=seed_scores,
            spread=seed_spread(fitted, target=budget.target) if len(fitted) >= 2 else None,
            prediction_fit=window_fit, prediction_boot=window_boot, prediction_seed_fits=window_seed_fits)
    for name, reason in failures.items():
        notes.append(f"{name}: not fitted: {reason}")
    comparison = None
    if schema.BASE in variants:
        seed_fits = {n: {s: f for s, f in v.seed_fits.items() if f is not None} for n, v in variants.items()}
        comparison = compare_loo({n: v.fit for n, v in variants.items()}, base=schema.BASE, n_boot=n_boot, seed=seed,
                                 seed_fits=seed_fits, fit_at=budget.verdict_until, target=budget.target,
                                 min_compute_ratio=budget.min_compute_ratio, min_a_shift=budget.min_a_shift)
    elif variants:
        notes.append("no fitted base run: no deltas and no verdicts")
    # Every run's own fit (the seed fits; a one-seed sweep's variant fit is its run's fit). Its note
    # goes under the LOO table (table.attrs["shape_note"]), in the printed table and in the report.
    shape = window_end_check([f for v in variants.values()
                              for f in (v.prediction_seed_fits.values() or [v.prediction_fit])])
    # Each prediction's interval, from the sweep's own back-tests (reports.forecasts); the other verdict protocol.
    def fit_curve(curve, fit_until):
        return _fit_curve(curve, budget, fit_until)[0]

    forecasts = forecast_sweep(data, variants, fit_curve)
    protocol = (protocol_note(data, variants, comparison, fit_curve, n_boot=n_boot, seed=seed)
                if comparison is not None else "")
    # How precise each evaluation point is (its logged sampling se): a note when too noisy for the margin.
    noise = evaluation_noise_check(data.evals["pass_rate_se"])
    # Once the runs reached the target, their predictions' misses there are observed: one side too often is a bias.
    target_miss = target_miss_check([score.error for v in variants.values()
                                     for score in (v.seed_scores.values() or [v.score]) if score is not None])
    return SweepFits(data=data, variants=variants, failures=failures, comparison=comparison, notes=notes,
                     n_boot=n_boot, shape=shape, noise=noise, target_miss=target_miss,
                     forecasts=forecasts, protocol_note=protocol)


def loo_table(data: SweepData, *, n_boot: int = DEFAULT_N_BOOT, seed: int = 0) -> pd.DataFrame:
    """One row per variant (schema.LOO_COLUMNS); the single place the LOO table is computed."""
    return fit_sweep(data, n_boot=n_boot, seed=seed).table


def changed_axis(data: SweepData, variant: str, axis: str, choice: str) -> str:
    """'loss: cispo -> dapo' from the configs (the axis' component name, else its changed parameters)."""
    scan = data.meta.get(schema.SWEEP_SCAN) or {}
    if axis == schema.BASE:
        return f"reference: {scan['key']} = {choice}" if scan else ""
    runs = data.runs
    pairs = [(runs[(runs["variant"] == schema.BASE) & (runs["seed"] == s)]["run_id"], r)
             for s, r in runs[runs["variant"] == variant][["seed", "run_id"]].itertuples(index=False)]
    for base_ids, run_id in pairs:
        if len(base_ids) and base_ids.iloc[0] in data.configs and run_id in data.configs:
            base, other = data.configs[base_ids.iloc[0]], data.configs[run_id]
            if scan:  # the scanned key, then the keys that change with it
                keys = sorted(k for k in set(base) | set(other) if base.get(k) != other.get(k)
                              and not k.startswith(schema.CONFIG_DIFF_IGNORED_PREFIXES))
                keys.sort(key=lambda k: k != scan["key"])
                return "; ".join(f"{k}: {base.get(k, '-')} -> {other.get(k, '-')}" for k in keys)
            name_key = f"{axis}.name"
            if base.get(name_key) != other.get(name_key):
                return f"{axis}: {base.get(name_key, '?')} -> {other.get(name_key, '?')}"
            keys = sorted(k for k in set(base) | set(other)
                          if k.startswith(axis + ".") and base.get(k) != other.get(k))
            if keys:
                return "; ".join(f"{k}: {base.get(k, '-')} -> {other.get(k, '-')}" for k in keys)
    return f"{axis}: base -> {choice}"


def config_diff(data: SweepData, variant: str) -> list[tuple[str, str, str]] | None:
    """(key, base value, variant value) for every flattened key that differs from the base of the same seed."""
    runs = data.runs
    for run_seed, run_id in runs[runs["variant"] == variant][["seed", "run_id"]].itertuples(index=False):
        base_ids = runs[(runs["variant"] == schema.BASE) & (runs["seed"] == run_seed)]["run_id"]
        if len(base_ids) and base_ids.iloc[0] in data.configs and run_id in data.configs:
            base, other = data.configs[base_ids.iloc[0]], data.configs[run_id]
            keys = sorted(k for k in set(base) | set(other) if base.get(k) != other.get(k)
                          and not k.startswith(schema.CONFIG_DIFF_IGNORED_PREFIXES))
            return [(k, base.get(k, "(absent)"), other.get(k, "(absent)")) for k in keys]
    return None


def diagnostics_table(data: SweepData, tail: float = 0.25) -> pd.DataFrame:
    """Per variant and diagnostic: mean over the last `tail` of each run's steps, and the largest value.

    Columns "<key> tail" and "<key> max"; with several seeds, the mean of the runs' tail means and the
    largest max. Keys no run logged are absent; a variant without the key has NaN.
    """
    frame = data.diagnostics
    keys = [k for k in schema.DIAGNOSTICS if k in frame.columns]
    rows = []
    for name in data.variants():
        row = {"variant": name}
        runs = frame[frame["variant"] == name]
        for key in keys:
            tails, peaks = [], []
            for _, run in runs.groupby("run_id"):
                values = run[["step", key]].dropna()
                if len(values):
                    last = values["step"] >= values["step"].max() * (1 - tail)
                    tails.append(values[key][last].mean())
                    peaks.append(values[key].max())
            row[f"{key} tail"] = float(np.mean(tails)) if tails else math.nan
            row[f"{key} max"] = float(np.max(peaks)) if peaks else math.nan
        rows.append(row)
    return pd.DataFrame(rows, columns=["variant"] + [f"{k} {s}" for k in keys for s in ("tail", "max")])


TRUNCATION_COLUMNS = {schema.TRUNCATION_RATE: "truncation_rate", schema.LOW_TRUNCATION_STEPS: "low_truncation_steps"}


def truncation_sums(data: SweepData) -> pd.DataFrame:
    """Per run_id and TRUNCATION_COLUMNS column: "<column> sum" (value x steps) and "<column> steps" (steps covered).

    A metrics line averages the training steps since the run's previous line, so it weighs
    step - previous step (the first line: its step). Lines without the key add nothing.
    """
    frame = data.diagnostics
    columns = [f"{c} {part}" for c in TRUNCATION_COLUMNS.values() for part in ("sum", "steps")]
    rows = []
    for run_id, run in frame.groupby("run_id", sort=False):
        run = run.sort_values("step")
        weights = run["step"].diff().fillna(run["step"]).clip(lower=0)
        row = {"run_id": run_id}
        for key, column in TRUNCATION_COLUMNS.items():
            values = run[key] if key in run.columns else pd.Series(math.nan, index=run.index)
            present = values.notna()
            row[f"{column} sum"] = float((values[present] * weights[present]).sum())
            row[f"{column} steps"] = float(weights[present].sum())
        rows.append(row)
    return pd.DataFrame(rows, columns=["run_id"] + columns).set_index("run_id")


def truncation_stats(sums: pd.DataFrame, run_ids) -> dict[str, float]:
    """truncation_rate and low_truncation_steps pooled over the steps of `run_ids` (NaN when none logged them)."""
    chosen = sums.loc[[r for r in run_ids if r in sums.index]]
    stats = {}
    for column in TRUNCATION_COLUMNS.values():
        steps = chosen[f"{column} steps"].sum() if len(chosen) else 0.0
        stats[column] = float(chosen[f"{column} sum"].sum() / steps) if steps > 0 else math.nan
    return stats


def _loo_frame(fits: SweepFits) -> pd.DataFrame:
    rows, comparison = [], fits.comparison
    sums = truncation_sums(fits.data)
    for name in fits.data.variants():
        job = fits.data.runs[fits.data.runs["variant"] == name].iloc[0]
        row = dict.fromkeys(schema.LOO_COLUMNS, math.nan)
        row.update(variant=name, axis=job["axis"], choice=job["choice"],
                   changed=changed_axis(fits.data, name, job["axis"], job["choice"]),
                   n_seeds=int(fits.data.runs[fits.data.runs["variant"] == name]["seed"].nunique()),
                   within_margin=None, verdict="not fitted", direction="", flags="", reason="", pred_interval="",
                   regime="")
        row.update(truncation_stats(sums, fits.data.runs[fits.data.runs["variant"] == name]["run_id"]))
        v = fits.variants.get(name)
        if v is not None:
            fit, boot, score = v.fit, v.boot, v.score
            forecast = fits.forecasts.rows[name]  # fit_sweep always makes them
            row.update(n_points=fit.n_points, R0=fit.r0, A=fit.a, A_lo=boot.a_ci[0], A_hi=boot.a_ci[1], B=fit.b,
                       C_mid=fit.c_mid, pred_at_target=score.predicted, pred_lo=forecast.interval[0],
                       pred_hi=forecast.interval[1], pred_interval=f"back-test {100 * forecast.level:.0f}%",
                       regime=", ".join(forecast.regime),
                       observed_at_target=score.observed, error=score.error,
                       within_margin=score.within_margin, verdict="-", flags=_flags(v))
            if v.spread is not None:
                row["A_seed_sd"] = v.spread.std["a"]
            if comparison is not None:
                c = comparison.variants[name]
                row.update(B_fixed_A=c.fixed_a_fit.b, B_fixed_A_lo=c.b_fixed_ci[0], B_fixed_A_hi=c.b_fixed_ci[1],
                           delta_A=c.delta_a, delta_B=c.delta_b, verdict=c.verdict, direction=c.direction or "",
                           reason=verdict_why(c.verdict, c.direction, c.effects, ceiling_budget=c.ceiling_budget,
                                              budget_key=fits.data.budget.verdict_until_key,
                                              a_pinned=_a_pinned(fits, name), fallback=c.reason),
                           ceiling_identifiable=c.ceiling_identifiable,
                           ceiling_budget=c.ceiling_budget)
                for quantity, prefix in EFFECT_COLUMNS.items():
                    effect = c.effects.get(quantity)
                    if effect is not None:
                        row.update({prefix: effect.estimate, f"{prefix}_lo": effect.low, f"{prefix}_hi": effect.high})
                        if quantity in ("A", "pred_at_target"):
                            row[f"MDE_{prefix.removeprefix('d_')}"] = effect.mde
                            row["MDE_is_lower_bound"] = effect.mde_is_lower_bound
                        else:
                            row[f"MDE_{quantity}"] = effect.mde
        rows.append(row)
    frame = pd.DataFrame(rows, columns=list(schema.LOO_COLUMNS))
    frame["n_points"] = frame["n_points"].astype("Int64")
    frame.attrs.update(caption=fits.caption(), unit=fits.data.budget.unit, target=fits.data.budget.target,
                       verdicts_from=fits.data.budget.verdicts_from,
                       min_compute_ratio=fits.data.budget.min_compute_ratio, min_a_shift=fits.data.budget.min_a_shift,
                       fixed_a=comparison.fixed_a if comparison is not None else math.nan,
                       tested_effects=comparison.tested_effects if comparison is not None else 0,
                       shape_note=fits.shape.note() if fits.shape is not None and fits.shape.departs else "",
                       noise_note=fits.noise.note() if fits.noise is not None and fits.noise.too_noisy else "",
                       miss_note=(fits.target_miss.note() if fits.target_miss is not None and fits.target_miss.departs
                                  else ""),
                       forecast_note=fits.forecasts.note() if fits.variants else "",
                       protocol_note=fits.protocol_note)
    return frame


def _flags(v: VariantFit) -> str:
    """The prediction's flags (the window fit's score and bootstrap), then, when the verdicts have their own fit
    (budget.verdicts_from: run), that fit's bootstrap flags, marked "verdict fit"."""
    flags = v.score.flags + v.prediction_boot.flags
    if v.boot is not v.prediction_boot:
        flags += tuple(f"verdict fit {flag}" for flag in v.boot.flags)
    return ", ".join(dict.fromkeys(flags))


def _a_pinned(fits: SweepFits, name: str) -> str | None:
    """Why A cannot be called although its interval clears the margin: a bootstrap A interval reaching its
    bound (the a_interval_at_bound of fitting.seeds.seed_verdicts), else a seed fit's flag
    (fitting.seeds.unidentifiable_reason); None: the reason is the fit window."""
    from fitting.seeds import unidentifiable_reason

    at_bound = {n for n, v in fits.variants.items() if "a_ci_at_bound" in v.boot.flags}
    if name in at_bound:
        return "its A interval reaches a bound"
    if schema.BASE in at_bound:
        return "the base's A interval reaches a bound"
    base = fits.variants.get(schema.BASE)
    if base is None:
        return None
    fitted = {s: f for s, f in fits.variants[name].seed_fits.items() if f is not None}
    return unidentifiable_reason(fitted, {s: f for s, f in base.seed_fits.items() if f is not None})


# paired effect (fitting.seeds) -> LOO table column prefix; reach columns hold ln(C_variant / C_base)
EFFECT_COLUMNS = {"A": "d_A", "pred_at_target": "d_pred", "reach_50": "log_reach_50", "reach_90": "log_reach_90"}


def _run_frame(fits: SweepFits) -> pd.DataFrame:
    rows, sums = [], truncation_sums(fits.data)
    for job in fits.data.runs.itertuples(index=False):
        row = dict.fromkeys(schema.RUN_COLUMNS, math.nan)
        row.update(run_id=job.run_id, variant=job.variant, axis=job.axis, choice=job.choice, seed=job.seed,
                   within_margin=None, flags="not fitted", regime="", **truncation_stats(sums, [job.run_id]))
        v = fits.variants.get(job.variant)
        fit = v.seed_fits.get(job.seed) if v is not None else None
        if fit is not None:
            score = v.seed_scores[job.seed]
            forecast = fits.forecasts.runs.get((job.variant, job.seed))
            if forecast is not None:
                row.update(pred_lo=forecast.interval[0], pred_hi=forecast.interval[1],
                           regime=", ".join(forecast.regime))
            row.update(n_points=fit.n_points, R0=fit.r0, A=fit.a, B=fit.b, C_mid=fit.c_mid,
                       pred_at_target=score.predicted, observed_at_target=score.observed, error=score.error,
                       within_margin=score.within_margin, flags=", ".join(score.flags))
        rows.append(row)
    return pd.DataFrame(rows, columns=list(schema.RUN_COLUMNS))


# --- plain-text table ------------------------------------------------------------------------------

# The sweep-level notes a LOO table's attrs may carry (empty when they do not apply), in the order the printed
# table and the report give them: the evaluation's noise, the fits' shape, the observed miss at the target.
