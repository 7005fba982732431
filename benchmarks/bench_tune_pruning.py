"""What sigmoid-aware pruning saves: the shipped tune study run twice, without pruning and with it.

    .venv/bin/python benchmarks/bench_tune_pruning.py [--trials 8] [--seed 0] [--out benchmarks/out/tune-pruning]

Both studies draw the same parameter sets in the same order (a seeded random sampler: its draws do
not depend on earlier results, whereas TPE's would diverge after the first pruned trial), so trial n
is the same recipe in both and the only difference is whether the pruner stops it. Reports the
compute each study spent, the compute pruning saved, which trials were pruned and where, and
whether both studies name the same best trial. Writes <out>/summary.json; about 3 minutes a trial
on a 2-core machine, so ~40 minutes for the default 8 + 8 trials.
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

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))


def run_study(spec, label: str) -> dict:
    from sweeps.tune import compute_summary, read_records, run_tune
    from sweeps.spec import output_dir

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


def main() -> int:
    from sweeps.tune_spec import load_tune_spec

    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--spec", default=str(REPO / "sweeps" / "tune.yaml"))
    parser.add_argument("--trials", type=int, default=8)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", default=str(REPO / "benchmarks" / "out" / "tune-pruning"))
    args = parser.parse_args()

    base = load_tune_spec(args.spec)
    out = Path(args.out)
    studies = {}
    for label, pruner in (("no_pruning", "none"), ("sigmoid_bound", base.pruner)):
        spec = dataclasses.replace(base, name=f"{base.name}-{label}", trials=args.trials, pruner=pruner,
                                   sampler=dataclasses.replace(base.sampler, name="random", seed=args.seed),
                                   output_dir=str(out / label))
        studies[label] = run_study(spec, label)
    plain, pruned = studies["no_pruning"], studies["sigmoid_bound"]
    summary = {
        "date": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "machine": f"{platform.node()} ({platform.machine()}, {__import__('os').cpu_count()} cpus)",
        "spec": args.spec, "trials": args.trials, "sampler_seed": args.seed, "pruner": base.pruner,
        "studies": studies,
        "compute_saved_fraction": 1 - pruned["compute_spent"] / plain["compute_spent"],
        "wall_saved_fraction": 1 - pruned["wall_seconds"] / plain["wall_seconds"],
        "same_best_trial": (plain["best"] or {}).get("number") == (pruned["best"] or {}).get("number"),
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
    print(f"compute spent ({unit}): no pruning {plain['compute_spent']:.0f}, sigmoid_bound {pruned['compute_spent']:.0f} "
          f"(saved {summary['compute_saved_fraction']:.1%}); wall {plain['wall_seconds']:.0f} s vs "
          f"{pruned['wall_seconds']:.0f} s; best trial {plain['best'] and plain['best']['number']} vs "
          f"{pruned['best'] and pruned['best']['number']} (same: {summary['same_best_trial']})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
