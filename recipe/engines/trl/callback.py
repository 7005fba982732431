"""The trl engine's callback: compute charged per step, evaluations at the native steps, our checkpoint state.

At the native engine's evaluation steps (once TRL has logged the step) it runs recipe.evaluation.evaluate on
the held-out set and records the point through the run ledger (metrics.jsonl, MLflow, on_eval); after every
step it charges the step's time to the compute meter (the generation, made once per k steps, charged 1/k a
step as the native engine charges each minibatch's generation when it trains on it) and calls on_step; at
every TRL checkpoint it writes the ledger's state into the checkpoint folder. Imports transformers: the
engine imports this module only when it trains.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any, Callable

import torch
from transformers import TrainerCallback

from recipe.compute import ModelShape, clocks, since
from recipe.config import RecipeConfig
from recipe.engines.trl.trainer import gathered_parameters
from recipe.engines.trl_vllm import evaluation_generator
from recipe.evaluation import evaluate
from recipe.ledger import RunLedger
from recipe.engines.trl.checkpoints import write_state


class StopRun(Exception):
    """on_eval stopped the run (its exception is re-raised once TRL has unwound)."""


def rank0_decides(accelerator, value: Any) -> Any:
    """Rank 0's value on every rank: a decision every rank must take together (whether to evaluate, to save,
    to stop) is made by one clock and one compute, not each rank's slightly different ones."""
    if accelerator.num_processes == 1:
        return value
    from accelerate.utils import broadcast_object_list

    box = [value]
    broadcast_object_list(box)
    return box[0]


@dataclasses.dataclass
class TrlRun:
    """What the callback and the evaluation of one trl job share."""

    cfg: RecipeConfig
    trainer: Any
    tokenizer: Any
    task: Any
    ledger: RunLedger
    shape: ModelShape
    output_dir: Path
    eval_kwargs: dict
    on_eval: Callable[[dict], None] | None = None
    on_step: Callable[[int, Any], None] | None = None
    stop_at_step: int | None = None
    stopped: BaseException | None = None

    @property
    def accelerator(self):
        return self.trainer.accelerator

    def evaluate_now(self, step: int) -> None:
        """Evaluate on the held-out set and record the point (main process); every process learns whether to
        stop. A sharded model's forward gathers its parameters from every rank, so every rank evaluates (the
        same prompts and seeds: the same forward calls); unsharded, the main process alone does."""
        accelerator, main = self.accelerator, self.accelerator.is_main_process
        verdict = None
        compute = self.ledger.compute(step)
        if main or self.cfg.engine.sharding != "none":
            started = clocks()
            unwrapped = accelerator.unwrap_model(self.trainer.model)
            unwrapped.eval()
            with gathered_parameters(unwrapped):
                results = evaluate(evaluation_generator(self.trainer, unwrapped, self.tokenizer), self.task,
                                   step=step, compute=compute, **self.eval_kwargs)
            unwrapped.train()
            self.ledger.meter.evaluation_seconds += since(started)[0]
        if main:
            # engine/processes: the ranks that trained (accelerate's count)
            record = self.ledger.record(step, results, {"engine/processes": accelerator.num_processes})
            try:
                if self.on_eval is not None:
                    self.on_eval(record)
            except BaseException as error:  # e.g. the sweep's TargetReached
                verdict = error
        else:
            self.ledger.last_eval_compute = compute
        verdict = rank0_decides(accelerator, verdict)
        if verdict is not None:
            self.stopped = verdict
            raise StopRun

    def charge_step(self, step: int, started) -> None:
        """The step's wall-clock and CPU time to the meter: its training, and 1/k of the generation made at the
        first of its k steps (counted once in the meter's statistics there)."""
        k = self.cfg.off_policy["k"]
        meter = self.ledger.meter
        wall, cpu = since(started)
        generation = getattr(self.trainer, "recipe_generation", None)
        j = (step - 1) % k  # which of the generation's k minibatches this step trained on
        if generation is not None:
            gen_wall, gen_cpu = generation["clock"]
            if j == 0:  # this step generated all k minibatches: count it once, in the meter's stats
                meter.add_generation(gen_wall, self.shape, generation["prompt_lengths"], generation["lengths"])
                if self.cfg.kl_penalty["name"] != "none":  # TRL's reference forward over the generation's rows
                    meter.add_reference(self.shape, generation["prompt_lengths"], generation["lengths"])
                self.ledger.pending.add(generation["metrics"])
                wall, cpu = wall - gen_wall, cpu - gen_cpu
            rows = range(j * generation["rows_per_step"], (j + 1) * generation["rows_per_step"])
            kept = [i for i in rows if generation["kept"][i]]
            meter.add_training(wall, self.shape, [generation["prompt_lengths"][i] for i in kept],
                               [generation["lengths"][i] for i in kept])
            # Each step is charged 1/k of the generation, as the native engine charges each minibatch's
            # generation when it is trained on: the curves' compute axes then advance alike.
            wall, cpu = wall + gen_wall / k, cpu + gen_cpu / k
        accelerator = self.accelerator
        if accelerator.num_processes > 1:  # every rank's CPU time is the job's (the wall-clock is shared)
            cpu = float(accelerator.reduce(torch.tensor([cpu], device=accelerator.device), "sum").item())
        meter.wall_seconds += wall
        meter.cpu_seconds += cpu
        self.ledger.step = step


