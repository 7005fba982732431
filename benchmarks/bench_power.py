"""What a LOO sweep can detect under other protocols (issue 52): its finished runs refitted, nothing trained again.

    .venv/bin/python -m benchmarks.bench_power SWEEP_DIR [--protocol NAME:KEY=VALUE,...] ...

Each protocol refits the sweep's own runs with some of: the compute axis (unit=flops | device_seconds | ...),
the fit window and target (fit_at=, target=, in that unit), the seeds used (seeds=0/1), every k-th evaluation
point kept (every=k; the step-0 point and the last are always kept), the pass rate read as sampled
(curve=sampled: a sweep evaluated with the reference control variate, read as mean@k), the verdict margins (ratio= for
budget.min_compute_ratio, shift= for budget.min_a_shift) and which fits the verdicts use (verdicts=window or
run: budget.verdicts_from). Per protocol and variant: the MDE in A, in the pass
rate at the target and in the compute to reach 50% / 90% of the base's gain (as ratios), and the verdict; then
the largest MDEs over the axes, the numbers issue 52's acceptance names (<= 0.08 in A, <= x1.25 in compute); and
the sd of one seed's paired difference in A beside what the evaluation's sampling noise alone gives it
(evaluation_noise_in_a: each run's fit redrawn with the standard error its evaluations logged).

    --protocol 'flops:unit=flops,fit_at=5e12,target=1e13,ratio=1.0'
    --protocol 'two-seeds:seeds=0/1'  --protocol 'sparse:every=2'  --protocol 'whole-run:verdicts=run'

Output: a table per protocol on stdout and JSON in benchmarks/out/bench_power.json.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import math
from pathlib import Path

from benchmarks.common import OUT

KEYS = {"unit": str, "fit_at": float, "target": float, "seeds": str, "every": int, "ratio": float, "shift": float,
        "verdicts": str, "curve": str}
# curve=sampled: the curves of a sweep evaluated with eval.control_variate=reference read as sampled (mean@k,
# eval/sampled_pass_rate and its se), so one sweep compares the two estimators on the same runs.
SAMPLED_KEYS = {"eval/pass_rate": "eval/sampled_pass_rate", "eval/pass_rate_se": "eval/sampled_pass_rate_se"}


def parse_protocol(text: str) -> tuple[str, dict]:
    """'name:key=value,key=value' -> (name, {key: value}); the keys of KEYS only."""
    name, _, body = text.partition(":")
    settings = {}
    for item in filter(None, body.split(",")):
        key, _, value = item.partition("=")
        if key not in KEYS:
            raise SystemExit(f"--protocol {text!r}: unknown key {key!r}; expected one of {', '.join(KEYS)}")
        settings[key] = KEYS[key](value)
    from reports.schema import VERDICT_FITS

    if settings.get("verdicts", "window") not in VERDICT_FITS:
        raise SystemExit(f"--protocol {text!r}: verdicts={settings['verdicts']!r}; expected one of "
                         f"{', '.join(VERDICT_FITS)}")
    return name or "as run", settings


def refit(sweep_dir: Path, settings: dict, n_boot: int, draws: int) -> dict:
    """The sweep's table under one protocol: per variant its MDEs (A, pass rate, compute ratios) and verdict."""
    import pandas as pd

    from reports import schema
    from reports.power import sweep_noise
    from reports.sweep_data import build_frames, load_sweep, read_metrics_file
    from reports.tables import fit_sweep
    from reports.table_text import verdict_text

    data = load_sweep(sweep_dir)
    budget = data.budget
    changes = {key: settings[key] for key in ("unit", "fit_at", "target") if key in settings}
    if "verdicts" in settings:
        changes["verdicts_from"] = settings["verdicts"]
    if "ratio" in settings:
        changes["min_compute_ratio"] = settings["ratio"]
    if "shift" in settings:
        changes["min_a_shift"] = settings["shift"]
    if changes:
        budget = dataclasses.replace(budget, **changes)
    data.budget = budget
    if settings.get("curve", "logged") not in ("logged", "sampled"):
        raise SystemExit(f"curve={settings['curve']!r}: expected logged or sampled")
    if "unit" in settings or settings.get("curve") == "sampled":  # the evaluation points read again
        plan = json.loads((sweep_dir / schema.PLAN_FILE).read_text())
        records = {str(e[schema.PLAN_RUN_ID]):
                   read_metrics_file(sweep_dir / e[schema.PLAN_RUN_DIR] / schema.METRICS_FILE) for e in plan}
        if settings.get("curve") == "sampled":
            for rows in records.values():
                for row in rows:
                    if SAMPLED_KEYS["eval/pass_rate"] in row:
                        row.update({key: row[sampled] for key, sampled in SAMPLED_KEYS.items()})
        data.evals, data.diagnostics, data.curves = build_frames(data.runs, records, budget, [])
    if "seeds" in settings:
        keep = [int(s) for s in settings["seeds"].split("/")]
        data.runs = data.runs[data.runs["seed"].isin(keep)].reset_index(drop=True)
        data.evals = data.evals[data.evals["seed"].isin(keep)].reset_index(drop=True)
        data.diagnostics = data.diagnostics[data.diagnostics["seed"].isin(keep)].reset_index(drop=True)
    if settings.get("every", 1) > 1:
        every = settings["every"]
        kept = []
        for _, rows in data.evals.groupby("run_id", sort=False):
            rows = rows.sort_values("step")
            index = list(range(0, len(rows), every))
            if index[-1] != len(rows) - 1:
                index.append(len(rows) - 1)
            kept.append(rows.iloc[index])
        data.evals = pd.concat(kept).reset_index(drop=True)
    fits = fit_sweep(data, n_boot=n_boot)
    paired_sd_a = sweep_noise(fits).quantities["A"].s
    eval_sd_a = evaluation_noise_in_a(data.evals, budget.verdict_fit_until, draws) if draws else math.nan
    table = fits.table.set_index("variant")
    variants = {}
    for name, row in table.iterrows():
        if name == schema.BASE:
            continue
        variants[name] = {
            "verdict": verdict_text(row), "MDE_A": _num(row["MDE_A"]), "MDE_pred": _num(row["MDE_pred"]),
            "MDE_ratio_50": _ratio(row["MDE_reach_50"]), "MDE_ratio_90": _ratio(row["MDE_reach_90"]),
            "d_A": _num(row["d_A"]), "ratio_50": _ratio(row["log_reach_50"]), "ratio_90": _ratio(row["log_reach_90"])}
    base = fits.variants.get(schema.BASE)
    points = data.evals.groupby("run_id").size()
    return {"budget": {"unit": budget.unit, "fit_at": budget.fit_at, "target": budget.target,
                       "min_compute_ratio": budget.min_compute_ratio, "min_a_shift": budget.min_a_shift,
                       "verdicts_from": budget.verdicts_from},
            "seeds": sorted(int(s) for s in data.runs["seed"].unique()),
            "points_per_run": [int(points.min()), int(points.max())],
            "base": {"A": float(base.fit.a), "C_mid": float(base.fit.c_mid)} if base else None,
            "A_paired_sd": {"measured": _num(paired_sd_a), "evaluation_noise_alone": _num(eval_sd_a)},
            "variants": variants,
            "worst": {key: _max([v[key] for v in variants.values()])
                      for key in ("MDE_A", "MDE_pred", "MDE_ratio_50", "MDE_ratio_90")}}


