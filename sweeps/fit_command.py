"""`sweep fit`: fit sigmoid curves to a CSV of (run, compute, pass_rate) rows and score the extrapolation.

    sweep fit examples/curves.csv --fit-until 8000 --target 16000 --burn-in 1500

Works on curves from any framework (verl, TRL, a wandb export): nothing here trains or imports torch.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import textwrap

from sweeps.arguments import MAX_SEED, integer, real

REQUIRED_COLUMNS = ("run", "compute", "pass_rate")
MAX_BOOT = 100_000
# A fit (or a bootstrap refit) of a 100-point curve takes ~3 ms on the 2-core CPU: a file of 1,000 runs with
# the default 1,000 draws is a million fits, most of an hour. Past this many, `sweep fit` asks first.
MAX_FITS, MAX_FITS_MINUTES = 100_000, 5
OPTIONAL_COLUMNS = ("seed", "step")
MISSING_VALUES = ("nan", "-nan", "na", "n/a", "<na>", "null", "none")  # a missing evaluation, as exports write it

EPILOG = """\
CSV columns: run, compute, pass_rate (one row per evaluation; pass_rate in [0, 1]); optional seed, step;
other columns are ignored. Rows with an empty pass_rate are dropped and counted in the notes. Each
(run, seed) curve is sorted by step when there is a step column, else by compute; compute must then
increase strictly (duplicates mean mixed seeds: add a seed column).
R0: fitted with --fit-r0; else --r0 for every curve; else each curve's own row at compute 0.
Several seeds per run: each seed is fitted on its own (one row each) and a second table gives the
spread across seeds (mean, sd, min, max of A, B, C_mid and the prediction at --target).
Intervals: A, B and C_mid from a moving-block residual bootstrap (--n-boot draws; 0 skips it); the
prediction's 90% interval from back-tests pooled over the file's curves (each curve fitted to
fit_until / r and scored at its own points up to fit_until, r = target / fit_until; fitting.backtest),
with a regime column naming why a curve is not yet predictable. Observed at target: mean of the points
within target * (1 +- --observed-window). Exit status 1 when a curve could not be fitted
(the others are still shown), 2 when none could.
--power-law: also fit the paper's power-law baseline R = A - D / C^B on the same window and show its
ceiling A and prediction at --target beside the sigmoid's. A power law keeps rising: on a saturating
curve its A runs to the bound 1 (no ceiling) and it over-predicts far out.
"""


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.formatter_class = argparse.RawDescriptionHelpFormatter
    parser.epilog = EPILOG
    parser.add_argument("curves", metavar="CURVES.csv", help="CSV with columns run, compute, pass_rate [, seed, step]")
    positive = real(0, low_open=True)
    parser.add_argument("--fit-until", type=positive, required=True, help="last compute inside the fit window")
    parser.add_argument("--target", type=positive, required=True, help="compute at which to predict and score")
    parser.add_argument("--burn-in", type=real(0), default=0.0,
                        help="first compute inside the fit window (paper: 1500 GPU-hours); default 0")
    r0 = parser.add_mutually_exclusive_group()
    r0.add_argument("--r0", type=real(0, 1), help="pass rate at zero RL compute, used for every curve")
    r0.add_argument("--fit-r0", action="store_true", help="fit R0 instead of taking it as given")
    parser.add_argument("--method", choices=("default", "paper"), default="default",
                        help="default: continuous C_mid, bounded B; paper: the paper's A x C_mid grid")
    parser.add_argument("--weights", choices=("compute", "equal"), default="compute",
                        help="least-squares weight of a point: compute (the compute half-way to its neighbours; "
                             "all 1 on an even schedule, the paper's) or equal")
    parser.add_argument("--paper-c-mid-range", type=positive, nargs=2, metavar=("LO", "HI"),
                        help="paper method: C_mid grid range (default the paper's 100 40000 GPU-hours)")
    parser.add_argument("--paper-grid-from-data", action="store_true",
                        help="paper method: derive the grid ranges from the data (C_mid: first/15..last*5, A: R0..1)")
    parser.add_argument("--margin", type=positive, default=0.02, help="allowed |predicted - observed| (default 0.02)")
    parser.add_argument("--observed-window", type=real(0, 1, high_open=True), default=0.03,
                        help="relative half-width of the observed window around --target (default 0.03)")
    parser.add_argument("--n-boot", type=integer(2, MAX_BOOT, also=(0,)), default=1000,
                        help="bootstrap draws for the intervals (0: none; default 1000)")
    parser.add_argument("--bootstrap-seed", type=integer(0, MAX_SEED), default=0,
                        help="random seed of the bootstrap (default 0)")
    parser.add_argument("--allow-long", action="store_true",
                        help=f"fit even when curves x (1 + n-boot) exceeds {MAX_FITS:,} fits "
                             f"(~{MAX_FITS_MINUTES} min on a 2-core CPU)")
    parser.add_argument("--power-law", action="store_true",
                        help="also fit the power-law baseline R = A - D/C^B and show its ceiling and prediction")
    parser.add_argument("--json", action="store_true", help="print JSON instead of tables")


def _read_curves(path: str):
    """The CSV as a frame of run, compute, pass_rate (, seed, step); errors name the file, line and column,
    never a value or a column name that is not one of ours (the file may be anything: an env dump, a key)."""
    import pandas as pd

    from sweeps.cli import UsageError

    hint = f"expected a CSV file with columns {', '.join(REQUIRED_COLUMNS)}"
    try:
        frame = pd.read_csv(path, dtype=str, keep_default_na=False, na_filter=False)
    except FileNotFoundError:
        raise UsageError(f"no such file: {path}; {hint}") from None
    except IsADirectoryError:
        raise UsageError(f"{path} is a directory; {hint}") from None
    except OSError as error:
        raise UsageError(f"cannot read {path}: {error.strerror or error}; {hint}") from None
    except pd.errors.EmptyDataError:
        raise UsageError(f"cannot read {path} as CSV: No columns (an empty file); {hint}") from None
    except pd.errors.ParserError:
        raise UsageError(f"cannot read {path} as CSV: rows with more fields than the header, or an unclosed quote; "
                         f"{hint}") from None
    except UnicodeDecodeError:
        raise UsageError(f"cannot read {path} as CSV: not a UTF-8 text file (binary?); {hint}") from None
    frame.columns = [str(c).strip() for c in frame.columns]
    missing = [c for c in REQUIRED_COLUMNS if c not in frame.columns]
    if missing:
        known = [c for c in frame.columns if c in REQUIRED_COLUMNS + OPTIONAL_COLUMNS]
        others = len(frame.columns) - len(known)
        found = ", ".join(known + ([f"{others} other column(s) (not shown)"] if others else [])) or "none"
        raise UsageError(f"{path} is missing column(s) {', '.join(missing)}; found {found}; "
                         f"required: {', '.join(REQUIRED_COLUMNS)}; optional: {', '.join(OPTIONAL_COLUMNS)}")
    if frame.empty:
        raise UsageError(f"{path} has a header but no rows")
    for column in ("compute", "pass_rate") + (("step",) if "step" in frame.columns else ()):
        text = frame[column].str.strip()
        numeric = pd.to_numeric(text.where(text != ""), errors="coerce")
        bad = numeric.isna() & (text != "") & ~text.str.lower().isin(MISSING_VALUES)
        if bad.any():
            raise UsageError(f"{path} line {int(bad.values.argmax()) + 2}: column {column} holds a value that is not a "
                             "number (leave it empty for a missing evaluation)")
        frame[column] = numeric.astype(float)
    run_names = frame["run"].str.strip()
    if (run_names == "").any():
        raise UsageError(f"{path} line {int((run_names == '').values.argmax()) + 2}: empty run name")
    frame["run"] = frame["run"].astype(str)
    frame["seed"] = frame["seed"].astype(str) if "seed" in frame.columns else "-"
    return frame


class FitProgress:
    """Curves fitted so far on stderr, once a fit has run PROGRESS_AFTER_S: at most every PROGRESS_EVERY_S, with
    the time left at the rate so far (each curve costs one fit plus --n-boot refits)."""

    PROGRESS_AFTER_S, PROGRESS_EVERY_S = 5.0, 10.0

    def __init__(self, total: int) -> None:
        import time

        self.total, self.clock = total, time.perf_counter
        self.started = self.last = self.clock()
        self.shown = False

    def update(self, done: int) -> None:
        now = self.clock()
        if now - self.started < self.PROGRESS_AFTER_S or (self.shown and now - self.last < self.PROGRESS_EVERY_S):
            return
        elapsed = now - self.started
        left = elapsed / done * (self.total - done)
        print(f"sweep fit: {done}/{self.total} curves fitted, {elapsed:.0f} s elapsed, ~{left:.0f} s left",
              file=sys.stderr, flush=True)
        self.shown, self.last = True, now

    def close(self) -> None:
        if self.shown:
            print(f"sweep fit: {self.total} curves fitted in {self.clock() - self.started:.0f} s", file=sys.stderr)


def _fit_curve(run: str, seed: str, rows, args) -> dict:
    """Fit, bootstrap and score one (run, seed) curve; FitInputError becomes the record's fit_error."""
    from fitting import FitInputError, bootstrap_fit, fit_sigmoid, score_extrapolation
    from fitting.backtest import backtest_curve

    record = {"run": run, "seed": seed, "notes": []}
    empty = rows["pass_rate"].isna()
    if empty.any():
        record["notes"].append(f"dropped {int(empty.sum())} row(s) with an empty or NaN pass_rate")
        rows = rows[~empty]
    rows = rows.sort_values("step" if "step" in rows.columns else "compute", kind="stable")
    compute, pass_rate = rows["compute"].to_numpy(), rows["pass_rate"].to_numpy()
    if args.power_law:
        record["power_law"] = _fit_power_law(compute, pass_rate, args)
    options = {"burn_in": args.burn_in, "fit_until": args.fit_until, "method": args.method, "weights": args.weights}
    if args.fit_r0:
        options["fit_r0"] = True
    elif args.r0 is not None:
        options["r0"] = args.r0
    if args.method == "paper":
        if args.paper_grid_from_data:
            options.update(paper_c_mid_range=None, paper_a_range=None)
        elif args.paper_c_mid_range:
            options["paper_c_mid_range"] = tuple(args.paper_c_mid_range)
    def fit_to(fit_until: float):
        return fit_sigmoid(compute, pass_rate, **{**options, "fit_until": fit_until})

    try:
        fit = fit_sigmoid(compute, pass_rate, **options)
        backtests = (backtest_curve(fit_to, compute, pass_rate, fit_at=args.fit_until, target=args.target,
                                    observed_halfwidth=args.observed_window)
                     if args.target > args.fit_until else [])  # a target inside the window: nothing to back-test
        score = score_extrapolation(fit, compute, pass_rate, target=args.target, margin=args.margin,
                                    observed_halfwidth=args.observed_window)
        boot = (bootstrap_fit(fit, n_boot=args.n_boot, target=args.target, seed=args.bootstrap_seed)
                if args.n_boot else None)
    except FitInputError as error:
        dropped = f" ({record['notes'][0]}, of {len(empty)})" if empty.any() else ""
        record["fit_error"] = f"{error}{dropped}"
        return record
    flags = list(score.flags) + [f for f in (boot.flags if boot else ()) if f not in score.flags]
    record.update(
        n_points=fit.n_points, window=list(fit.window), r0=fit.r0, r0_source=fit.r0_source,
        a=fit.a, b=fit.b, c_mid=fit.c_mid,
        a_ci=list(boot.a_ci) if boot else None, b_ci=list(boot.b_ci) if boot else None,
        c_mid_ci=list(boot.c_mid_ci) if boot else None,
        predicted=score.predicted, predicted_ci=list(boot.prediction_ci) if boot else None,
        observed=score.observed, n_observed=score.n_observed, error=score.error,
        within_margin=score.within_margin, flags=flags, fit=fit, fit_to=fit_to, backtests=backtests,
    )
    return record


