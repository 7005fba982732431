"""What sigmoid-aware pruning saves: the shipped tune study run twice, without pruning and with it.

    .venv/bin/python -m benchmarks.bench_tune_pruning [--trials 8] [--seed 0] [--out benchmarks/out/tune-pruning]

Both studies draw the same parameter sets in the same order (a seeded random sampler: its draws do
not depend on earlier results, whereas TPE's would diverge after the first pruned trial), so trial n
is the same recipe in both and the only difference is whether the pruner stops it. Reports the
compute each study spent, the compute pruning saved, which trials were pruned and where, and
whether both studies name the same best trial.

Then how often the pruner's interval misses (issue 17): every trial of the unpruned study ran on to
fit_at, so its objective there is what a pruned trial would have reached. For each such trial and
each horizon h in --horizons (fractions of fit_at; the pruner may act from min_compute_frac on), its
curve is cut at h x fit_at and the pruner's interval is computed from that part alone, as the
pruner would (sweeps.tune.estimate_objective, the pruner's level, bootstrap draws and run_sd), and
once more without the run-to-run widening (run_sd 0, the interval before issue 17). A miss is a
final objective outside the interval. Also, for each trial the pruned study stopped: its interval at
pruning against the same recipe's objective in the unpruned study.
Writes <out>/summary.json; about 2 minutes a trial on a 2-core machine.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import platform
import sys
import time
from datetime import datetime, timezone
from pathlib import Path

from benchmarks.common import REPO


def run_study(spec, label: str) -> dict:
    from sweeps.spec import output_dir
    from sweeps.trials import compute_summary, read_records
    from sweeps.tune import run_tune

    began = time.time()
    status = run_tune(spec)
    wall = time.time() - began
    records = read_records(output_dir(spec))
    complete = [r for r in records if r.state == "complete"]
    best = max(complete, key=lambda r: r.value) if complete else None
    return {
        "label": label, "status": status, "wall_seconds": wall,
        "compute_spent": compute_summary(records, spec.budget.fit_at)[0],
        "trials": [{"number": r.number, "state": r.state, "params": r.params, "objective": r.value,
                    "interval": [r.lower, r.upper], "compute": r.compute,
                    "pruned_at": (r.pruned or {}).get("compute"),
                    "pruned_estimate": (r.pruned or {}).get("estimate"),
                    "pruned_against": (r.pruned or {}).get("best")} for r in records],
        "best": None if best is None else {"number": best.number, "params": best.params, "objective": best.value,
                                           "interval": [best.lower, best.upper]},
    }


def interval_misses(spec, study_dir: Path, trials: list[dict], horizons: list[float]) -> dict:
    """Cases (trial, horizon): the pruner's interval from the curve cut at horizon x fit_at vs the trial's objective."""
    from sweeps.pruning import PRUNERS
    from fitting import FitInputError
    from sweeps.trials import curve_points, read_records
    from sweeps.tune import estimate_objective, interval_settings

    level, n_boot, run_sd = interval_settings(PRUNERS.build(spec.pruner))
    run_ids = {record.number: record.run_id for record in read_records(study_dir)}
    cases = []
    for trial in trials:
        if trial["state"] != "complete" or trial["objective"] is None:
            continue
        steps, compute, pass_rate = curve_points(study_dir / "runs" / run_ids[trial["number"]], spec.budget.unit)
        for horizon in horizons:
            cut = [i for i, c in enumerate(compute) if c <= horizon * spec.budget.fit_at]
            points = ([steps[i] for i in cut], [compute[i] for i in cut], [pass_rate[i] for i in cut])
            try:
                honest = estimate_objective(spec, points, level, n_boot, run_sd)
                narrow = estimate_objective(spec, points, level, n_boot, 0.0)
            except FitInputError:
                continue
            final = trial["objective"]
            cases.append({
                "trial": trial["number"], "horizon": horizon, "seen_compute": points[1][-1], "final": final,
                "interval": [honest.lower, honest.upper], "unbounded": (honest.lower, honest.upper) == (0.0, 1.0),
                "miss": not honest.lower <= final <= honest.upper,
                "interval_without_run_sd": [narrow.lower, narrow.upper],
                "miss_without_run_sd": not narrow.lower <= final <= narrow.upper,
            })
    n = len(cases)
    return {"level": level, "n_boot": n_boot, "run_sd": run_sd, "horizons": horizons, "cases": cases,
            "misses": sum(case["miss"] for case in cases), "unbounded": sum(case["unbounded"] for case in cases),
            "misses_without_run_sd": sum(case["miss_without_run_sd"] for case in cases), "n": n}


def main() -> int:
    from sweeps.tune_spec import load_tune_spec

    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--spec", default=str(REPO / "sweeps" / "tune.yaml"))
    parser.add_argument("--trials", type=int, default=8)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", default=str(REPO / "benchmarks" / "out" / "tune-pruning"))
    parser.add_argument("--horizons", type=float, nargs="+", default=[0.5, 0.6, 0.75],
                        help="fractions of fit_at at which the interval check cuts each unpruned curve")
    args = parser.parse_args()

    base = load_tune_spec(args.spec)
    out = Path(args.out)
    studies, specs = {}, {}
    for label, pruner in (("no_pruning", "none"), ("sigmoid_bound", base.pruner)):
        spec = dataclasses.replace(base, name=f"{base.name}-{label}", trials=args.trials, pruner=pruner,
                                   sampler=dataclasses.replace(base.sampler, name="random", seed=args.seed),
                                   output_dir=str(out / label))
        specs[label] = spec
        studies[label] = run_study(spec, label)
    plain, pruned = studies["no_pruning"], studies["sigmoid_bound"]
    # The unpruned curves judged by the shipped pruner's intervals (the spec with the shipped pruner).
    check = interval_misses(dataclasses.replace(specs["no_pruning"], pruner=base.pruner), out / "no_pruning",
                            plain["trials"], args.horizons)
    run_on = {trial["number"]: trial["objective"] for trial in plain["trials"] if trial["state"] == "complete"}
    pruned_check = []
    for t in pruned["trials"]:
        if t["state"] == "pruned":
            low, high, reached = t["pruned_estimate"]["lower"], t["pruned_estimate"]["upper"], run_on.get(t["number"])
            pruned_check.append({"trial": t["number"], "pruned_at": t["pruned_at"], "interval": [low, high],
                                 "run_on": reached, "contains": reached is not None and low <= reached <= high})
    summary = {
        "date": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "machine": f"{platform.node()} ({platform.machine()}, {__import__('os').cpu_count()} cpus)",
        "spec": args.spec, "trials": args.trials, "sampler_seed": args.seed, "pruner": base.pruner,
        "studies": studies,
        "compute_saved_fraction": 1 - pruned["compute_spent"] / plain["compute_spent"],
        "wall_saved_fraction": 1 - pruned["wall_seconds"] / plain["wall_seconds"],
        "same_best_trial": (plain["best"] or {}).get("number") == (pruned["best"] or {}).get("number"),
        "interval_check": check, "pruned_vs_run_on": pruned_check,
    }
    out.mkdir(parents=True, exist_ok=True)
    (out / "summary.json").write_text(json.dumps(summary, indent=1) + "\n")
    unit = base.budget.unit
    print(f"\n{'trial':<6}{'params':<58}{'no pruning':>22}{'sigmoid_bound':>34}")
    for a, b in zip(plain["trials"], pruned["trials"]):
        params = ", ".join(f"{k.split('.')[-1]}={v:.3g}" if isinstance(v, float) else f"{k.split('.')[-1]}={v}"
                           for k, v in a["params"].items())
        left = f"{a['objective']:.3f} @ {a['compute']:.0f}" if a["objective"] is not None else a["state"]
        right = (f"{b['objective']:.3f} @ {b['compute']:.0f}" if b["state"] == "complete"
                 else f"pruned @ {b['pruned_at']:.0f} (U={b['pruned_estimate']['upper']:.3f})" if b["state"] == "pruned"
                 else b["state"])
        print(f"{a['number']:<6}{params:<58}{left:>22}{right:>34}")
    print(f"compute spent ({unit}): no pruning {plain['compute_spent']:.0f}, "
          f"sigmoid_bound {pruned['compute_spent']:.0f} "
          f"(saved {summary['compute_saved_fraction']:.1%}); wall {plain['wall_seconds']:.0f} s vs "
          f"{pruned['wall_seconds']:.0f} s; best trial {plain['best'] and plain['best']['number']} vs "
          f"{pruned['best'] and pruned['best']['number']} (same: {summary['same_best_trial']})")
    print(f"\ninterval check ({check['level']:.0%} intervals, run_sd {check['run_sd']}): of {check['n']} cases "
          f"(unpruned trial x horizon {args.horizons} of fit_at), {check['misses']} miss the objective the trial "
          f"reached at fit_at ({check['unbounded']} unbounded [0, 1]); without the run-to-run widening "
          f"{check['misses_without_run_sd']} miss")
    for case in check["cases"]:
        print(f"  trial {case['trial']} cut at {case['seen_compute']:.0f}: [{case['interval'][0]:.3f}, "
              f"{case['interval'][1]:.3f}] (no run_sd [{case['interval_without_run_sd'][0]:.3f}, "
              f"{case['interval_without_run_sd'][1]:.3f}]) vs {case['final']:.3f}{'  MISS' if case['miss'] else ''}")
    for case in pruned_check:
        print(f"  pruned trial {case['trial']} @ {case['pruned_at']:.0f}: [{case['interval'][0]:.3f}, "
              f"{case['interval'][1]:.3f}] vs {case['run_on']} when run on (contains: {case['contains']})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