class RecipeCallback(TrainerCallback):
    """Charges each step to the meter; evaluates at the evaluation steps once TRL has logged the step.

    TRL logs a step (loss, grad norm, our loss's metrics) after on_step_end, so the evaluation waits for
    that log (on_log, on every rank) and its record holds the step's own training metrics; a step that
    was not logged is evaluated before the next one starts, or at the end.
    """

    def __init__(self, run: TrlRun) -> None:
        self.run = run
        self.due: int | None = None  # an evaluation step waiting for its log
        self.started = clocks()

    def evaluate_due(self) -> None:
        if self.due is not None:
            step, self.due = self.due, None
            self.run.evaluate_now(step)

    def on_step_begin(self, args, state, control, **kwargs):
        self.evaluate_due()
        self.started = clocks()

    def on_step_end(self, args, state, control, **kwargs):
        run, step = self.run, state.global_step
        run.charge_step(step, self.started)
        if run.on_step is not None:
            run.on_step(step, run.ledger.meter)
        if rank0_decides(run.accelerator, run.ledger.eval_due(step)):  # compute differs a little by rank
            self.due = step
        # TRL saves every save_steps steps; a slow step also saves after checkpoint.every_minutes of wall-clock,
        # on a generation boundary like every checkpoint here.
        if step % run.cfg.off_policy["k"] == 0:
            control.should_save = control.should_save or rank0_decides(run.accelerator,
                                                                       run.ledger.checkpoint_overdue())
        if control.should_save:
            run.ledger.checkpointed()
        if run.stop_at_step is not None and step >= run.stop_at_step:
            control.should_training_stop = True

    def on_log(self, args, state, control, logs=None, **kwargs):
        pending = self.run.ledger.pending
        for key, value in (logs or {}).items():
            if key in ("loss", "grad_norm", "entropy", "kl"):
                pending.add({f"train/{key}": float(value)})
            elif key.startswith("loss/"):  # our loss component's metrics, named as the native engine names them
                pending.add({key: float(value)})
        if logs and "loss" in logs:  # the step's own log, not the run's closing summary
            self.evaluate_due()

    def on_train_end(self, args, state, control, **kwargs):
        self.evaluate_due()

    def on_save(self, args, state, control, **kwargs):
        if self.run.accelerator.is_main_process:
            write_state(self.run.output_dir / f"checkpoint-{state.global_step}", self.run.ledger.state_dict())