def _calibrate_records(records: list[dict], args):
    """Calibrate over every fitted curve's back-tests; each record gains its calibrated interval and regime."""
    from fitting.backtest import calibrate
    from fitting.forecast import forecast_at

    fitted = [r for r in records if "fit" in r]
    calibration = calibrate([r["backtests"] for r in fitted], margin=args.margin)
    for r in fitted:
        forecast = forecast_at(r["fit_to"], r["fit"], r["backtests"], calibration, target=args.target)
        r.update(calibrated_ci=list(forecast.interval), calibrated_centre=forecast.centre, regime=list(forecast.regime),
                 covered=forecast.held(r["observed"]))
    observed = [r["covered"] for r in fitted if r["covered"] is not None]
    held = (f"; at the target the intervals held {sum(observed)} of {len(observed)} observed ends "
            f"({100 * sum(observed) / len(observed):.0f}%)" if observed else "")
    note = (f"prediction intervals: {100 * calibration.level:.0f}% from the back-tests ({calibration.describe()}); "
            f"{sum(bool(r['regime']) for r in fitted)} of {len(fitted)} curves not yet predictable{held}")
    summary = {"level": calibration.level, "n_tests": calibration.n_tests, "quantile": calibration.quantile,
               "typical_scale": calibration.typical_scale, "within_margin": calibration.within_margin,
               "mean_error": calibration.mean_error, "covered": sum(observed), "observed": len(observed), "note": note}
    return summary


