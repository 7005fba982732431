"""What the published recipes' pieces cost a step: DAPO's dynamic sampling against drop-only filtering, and a KL
penalty's reference forward against none, side by side on the embedded testbed (issue 73).

    .venv/bin/python -m benchmarks.bench_recipe_pieces [--rounds 3] [--steps 40] [--warmup 5] [key=value ...]

Each round runs every variant below in a fresh process (alternated, so a drifting load falls on all of them):
the ScaleRL base with PPO-off-policy-8 (the off-policy mode dynamic sampling runs under), its batch filter
zero_variance or dynamic_sampling, its KL penalty none or reference (k3). A child trains W + N steps and
times the N after the W warm-up ones from the on_step callbacks; the meter gives the generated and trained
tokens, the record at the end the refill rounds and the reference's FLOPs. Output: one JSON line per child,
then the medians per variant with the machine, date and load.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from benchmarks.common import OUT, REPO, loadavg, machine

BASE = ["off_policy={name: ppo_off_policy, k: 8}", "seed=0", "tracking.mlflow=false", "eval.points_per_doubling=0",
        "eval.greedy=false"]
VARIANTS = {
    "drop_only": ["batch_filter=zero_variance"],
    "dynamic_sampling": ["batch_filter=dynamic_sampling"],
    "kl_reference": ["kl_penalty=reference"],
}


def child(variant: str, args) -> dict:
    import torch

    torch.set_num_threads(args.threads)
    from recipe.config import load_recipe
    from recipe.engines import train
    from recipe.run import model_directory

    total = args.warmup + args.steps
    cfg = load_recipe(None, [*BASE, *VARIANTS[variant], *args.overrides, f"max_steps={total}",
                             f"eval.every_steps={total}"])
    model_directory(cfg)  # the cached warm start, never built inside the timed window
    marks = {}

    def on_step(step, meter):
        if step in (args.warmup, total):
            marks[step] = (time.perf_counter(), meter.generated_tokens, meter.trained_tokens, meter.samples,
                           meter.reference_flops, meter.training_flops)

    load_before = os.getloadavg()[0]
    with tempfile.TemporaryDirectory(prefix=f"bench_recipe_pieces_{variant}_") as run_dir:
        records = train(cfg, run_dir, device="cpu", on_step=on_step)
    (t0, gen0, trained0, samples0, ref0, flops0), (t1, gen1, trained1, samples1, ref1, flops1) = (
        marks[args.warmup], marks[total])
    n = args.steps
    last = records[-1]  # the metrics averaged over the run's steps (one evaluation at the end)
    return {"variant": variant, "s_per_step": (t1 - t0) / n, "generated_tokens_per_step": (gen1 - gen0) / n,
            "trained_tokens_per_step": (trained1 - trained0) / n,
            "generated_per_trained": (gen1 - gen0) / max(trained1 - trained0, 1),
            "samples_per_step": (samples1 - samples0) / n,
            "rounds_per_step": last.get("rollout/dynamic_rounds", 1.0),
            "reference_share_of_training_flops": (ref1 - ref0) / max(flops1 - flops0, 1.0),
            "load_before": load_before, "load_after": os.getloadavg()[0]}


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--steps", type=int, default=40)
    parser.add_argument("--warmup", type=int, default=5)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--out", default=str(OUT / "bench_recipe_pieces.json"))
    parser.add_argument("--child", choices=VARIANTS)
    parser.add_argument("overrides", nargs="*")
    args = parser.parse_args(argv)
    if args.child:
        print(json.dumps(child(args.child, args)), flush=True)
        return 0
    runs, started = [], loadavg()
    for round_ in range(args.rounds):
        for variant in VARIANTS:
            print(f"round {round_ + 1}/{args.rounds}: {variant}", file=sys.stderr, flush=True)
            command = [sys.executable, "-m", "benchmarks.bench_recipe_pieces", "--child", variant, "--steps",
                       str(args.steps), "--warmup", str(args.warmup), "--threads", str(args.threads), *args.overrides]
            done = subprocess.run(command, env={**os.environ, "OMP_NUM_THREADS": str(args.threads)},
                                  capture_output=True, text=True, cwd=REPO)
            if done.returncode != 0:
                print(done.stderr[-3000:], file=sys.stderr)
                raise SystemExit(f"bench_recipe_pieces: the {variant} child failed (exit {done.returncode})")
            runs.append(json.loads(done.stdout.strip().splitlines()[-1]))
            print(json.dumps(runs[-1]), flush=True)
    keys = [key for key in runs[0] if key not in ("variant", "load_before", "load_after")]
    summary = {**machine(), "load_at_start": started, "load_at_end": loadavg(), "rounds": args.rounds,
               "steps": args.steps, "warmup": args.warmup, "recipe": ["scalerl base", *BASE, *args.overrides]}
    for variant in VARIANTS:
        mine = [run for run in runs if run["variant"] == variant]
        summary[variant] = {key: statistics.median(run[key] for run in mine) for key in keys}
    for variant in ("dynamic_sampling", "kl_reference"):
        summary[f"{variant}_step_time_vs_drop_only"] = (summary[variant]["s_per_step"]
                                                        / summary["drop_only"]["s_per_step"])
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps({**summary, "runs": runs}, indent=1))
    print(json.dumps({key: value for key, value in summary.items() if key != "runs"}, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
