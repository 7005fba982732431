"""Do the LOO's intervals hold across seed sets? The same spec's effect estimates from independent seed sets.

    .venv/bin/python benchmarks/bench_across_sets.py runs/loo-seeds-0-2 runs/loo-seeds-3-5 runs/loo-seeds-6-8

Each sweep is the same LOO on other seeds. A variant's estimate (mean over a set's seeds of variant - base,
fitting.seeds.paired_effects) varies from set to set by its standard error, which each sweep's intervals take
as s / sqrt(n) (s: the two-way residual's paired sd, fitting.seeds.paired_difference_sd). Reported per quantity
(dA; ln C to reach 50% / 90% of the base's gain): the spread of every variant's estimates across the sets,
pooled over variants (df = sum (sets - 1)) with its 95% chi-square interval, against the root-mean-square of the
sets' standard errors. A ratio well above 1 says the intervals are too narrow; the length-penalty variant, whose
A sits at its bound, is left out. Output: text on stdout.
"""

from __future__ import annotations

import argparse
import math
import sys
import warnings
from pathlib import Path

import numpy as np
from scipy import stats

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from fitting.seeds import paired_difference_sd, seed_quantities  # noqa: E402
from reports.sweep_data import load_sweep  # noqa: E402
from reports.tables import fit_sweep  # noqa: E402

QUANTITIES = ("A", "reach_50", "reach_90")


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("sweeps", type=Path, nargs="+", help="finished sweeps of one LOO spec on disjoint seeds")
    args = parser.parse_args(argv)
    if len(args.sweeps) < 2:
        parser.error("give at least two sweeps (seed sets)")
    warnings.filterwarnings("ignore")
    values = []
    for path in args.sweeps:
        data = load_sweep(path)
        fits = fit_sweep(data, n_boot=20)
        seed_fits = {name: {s: f for s, f in v.seed_fits.items() if f is not None} for name, v in fits.variants.items()}
        values.append(seed_quantities(seed_fits, "base", fit_at=data.budget.verdict_until, target=data.budget.target))
    for quantity in QUANTITIES:
        estimates, standard_errors = {}, []
        for by_variant in values:
            base = by_variant[quantity]["base"]
            differences = {name: {s: x - base[s] for s, x in by_seed.items() if s in base}
                           for name, by_seed in by_variant[quantity].items()
                           if name != "base" and not name.startswith("length_control")}
            finite = {name: d for name, d in differences.items() if all(np.isfinite(list(d.values())))}
            s, _ = paired_difference_sd(finite)
            standard_errors.append(s / math.sqrt(len(base)))
            for name, d in finite.items():
                estimates.setdefault(name, []).append(float(np.mean(list(d.values()))))
        squares = sum(float(((np.array(x) - np.mean(x)) ** 2).sum()) for x in estimates.values())
        df = sum(len(x) - 1 for x in estimates.values())
        observed = math.sqrt(squares / df)
        low = observed * math.sqrt(df / stats.chi2.ppf(0.975, df))
        high = observed * math.sqrt(df / stats.chi2.ppf(0.025, df))
        claimed = math.sqrt(float(np.mean(np.square(standard_errors))))
        print(f"{quantity}: across-set sd of an estimate {observed:.4f} (df {df}; 95% [{low:.4f}, {high:.4f}]); "
              f"the intervals' se {claimed:.4f} (per set {', '.join(f'{x:.4f}' for x in standard_errors)}); "
              f"ratio {observed / claimed:.2f}")
        for name, x in estimates.items():
            print(f"  {name}: " + ", ".join(f"{v:+.3f}" for v in x))
    return 0


if __name__ == "__main__":
    sys.exit(main())
