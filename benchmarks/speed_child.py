"""One tree's synchronous RL steps, timed: the child of benchmarks/bench_speed.py, one process per contender.

    PYTHONPATH=TREE .venv/bin/python benchmarks/speed_child.py --tree TREE --result FILE [--steps N] ...

bench_speed runs this file by its path with PYTHONPATH and the working directory set to the tree under test
(an old commit's worktree or this checkout), so `recipe` and `components` come from that tree; it imports
nothing from benchmarks/, which an old tree may not have. It replays recipe.engines.native's loop body
without evaluation or checkpoints (bench_speed's docstring says what is timed and counted) and writes the
per-step records to --result as one JSON line.
"""

from __future__ import annotations

import argparse
import dataclasses
import hashlib
import json
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

BASE_OVERRIDES = ["off_policy=ppo_off_policy", "seed=0"]


def run_child(args) -> int:
    """Time W + N steps of the synchronous loop of the tree `args.tree`; write the per-step record as JSON."""
    tree = Path(args.tree).resolve()
    import torch

    torch.set_num_threads(args.threads)
    import components
    import recipe

    for module in (recipe, components):
        where = Path(module.__file__).resolve()
        if not where.is_relative_to(tree):
            raise SystemExit(f"bench_speed child: {module.__name__} was imported from {where}, not from the "
                             f"tree under test {tree}; refusing to measure the wrong code")
    from recipe.compute import ModelShape, sequence_cost
    from recipe.config import load_recipe
    try:
        from recipe.run import Run, assemble_minibatch, sample_groups, train_on
    except ImportError:  # trees from before the engine split (recipe/engines/) kept them in recipe.loop
        from recipe.loop import Run, assemble_minibatch, sample_groups, train_on
    try:  # trees that sample a round's minibatches together (recipe/engines/native.py does)
        from recipe.run import sample_round
    except ImportError:
        sample_round = None
    from recipe.warm_start import cache_root, warm_start_key

    total = args.warmup + args.steps
    from recipe.run_config import WarmStartConfig

    # Trees that ship a warm start would use it, older ones this machine's cached build: both use the
    # cached build, so old and new start from the same weights on any machine.
    own_build = (["warm_start.use_shipped=false"]
                 if "use_shipped" in {f.name for f in dataclasses.fields(WarmStartConfig)} else [])
    cfg = load_recipe(None, [*BASE_OVERRIDES, *args.overrides, *own_build, f"max_steps={total}",
                             "tracking.mlflow=false"])
    model_dir = Path(cfg.model.path)
    if cfg.model.path == "embedded":
        # Both trees must start from the same cached warm start; never build one inside a timing run.
        warm = cache_root(cfg.warm_start) / "warm_start" / warm_start_key(cfg.model, cfg.warm_start, cfg.task)
        model_dir = warm
        if not (warm / "warm_start.json").is_file():
            raise SystemExit(f"bench_speed child: the warm start {warm} is not built (tree {tree}); build it first, "
                             "e.g. .venv/bin/python -c \"from recipe.config import load_recipe; from recipe.run "
                             "import model_directory; model_directory(load_recipe(), log_every=100)\"")
    run_dir = Path(tempfile.mkdtemp(prefix="run_", dir=Path(args.result).parent))
    try:
        started = time.perf_counter()
        run = Run(cfg, run_dir, "cpu", devices=args.threads)
        load_seconds = time.perf_counter() - started
        if getattr(run.c.off_policy, "asynchronous", False):
            raise SystemExit("bench_speed child: the off_policy mode is asynchronous; this benchmark times the "
                             "synchronous loop (off_policy=ppo_off_policy)")
        shape = ModelShape.of(run.model)
        P = cfg.rollout.prompts_per_batch
        steps, first = [], {}
        while run.step < total:
            k = min(run.c.off_policy.k, total - run.step)
            round_ = []
            generated = []  # (samples, minibatch, generation seconds) of the round's k minibatches
            if sample_round is not None:  # 1. generation: k minibatches with the same frozen weights
                t0 = time.perf_counter()
                orders = [run.c.curriculum.sample(P) for _ in range(k)]
                both = [(samples, assemble_minibatch(samples, run.c))
                        for samples in sample_round(run.generator, run.task, run.c, cfg, orders, run.rngs,
                                                    policy_version=run.step)]
                generation_s = (time.perf_counter() - t0) / k  # the round's time, a k-th to each step
                generated = [(samples, minibatch, generation_s) for samples, minibatch in both]
            else:
                for _ in range(k):
                    t0 = time.perf_counter()
                    samples = sample_groups(run.generator, run.task, run.c, cfg,
                                            run.c.curriculum.sample(P), run.rngs, policy_version=run.step)
                    minibatch = assemble_minibatch(samples, run.c)
                    generated.append((samples, minibatch, time.perf_counter() - t0))
            for samples, minibatch, generation_s in generated:
                rollout = samples.rollout
                if not first:
                    first = {"prompts_sha": hashlib.sha256(json.dumps(samples.prompt_ids).encode()).hexdigest()[:16],
                             "rollout_sha": hashlib.sha256(rollout.input_ids.cpu().numpy().tobytes()).hexdigest()[:16]}
                prompt_lengths = rollout.attention_mask[:, : rollout.prompt_width].sum(dim=1).tolist()
                tokens, context = sequence_cost(prompt_lengths, rollout.lengths.tolist())
                record = {
                    "generation_s": generation_s, "completions": int(rollout.input_ids.shape[0]),
                    "generated_tokens": int(rollout.lengths.sum()), "sampled_tokens": int(rollout.loss_mask.sum()),
                    "prompt_tokens": int(sum(prompt_lengths)), "generation_flops": shape.forward_flops(tokens, context),
                    "pass_rate": float(samples.correct.float().mean()),
                }
                kept = None if minibatch.batch is None else minibatch.batch.rollout
                if kept is None:
                    record.update(kept_rows=0, trained_tokens=0, trained_response_tokens=0, training_flops=0.0)
                else:
                    kept_prompt = kept.attention_mask[:, : kept.prompt_width].sum(dim=1).tolist()
                    tokens, context = sequence_cost(kept_prompt, kept.lengths.tolist())
                    record.update(kept_rows=int(kept.input_ids.shape[0]), trained_tokens=int(kept.attention_mask.sum()),
                                  trained_response_tokens=int(kept.loss_mask.sum()),
                                  training_flops=3.0 * shape.forward_flops(tokens, context))
                round_.append((minibatch, record))
            for minibatch, record in round_:  # 2. k optimizer steps in order
                t0 = time.perf_counter()
                train_on(minibatch, run.step, run)
                record["training_s"] = time.perf_counter() - t0
                record["step_s"] = record["generation_s"] + record["training_s"]
                record["warmup"] = run.step < args.warmup
                run.step += 1
                steps.append(record)
        run.tracker.finish()
        result = {
            "tree": str(tree), "recipe_file": recipe.__file__, "components_file": components.__file__,
            "python": sys.executable, "torch": torch.__version__, "torch_threads": torch.get_num_threads(),
            "omp_num_threads": os.environ.get("OMP_NUM_THREADS"), "model_dir": str(model_dir),
            "shape": {"params_non_embedding": shape.params, "layers": shape.layers, "width": shape.width},
            "k": run.c.off_policy.k, "prompts_per_step": P, "samples_per_prompt": cfg.rollout.samples_per_prompt,
            "max_new_tokens": cfg.rollout.max_new_tokens, "seed": cfg.seed, "load_run_s": load_seconds,
            "first_step": first, "steps": steps,
        }
    finally:
        shutil.rmtree(run_dir, ignore_errors=True)
    Path(args.result).write_text(json.dumps(result) + "\n")
    return 0


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tree", required=True, help="the tree whose recipe and components are measured")
    parser.add_argument("--result", required=True, help="where the JSON line of per-step records goes")
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--warmup", type=int, default=3)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("overrides", nargs="*", help="recipe overrides, as bench_speed passes them")
    return run_child(parser.parse_args(argv))


if __name__ == "__main__":
    sys.exit(main())
