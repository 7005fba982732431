"""The seed planner against a measured sweep: plan from some of its seeds, compare with all of them (issue 40).

    .venv/bin/python -m benchmarks.bench_planner runs/scalerl-loo-3seeds --pilot-seeds 0 1 \
        [--compare DIR ...] [--out benchmarks/out/planner.json]

The pilot is the sweep's runs of --pilot-seeds only (seeds 0 and 1 of a 3-seed LOO are the jobs a 2-seed
`make demo` runs). For the pilot and for the whole sweep it prints, per quantity, the run-to-run sd s of a
paired seed (the two-way residual, reports.power.sweep_noise) and:
  - the planner's MDE (fitting.power.mde: exact 80% power at the table's Bonferroni level and margins) at
    the pilot's seeds and at the whole sweep's, from the pilot's s: its prediction;
  - what each table measured: the MDE its loo_table prints (fitting.power.table_mde of its own s, the
    textbook (t + t) figure) and the planner's exact MDE from its own s.
--compare DIR adds earlier finished sweeps of the same spec (other demos): their tables' MDE next to the
pilot's prediction for their seed count.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import platform
from datetime import datetime, timezone
from pathlib import Path

from fitting.power import mde, table_mde
from reports.power import quantity_margin, sweep_noise
from reports.sweep_data import SweepData, load_sweep
from reports.tables import fit_sweep

QUANTITIES = ("A", "pred_at_target", "reach_50", "reach_90")


def seeds_subset(data: SweepData, seeds: list[int]) -> SweepData:
    """The sweep as if only `seeds` had run: its jobs, evaluations and diagnostics of those seeds."""
    runs = data.runs[data.runs["seed"].isin(seeds)].reset_index(drop=True)
    ids = set(runs["run_id"])
    return SweepData(name=f"{data.name} (seeds {', '.join(map(str, seeds))})", meta=data.meta, budget=data.budget,
                     runs=runs, evals=data.evals[data.evals["run_id"].isin(ids)].reset_index(drop=True),
                     diagnostics=data.diagnostics[data.diagnostics["run_id"].isin(ids)].reset_index(drop=True),
                     configs={k: v for k, v in data.configs.items() if k in ids}, source=data.source,
                     notes=list(data.notes))


def margin(quantity: str, budget) -> float:
    return quantity_margin(quantity, budget.min_a_shift, budget.min_compute_ratio)


def measure(data: SweepData) -> dict:
    """s per quantity, and the table's and the planner's MDE from it at this sweep's seeds."""
    noise = sweep_noise(fit_sweep(data))
    out = {"seeds": noise.seeds, "variants": noise.variants, "quantities": {}}
    for quantity in QUANTITIES:
        q = noise.quantities[quantity]
        m = margin(quantity, data.budget)
        row = {"s": q.s, "df": q.df}
        if q.df >= 1 and q.s > 0:
            row["table_mde"] = table_mde(q.s, noise.seeds, noise.variants, margin=m)
            row["planner_mde"] = mde(q.s, noise.seeds, noise.variants, margin=m)
        out["quantities"][quantity] = row
    return out


def shown(quantity: str, value) -> str:
    if value is None or not math.isfinite(value):
        return "-"
    return f"x{math.exp(value):.2f}" if quantity.startswith("reach") else f"{value:.3f}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("sweep_dir")
    parser.add_argument("--pilot-seeds", type=int, nargs="+", default=[0, 1])
    parser.add_argument("--compare", nargs="*", default=[], help="other finished sweeps of the same spec")
    parser.add_argument("--out", default="benchmarks/out/planner.json")
    args = parser.parse_args()

    data = load_sweep(args.sweep_dir)
    pilot = measure(seeds_subset(data, args.pilot_seeds))
    whole = measure(data)
    others = {d: measure(load_sweep(d)) for d in args.compare}
    V = whole["variants"]
    print(f"pilot: {args.sweep_dir} seeds {args.pilot_seeds} ({pilot['seeds']} seeds, {V} variants); "
          f"whole: {whole['seeds']} seeds")
    print(f"{'quantity':16} {'s pilot':>8} {'s whole':>8} | {'planned at ' + str(pilot['seeds']):>14} "
          f"{'pilot table':>11} | {'planned at ' + str(whole['seeds']):>14} {'whole table':>11} {'whole planner':>13}")
    rows = {}
    for quantity in QUANTITIES:
        p, w = pilot["quantities"][quantity], whole["quantities"][quantity]
        m = margin(quantity, data.budget)
        plan = {n: mde(p["s"], n, V, margin=m) for n in sorted({pilot["seeds"], whole["seeds"], 2, 3, 4, 6, 8})} \
            if p.get("planner_mde") is not None else {}
        rows[quantity] = {"pilot": p, "whole": w, "planned_from_pilot": plan,
                          "others": {d: o["quantities"][quantity] | {"seeds": o["seeds"]} for d, o in others.items()}}
        print(f"{quantity:16} {p['s']:8.4f} {w['s']:8.4f} | {shown(quantity, plan.get(pilot['seeds'])):>14} "
              f"{shown(quantity, p.get('table_mde')):>11} | {shown(quantity, plan.get(whole['seeds'])):>14} "
              f"{shown(quantity, w.get('table_mde')):>11} {shown(quantity, w.get('planner_mde')):>13}")
        for d, o in rows[quantity]["others"].items():
            print(f"{'':16} {d}: {o['seeds']} seeds, s {o['s']:.4f}, table MDE {shown(quantity, o.get('table_mde'))}"
                  f" (planned from the pilot: {shown(quantity, plan.get(o['seeds']))})")
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps({
        "machine": platform.processor() or platform.machine(), "date": datetime.now(timezone.utc).isoformat(),
        "load": os.getloadavg(), "sweep": args.sweep_dir, "pilot_seeds": args.pilot_seeds, "rows": rows},
        indent=1, default=float))


if __name__ == "__main__":
    main()