def evaluation_noise_in_a(evals, fit_at: float, draws: int, seed: int = 0) -> float:
    """sqrt(2) x the median over runs of sd(A) when only the evaluation's sampling noise moves the curve.

    A parametric bootstrap: per run, fit R(C) on [0, fit_at], redraw every point as the fit's value plus
    N(0, pass_rate_se^2) (the standard error the evaluation logged; fresh draws at every point are independent),
    refit, and take the sd of A over `draws` redraws. sqrt(2): a paired difference holds two runs.
    """
    import numpy as np

    from fitting import FitInputError, fit_sigmoid, sigmoid_curve

    rng = np.random.default_rng(seed)
    sds = []
    for _, rows in evals.groupby("run_id", sort=False):
        rows = rows.sort_values("compute")
        c, y, se = (rows[key].to_numpy(float) for key in ("compute", "pass_rate", "pass_rate_se"))
        try:
            fit = fit_sigmoid(c, y, fit_until=fit_at)
        except FitInputError:
            continue
        mean = sigmoid_curve(c, fit.a, fit.b, fit.c_mid, fit.r0)  # R(0) = R0, the step-0 point's own value
        values = []
        for _ in range(draws):
            redrawn = np.clip(mean + rng.standard_normal(len(c)) * se, 0.0, 1.0)
            try:
                values.append(fit_sigmoid(c, redrawn, fit_until=fit_at).a)
            except FitInputError:
                pass
        if len(values) > 1:
            sds.append(float(np.std(values, ddof=1)))
    return math.sqrt(2) * float(np.median(sds)) if sds else math.nan


