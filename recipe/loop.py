"""The RL training run, top to bottom: sample -> reward -> filter -> advantages -> k updates -> eval.

One generation round under PPO-off-policy-k: the curriculum picks P prompts, the frozen policy
samples G responses each (B = P G sequences) and records behaviour logprobs; the checker scores
them (+1 / -1), length control shapes the rewards, the batch filter drops groups and the advantage
normalization scales the rest. k such minibatches are generated before any weight changes, then
the trainer takes k optimizer steps on them in order (minibatch j is j steps stale; k = 1 is
on-policy). Every eval.every_steps steps the validation pass rate is logged with the compute spent;
at the first round boundary past every checkpoint.every_steps steps the run is checkpointed.

Rerunning on the same run directory resumes from its checkpoint and continues bit-identically.
Run it as `sweep train RECIPE.yaml [key=value ...]`.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import numpy as np
import torch

from components import REGISTRIES
from recipe.advantages import filter_and_normalize
from recipe.checkpoint import load_checkpoint, save_checkpoint
from recipe.compute import ComputeMeter, ModelShape
from recipe.config import RecipeConfig, resolved_yaml, run_id, to_dict
from recipe.evaluation import evaluate, score
from recipe.generator import Rollout, generate
from recipe.model import load_model_dir
from recipe.tasks import build_task
from recipe.tracking import Tracker
from recipe.trainer import TrainBatch, build_optimizer, train_step
from recipe.warm_start import warm_start_dir


@dataclass
class Components:
    loss: object
    aggregation: object
    advantage_norm: object
    batch_filter: object
    curriculum: object
    length_control: object
    off_policy: object
    precision: object


def build_components(cfg: RecipeConfig) -> Components:
    return Components(**{axis: REGISTRIES[axis].build(getattr(cfg, axis)) for axis in REGISTRIES})


def model_directory(cfg: RecipeConfig, log_every: int = 0) -> Path:
    """The HF directory the run starts from: the cached warm start for "embedded", else model.path."""
    if cfg.model.path == "embedded":
        return warm_start_dir(cfg.model, cfg.warm_start, cfg.task, log_every=log_every)
    return Path(cfg.model.path)


@dataclass
class Minibatch:
    batch: TrainBatch | None  # None when the filter dropped every group
    metrics: dict[str, float]
    seconds: float  # generation wall-clock, charged when the minibatch is trained on
    prompt_lengths: list[int]
    response_lengths: list[int]


def select_rows(rollout: Rollout, rows: torch.Tensor) -> Rollout:
    return Rollout(**{k: (v[rows] if torch.is_tensor(v) else v) for k, v in rollout.__dict__.items()})


def collect_minibatch(model, tokenizer, task, c: Components, cfg: RecipeConfig, rngs: dict, staleness: int) -> Minibatch:
    """Sample P prompts x G responses with the current (frozen) weights and score them."""
    started = time.perf_counter()
    P, G = cfg.rollout.prompts_per_batch, cfg.rollout.samples_per_prompt
    prompt_ids = c.curriculum.sample(P)
    problems = [task.train[i] for i in prompt_ids]
    rollout = generate(model, tokenizer, [p.prompt for p in problems for _ in range(G)], precision=c.precision,
                       length_control=c.length_control, max_new_tokens=cfg.rollout.max_new_tokens,
                       temperature=cfg.rollout.temperature, torch_rng=rngs["torch"], numpy_rng=rngs["numpy"])
    correct = score(task, tokenizer, rollout, [p.answer for p in problems for _ in range(G)])
    lengths = rollout.lengths.cpu()
    rewards = c.length_control.shape_rewards(torch.where(correct, 1.0, -1.0), lengths, correct)
    group_ids = torch.arange(P).repeat_interleave(G)  # (B,) sample i belongs to prompt i // G
    keep, advantages = filter_and_normalize(rewards, group_ids, c.batch_filter, c.advantage_norm)
    c.curriculum.update(prompt_ids, correct.view(P, G).float().mean(dim=1).tolist())

    rows = keep.nonzero().squeeze(-1)
    device = rollout.input_ids.device
    batch = None
    if rows.numel():
        batch = TrainBatch(select_rows(rollout, rows.to(device)), advantages[rows].to(device), group_ids[rows].to(device),
                           staleness)
    real_prompt = rollout.attention_mask[:, : rollout.prompt_width].sum(dim=1).cpu()
    metrics = {
        "rollout/pass_rate": float(correct.float().mean()),
        "rollout/reward_mean": float(rewards.mean()),
        "rollout/len_mean": float(lengths.float().mean()),
        "rollout/len_max": float(lengths.max()),
        "rollout/truncated_frac": float(rollout.truncated.float().mean()),
        "rollout/interrupted_frac": float(rollout.interrupted.float().mean()),
        "rollout/kept_group_frac": float(keep.view(P, G)[:, 0].float().mean()),
        "rollout/kept_sample_frac": float(keep.float().mean()),
    }
    return Minibatch(batch, metrics, time.perf_counter() - started, real_prompt.tolist(), lengths.tolist())


def train_on(minibatch: Minibatch, model, optimizer, schedule, c: Components, cfg: RecipeConfig,
             meter: ComputeMeter, shape: ModelShape) -> dict[str, float]:
    """One optimizer step on a minibatch (none if every group was filtered); charges its compute."""
    started = time.perf_counter()
    metrics = dict(minibatch.metrics)
    metrics["train/skipped"] = float(minibatch.batch is None)
    meter.add_generation(minibatch.seconds, shape, minibatch.prompt_lengths, minibatch.response_lengths)
    if minibatch.batch is None:
        return metrics
    metrics.update(train_step(model, optimizer, schedule, minibatch.batch, loss_fn=c.loss, aggregation=c.aggregation,
                              precision=c.precision, temperature=cfg.rollout.temperature,
                              grad_clip=cfg.optimizer.grad_clip, micro_batch_size=cfg.optimizer.micro_batch_size))
    kept = minibatch.batch.rollout
    meter.add_training(time.perf_counter() - started, shape,
                       kept.attention_mask[:, : kept.prompt_width].sum(dim=1).tolist(), kept.lengths.tolist())
    return metrics


class Averager:
    """Means of the train/rollout metrics of the steps since the last evaluation point."""

    def __init__(self) -> None:
        self.sums: dict[str, float] = {}
        self.counts: dict[str, int] = {}

    def add(self, metrics: dict[str, float]) -> None:
        for key, value in metrics.items():
            self.sums[key] = self.sums.get(key, 0.0) + value
            self.counts[key] = self.counts.get(key, 0) + 1

    def pop(self) -> dict[str, float]:
        means = {key: self.sums[key] / self.counts[key] for key in sorted(self.sums)}
        self.sums, self.counts = {}, {}
        return means


def prepare_run_dir(cfg: RecipeConfig, run_dir: Path) -> None:
    """Create run_dir with config.yaml; refuse a directory that belongs to a different config."""
    run_dir.mkdir(parents=True, exist_ok=True)
    config_path = run_dir / "config.yaml"
    text = resolved_yaml(cfg)
    if config_path.is_file() and config_path.read_text() != text:
        raise ValueError(f"{run_dir}: holds a run of a different config (config.yaml differs); "
                         "use another run directory or delete this one")
    config_path.write_text(text)


def train(cfg: RecipeConfig, run_dir: str | Path, *, device: str = "cpu",
          on_eval: Callable[[dict], None] | None = None, on_step: Callable[[int, ComputeMeter], None] | None = None,
          stop_at_step: int | None = None) -> list[dict]:
    """Run (or resume) `cfg` in `run_dir`; returns the evaluation records of metrics.jsonl.

    stop_at_step: return early once that step is reached (after any checkpoint due then) - tests
    use it to interrupt a run at a known point.
    """
    run_dir = Path(run_dir)
    prepare_run_dir(cfg, run_dir)
    model, tokenizer = load_model_dir(model_directory(cfg, log_every=100), cfg.model.dtype, device)
    model.eval()
    task = build_task(cfg.task, tokenizer)
    c = build_components(cfg)
    if c.off_policy.asynchronous:
        raise NotImplementedError("off_policy=pipeline_rl is not implemented yet; use off_policy=ppo_off_policy")
    optimizer, schedule = build_optimizer(model, cfg.optimizer)
    c.curriculum.reset(len(task.train), cfg.seed)
    shape = ModelShape.of(model)
    meter = ComputeMeter()
    pending = Averager()
    torch.manual_seed(cfg.seed)
    rngs = {"torch": torch.Generator(device=device).manual_seed(cfg.seed), "numpy": np.random.default_rng(cfg.seed)}
    eval_kwargs = dict(precision=c.precision, length_control=c.length_control, eval_cfg=cfg.eval,
                       max_new_tokens=cfg.rollout.max_new_tokens, temperature=cfg.rollout.temperature, seed=cfg.seed,
                       batch_size=cfg.rollout.prompts_per_batch * cfg.rollout.samples_per_prompt)
    step = last_checkpoint = 0

    checkpoint = load_checkpoint(run_dir)
    if checkpoint is not None:
        model.load_state_dict(checkpoint["model"])
        optimizer.load_state_dict(checkpoint["optimizer"])
        schedule.load_state_dict(checkpoint["schedule"])
        c.curriculum.load_state_dict(checkpoint["curriculum"])
        meter.load_state_dict(checkpoint["compute"])
        pending.sums, pending.counts = checkpoint["pending"]
        rngs["torch"].set_state(checkpoint["rng"]["torch"])
        rngs["numpy"].bit_generator.state = checkpoint["rng"]["numpy"]
        torch.set_rng_state(checkpoint["rng"]["global"])
        step = last_checkpoint = checkpoint["step"]
    tracker = Tracker(run_dir, cfg.tracking, to_dict(cfg), run_id(cfg), None if checkpoint is None else step)

    def log_eval() -> None:
        started = time.perf_counter()
        record = {"step": step, **evaluate(model, tokenizer, task, step=step, **eval_kwargs)}
        meter.evaluation_seconds += time.perf_counter() - started
        record.update(pending.pop())
        record.update(c.curriculum.metrics())
        record.update(meter.metrics())
        tracker.log(record)
        if on_eval is not None:
            on_eval(record)

    def save() -> None:
        save_checkpoint(run_dir, {
            "step": step, "model": model.state_dict(), "optimizer": optimizer.state_dict(),
            "schedule": schedule.state_dict(), "curriculum": c.curriculum.state_dict(),
            "compute": meter.state_dict(), "pending": (pending.sums, pending.counts),
            "rng": {"torch": rngs["torch"].get_state(), "numpy": rngs["numpy"].bit_generator.state,
                    "global": torch.get_rng_state()},
        })

    try:
        if checkpoint is None:
            log_eval()
        while step < cfg.max_steps:
            # 1. Generation round: k minibatches sampled with the same frozen weights.
            k = min(c.off_policy.k, cfg.max_steps - step)
            round_ = [collect_minibatch(model, tokenizer, task, c, cfg, rngs, staleness=j) for j in range(k)]
            # 2. k optimizer steps, minibatch j after j updates since it was sampled.
            for minibatch in round_:
                metrics = train_on(minibatch, model, optimizer, schedule, c, cfg, meter, shape)
                step += 1
                pending.add(metrics)
                if on_step is not None:
                    on_step(step, meter)
                if step % cfg.eval.every_steps == 0 or step == cfg.max_steps:
                    log_eval()
            # 3. Checkpoints sit on round boundaries, where no sampled-but-untrained data exists.
            if step - last_checkpoint >= cfg.checkpoint.every_steps or step == cfg.max_steps:
                save()
                last_checkpoint = step
            if stop_at_step is not None and step >= stop_at_step:
                return tracker.records
    except BaseException:
        tracker.finish("FAILED")  # the MLflow run must not look alive; metrics.jsonl is already complete
        raise
    tracker.finish()
    return tracker.records
