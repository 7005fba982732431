"""The native synchronous engine: sample -> reward -> filter -> advantages -> k updates -> eval.

One generation round under PPO-off-policy-k: the curriculum picks P prompts, the frozen policy
samples G responses each (B = P G sequences) and records behaviour logprobs; the checker scores
them (+1 / -1), length control shapes the rewards, the batch filter drops groups and the advantage
normalization scales the rest. k such minibatches are generated before any weight changes (in one
generate call, up to rollout.rows_per_call rows: recipe.run.sample_round), then
the trainer takes k optimizer steps on them in order (minibatch j is j steps stale; k = 1 is
on-policy). At each evaluation step (evenly spaced in log steps, recipe.evaluation.evaluation_steps)
the validation pass rate is logged with the compute spent; at the first round boundary past every
checkpoint.every_steps steps (or checkpoint.every_minutes of wall-clock) the run is checkpointed.

Rerunning on the same run directory resumes from its checkpoint and continues bit-identically.
The building blocks (Run, sample_groups, assemble_minibatch, train_on) live in recipe/run.py, shared
with the PipelineRL engine (recipe/engines/pipeline.py).
"""

from __future__ import annotations

from pathlib import Path
from typing import Callable

from recipe.compute import ComputeMeter, clocks, since
from recipe.config import RecipeConfig
from recipe.dynamic_sampling import fill_minibatch
from recipe.run import Run, Samples, assemble_minibatch, devices_held, sample_groups, sample_round, train_on


def refill(run: Run, samples: Samples) -> Samples:
    """Dynamic sampling's minibatch (recipe/dynamic_sampling.py): more prompts from the curriculum, sampled with
    the round's frozen weights (version run.step), until P groups have rewards that differ."""
    cfg, c = run.cfg, run.c

    def sample_more(count: int) -> Samples:
        return sample_groups(run.generator, run.task, c, cfg, c.curriculum.sample(count), run.rngs,
                             policy_version=run.step)

    def on_dropped(dropped: Samples, groups: list[int]) -> None:
        G = len(dropped.correct) // len(dropped.prompt_ids)
        pass_rates = dropped.correct.view(-1, G).float().mean(dim=1)
        c.curriculum.update([dropped.prompt_ids[j] for j in groups], [float(pass_rates[j]) for j in groups])

    return fill_minibatch(samples, sample_more, c.batch_filter.max_rounds, on_dropped)


def train_native(cfg: RecipeConfig, run_dir: str | Path, *, device: str,
                 on_eval: Callable[[dict], None] | None = None,
                 on_step: Callable[[int, ComputeMeter], None] | None = None,
                 stop_at_step: int | None = None) -> list[dict]:
    """Run (or resume) a synchronous recipe in `run_dir` on `device`; the engine contract of recipe.engines.train."""
    run = Run(cfg, Path(run_dir), device, devices_held(cfg, device))

    def log_eval() -> None:
        record = run.evaluate()
        if on_eval is not None:
            on_eval(record)

    try:
        if not run.resumed:
            log_eval()
        while run.step < cfg.max_steps:
            # 1. Generation round: k minibatches sampled with the same frozen weights (version = step).
            #    The curriculum picks every minibatch's prompts first, then they are sampled together.
            k = min(run.c.off_policy.k, cfg.max_steps - run.step)
            orders = [run.c.curriculum.sample(cfg.rollout.prompts_per_batch) for _ in range(k)]
            sampled = sample_round(run.generator, run.task, run.c, cfg, orders, run.rngs, policy_version=run.step)
            if run.c.batch_filter.max_rounds > 1:  # dynamic sampling: refill each minibatch's dropped groups
                sampled = [refill(run, samples) for samples in sampled]
            round_ = [assemble_minibatch(samples, run.c, run.task) for samples in sampled]
            # 2. k optimizer steps, minibatch j after j updates since it was sampled.
            for minibatch in round_:
                started = clocks()
                metrics = train_on(minibatch, run.step, run)
                wall, cpu = since(started)
                run.meter.wall_seconds += minibatch.seconds + wall  # one role at a time
                run.meter.cpu_seconds += minibatch.cpu_seconds + cpu
                run.step += 1
                run.pending.add(metrics)
                if on_step is not None:
                    on_step(run.step, run.meter)
                if run.eval_due():
                    log_eval()
            # 3. Checkpoints sit on round boundaries, where no sampled-but-untrained data exists.
            if run.checkpoint_due():
                run.save()
            if stop_at_step is not None and run.step >= stop_at_step:
                return run.tracker.records
    except BaseException:
        run.tracker.finish("FAILED")  # the MLflow run must not look alive; metrics.jsonl is already complete
        raise
    run.tracker.finish()
    return run.tracker.records
