"""Where the spread of A comes from, and whether another estimator of each run's ceiling narrows it (issue 52).

    .venv/bin/python benchmarks/bench_a_estimators.py SWEEP_DIR [SWEEP_DIR ...]

Refits a finished LOO sweep's runs (nothing trained) and reads, per estimator of a run's ceiling:
- s (each run fitted as the verdicts fit it, to budget.verdict_fit_until): the sd of one seed's paired
  difference (variant - base) from the table's two-way residual
  (fitting.seeds.paired_difference_sd), the length-penalty variant left out (its A sits at the bound);
- the MDE in A that s gives a table of 8 variants on 3 seeds at the shipped margin (fitting.power.table_mde);
- rms dA: the root-mean-square over variants of the mean paired difference, and rms dA / s. An estimator that
  merely shrinks A towards the data lowers s and rms dA alike (ratio unchanged): its MDE falls, its power does not;
- mean A over the runs, and the window fit's prediction at the target against the observed pass rate there
  (fit on [0, fit_at]; bias and the share within 0.02): the same weights' extrapolation, on other data.
The estimators: the shipped fit (least squares, compute weights, budget.fit_weights), equal weights, robust losses
(scipy's soft_l1 and Cauchy, scale 0.01: a transient dip weighs less), and as a floor, the observed pass rate at
the target (mean of the last two points), which is a run's end, not its ceiling.
Output: text on stdout.
"""

from __future__ import annotations

import argparse
import math
import sys
import warnings
from pathlib import Path

import numpy as np
from scipy.optimize import least_squares

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from fitting import fit_sigmoid  # noqa: E402
from fitting.fit import point_weights  # noqa: E402
from fitting.power import table_mde  # noqa: E402
from fitting.seeds import MIN_A_SHIFT, paired_difference_sd  # noqa: E402
from reports.sweep_data import load_sweep  # noqa: E402


def sigmoid_fit(compute, pass_rate, r0: float, until: float, *, weights: str = "compute", loss: str = "linear",
                scale: float = 1.0):
    """(A, fitted curve) of R = R0 + (A - R0) / (1 + (C_mid / C)^B) on 0 < C <= until, by scipy's least_squares
    with the given loss, started from the shipped fit (the shipped fit itself when loss is linear)."""
    shipped = fit_sigmoid(compute, pass_rate, r0=r0, fit_until=until, weights=weights)
    if loss == "linear":
        return shipped.a, shipped.predict
    inside = (compute > 0) & (compute <= until)
    c, y = compute[inside], pass_rate[inside]
    root_w = np.sqrt(point_weights(c, weights))

    def curve(x, at):
        a, b, log_c_mid = x
        return r0 + (a - r0) / (1 + np.exp(b * (log_c_mid - np.log(at))))

    start = [shipped.a, shipped.b, math.log(shipped.c_mid)]
    low = [r0, 0.1, math.log(c[0] / 100)]
    high = [1.0, 10.0, math.log(c[-1] * 100)]
    start = np.clip(start, np.nextafter(low, high), np.nextafter(high, low))
    solved = least_squares(lambda x: root_w * (curve(x, c) - y), start, loss=loss, f_scale=scale, bounds=(low, high))
    return float(solved.x[0]), (lambda at, x=solved.x: curve(x, np.asarray(at, dtype=float)))


ESTIMATORS = {
    "shipped fit (compute weights)": {},
    "equal weights": {"weights": "equal"},
    "soft_l1 loss, scale 0.01": {"loss": "soft_l1", "scale": 0.01},
    "Cauchy loss, scale 0.01": {"loss": "cauchy", "scale": 0.01},
}


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("sweeps", type=Path, nargs="+", help="finished LOO sweeps")
    args = parser.parse_args(argv)
    warnings.filterwarnings("ignore")
    for path in args.sweeps:
        data = load_sweep(path)
        budget, evals = data.budget, data.evals
        runs = {(name, seed): rows.sort_values("step") for (name, seed), rows in evals.groupby(["variant", "seed"])}
        names = sorted({name for name, _ in runs})
        compared = [n for n in names if n != "base" and not n.startswith("length_control")]
        seeds = sorted({seed for _, seed in runs})
        print(f"{path} ({len(seeds)} seeds; fit_at {budget.fit_at:g}, target {budget.target:g})")
        rows_out = []
        for label, options in {**ESTIMATORS, "observed at the target (last 2 points)": None}.items():
            value, errors = {}, []
            for (name, seed), rows in runs.items():
                compute, pass_rate = rows["compute"].to_numpy(), rows["pass_rate"].to_numpy()
                r0 = float(rows.loc[rows["step"] == 0, "pass_rate"].iloc[0])
                if options is None:
                    value[name, seed] = float(pass_rate[-2:].mean())
                    continue
                value[name, seed], _ = sigmoid_fit(compute, pass_rate, r0, budget.verdict_fit_until, **options)
                _, window_curve = sigmoid_fit(compute, pass_rate, r0, budget.fit_at, **options)
                near = np.abs(compute / budget.target - 1) <= 0.1
                if near.any():  # a run that stopped short of the target (a failed job) has nothing to score
                    errors.append(float(window_curve(budget.target)) - float(pass_rate[near].mean()))
            differences = {n: {s: value[n, s] - value["base", s] for s in seeds if (n, s) in value} for n in compared}
            s, _ = paired_difference_sd(differences)
            rms = math.sqrt(np.mean([np.mean(list(d.values())) ** 2 for d in differences.values()]))
            mean_a = np.mean([v for (n, _), v in value.items() if not n.startswith("length_control")])
            error = np.array(errors)
            prediction = (f"{error.mean():+.3f} / {np.mean(np.abs(error) <= 0.02):.0%}" if error.size else "-")
            rows_out.append((label, s, table_mde(s, 3, 8, margin=MIN_A_SHIFT), rms, rms / s, mean_a, prediction))
        print(f"  {'estimator':40s} {'s':>7s} {'MDE A':>6s} {'rms dA':>7s} {'ratio':>6s} {'mean A':>7s}"
              "  prediction at target: bias / within 0.02")
        for label, s, mde, rms, ratio, mean_a, prediction in rows_out:
            print(f"  {label:40s} {s:7.4f} {mde:6.3f} {rms:7.4f} {ratio:6.2f} {mean_a:7.3f}  {prediction}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