def _num(value) -> float | None:
    return None if value is None or not math.isfinite(float(value)) else float(value)


def _ratio(log_value) -> float | None:
    value = _num(log_value)
    return None if value is None else math.exp(value)


def _max(values) -> float | None:
    values = [v for v in values if v is not None]
    return max(values) if values else None


def show(name: str, result: dict) -> None:
    budget = result["budget"]
    print(f"\n{name}: unit {budget['unit']}, fit on [0, {budget['fit_at']:g}], target {budget['target']:g}, "
          f"verdicts from the {'whole run' if budget['verdicts_from'] == 'run' else 'window'}, "
          f"seeds {result['seeds']}, {result['points_per_run'][0]}-{result['points_per_run'][1]} points a run, "
          f"margins x{budget['min_compute_ratio']:g} / {budget['min_a_shift']:g}; base {result['base']}")
    print(f"  {'variant':<58} {'MDE A':>6} {'MDE pred':>8} {'MDE x50%':>8} {'MDE x90%':>8}  verdict")
    for variant, v in result["variants"].items():
        print(f"  {variant:<58} {_f(v['MDE_A'])} {_f(v['MDE_pred'], 8)} {_x(v['MDE_ratio_50'])} "
              f"{_x(v['MDE_ratio_90'])}  {v['verdict']}")
    w = result["worst"]
    sd = result["A_paired_sd"]
    print(f"  A: one seed's paired sd {_f(sd['measured']).strip()}; the evaluation's sampling noise alone "
          f"{_f(sd['evaluation_noise_alone']).strip()}")
    print(f"  {'largest':<58} {_f(w['MDE_A'])} {_f(w['MDE_pred'], 8)} {_x(w['MDE_ratio_50'])} {_x(w['MDE_ratio_90'])}")


def _f(value, width: int = 6) -> str:
    return f"{value:>{width}.3f}" if value is not None else f"{'-':>{width}}"


def _x(value) -> str:
    return f"{'x' + format(value, '.2f'):>8}" if value is not None else f"{'-':>8}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("sweep_dir", type=Path)
    parser.add_argument("--protocol", action="append", default=[], help="NAME:KEY=VALUE,... (see the docstring)")
    parser.add_argument("--n-boot", type=int, default=200)
    parser.add_argument("--eval-draws", type=int, default=40,
                        help="redraws per run for the evaluation-noise sd of A (0: skip)")
    options = parser.parse_args()
    protocols = [parse_protocol(p) for p in options.protocol] or [("as run", {})]
    results = {}
    for name, settings in protocols:
        results[name] = {"settings": settings, **refit(options.sweep_dir, settings, options.n_boot, options.eval_draws)}
        show(name, results[name])
    OUT.mkdir(parents=True, exist_ok=True)
    (OUT / "bench_power.json").write_text(json.dumps({"sweep": str(options.sweep_dir), "protocols": results},
                                                      indent=2))


if __name__ == "__main__":
    main()
