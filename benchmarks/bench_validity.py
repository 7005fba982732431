"""Validation study (issue 17): do the LOO predictions, intervals and verdicts hold up?

    .venv/bin/python -m benchmarks.bench_validity SWEEP_DIR [SECOND_SWEEP_DIR] [--out FILE.json]
    .venv/bin/python -m benchmarks.bench_validity --run benchmarks/validity.yaml [--run-again] [--seeds 3 4]
    .venv/bin/python -m benchmarks.bench_validity SWEEP_DIR --protocols default:0 paper:0 default:10 default:0:equal

SWEEP_DIR: a finished multi-seed LOO sweep (`sweep run` of benchmarks/validity.yaml: the embedded LOO
with 3 seeds per variant at the paper's ratios, fit_at >= 3x the base's C_mid, target >= 6x). --run
SPEC runs the sweep first (`sweep run SPEC`), --run-again runs it a second time into SPEC's name + "-2"
for (d). Reads only the sweep directories (reports.load_sweep, reports.fit_sweep), so it can be rerun.

Measured, each printed and written to --out (default benchmarks/out/bench_validity.json):
 (a) prediction accuracy: the share of runs (variant x seed, each seed's own fit) whose prediction
     at the target is within 0.02 of the observed pass rate there (goal >= 80%); and the share of
     runs within 0.02 of their recipe's prediction, the LOO table's row (the fit of the recipe's
     seed-mean curve over the window: what the sweep predicts for the recipe), each run scored
     against its own observed value (not the seed mean's);
 (b) leave-one-seed-out calibration: for every variant and held-out seed, the interval
     fitting.seeds.held_out_interval builds from the other seeds' predictions (run-to-run sds pooled
     over the sweep without the held-out run, and the fits' shape term: the rms of the other runs'
     window-end residuals, as the table's intervals use; the share without it is printed too) must
     contain the held-out run's observed value at the
     target (goal >= 90% of cases at 95%);
 (c) the base's ceiling is identifiable: A not at a bound in the seed-mean fit nor in any seed's fit, and
     the seed-mean fit's bootstrap A interval does not reach a bound (flag a_ci_at_bound);
 (d) with a second sweep directory (another run of the same spec): the same verdict for every variant.
Also: the base's C_mid and the fit window / target as multiples of it, and the per-axis minimum
detectable effects (A and pass rate at the target).

Why (a) misses, measured on the same runs (`error_diagnosis`): each run's error at the target (a)
as the sweep fits it (the (a) figures themselves), (b) refitted with A fixed at 1, the highest
ceiling a pass rate can have (if even that under-predicts, no sigmoid through the window's points
reaches the observed end), and (c) refitted in RL steps instead of compute (fit_at and the target
mapped to steps through the run's own compute per step, which falls as training goes on here: the
zero-variance filter drops more groups). Same window, fit method, R0 and observed window as the sweep.
"""

from __future__ import annotations

import argparse
import json
import math
import platform
import subprocess
import sys
from datetime import datetime, timezone
from pathlib import Path

from benchmarks.common import REPO

MARGIN = 0.02


