"""How often paired LOO intervals miss on null sweeps: each variant's spread pooled vs the two-way residual.

    .venv/bin/python benchmarks/bench_paired_sd.py [--tables 200000] [--variants 8] [--seeds 2 3]

Simulates LOO tables with no effect anywhere: V variants and the base on S seeds, each run's value
= a seed effect shared by every recipe of that seed (the paired design's blocks) + independent
normal noise. For every table it builds the paired differences d_vs = y_vs - y_base,s and the
interval mean_v +- t(df) s / sqrt(S) with s from
  (a) the variants' own spreads pooled: s^2 = sum_v sum_s (d_vs - mean_v)^2 / (V (S - 1)), the
      estimate fitting.seeds used before (fitting.seeds.pooled_sd);
  (b) the two-way (recipe x seed) residual of the table with the base as a row of zeros, the one it
      uses now (fitting.seeds.paired_difference_sd; vectorised here for a full table: the same formula).
Reports, per S: the share of 95% intervals that miss 0 (nominal 5%) and the share of tables where
any interval at the table-wide level of the shipped LOO (1 - 0.05 / 3V per interval) misses, for one
quantity (V tests; Bonferroni bounds it by 0.05 / 3). Output: JSON on stdout.
"""

from __future__ import annotations

import argparse
import json
import sys

import numpy as np
from scipy import stats


def miss_rates(tables: int, variants: int, seeds: int, rng: np.random.Generator) -> dict:
    runs = rng.normal(size=(tables, variants + 1, seeds)) + rng.normal(size=(tables, 1, seeds))
    d = runs[:, 1:, :] - runs[:, :1, :]
    means = d.mean(-1)
    df = variants * (seeds - 1)
    own = np.sqrt(((d - means[..., None]) ** 2).sum((1, 2)) / df)
    z = np.concatenate([np.zeros((tables, 1, seeds)), d], axis=1)
    residual = z - z.mean(2, keepdims=True) - z.mean(1, keepdims=True) + z.mean((1, 2), keepdims=True)
    two_way = np.sqrt(2 * (residual ** 2).sum((1, 2)) / df)
    table_level = 1 - 0.05 / (3 * variants)
    result = {"seeds": seeds, "variants": variants, "df": df}
    for name, sd in (("variants_pooled", own), ("two_way_residual", two_way)):
        scaled = np.abs(means) / (sd[:, None] / np.sqrt(seeds))
        result[name] = {
            "miss_95": float((scaled > stats.t.ppf(0.975, df)).mean()),
            "any_miss_table_level": float((scaled > stats.t.ppf((1 + table_level) / 2, df)).any(1).mean()),
        }
    return result


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tables", type=int, default=200_000)
    parser.add_argument("--variants", type=int, default=8)
    parser.add_argument("--seeds", type=int, nargs="+", default=[2, 3])
    args = parser.parse_args(argv)
    rng = np.random.default_rng(0)
    print(json.dumps([miss_rates(args.tables, args.variants, s, rng) for s in args.seeds], indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