def _fit_power_law(compute, pass_rate, args) -> dict:
    """The power-law baseline on the sigmoid's window: A (None as the ceiling when A sits at its bound 1)."""
    from fitting import FitInputError, fit_power_law

    try:
        power = fit_power_law(compute, pass_rate, burn_in=args.burn_in, fit_until=args.fit_until)
    except FitInputError as error:
        return {"fit_error": str(error)}
    return {"a": power.a, "d": power.d, "b": power.b, "ceiling": None if power.a_at_bound else power.a,
            "predicted": float(power.predict(args.target)), "n_points": power.n_points}


def _seed_spreads(records: list[dict], target: float) -> list[dict]:
    from fitting import seed_spread

    spreads = []
    for run in dict.fromkeys(r["run"] for r in records):
        fits = [r["fit"] for r in records if r["run"] == run and "fit" in r]
        if len(fits) >= 2:
            spread = seed_spread(fits, target=target)
            spreads.append({"run": run, "n_seeds": spread.n_seeds, "mean": spread.mean, "std": spread.std,
                            "min": spread.low, "max": spread.high})
    return spreads


def _with_ci(value, ci, fmt) -> str:
    return fmt(value) + (f" [{fmt(ci[0])}, {fmt(ci[1])}]" if ci else "")


def _curve_name(record: dict) -> str:
    """"run/seed", or "run" for a CSV without a seed column."""
    return f"{record['run']}/{record['seed']}" if record["seed"] != "-" else record["run"]