def study(sweep_dir: Path, n_boot: int = 200, protocol: dict | None = None) -> dict:
    """Measures (a)-(c) and the MDEs of one finished sweep directory.

    protocol: budget fields to fit with instead of the sweep's own (burn_in, fit_method), so one
    sweep's curves can compare fit protocols (--protocols).
    """
    import dataclasses

    import numpy as np
    import pandas as pd

    from fitting.seeds import ceiling_identifiable, held_out_interval, pooled_sd
    from fitting.shape import window_end_check
    from reports import schema
    from reports.sweep_data import load_sweep
    from reports.tables import fit_sweep
    from reports.table_text import verdict_text

    data = load_sweep(sweep_dir)
    if protocol:
        data.budget = dataclasses.replace(data.budget, **protocol)
    fits = fit_sweep(data, n_boot=n_boot)
    budget = data.budget
    runs = []  # (variant, seed, predicted, observed)
    run_fits = {}  # (variant, seed) -> the run's own fit (for the shape term of (b))
    for name, v in fits.variants.items():
        for seed, fit in v.prediction_seed_fits.items():  # the window's fits, whose predictions are scored
            score = v.seed_scores.get(seed)
            if fit is None or score is None or score.observed is None or not math.isfinite(score.observed):
                continue
            runs.append((name, seed, float(score.predicted), float(score.observed)))
            run_fits[(name, seed)] = fit
    within = [abs(p - o) <= MARGIN for _, _, p, o in runs]
    # The table's rows: each variant's seed-mean curve, fitted and scored as the LOO table does.
    row_errors = [float(v.score.error) for v in fits.variants.values()
                  if v.score is not None and v.score.error is not None and math.isfinite(v.score.error)]
    # Each run against its recipe's prediction (the row's): the recipe's predicted pass rate at the
    # target must hold for every run of it, so a run's own course after the window counts in full.
    row_predicted = {name: float(v.score.predicted) for name, v in fits.variants.items()
                     if v.score is not None and v.score.predicted is not None and math.isfinite(v.score.predicted)}
    row_run_errors = [row_predicted[name] - observed for name, _, _, observed in runs if name in row_predicted]

    coverage = []
    for held_variant, held_seed, _, held_observed in runs:
        others = [r for r in runs if not (r[0] == held_variant and r[1] == held_seed)]
        predictions_by_variant, observed_by_variant = {}, {}
        for name, _, predicted, observed in others:
            predictions_by_variant.setdefault(name, []).append(predicted)
            observed_by_variant.setdefault(name, []).append(observed)
        prediction_sd, df = pooled_sd(predictions_by_variant)
        observed_sd, _ = pooled_sd(observed_by_variant)
        own = predictions_by_variant.get(held_variant, [])
        # the shape term as the table builds it (fitting.ShapeCheck.rms_residual), from the other runs' fits
        shape = window_end_check([fit for key, fit in run_fits.items() if key != (held_variant, held_seed)])
        shape_sd = shape.rms_residual if shape else 0.0
        low, high = held_out_interval(own, observed_sd, prediction_sd, df, shape_sd=shape_sd)
        if math.isfinite(low):
            low0, high0 = held_out_interval(own, observed_sd, prediction_sd, df)
            coverage.append({"variant": held_variant, "seed": int(held_seed), "low": low, "high": high,
                             "shape_sd": shape_sd, "inside_without_shape": bool(low0 <= held_observed <= high0),
                             "observed": held_observed, "inside": bool(low <= held_observed <= high)})

    base = fits.variants.get(schema.BASE)
    table = fits.table.set_index("variant")
    base_c_mid = float(base.fit.c_mid) if base else math.nan
    mdes = {}
    for name, row in table.iterrows():
        if name != schema.BASE:
            lower_bound = row["MDE_is_lower_bound"]
            mdes[name] = {"axis": row["axis"], "MDE_A": _num(row["MDE_A"]), "MDE_pred": _num(row["MDE_pred"]),
                          "lower_bound": None if pd.isna(lower_bound) else bool(lower_bound)}
    return {
        "sweep_dir": str(sweep_dir), "seeds": sorted({int(s) for _, s, _, _ in runs}),
        "budget": {"unit": budget.unit, "burn_in": budget.burn_in, "fit_at": budget.fit_at, "target": budget.target},
        "base_c_mid": base_c_mid,
        "fit_at_over_c_mid": budget.fit_at / base_c_mid if base else math.nan,
        "target_over_c_mid": budget.target / base_c_mid if base else math.nan,
        "a_within_margin": {"share": float(np.mean(within)) if within else math.nan, "runs": len(within),
                            "goal": 0.8},
        "a_runs_against_their_row": {
            "share": float(np.mean(np.abs(row_run_errors) <= MARGIN)) if row_run_errors else math.nan,
            "runs": len(row_run_errors), "goal": 0.8,
            "error_mean": float(np.mean(row_run_errors)) if row_run_errors else math.nan,
            "error_sd": float(np.std(row_run_errors, ddof=1)) if len(row_run_errors) > 1 else math.nan},
        "a_seed_mean_rows": {"share": float(np.mean(np.abs(row_errors) <= MARGIN)) if row_errors else math.nan,
                             "rows": len(row_errors), "errors": row_errors},
        "calibration": {"share": float(np.mean([c["inside"] for c in coverage])) if coverage else math.nan,
                        "cases": len(coverage), "goal": 0.9, "misses": [c for c in coverage if not c["inside"]],
                        "share_without_shape": (float(np.mean([c["inside_without_shape"] for c in coverage]))
                                                if coverage else math.nan),
                        "mean_halfwidth": (float(np.mean([(c["high"] - c["low"]) / 2 for c in coverage]))
                                           if coverage else math.nan)},
        "base_ceiling_identifiable": {
            # the seed-mean fit: not at a bound, and its bootstrap A interval does not reach one either
            "seed_mean_fit": bool(base and ceiling_identifiable(base.fit) and "a_ci_at_bound" not in base.boot.flags),
            "every_seed": bool(base and all(f is not None and ceiling_identifiable(f)
                                            for f in base.seed_fits.values())),
            "A": float(base.fit.a) if base else math.nan, "flags": list(base.fit.flags) if base else []},
        "verdicts": {name: verdict_text(row) for name, row in table.iterrows()},
        "reasons": {name: row["reason"] for name, row in table.iterrows()},
        "mde": mdes,
        "error_diagnosis": error_diagnosis(data, [predicted - observed for _, _, predicted, observed in runs]),
    }


