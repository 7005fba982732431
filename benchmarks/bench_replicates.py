"""How far one recipe's runs part when only their rollout draws differ, against the LOO's run-to-run residual.

    .venv/bin/python benchmarks/bench_replicates.py runs/replicates runs/scalerl-loo-a runs/scalerl-loo-b ...

The first sweep is an A/A scan of the base over the recipe key `replicate` (benchmarks/replicates.yaml: each
seed's base run three times, replicates 1 and 2 drawing other rollouts than replicate 0, the same warm start,
prompt order and evaluation draws). The others are LOO sweeps of the same base on some of the same seeds; their
variants give the two-way (recipe x seed) residual the LOO's intervals rest on (fitting.seeds).

Per quantity (A; ln C to reach 50% / 90% of the gain, against replicate 0's levels), every run read from its own
whole-run fit (the verdicts' fits):
  sigma_b  the spread of a seed's base runs across rollout draws, sum_s sum_j (q_sj - mean_s)^2 / (S (k - 1));
  sigma_v  the LOO variants' two-way residual (the length-penalty variant, whose A sits at its bound, left out),
           pooled over the LOO sweeps given;
  F        sigma_b^2 / sigma_v^2 with its one-sided p (the LOO intervals take one sigma for every recipe).
The paired sd of one seed's difference that each design implies:
  one base run a seed (the LOO as shipped), as the intervals read it: sqrt(2) sigma_v;
  two base runs a seed averaged, from what the replicates measure: sqrt(sigma_v^2 + sigma_b^2 / 2) (exact even
  when the runs of one rollout stream share a component that a paired difference cancels).
Output: text on stdout.
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

from fitting.seeds import seed_quantities  # noqa: E402
from reports.sweep_data import load_sweep  # noqa: E402
from reports.tables import _fit_curve  # noqa: E402

QUANTITIES = ("A", "reach_50", "reach_90")


def run_fits(sweep_dir: Path) -> tuple[list[tuple[str, int, int, object]], object]:
    """(variant, seed, replicate, whole-run fit) of every run of a sweep, and its budget."""
    data = load_sweep(sweep_dir)
    budget = data.budget
    runs = []
    for run_id, rows in data.evals.groupby("run_id"):
        fit, _, _ = _fit_curve(rows.sort_values("step"), budget, fit_until=budget.verdict_fit_until)
        replicate = int(data.configs.get(run_id, {}).get("replicate", "0"))
        runs.append((str(rows["variant"].iloc[0]), int(rows["seed"].iloc[0]), replicate, fit))
    return runs, budget


def quantity(name: str, fit, reference_fit, budget) -> float:
    """A, or ln C(fit) - ln C(reference) to reach a share of the gain reference_fit made (the LOO's reach)."""
    if name == "A":
        return float(fit.a)
    values = seed_quantities({"base": {0: reference_fit}, "x": {0: fit}}, "base", fit_at=budget.verdict_until,
                             target=budget.target)
    return float(values[name]["x"][0])


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("replicates", type=Path, help="the A/A scan over replicate (benchmarks/replicates.yaml)")
    parser.add_argument("loo", type=Path, nargs="+", help="LOO sweeps of the same base")
    args = parser.parse_args(argv)
    warnings.filterwarnings("ignore")
    aa, budget = run_fits(args.replicates)
    base = {(seed, replicate): fit for _, seed, replicate, fit in aa}
    seeds = sorted({seed for seed, _ in base})
    replicates = sorted({replicate for _, replicate in base})
    loo = [run_fits(path) for path in args.loo]
    print(f"A/A: {len(seeds)} seeds x {len(replicates)} runs of the base ({args.replicates}); "
          f"LOO: {', '.join(map(str, args.loo))}")
    for name in QUANTITIES:
        by_seed = np.array([[quantity(name, base[(s, r)], base[(s, 0)], budget) for r in replicates] for s in seeds])
        sb2 = float(((by_seed - by_seed.mean(1, keepdims=True)) ** 2).sum()) / (len(seeds) * (len(replicates) - 1))
        df_b = len(seeds) * (len(replicates) - 1)
        squares, df_v = 0.0, 0
        for runs, loo_budget in loo:
            loo_base = {seed: fit for variant, seed, _, fit in runs if variant == "base"}
            variants = {}
            for variant, seed, _, fit in runs:
                if variant != "base" and not variant.startswith("length_control") and seed in loo_base:
                    variants.setdefault(variant, {})[seed] = quantity(name, fit, loo_base[seed], loo_budget)
            table = np.array([[values[s] for s in sorted(loo_base)] for values in variants.values()])
            residual = table - table.mean(1, keepdims=True) - table.mean(0, keepdims=True) + table.mean()
            squares += float((residual ** 2).sum())
            df_v += (table.shape[0] - 1) * (table.shape[1] - 1)
        sv2 = squares / df_v
        f = sb2 / sv2
        p = float(stats.f.sf(f, df_b, df_v))
        one, two = math.sqrt(2 * sv2), math.sqrt(sv2 + sb2 / 2)
        print(f"{name}: sigma_b {math.sqrt(sb2):.4f} (df {df_b})  sigma_v {math.sqrt(sv2):.4f} (df {df_v})  "
              f"F {f:.2f} (p {p:.3f})  paired sd of one seed: one base run {one:.4f}, two averaged {two:.4f}")
        print(f"  per seed (replicates {replicates}): "
              + "; ".join(f"{s}: " + " ".join(f"{v:+.3f}" if name != "A" else f"{v:.3f}" for v in row)
                          for s, row in zip(seeds, by_seed)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
