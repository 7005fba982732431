"""The ScaleRL base trained by both engines on several seeds: does the trl engine learn as the native one does?

    .venv/bin/python -m benchmarks.bench_engines_learning [--seeds 0 1 2] [--steps 120] [--every 20]
        [--threads 2] [--out benchmarks/out/engines_learning.json] [key=value ...]

The recipe is the ScaleRL base (CISPO, prompt-mean aggregation, batch advantage normalization, zero-
variance filter, No-Positive-Resampling, forced interruption, fp32 head) with PPO-off-policy-8 in place of
PipelineRL-8, which the trl engine runs only on GPUs with a vLLM server; the embedded testbed, 32 prompts
x 8. Each (engine, seed) trains in its own process and run directory under --work, evaluated every
--every steps on the held-out set; a finished pair is skipped on a rerun and an unfinished one resumes
from its checkpoint, so a killed benchmark loses nothing. Curves are compared in steps, not seconds, so
the machine's load does not enter them (the timing is bench_engines.py's).

The summary: at each evaluation step, each engine's mean pass rate over the seeds and its sample
standard deviation; the difference of the means against its standard error (sqrt(sd_n^2/n + sd_t^2/n))
and whether it lies within 2 of them (the seeds' spread).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import statistics
import subprocess
import sys
from datetime import datetime, timezone
from pathlib import Path

from benchmarks.common import REPO, cpu_model

BASE_ON_CPU = ["off_policy={name: ppo_off_policy, k: 8}", "tracking.mlflow=false"]


def child(engine: str, seed: int, args) -> None:
    """Train (or resume) one engine on one seed in its run directory; the curve is its metrics.jsonl."""
    import torch

    torch.set_num_threads(args.threads)
    from recipe.config import load_recipe
    from recipe.engines import train

    cfg = load_recipe(None, [*BASE_ON_CPU, *args.overrides, f"engine.name={engine}", f"seed={seed}",
                             f"max_steps={args.steps}", f"eval.every_steps={args.every}",
                             "eval.points_per_doubling=0"])
    train(cfg, run_dir(args, engine, seed), device="cpu")


def run_dir(args, engine: str, seed: int) -> Path:
    return Path(args.work) / f"{engine}-seed{seed}"


def curve(args, engine: str, seed: int) -> dict[int, float]:
    from recipe.tracking import read_metrics

    return {r["step"]: r["eval/pass_rate"] for r in read_metrics(run_dir(args, engine, seed))}


def summarize(args, curves: dict) -> list[dict]:
    rows = []
    n = len(args.seeds)
    for step in sorted(set.intersection(*(set(c) for c in curves.values()))):
        row = {"step": step}
        for engine in ("native", "trl"):
            values = [curves[(engine, seed)][step] for seed in args.seeds]
            row[engine] = {"mean": statistics.mean(values), "sd": statistics.stdev(values) if n > 1 else 0.0,
                           "seeds": values}
        se = math.sqrt((row["native"]["sd"] ** 2 + row["trl"]["sd"] ** 2) / n)
        row["difference"] = row["trl"]["mean"] - row["native"]["mean"]
        row["se"] = se
        row["within_2_se"] = abs(row["difference"]) <= 2 * se
        rows.append(row)
    return rows


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--steps", type=int, default=120)
    parser.add_argument("--every", type=int, default=20)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--work", default=str(REPO / "benchmarks" / "out" / "engines_learning"))
    parser.add_argument("--out", default=str(REPO / "benchmarks" / "out" / "engines_learning.json"))
    parser.add_argument("--child", nargs=2, metavar=("ENGINE", "SEED"))
    parser.add_argument("overrides", nargs="*")
    args = parser.parse_args(argv)
    if args.child:
        child(args.child[0], int(args.child[1]), args)
        return 0
    env = {**os.environ, "OMP_NUM_THREADS": str(args.threads)}
    started = datetime.now(timezone.utc).isoformat(timespec="minutes")
    load_before = os.getloadavg()[0]
    for seed in args.seeds:
        for engine in ("native", "trl"):
            done = run_dir(args, engine, seed) / "done.json"
            if done.is_file():
                continue
            print(f"seed {seed}: {engine}", file=sys.stderr, flush=True)
            command = [sys.executable, "-m", "benchmarks.bench_engines_learning", "--child", engine, str(seed),
                       "--steps", str(args.steps), "--every", str(args.every), "--threads", str(args.threads),
                       "--work", args.work, *args.overrides]
            finished = subprocess.run(command, env=env, capture_output=True, text=True, cwd=REPO)
            if finished.returncode != 0:
                print(finished.stderr[-3000:], file=sys.stderr)
                raise SystemExit(f"bench_engines_learning: {engine} seed {seed} failed (exit {finished.returncode}); "
                                 "rerun to resume it")
            done.write_text(json.dumps({"finished": datetime.now(timezone.utc).isoformat(timespec="minutes")}))
    curves = {(engine, seed): curve(args, engine, seed) for seed in args.seeds for engine in ("native", "trl")}
    rows = summarize(args, curves)

    summary = {"started": started, "finished": datetime.now(timezone.utc).isoformat(timespec="minutes"),
               "cpu": cpu_model(), "load": [load_before, os.getloadavg()[0]], "threads": args.threads,
               "seeds": args.seeds, "steps": args.steps, "recipe": ["scalerl base", *BASE_ON_CPU, *args.overrides],
               "rows": rows}
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(summary, indent=1))
    print(f"{'step':>5}  {'native mean (sd)':>18}  {'trl mean (sd)':>18}  {'trl - native':>12}  {'2 se':>6}  within")
    for row in rows:
        native, trl = row["native"], row["trl"]
        print(f"{row['step']:>5}  {native['mean']:>10.3f} ({native['sd']:.3f})  {trl['mean']:>10.3f} ({trl['sd']:.3f})"
              f"  {row['difference']:>+12.3f}  {2 * row['se']:>6.3f}  {'yes' if row['within_2_se'] else 'NO'}")
    within = sum(row["within_2_se"] for row in rows)
    print(f"{within} of {len(rows)} evaluation steps within 2 standard errors "
          f"({summary['cpu']}, {args.threads} threads)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
