"""Is the compute axis robust on a shared CPU? The same run alone and beside a CPU-bound process.

    .venv/bin/python benchmarks/bench_cpu_axis.py [--threads 2] [--competitor-threads 2] [--baseline]
        [--env KEY=VALUE ...] [--out benchmarks/out/bench_cpu_axis.json] [key=value ...]

Runs one short deterministic training twice, each as `sweep train` in a fresh process with a fresh
run directory: (a) alone, (b) while a competing process (this script with --competitor: a loop of
1024 x 1024 fp32 torch matmuls on --competitor-threads threads) runs for the whole duration of (b).
With --baseline, (a) runs a second time alone afterwards (a2), so the run-to-run noise of each clock
shows next to the effect of the load. The recipe is the embedded ScaleRL base with
`off_policy=ppo_off_policy max_steps=40 eval.points_per_doubling=0 eval.every_steps=10
tracking.mlflow=false seed=0` (+ extra key=value overrides), --threads torch threads (OMP_NUM_THREADS),
from the cached warm start (the script refuses to build one: that would land inside a timed run).

The synchronous schedule is deterministic, so (a) and (b) sample the same rollouts: the script checks
that every evaluation point has the same eval/pass_rate, compute/tokens and compute/samples in both,
then reports, at every evaluation step, the ratio b / a of
  compute/device_seconds       the run's clock: CPU-seconds of generation + training on CPU
  compute/wall_device_seconds  the old clock: wall-clock of generation + training x threads
and, over the steps after 0, the max |ratio - 1| of each. A robust axis has ratios near 1 under load.
Load averages are sampled every 2 s during each run (mean of the 1-minute figure reported), and the
job's own CPU time is set beside the machine's busy CPU time over the run (/proc/stat), so a run
disturbed by other work than the competitor shows. Output: a table on stdout and the JSON (machine,
CPU model, date, loads, every record) in --out.
--env KEY=VALUE sets a variable for the training runs only (e.g. OMP_WAIT_POLICY=PASSIVE or
GOMP_SPINCOUNT=0, to see whether OpenMP threads spin-waiting at barriers inflate the CPU clock).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import resource
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from datetime import datetime, timezone
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

BASE_OVERRIDES = ["off_policy=ppo_off_policy", "max_steps=40", "eval.points_per_doubling=0", "eval.every_steps=10",
                  "tracking.mlflow=false", "seed=0"]
CLOCK_KEYS = {"cpu": "compute/device_seconds", "wall": "compute/wall_device_seconds"}
# What two runs of the same rollouts must agree on (timing-free).
SAME_WORK_KEYS = ("eval/pass_rate", "compute/tokens", "compute/samples", "compute/flops")
LOAD_POLL_SECONDS = 2.0


def run_competitor(threads: int) -> int:
    """Keep `threads` cores busy with matmuls until killed (SIGTERM); prints the matmuls/s on exit."""
    import torch

    torch.set_num_threads(threads)
    a, b = torch.randn(1024, 1024), torch.randn(1024, 1024)
    done, started = 0, time.perf_counter()
    stop = []
    signal.signal(signal.SIGTERM, lambda *_: stop.append(True))
    while not stop:
        torch.matmul(a, b)
        done += 1
    print(json.dumps({"matmuls_per_s": done / (time.perf_counter() - started),
                      "cpu_seconds": time.process_time(), "wall_seconds": time.perf_counter() - started}), flush=True)
    return 0


def cpu_model() -> str:
    """The CPU's model name, as benchmarks/bench_speed.py reads it (run as a script, benchmarks/ is on sys.path)."""
    from bench_speed import cpu_model as read_cpu_model

    return read_cpu_model()


def loadavg() -> list[float]:
    return [round(x, 2) for x in os.getloadavg()]


def busy_cpu_seconds() -> float:
    """CPU-seconds the whole machine has spent busy since boot (/proc/stat: all but idle and iowait)."""
    fields = [int(x) for x in Path("/proc/stat").read_text().splitlines()[0].split()[1:]]
    return (sum(fields) - fields[3] - fields[4]) / os.sysconf("SC_CLK_TCK")


def children_cpu_seconds() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def check_warm_start(overrides: list[str]) -> None:
    """Refuse to start when the embedded warm start is not cached (building it would be timed as run (a))."""
    from recipe.config import load_recipe
    from recipe.warm_start import cache_root, warm_start_key

    cfg = load_recipe(None, overrides)
    if cfg.model.path != "embedded":
        return
    warm = cache_root(cfg.warm_start) / "warm_start" / warm_start_key(cfg.model, cfg.warm_start, cfg.task)
    if not (warm / "warm_start.json").is_file():
        raise SystemExit(f"bench_cpu_axis: the warm start {warm} is not built; build it first, e.g. "
                         ".venv/bin/python -c \"from recipe.config import load_recipe; from recipe.run import "
                         "model_directory; model_directory(load_recipe(), log_every=100)\"")