def error_diagnosis(data, as_fitted: list[float]) -> dict:
    """(a)'s errors, as fitted and under two refits of every run's own curve (see the module docstring).

    data: the sweep's reports.sweep_data.SweepData; as_fitted: the (a) errors of the same runs.
    """
    import numpy as np

    from fitting import FitInputError, fit_sigmoid, observed_at
    from fitting.extrapolation import DEFAULT_OBSERVED_HALFWIDTH
    from fitting.fit import window_method_options

    budget = data.budget
    halfwidth = {} if budget.observed_window is None else {"halfwidth": budget.observed_window}
    method = {**window_method_options(budget.fit_method), "weights": budget.fit_weights}
    errors = {"as_fitted": list(as_fitted), "a_fixed_at_1": [], "in_steps": []}
    observed_sds = []  # per run: the noise of its observed value (one point's sd / sqrt(points averaged))
    for _, run in data.evals.groupby("run_id", sort=False):
        steps, compute, rate = (run[column].to_numpy(dtype=float) for column in ("step", "compute", "pass_rate"))
        observed, count, _ = observed_at(compute, rate, budget.target, **halfwidth)
        if steps[0] != 0 or not math.isfinite(observed):
            continue
        # the logged sampling se of the points near the target when the run has it; else the scatter of
        # consecutive points, which misses the part of the error the shared evaluation stream carries over
        halfwidth_c = (budget.observed_window or DEFAULT_OBSERVED_HALFWIDTH) * budget.target
        near = np.abs(compute - budget.target) <= halfwidth_c
        logged = run["pass_rate_se"].to_numpy(dtype=float)[near]
        logged = logged[np.isfinite(logged)]
        point_sd = float(logged.mean()) if logged.size else evaluation_noise(compute, rate, budget.fit_at)
        if math.isfinite(point_sd):
            observed_sds.append(point_sd / math.sqrt(count))
        step_fit_at, step_target, step_burn_in = np.interp([budget.fit_at, budget.target, budget.burn_in],
                                                          compute, steps)
        try:
            a_at_1 = fit_sigmoid(compute, rate, r0=rate[0], a=1.0, burn_in=budget.burn_in, fit_until=budget.fit_at,
                                 **method)
            in_steps = fit_sigmoid(steps, rate, r0=rate[0], burn_in=step_burn_in, fit_until=step_fit_at, **method)
        except FitInputError:
            continue
        errors["a_fixed_at_1"].append(float(a_at_1.predict(budget.target)) - observed)
        errors["in_steps"].append(float(in_steps.predict(step_target)) - observed)
    summary = {}
    if observed_sds:
        from scipy.stats import norm

        sds = np.array(observed_sds)
        # Even a perfect prediction misses the margin when the observed value itself is that noisy.
        summary["observed_noise"] = {"runs": int(sds.size), "median_sd": float(np.median(sds)),
                                     "perfect_predictor_within_margin": float(np.mean(2 * norm.cdf(MARGIN / sds) - 1))}
    for name, values in errors.items():
        values = np.array(values)
        summary[name] = {"runs": int(values.size),
                         "within_margin": float(np.mean(np.abs(values) <= MARGIN)) if values.size else math.nan,
                         "mean_error": float(values.mean()) if values.size else math.nan,
                         "sd_error": float(values.std()) if values.size else math.nan}
    return summary