def _print_tables(records: list[dict], spreads: list[dict], forecast: dict, args) -> None:
    from fitting import FLAG_MEANINGS
    from reports.text import aligned_lines, sig3

    three, two = (lambda v: f"{v:.3f}"), (lambda v: f"{v:.2f}")
    print(f"fit window [{args.burn_in:g}, {args.fit_until:g}], method {args.method}, weights {args.weights}, "
          f"{args.n_boot} bootstrap draws; observed = mean of points within {args.target:g} "
          f"+-{100 * args.observed_window:g}%; margin {args.margin:g}")
    header = ["run", "seed", "n", "R0", "A", "B", "C_mid", f"pred@{args.target:g} [90% back-test]", "observed", "error",
              "ok", "regime", "flags"]
    rows, notes, seen_flags = [], [], []
    for r in records:
        name = _curve_name(r)
        notes += [f"{name}: {note}" for note in r["notes"]]
        if "fit_error" in r:
            rows.append([r["run"], r["seed"]] + ["-"] * 10 + ["not fitted (see notes)"])
            notes.append(f"{name}: not fitted: {r['fit_error']}")
            continue
        seen_flags += [f for f in r["flags"] if f not in seen_flags]
        unobserved = r["n_observed"] == 0
        rows.append([
            r["run"], r["seed"], str(r["n_points"]), f"{r['r0']:.3f}" + ("*" if r["r0_source"] == "fitted" else ""),
            _with_ci(r["a"], r["a_ci"], three), _with_ci(r["b"], r["b_ci"], two),
            _with_ci(r["c_mid"], r["c_mid_ci"], sig3), _with_ci(r["calibrated_centre"], r["calibrated_ci"], three),
            "-" if unobserved else three(r["observed"]), "-" if unobserved else f"{r['error']:+.3f}",
            "-" if unobserved else ("yes" if r["within_margin"] else "NO"), ", ".join(r["regime"]) or "-",
            ", ".join(r["flags"]) or "-",
        ])
    print("\n".join(aligned_lines(header, rows)))
    if any(r.get("r0_source") == "fitted" for r in records):
        print("* R0 fitted")
    if spreads:
        print("\nseed spread (mean +- sd [min, max])")
        keys = [("a", three), ("b", two), ("c_mid", sig3), ("prediction", three)]
        spread_rows = [[s["run"], str(s["n_seeds"])]
                       + [f"{fmt(s['mean'][k])} +- {fmt(s['std'][k])} [{fmt(s['min'][k])}, {fmt(s['max'][k])}]"
                          for k, fmt in keys] for s in spreads]
        print("\n".join(aligned_lines(["run", "seeds", "A", "B", "C_mid", f"pred@{args.target:g}"], spread_rows)))
    print("\n" + textwrap.fill(forecast["note"], 120))
    regimes = list(dict.fromkeys(reason for r in records for reason in r.get("regime", [])))
    if regimes:
        from fitting.forecast import REGIME_MEANINGS

        print("\nregime (why a prediction is not yet trusted):")
        for reason in regimes:
            print(f"  {reason}: {REGIME_MEANINGS[reason]}")
    if seen_flags:
        print("\nflags:")
        for flag in seen_flags:
            print(f"  {flag}: {FLAG_MEANINGS[flag]}")
    if notes:
        print("\nnotes:")
        for note in notes:
            print(f"  {note}")