def start_competitor(args) -> subprocess.Popen:
    env = dict(os.environ, OMP_NUM_THREADS=str(args.competitor_threads), MKL_NUM_THREADS=str(args.competitor_threads))
    command = [sys.executable, str(Path(__file__).resolve()), "--competitor", "--competitor-threads",
               str(args.competitor_threads)]
    process = subprocess.Popen(command, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    time.sleep(3.0)  # imported torch and busy before the run starts
    if process.poll() is not None:
        raise SystemExit(f"bench_cpu_axis: the competitor exited early: {process.communicate()[1][-2000:]}")
    return process


def stop_competitor(process: subprocess.Popen) -> dict:
    process.send_signal(signal.SIGTERM)
    out, err = process.communicate(timeout=30)
    lines = [line for line in out.splitlines() if line.startswith("{")]
    return json.loads(lines[-1]) if lines else {"error": err[-2000:]}


def run_training(label: str, args, overrides: list[str], tmp: Path) -> dict:
    """`sweep train` in a fresh process and run directory; its evaluation records and the load during it."""
    from recipe.tracking import read_metrics

    run_dir = tmp / label
    env = dict(os.environ, PYTHONPATH=str(REPO), OMP_NUM_THREADS=str(args.threads),
               MKL_NUM_THREADS=str(args.threads), TOKENIZERS_PARALLELISM="false", **dict(args.env))
    command = [sys.executable, "-m", "sweeps.cli", "train", *overrides, "--run-dir", str(run_dir),
               "--threads", str(args.threads)]
    loads, before, started = [], loadavg(), time.perf_counter()
    busy_before, children_before = busy_cpu_seconds(), children_cpu_seconds()
    with open(tmp / f"{label}.log", "w") as log:
        process = subprocess.Popen(command, cwd=REPO, env=env, stdout=log, stderr=subprocess.STDOUT)
        while process.poll() is None:
            time.sleep(LOAD_POLL_SECONDS)
            loads.append(os.getloadavg()[0])
    # Who used the machine meanwhile: the job's own CPU time (start-up and evaluations included) and
    # the machine's; the rest is the competitor and whatever else ran.
    job_cpu, machine_cpu = children_cpu_seconds() - children_before, busy_cpu_seconds() - busy_before
    if process.returncode != 0:
        raise SystemExit(f"bench_cpu_axis: run {label} failed (exit {process.returncode}): {' '.join(command)}\n"
                         f"{(tmp / f'{label}.log').read_text()[-4000:]}")
    records = [{k: v for k, v in r.items() if k == "step" or k.startswith(("compute/", "eval/pass_rate"))}
               for r in read_metrics(run_dir)]
    return {"label": label, "records": records, "job_wall_seconds": time.perf_counter() - started,
            "job_cpu_seconds": job_cpu, "machine_busy_cpu_seconds": machine_cpu,
            "load_before": before, "load_after": loadavg(),
            "load_1min_mean_during": round(sum(loads) / max(len(loads), 1), 2)}


def compare(alone: dict, other: dict) -> dict:
    """Per evaluation step: ratio other / alone of each clock; and the proof both runs did the same work."""
    rows = []
    for a, b in zip(alone["records"], other["records"], strict=True):
        if a["step"] != b["step"]:
            raise SystemExit(f"bench_cpu_axis: evaluation steps differ: {a['step']} vs {b['step']}")
        different = [k for k in SAME_WORK_KEYS if a.get(k) != b.get(k)]
        row = {"step": a["step"], "same_work": not different, "differs_in": different}
        for clock, key in CLOCK_KEYS.items():
            row[f"{clock}_alone"], row[f"{clock}_other"] = a[key], b[key]
            row[f"{clock}_ratio"] = b[key] / a[key] if a[key] > 0 else None
        rows.append(row)
    deviation = {clock: max(abs(r[f"{clock}_ratio"] - 1.0) for r in rows if r[f"{clock}_ratio"] is not None)
                 for clock in CLOCK_KEYS}
    return {"rows": rows, "max_abs_deviation": deviation, "same_work": all(r["same_work"] for r in rows)}


def table(name: str, comparison: dict) -> str:
    lines = [f"{name}: ratio b/a per evaluation step "
             "(device_seconds = CPU-seconds; wall_device_seconds = wall x threads)",
             "| step | CPU-s a | CPU-s b | CPU ratio | wall-dev-s a | wall-dev-s b | wall ratio | same work |",
             "|---:|---:|---:|---:|---:|---:|---:|:---:|"]
    fmt = lambda v: "-" if v is None else f"{v:.3f}"  # noqa: E731
    for r in comparison["rows"]:
        lines.append(f"| {r['step']} | {r['cpu_alone']:.1f} | {r['cpu_other']:.1f} | {fmt(r['cpu_ratio'])} | "
                     f"{r['wall_alone']:.1f} | {r['wall_other']:.1f} | {fmt(r['wall_ratio'])} | "
                     f"{'yes' if r['same_work'] else 'NO: ' + ', '.join(r['differs_in'])} |")
    dev = comparison["max_abs_deviation"]
    lines.append(f"max |ratio - 1|: CPU clock {dev['cpu']:.3f}, wall clock {dev['wall']:.3f}")
    return "\n".join(lines)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--threads", type=int, default=2, help="torch threads of the training runs")
    parser.add_argument("--competitor-threads", type=int, default=2)
    parser.add_argument("--baseline", action="store_true", help="also rerun (a) alone after (b): run-to-run noise")
    parser.add_argument("--env", action="append", default=[], metavar="KEY=VALUE",
                        help="environment variable for the training runs (repeatable)")
    parser.add_argument("--out", default=str(REPO / "benchmarks" / "out" / "bench_cpu_axis.json"))
    parser.add_argument("--competitor", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("overrides", nargs="*", help="extra recipe overrides, e.g. rollout.prompts_per_batch=16")
    args = parser.parse_args(argv)
    if args.competitor:
        return run_competitor(args.competitor_threads)
    if any("=" not in item for item in args.env):
        parser.error("--env takes KEY=VALUE")
    args.env = [tuple(item.split("=", 1)) for item in args.env]
    overrides = [*BASE_OVERRIDES, *args.overrides]
    check_warm_start(overrides)
    import torch

    results = {
        "bench": "bench_cpu_axis",
        "machine": {"node": platform.node(), "cpu_model": cpu_model(), "cpu_count": os.cpu_count(),
                    "platform": platform.platform(), "python": platform.python_version(), "torch": torch.__version__,
                    "date": datetime.now(timezone.utc).isoformat(timespec="seconds"), "load_at_start": loadavg()},
        "command": " ".join([Path(sys.argv[0]).name, *(sys.argv[1:] if argv is None else argv)]),
        "recipe_overrides": overrides, "threads": args.threads, "competitor_threads": args.competitor_threads,
        "env": dict(args.env), "runs": {},
    }
    tmp = Path(tempfile.mkdtemp(prefix="bench_cpu_axis_"))
    competitor = None
    try:
        results["runs"]["a"] = run_training("a", args, overrides, tmp)
        print(f"(a) alone: {results['runs']['a']['job_wall_seconds']:.0f} s", file=sys.stderr, flush=True)
        competitor = start_competitor(args)
        results["runs"]["b"] = run_training("b", args, overrides, tmp)
        results["competitor"] = stop_competitor(competitor)
        competitor = None
        print(f"(b) loaded: {results['runs']['b']['job_wall_seconds']:.0f} s", file=sys.stderr, flush=True)
        if args.baseline:
            results["runs"]["a2"] = run_training("a2", args, overrides, tmp)
            print(f"(a2) alone again: {results['runs']['a2']['job_wall_seconds']:.0f} s", file=sys.stderr, flush=True)
    finally:
        if competitor is not None:
            competitor.kill()
            competitor.wait()
        shutil.rmtree(tmp, ignore_errors=True)
    results["loaded"] = compare(results["runs"]["a"], results["runs"]["b"])
    if args.baseline:
        results["baseline"] = compare(results["runs"]["a"], results["runs"]["a2"])
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(results, indent=1) + "\n")

    m = results["machine"]
    print(f"{m['date']}  {m['cpu_model']} ({m['cpu_count']} CPUs), torch {m['torch']}, {args.threads} threads, "
          f"competitor {args.competitor_threads} threads, env {results['env'] or '-'}")
    for label, run in results["runs"].items():
        print(f"run {label}: job {run['job_wall_seconds']:.0f} s wall, {run['job_cpu_seconds']:.0f} CPU-s "
              f"(machine busy "
              f"{run['machine_busy_cpu_seconds']:.0f} CPU-s); load 1-min before {run['load_before'][0]} / "
              f"mean during {run['load_1min_mean_during']} / after {run['load_after'][0]}")
    if "competitor" in results:
        print(f"competitor: {results['competitor'].get('matmuls_per_s', float('nan')):.1f} matmuls/s")
    print(table("(b) loaded vs (a) alone", results["loaded"]))
    if args.baseline:
        print(table("(a2) alone again vs (a) alone", results["baseline"]))
    print(f"JSON: {out}")
    return 0 if results["loaded"]["same_work"] else 1


if __name__ == "__main__":
    sys.exit(main())
