"""GRPOConfig / AsyncGRPOConfig keyword arguments for a recipe: one TRL setting per recipe setting.

recipe/engines/support.py is the table of what maps, what the engine emulates and what is refused; these
functions only translate what support.check_engine has accepted.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

from recipe.config import RecipeConfig


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


def kl_arguments(cfg: RecipeConfig) -> dict[str, Any]:
    """TRL's reference model and its resets for kl_penalty reference (beta 0: none kept, as the paper). TRL
    computes the reference's logprobs; our kl_penalty component turns them into the penalty (recipe_loss)."""
    if cfg.kl_penalty["name"] == "none":
        return {"beta": 0.0}
    reset_every = cfg.kl_penalty["reset_every"]
    # mixup alpha 1: the reference becomes the policy (DeepSeek-R1's reset), not TRL's default blend of 0.6.
    return {"beta": float(cfg.kl_penalty["coef"]), "sync_ref_model": reset_every > 0,
            "ref_model_sync_steps": max(1, reset_every), "ref_model_mixup_alpha": 1.0}


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
        **kl_arguments(cfg),
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