def _print_power_law(records: list[dict], args) -> None:
    """The sigmoid and the power-law baseline side by side: ceiling and prediction at --target."""
    from reports.text import aligned_lines

    def three(value: float) -> str:
        return f"{value:.3f}"

    print("\npower-law baseline R = A - D / C^B on the same window (A at its bound 1: no ceiling)")
    rows = []
    for r in records:
        power = r["power_law"]
        sigmoid = ["-", "-"] if "fit_error" in r else [three(r["a"]), three(r["predicted"])]
        if "fit_error" in power:
            law = ["-", "-"]
        else:
            law = [three(power["ceiling"]) if power["ceiling"] is not None else "none (A=1)", three(power["predicted"])]
        observed = "-" if "fit_error" in r or r["n_observed"] == 0 else three(r["observed"])
        rows.append([r["run"], r["seed"], sigmoid[0], law[0], sigmoid[1], law[1], observed,
                     f"not fitted: {power['fit_error']}" if "fit_error" in power else ""])
    target = f"{args.target:g}"
    header = ["run", "seed", "A sigmoid", "A power law", f"pred@{target} sigmoid", f"pred@{target} power law",
              "observed", "note"]
    print("\n".join(aligned_lines(header, rows)))


def _unfitted_summary(records: list[dict]) -> str:
    """One line saying why no curve could be fitted: the first few curves and their reasons."""
    reasons = [f"{_curve_name(r)}: {r['fit_error']}" for r in records]
    more = f"; and {len(reasons) - 3} more" if len(reasons) > 3 else ""
    return f"no curve could be fitted ({len(records)} curve(s)): " + "; ".join(reasons[:3]) + more


def _jsonable(value):
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, dict):
        return {k: _jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_jsonable(v) for v in value]
    return value


def run(args) -> int:
    from sweeps.cli import UsageError

    if not args.fit_until > args.burn_in:
        raise UsageError(f"--fit-until must exceed --burn-in; got {args.fit_until} <= {args.burn_in}")
    if args.paper_c_mid_range and not args.paper_c_mid_range[0] < args.paper_c_mid_range[1]:
        raise UsageError(f"--paper-c-mid-range: LO must be below HI; got {args.paper_c_mid_range[0]:g} "
                         f"{args.paper_c_mid_range[1]:g}")
    if args.method == "paper" and args.fit_r0:
        raise UsageError("--method paper takes R0 as given; drop --fit-r0 or use --method default")
    frame = _read_curves(args.curves)
    curves = frame.groupby(["run", "seed"], sort=False)
    fits = len(curves) * (1 + args.n_boot)
    if fits > MAX_FITS and not args.allow_long:
        fewer = max(0, MAX_FITS // len(curves) - 1)
        raise UsageError(f"{len(curves):,} curves x (1 + --n-boot {args.n_boot}) = {fits:,} fits, about "
                         f"{fits * 3e-3 / 60:.0f} min at ~3 ms a fit on a 2-core CPU; lower --n-boot to "
                         f"{fewer if fewer >= 2 else 0}{' (or 0: no intervals)' if fewer >= 2 else ' (no intervals)'}, "
                         "or add --allow-long to fit them all")
    progress = FitProgress(len(curves))
    records = []
    for (run, seed), rows in curves:
        records.append(_fit_curve(run, seed, rows, args))
        progress.update(len(records))
    progress.close()
    if all("fit_error" in r for r in records):
        raise UsageError(_unfitted_summary(records))
    spreads = _seed_spreads(records, args.target)
    forecast = _calibrate_records(records, args)
    from fitting import window_end_check

    shape = window_end_check([r["fit"] for r in records if "fit" in r])
    if args.json:
        settings = {k: getattr(args, k) for k in ("burn_in", "fit_until", "target", "method", "weights", "margin",
                                                  "observed_window", "n_boot", "bootstrap_seed", "power_law")}
        curves = [{k: v for k, v in r.items() if k not in ("fit", "fit_to", "backtests")} for r in records]
        fit_shape = None if shape is None else {"runs": shape.runs, "above": shape.above, "p_value": shape.p_value,
                                                "departs": shape.departs,
                                                "note": shape.note() if shape.departs else None}
        print(json.dumps(_jsonable({"settings": settings, "curves": curves, "seed_spread": spreads,
                                    "fit_shape": fit_shape, "prediction_intervals": forecast}), indent=2))
    else:
        _print_tables(records, spreads, forecast, args)
        if shape is not None and shape.departs:
            print("\n" + textwrap.fill(shape.note(), 120))
        if args.power_law:
            _print_power_law(records, args)
    return 1 if any("fit_error" in r for r in records) else 0
