"""The sweep harness's own overhead, read from a finished sweep directory.

    .venv/bin/python -m benchmarks.harness_overhead runs/scalerl-loo-embedded

Driver: <sweep>/harness.json (written by `sweep run`): wall-clock the driver spent planning,
launching, polling (mirroring metrics to MLflow, progress, state files; sleeps excluded) and
finalizing (fits, LOO table, PDF report, MLflow fit results), as a fraction of the sweep's wall
clock. Jobs: each job's wall-clock minus its training (generation + training wall-clock) and its
evaluations, i.e. process start, imports, model loading, checkpoint writes and for PipelineRL the
role processes' start. Only the driver's phases are the harness's; job start-up is reported beside
it because a sweep of short jobs pays it once per job.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if len(argv) != 1:
        print(__doc__)
        return 2
    sweep_dir = Path(argv[0])
    harness = json.loads((sweep_dir / "harness.json").read_text())
    wall = harness["wall_seconds"]
    print(f"sweep wall-clock {wall:.0f} s (this driver's run; a resumed sweep counts only the last driver)")
    for name, seconds in sorted(harness["phases"].items()):
        print(f"  driver {name:9s} {seconds:8.1f} s  {100 * seconds / wall:5.2f}%")
    print(f"  driver total     {harness['harness_seconds']:8.1f} s  {100 * harness['harness_fraction']:5.2f}%"
          f"   (driver CPU {harness['driver_cpu_seconds']:.1f} s)")
    jobs_wall = jobs_overhead = 0.0
    for done in sorted(sweep_dir.glob("runs/*/done.json")):
        attempt = json.loads(done.read_text()).get("wall_seconds_this_attempt")
        lines = (done.parent / "metrics.jsonl").read_text().splitlines()
        last = json.loads(lines[-1])
        busy = last["compute/wall_seconds"] + last["compute/evaluation_seconds"]
        if attempt is not None:
            jobs_wall += attempt
            jobs_overhead += max(0.0, attempt - busy)
    if jobs_wall:
        print(f"jobs: {jobs_wall:.0f} s in all, of which start-up/checkpoints/other {jobs_overhead:.0f} s "
              f"({100 * jobs_overhead / jobs_wall:.1f}%)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
