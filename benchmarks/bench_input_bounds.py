"""Time and peak memory of `sweep` on inputs of extreme size: what issue 36 bounded.

    .venv/bin/python -m benchmarks.bench_input_bounds

Each row runs one `sweep` command in its own process and reads its peak RSS (VmHWM) and wall time:
- `sweep plan` on a spec of 10,000 LOO variants (10,001 jobs; each a distinct loss.eps_max);
- `sweep plan` on 101 variants x 100 seeds (10,100 jobs);
- `sweep tune --check` on a range of G from 2 to 10^8 with total_batch 256 (refused: not a divisor);
- `sweep fit` on one curve of 100,000 rows (50,000 in the fit window), without and with 1,000 bootstrap draws;
- `sweep fit` on 1,000 curves of 100 points without bootstrap draws.
Prints one line per row and the machine's load average before it started.
"""

from __future__ import annotations

import argparse
import os
import platform
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from benchmarks.common import REPO

BUDGET = "budget: {unit: device_seconds, fit_at: 10, target: 20}\n"
# Peak RSS is VmHWM of /proc/self/status (kB): getrusage's ru_maxrss also counts the memory of the process this
# one was forked from (Linux carries it across exec).
RUNNER = ("import sys\nfrom sweeps.cli import main\ncode = main(sys.argv[2:])\n"
          "open(sys.argv[1], 'w').write(open('/proc/self/status').read().split('VmHWM:')[1].split()[0])\n"
          "sys.exit(code)\n")


def write_inputs(root: Path) -> None:
    variants = ", ".join(f"{{name: cispo, eps_max: {1 + i / 10000}}}" for i in range(1, 10001))
    (root / "variants.yaml").write_text(f"name: variants\naxes: {{loss: [{variants}]}}\n" + BUDGET)
    variants = ", ".join(f"{{name: cispo, eps_max: {1 + i / 1000}}}" for i in range(1, 101))
    seeds = ", ".join(map(str, range(100)))
    (root / "seeds.yaml").write_text(f"name: seeds\naxes: {{loss: [{variants}]}}\nseeds: [{seeds}]\n" + BUDGET)
    (root / "tune.yaml").write_text(
        "name: t\nspace:\n  rollout.samples_per_prompt: {type: int, low: 2, high: 100000000}\n"
        "budget: {unit: device_seconds, fit_at: 150, target: 300}\ntrials: 2\ntotal_batch: 256\n")
    rows = "".join(f"one,{i * 0.1:.1f},{0.2 + 0.5 / (1 + (3000 / (i * 0.1)) ** 1.5) if i else 0.2:.4f}\n"
                   for i in range(100_000))
    (root / "rows.csv").write_text("run,compute,pass_rate\n" + rows)
    curves = "".join(f"r{run},{c * 100},{0.2 + 0.5 / (1 + (3000 / (c * 100)) ** 1.5) if c else 0.2:.4f}\n"
                     for run in range(1000) for c in range(100))
    (root / "curves.csv").write_text("run,compute,pass_rate\n" + curves)


ROWS = [
    ("plan, 10,000 variants (10,001 jobs)", ["plan", "variants.yaml"]),
    ("plan, 101 variants x 100 seeds (10,100 jobs)", ["plan", "seeds.yaml"]),
    ("tune --check, G in [2, 10^8], total_batch 256", ["tune", "tune.yaml", "--check"]),
    ("fit, 100,000 rows, --n-boot 0", ["fit", "rows.csv", "--fit-until", "5000", "--target", "9000", "--n-boot", "0"]),
    ("fit, 100,000 rows, --n-boot 1000", ["fit", "rows.csv", "--fit-until", "5000", "--target", "9000"]),
    ("fit, 1,000 curves x 100 points, --n-boot 0",
     ["fit", "curves.csv", "--fit-until", "5000", "--target", "9000", "--n-boot", "0"]),
]


def main(argv=None) -> int:
    argparse.ArgumentParser(description=__doc__.splitlines()[0]).parse_args(argv)  # no options: --help only
    print(f"{platform.processor() or platform.machine()}, {os.cpu_count()} cpus, load {os.getloadavg()[0]:.2f} "
          f"at {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}")
    with tempfile.TemporaryDirectory() as folder:
        root = Path(folder)
        write_inputs(root)
        env = {**os.environ, "PYTHONPATH": str(REPO)}
        for label, argv in ROWS:
            started = time.perf_counter()
            result = subprocess.run([sys.executable, "-c", RUNNER, str(root / "peak"), *argv], cwd=root, env=env,
                                    capture_output=True, text=True)
            seconds = time.perf_counter() - started
            peak_mb = int((root / "peak").read_text()) / 1024
            print(f"{label:48s} exit {result.returncode}  {seconds:6.1f} s  peak {peak_mb:6.0f} MB")
    return 0


if __name__ == "__main__":
    sys.exit(main())
