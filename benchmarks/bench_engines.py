"""Native vs TRL engine, side by side: the same recipe, task, model, batch shape and threads (issue 18).

    .venv/bin/python -m benchmarks.bench_engines [--rounds 3] [--steps 20] [--warmup 3] [--threads 2]
        [--out benchmarks/out/bench_engines.json] [key=value ...]

Each round runs the native engine, the trl engine, then (with --processes 2) the trl engine as 2
processes of 1 thread each (accelerate launch, gloo: one step split over two ranks), each in a fresh
process (`--child ENGINE`), on the ScaleRL base with PPO-off-policy-8 in place of PipelineRL-8 (TRL
runs PipelineRL only on GPUs with vLLM; BASE_ON_CPU below, plus any key=value overrides): 32 prompts x
8 samples a step, the cached embedded warm start, seed 0. The 2-process child is timed by the meter
(the step wall-clock the engine records), read at the evaluations it makes at the window's two ends:
its steps run in the launched processes, where no on_step callback of this process can see them. A child calls
recipe.engines.train for W + N steps with evaluation only at step 0 and at the end (outside the
timed window: it runs after the last step's on_step) and times the N steps after the W warm-up
steps from the on_step callbacks (wall-clock) and the ComputeMeter the engine fills (CPU-seconds,
generated tokens, trained response tokens). tokens/s = (generated + trained response tokens) / s.
Both engines count with the same meter: generated = every sampled token up to and including <eos>,
trained = response tokens of the rows kept by the batch filter. Output: one JSON line per child,
then a summary table; the machine, CPU model, date and load before and after each child.
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
from datetime import datetime, timezone
from pathlib import Path

from benchmarks.common import REPO, cpu_model

BASE_ON_CPU = ["off_policy={name: ppo_off_policy, k: 8}", "seed=0", "tracking.mlflow=false"]
CHILDREN = ("native", "trl", "trl2")  # trl2: the trl engine as 2 processes of 1 thread


def child(engine: str, args) -> dict:
    import torch

    torch.set_num_threads(args.threads)
    from recipe.config import load_recipe
    from recipe.engines import train
    from recipe.run import model_directory

    total = args.warmup + args.steps
    processes = 2 if engine == "trl2" else 1
    every = args.warmup if processes > 1 else total  # trl2: records at both ends of the window (see above)
    cfg = load_recipe(None, [*BASE_ON_CPU, *args.overrides, f"engine.name={'trl' if engine == 'trl2' else engine}",
                             f"engine.num_processes={processes}", f"max_steps={total}", f"eval.every_steps={every}",
                             "eval.points_per_doubling=0", "eval.greedy=false"])
    model_directory(cfg)  # the cached warm start; never built inside the timed window
    if processes > 1:
        return launched_child(engine, cfg, args)
    marks = {}

    def on_step(step, meter):
        if step in (args.warmup, total):
            marks[step] = (time.perf_counter(), meter.cpu_seconds, meter.generated_tokens, meter.trained_tokens,
                           meter.samples)

    load_before = os.getloadavg()[0]
    with tempfile.TemporaryDirectory(prefix=f"bench_engines_{engine}_") as run_dir:
        train(cfg, run_dir, device="cpu", on_step=on_step)
    (t0, cpu0, gen0, trained0, samples0), (t1, cpu1, gen1, trained1, samples1) = marks[args.warmup], marks[total]
    seconds, n = t1 - t0, args.steps
    return {"engine": engine, "s_per_step": seconds / n, "cpu_s_per_step": (cpu1 - cpu0) / n,
            "completions_per_s": (samples1 - samples0) / seconds,
            "generated_tokens_per_step": (gen1 - gen0) / n, "trained_tokens_per_step": (trained1 - trained0) / n,
            "tokens_per_s": ((gen1 - gen0) + (trained1 - trained0)) / seconds,
            "load_before": load_before, "load_after": os.getloadavg()[0]}


def launched_child(engine: str, cfg, args) -> dict:
    """The trl engine under accelerate launch, timed from the meter's records at steps warmup and warmup + steps."""
    from recipe.engines import train

    load_before = os.getloadavg()[0]
    with tempfile.TemporaryDirectory(prefix=f"bench_engines_{engine}_") as run_dir:
        records = {r["step"]: r for r in train(cfg, run_dir, device="cpu")}
    first, last = records[args.warmup], records[args.warmup + args.steps]
    seconds, n = last["compute/wall_seconds"] - first["compute/wall_seconds"], args.steps
    generated = last["compute/tokens"] - first["compute/tokens"]
    trained = last["compute/trained_tokens"] - first["compute/trained_tokens"]
    return {"engine": engine, "s_per_step": seconds / n,
            "cpu_s_per_step": (last["compute/cpu_seconds"] - first["compute/cpu_seconds"]) / n,
            "completions_per_s": (last["compute/samples"] - first["compute/samples"]) / seconds,
            "generated_tokens_per_step": generated / n, "trained_tokens_per_step": trained / n,
            "tokens_per_s": (generated + trained) / seconds,
            "load_before": load_before, "load_after": os.getloadavg()[0]}


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--warmup", type=int, default=3)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--out", default=str(REPO / "benchmarks" / "out" / "bench_engines.json"))
    parser.add_argument("--child", choices=CHILDREN)
    parser.add_argument("--processes", type=int, choices=(1, 2), default=1,
                        help="2: also time the trl engine as 2 processes of 1 thread each")
    parser.add_argument("overrides", nargs="*")
    args = parser.parse_args(argv)
    if args.warmup < 1:
        parser.error("--warmup must be >= 1 (the first step carries one-time costs)")
    if args.child:
        print(json.dumps(child(args.child, args)), flush=True)
        return 0
    engines = CHILDREN if args.processes == 2 else CHILDREN[:2]
    runs = []
    for round_ in range(args.rounds):
        for engine in engines:
            threads = 1 if engine == "trl2" else args.threads  # 2 processes share the cores
            env = {**os.environ, "OMP_NUM_THREADS": str(threads)}
            command = [sys.executable, "-m", "benchmarks.bench_engines", "--child", engine, "--steps", str(args.steps),
                       "--warmup", str(args.warmup), "--threads", str(threads), *args.overrides]
            print(f"round {round_ + 1}/{args.rounds}: {engine}", file=sys.stderr, flush=True)
            done = subprocess.run(command, env=env, capture_output=True, text=True, cwd=REPO)
            if done.returncode != 0:
                print(done.stderr[-3000:], file=sys.stderr)
                raise SystemExit(f"bench_engines: the {engine} child failed (exit {done.returncode})")
            runs.append(json.loads(done.stdout.strip().splitlines()[-1]))
            print(json.dumps(runs[-1]), flush=True)
    summary = {"date": datetime.now(timezone.utc).isoformat(timespec="minutes"), "cpu": cpu_model(),
               "cores": os.cpu_count(), "threads": args.threads, "rounds": args.rounds, "steps": args.steps,
               "warmup": args.warmup, "recipe": ["scalerl base", *BASE_ON_CPU, *args.overrides]}
    keys = ("s_per_step", "cpu_s_per_step", "completions_per_s", "generated_tokens_per_step",
            "trained_tokens_per_step", "tokens_per_s")
    for engine in engines:
        mine = [run for run in runs if run["engine"] == engine]
        summary[engine] = {key: statistics.median(run[key] for run in mine) for key in keys}
        summary[engine]["load"] = [min(r["load_before"] for r in mine), max(r["load_after"] for r in mine)]
    summary["native_vs_trl_tokens_per_s"] = summary["native"]["tokens_per_s"] / summary["trl"]["tokens_per_s"]
    summary["native_vs_trl_s_per_step"] = summary["trl"]["s_per_step"] / summary["native"]["s_per_step"]
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps({**summary, "runs": runs}, indent=1))
    print(f"\n{'median of ' + str(args.rounds) + ' rounds':<28}" + "".join(f"{engine:>12}" for engine in engines))
    for key in keys:
        print(f"{key:<28}" + "".join(f"{summary[engine][key]:>12.3f}" for engine in engines))
    if "trl2" in summary:
        print(f"trl, 2 processes x 1 thread vs 1 process x {args.threads}: "
              f"{summary['trl2']['s_per_step'] / summary['trl']['s_per_step']:.2f}x the time per step")
    print(f"native vs trl: {summary['native_vs_trl_s_per_step']:.2f}x per step, "
          f"{summary['native_vs_trl_tokens_per_s']:.2f}x tokens/s ({summary['cpu']}, {args.threads} threads)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
