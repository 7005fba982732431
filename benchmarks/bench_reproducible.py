"""Does a sweep's job repeat under load? Some of a finished sweep's jobs run again beside busy loops, compared.

    .venv/bin/python benchmarks/bench_reproducible.py SWEEP_DIR [--axes batch_filter,aggregation] [--seeds 0]
        [--busy 1]
    .venv/bin/python benchmarks/bench_reproducible.py SWEEP_DIR --rerun-dir RERUN_SWEEP_DIR   (compare only)

SWEEP_DIR is a finished `sweep run` (its spec.yaml is read back). The same spec, cut to the base and the named
axes on the named seeds and renamed `<name>-rerun`, runs again with `sweep run` while --busy CPU-bound
processes (`while True: pass`) run beside it; the 1-minute load average is sampled every 5 s. A rerun job has
the run id of its first run (same config), so the two are compared evaluation point by evaluation point:
step, pass rate, compute (FLOPs), staleness and loss, exactly. With PipelineRL's modeled timing
(off_policy.timing: modeled, the demo's) every point should be identical; with real timing it is not.

Output: one line per job (identical or the first differences, wall-clock of both runs) and JSON in
benchmarks/out/bench_reproducible.json.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import threading
import time
from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
OUT = REPO / "benchmarks" / "out"
COMPARED = ("step", "eval/pass_rate", "compute/flops", "train/staleness", "train/loss")


def evaluation_points(run_dir: Path) -> list[dict]:
    from recipe.tracking import read_metrics

    return [record for record in read_metrics(run_dir) if "eval/pass_rate" in record]


def compare(first: list[dict], second: list[dict]) -> list[str]:
    """The differences between two runs' evaluation points (empty: identical)."""
    if len(first) != len(second):
        return [f"{len(first)} evaluation points against {len(second)}"]
    return [f"step {a['step']}: {key} {a.get(key)!r} against {b.get(key)!r}"
            for a, b in zip(first, second) for key in COMPARED if a.get(key) != b.get(key)]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("sweep_dir", type=Path)
    parser.add_argument("--axes", default="batch_filter,aggregation", help="axes to rerun beside the base")
    parser.add_argument("--seeds", default="0", help="seeds to rerun, comma-separated")
    parser.add_argument("--busy", type=int, default=1, help="CPU-bound processes beside the rerun")
    parser.add_argument("--rerun-dir", type=Path, default=None,
                        help="compare SWEEP_DIR with this finished rerun instead of running one")
    args = parser.parse_args()
    if args.rerun_dir is not None:
        jobs = compare_sweeps(args.sweep_dir, args.rerun_dir)
        print(f"all identical: {all(job['identical'] for job in jobs)}")
        return

    spec = yaml.safe_load((args.sweep_dir / "spec.yaml").read_text())
    axes = args.axes.split(",") if args.axes else []
    unknown = sorted(set(axes) - set(spec["axes"]))
    if unknown:
        raise SystemExit(f"--axes: {', '.join(unknown)} not among the sweep's axes ({', '.join(spec['axes'])})")
    # The frozen spec names its own sweep directory (output_dir): the rerun gets one of its own, runs/<name>-rerun.
    spec.update(name=f"{spec['name']}-rerun", axes={axis: spec["axes"][axis] for axis in axes},
                seeds=[int(seed) for seed in args.seeds.split(",")], output_dir=None)
    rerun_spec = OUT / "bench_reproducible.yaml"
    OUT.mkdir(parents=True, exist_ok=True)
    rerun_spec.write_text(yaml.safe_dump(spec, sort_keys=False))

    busy = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(args.busy)]
    loads, done = [], threading.Event()

    def sample_load() -> None:
        while not done.wait(5.0):
            loads.append(os.getloadavg()[0])

    sampler = threading.Thread(target=sample_load, daemon=True)
    sampler.start()
    started = time.time()
    try:
        subprocess.run([str(REPO / ".venv" / "bin" / "sweep"), "run", str(rerun_spec)], check=True, cwd=REPO)
    finally:
        done.set()
        for process in busy:
            process.kill()
            process.wait()
    jobs = compare_sweeps(args.sweep_dir, REPO / "runs" / spec["name"])
    result = {"sweep_dir": str(args.sweep_dir), "busy": args.busy, "minutes": (time.time() - started) / 60,
              "load_average_1min": {"median": sorted(loads)[len(loads) // 2] if loads else None,
                                    "min": min(loads, default=None), "max": max(loads, default=None),
                                    "readings": len(loads)}, "jobs": jobs}
    (OUT / "bench_reproducible.json").write_text(json.dumps(result, indent=1))
    print(f"load average (1 min) median {result['load_average_1min']['median']}, "
          f"{len(loads)} readings; all identical: {all(job['identical'] for job in jobs)}")


def compare_sweeps(sweep_dir: Path, rerun_dir: Path) -> list[dict]:
    """Each finished job of the rerun against the job of the same run id in the first sweep; printed."""
    jobs = []
    for run_dir in sorted((rerun_dir / "runs").iterdir()):
        if not (run_dir / "done.json").is_file():
            print(f"{run_dir.name}: not finished in {rerun_dir}")
            continue
        first_dir = sweep_dir / "runs" / run_dir.name
        first, second = evaluation_points(first_dir), evaluation_points(run_dir)
        differences = compare(first, second)
        jobs.append({"run_id": run_dir.name, "points": len(second), "identical": not differences,
                     "differences": differences[:5], "wall_seconds": [first[-1]["compute/wall_seconds"],
                                                                      second[-1]["compute/wall_seconds"]]})
        print(f"{run_dir.name}: {len(second)} points, "
              f"{'identical' if not differences else 'differs: ' + '; '.join(differences[:3])}; "
              f"generation + training {jobs[-1]['wall_seconds'][0]:.1f} s first, {jobs[-1]['wall_seconds'][1]:.1f} s "
              f"under load")
    return jobs


if __name__ == "__main__":
    main()
