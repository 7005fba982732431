"""The shared-prompt attention (recipe/prefix_attention.py) against per-row caches, in one process.

    .venv/bin/python -m benchmarks.bench_prefix_attention [--threads 2] [--repeats 5] [--rows 2048 512]
        [--out benchmarks/out/bench_prefix_attention.json]

Loads the shipped warm start of the embedded recipe (what `sweep train` starts from) and times,
alternating the two paths so that machine noise hits both alike:
- generation: one `generate` call of R rows (G samples each of R / G training prompts, the recipe's
  length control), with `shared_prefix_decoding` True and False; the same seed for both, and the sampled
  tokens are checked equal;
- training: `train_step` on the same 10 minibatches (a PPO round sampled from the warm start): the
  trainer's shared-prompt path with the response tokens packed (shipped), the same with padded rows
  (recipe.trainer.PACK_RESPONSES False), and the per-row gather (recipe.trainer.supports_shared_prefix
  forced False); also the share of response positions that are padding. All three update the
  weights; each repeat restores the same start weights and optimizer state.
Medians over the repeats (and per minibatch for training). Output: JSON on stdout and in --out,
with the CPU model, the date and the load averages before and after.
"""

from __future__ import annotations

import argparse
import copy
import json
import os
import random
import statistics
import sys
import tempfile
import time
from datetime import datetime, timezone
from pathlib import Path

from benchmarks.common import REPO, cpu_model


def time_generation(run, rows: int, repeats: int) -> dict:
    import numpy as np
    import torch

    from recipe.generator import generate

    G = run.cfg.rollout.samples_per_prompt
    problems = random.Random(0).sample(run.task.train, rows // G)
    prompts = [problem.prompt for problem in problems for _ in range(G)]  # as sample_groups lays them out

    def call(shared: bool, seed: int):
        return generate(run.model, run.tokenizer, prompts, precision=run.c.precision,
                        length_control=run.c.length_control, max_new_tokens=run.cfg.rollout.max_new_tokens,
                        torch_rng=torch.Generator().manual_seed(seed), numpy_rng=np.random.default_rng(seed),
                        shared_prefix_decoding=shared)

    same = torch.equal(call(True, 0).input_ids, call(False, 0).input_ids)
    seconds = {True: [], False: []}
    for repeat in range(repeats):
        for shared in (True, False):
            started = time.perf_counter()
            call(shared, repeat)
            seconds[shared].append(time.perf_counter() - started)
    shared_s, per_row_s = statistics.median(seconds[True]), statistics.median(seconds[False])
    return {"rows": rows, "same_tokens": same, "shared_s": seconds[True], "per_row_s": seconds[False],
            "shared_median_s": shared_s, "per_row_median_s": per_row_s, "speedup": per_row_s / shared_s}


def time_training(run, repeats: int) -> dict:
    import recipe.trainer
    from recipe.run import assemble_minibatch, sample_round, train_on

    P = run.cfg.rollout.prompts_per_batch
    orders = [run.c.curriculum.sample(P) for _ in range(16)]
    minibatches = [m for m in (assemble_minibatch(s, run.c) for s in sample_round(
        run.generator, run.task, run.c, run.cfg, orders, run.rngs, policy_version=0)) if m.batch is not None]
    minibatches = minibatches[:10]
    weights, optimizer = copy.deepcopy(run.model.state_dict()), copy.deepcopy(run.optimizer.state_dict())
    own = recipe.trainer.supports_shared_prefix
    paths = ("packed", "rows", "per_row")  # shared prefix + packed tokens; shared prefix, padded rows; gather
    seconds = {path: [] for path in paths}
    try:
        for repeat in range(repeats + 1):  # the first repeat warms up
            for path in paths:
                recipe.trainer.supports_shared_prefix = (lambda model: False) if path == "per_row" else own
                recipe.trainer.PACK_RESPONSES = path == "packed"
                run.model.load_state_dict(weights)
                run.optimizer.load_state_dict(optimizer)
                for minibatch in minibatches:
                    started = time.perf_counter()
                    train_on(minibatch, 0, run)
                    if repeat:
                        seconds[path].append(time.perf_counter() - started)
    finally:
        recipe.trainer.supports_shared_prefix = own
        recipe.trainer.PACK_RESPONSES = True
    median = {path: statistics.median(seconds[path]) for path in paths}
    masks = [m.batch.rollout.attention_mask[:, m.batch.rollout.prompt_width + 1:] for m in minibatches]
    padding = 1 - sum(float(m.sum()) for m in masks) / sum(m.numel() for m in masks)
    return {"minibatches": len(minibatches), "response_padding_share": padding,
            "packed_median_s": median["packed"], "shared_median_s": median["rows"],
            "per_row_median_s": median["per_row"],
            "speedup": median["per_row"] / median["rows"], "packing_speedup": median["rows"] / median["packed"],
            "speedup_packed_vs_per_row": median["per_row"] / median["packed"]}


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--rows", type=int, nargs="+", default=[2048, 512])
    parser.add_argument("--out", default=str(REPO / "benchmarks" / "out" / "bench_prefix_attention.json"))
    args = parser.parse_args(argv)
    import torch

    torch.set_num_threads(args.threads)
    from recipe.config import load_recipe
    from recipe.run import Run

    load_before = os.getloadavg()
    cfg = load_recipe(None, ["off_policy=ppo_off_policy", "seed=0", "tracking.mlflow=false", "max_steps=100"])
    with tempfile.TemporaryDirectory() as run_dir:
        run = Run(cfg, Path(run_dir), "cpu", devices=args.threads)
        run.model.eval()
        result = {
            "cpu": cpu_model(), "threads": args.threads,
            "date": datetime.now(timezone.utc).isoformat(timespec="seconds"), "load_before": load_before,
            "torch": torch.__version__,
            "generation": [time_generation(run, rows, args.repeats) for rows in args.rows],
            "training": time_training(run, args.repeats),
            "load_after": os.getloadavg(),
        }
        run.tracker.finish()
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(result, indent=1))
    print(json.dumps(result, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