def evaluation_noise(compute, rate, start: float) -> float:
    """sd of one evaluation point about the curve, from the points at C >= start (the late, slow part).

    Second differences of consecutive points cancel a locally linear trend: for independent noise of
    sd s, var(y[i+1] - 2 y[i] + y[i-1]) = 6 s^2. NaN with fewer than 5 such points.
    """
    import numpy as np

    late = np.asarray(rate, dtype=float)[np.asarray(compute, dtype=float) >= start]
    if late.size < 5:
        return math.nan
    second = late[2:] - 2 * late[1:-1] + late[:-2]
    return float(np.sqrt(np.mean(second**2) / 6))


def _num(value) -> float | None:
    return None if value is None or (isinstance(value, float) and math.isnan(value)) else float(value)


def replication(first: dict, second: dict) -> dict:
    """(d): the verdicts of two runs of the same spec, variant by variant."""
    names = sorted(set(first["verdicts"]) | set(second["verdicts"]))
    rows = {n: {"first": first["verdicts"].get(n), "second": second["verdicts"].get(n)} for n in names}
    same = [r["first"] == r["second"] for r in rows.values()]
    return {"same_verdicts": sum(same), "variants": len(same), "all_same": all(same), "rows": rows}


def run_sweep(spec: Path, name_suffix: str = "", seeds: list[int] | None = None) -> Path:
    """`sweep run SPEC`; with a name suffix (--run-again, --seeds) a copy of SPEC named name + suffix,
    its seeds replaced by `seeds` when given. Returns the sweep dir."""
    import yaml

    if name_suffix:
        data = yaml.safe_load(spec.read_text())
        data["name"] = f"{data['name']}{name_suffix}"
        if seeds:
            data["seeds"] = list(seeds)
        copy = spec.with_name(f"{spec.stem}{name_suffix}.yaml")
        copy.write_text(yaml.safe_dump(data, sort_keys=False))
        spec = copy
    subprocess.run([sys.executable, "-m", "sweeps.cli", "run", str(spec)], cwd=REPO, check=True)
    from sweeps.spec import load_spec, output_dir

    return REPO / output_dir(load_spec(spec))


def summary_lines(result: dict) -> list[str]:
    lines = [f"sweep {result['sweep_dir']}: seeds {result['seeds']}; base C_mid {result['base_c_mid']:.3g} "
             f"{result['budget']['unit']}; fit_at {result['fit_at_over_c_mid']:.2f}x, target "
             f"{result['target_over_c_mid']:.2f}x C_mid (paper ~3x, ~6x)"]
    a, c, base = result["a_within_margin"], result["calibration"], result["base_ceiling_identifiable"]
    lines.append(f"(a) |pred - obs| <= {MARGIN} at the target: {a['share']:.0%} of {a['runs']} runs (goal >= 80%)")
    against_row = result["a_runs_against_their_row"]
    lines.append(f"    each run against its recipe's prediction (the table's row): {against_row['share']:.0%} of "
                 f"{against_row['runs']} runs within {MARGIN} (error mean {against_row['error_mean']:+.3f}, "
                 f"sd {against_row['error_sd']:.3f})")
    rows = result["a_seed_mean_rows"]
    lines.append(f"    the table's rows (each variant's seed-mean curve): {rows['share']:.0%} of {rows['rows']} within "
                 f"{MARGIN}")
    lines.append(f"(b) leave-one-seed-out 95% intervals containing the held-out observed value: {c['share']:.0%} of "
                 f"{c['cases']} (goal >= 90%); mean half-width {c['mean_halfwidth']:.3f}; without the shape term "
                 f"{c['share_without_shape']:.0%}")
    lines.append(f"(c) base A identifiable: seed-mean fit {base['seed_mean_fit']}, every seed {base['every_seed']} "
                 f"(A {base['A']:.3f}; flags {', '.join(base['flags']) or 'none'})")
    lines.append("verdicts and MDEs:")
    for name, verdict in result["verdicts"].items():
        mde = result["mde"].get(name)
        extra = "" if not mde else (f"  MDE A {mde['MDE_A']:.3f}, pred {mde['MDE_pred']:.3f}"
                                    + (" (lower bounds)" if mde["lower_bound"] else "")
                                    if mde["MDE_A"] is not None else "")
        lines.append(f"    {name:<32} {verdict}{extra}")
    return lines


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("sweep_dirs", nargs="*", help="one finished sweep directory, or two runs of the same spec")
    parser.add_argument("--run", type=Path, help="run this sweep spec first (sweep run), then study it")
    parser.add_argument("--run-again", action="store_true", help="with --run: run it a second time for (d)")
    parser.add_argument("--seeds", type=int, nargs="+",
                        help="with --run: run the spec on these seeds instead (a hold-out: new curves to check a "
                             "protocol chosen on an earlier run), into its name + '-seeds-<seeds>'")
    parser.add_argument("--n-boot", type=int, default=200)
    parser.add_argument("--protocols", nargs="+", metavar="METHOD:BURN_IN[:WEIGHTS]",
                        help="also refit the same curves under these fit protocols, e.g. default:0 paper:0 "
                             "default:10 default:0:equal (burn_in in the budget's unit; weights compute or "
                             "equal, default compute) and print (a)-(c) for each")
    parser.add_argument("--out", default=str(REPO / "benchmarks" / "out" / "bench_validity.json"))
    args = parser.parse_args(argv)
    dirs = [Path(d) for d in args.sweep_dirs]
    if args.run:
        suffix = "-seeds-" + "-".join(map(str, args.seeds)) if args.seeds else ""
        dirs = [run_sweep(args.run, suffix, args.seeds)] + ([run_sweep(args.run, suffix + "-2", args.seeds)]
                                                             if args.run_again else [])
    if not 1 <= len(dirs) <= 2:
        parser.error("give one or two sweep directories, or --run SPEC")
    results = [study(d, n_boot=args.n_boot) for d in dirs]
    out = {"date": datetime.now(timezone.utc).isoformat(timespec="seconds"), "machine": platform.node(),
           "studies": results}
    for result in results:
        print("\n".join(summary_lines(result)))
        for name, row in result["error_diagnosis"].items():
            if name == "observed_noise":
                print(f"    observed value's noise: median sd {row['median_sd']:.3f} over {row['runs']} runs; a "
                      f"perfect prediction would be within {MARGIN} for {row['perfect_predictor_within_margin']:.0%}")
                continue
            print(f"    (a) {name:<13}: {row['within_margin']:.0%} of {row['runs']} runs within {MARGIN}, "
                  f"error mean {row['mean_error']:+.3f}, sd {row['sd_error']:.3f}")
    if args.protocols:
        out["protocols"] = {}
        for text in args.protocols:
            method, burn_in, weights = (text.split(":") + [None, None])[:3]  # METHOD[:BURN_IN[:WEIGHTS]]
            protocol = {"fit_method": method, "burn_in": float(burn_in or 0), "fit_weights": weights or "compute"}
            result = study(dirs[0], n_boot=args.n_boot, protocol=protocol)
            out["protocols"][text] = result
            a, c, base = result["a_within_margin"], result["calibration"], result["base_ceiling_identifiable"]
            against_row = result["a_runs_against_their_row"]
            print(f"protocol {text:<18} (a) {a['share']:.0%} of {a['runs']} "
                  f"(against the row {against_row['share']:.0%})"
                  f"  (b) {c['share']:.0%} of {c['cases']}  "
                  f"(c) base A {base['A']:.3f} identifiable in every seed: {base['every_seed']}")
    if len(results) == 2:
        out["replication"] = replication(*results)
        rep = out["replication"]
        print(f"(d) same verdict in both runs: {rep['same_verdicts']} of {rep['variants']} variants")
        for name, row in rep["rows"].items():
            if row["first"] != row["second"]:
                print(f"    {name}: {row['first']} -> {row['second']}")
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(out, indent=1, default=str) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
