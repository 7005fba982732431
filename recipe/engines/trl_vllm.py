"""The trl engine's vLLM (engine.vllm_mode colocate): TRL's colocated engine, started and fed as ours is.

TRL 1.16's colocate mode builds `vllm.LLM` in each training process and copies the weights in after every
optimizer step. Three things it does not do on vLLM's CPU build, or not as the recipe asks, are done here:

- the engine's settings: the recipe's dtype and head (hf_overrides head_dtype, as recipe/vllm_generator.py),
  eager on CPU, no loading bar; the process around it kept as the trainer needs it (engine_process);
- the weight copy: TRL calls `load_weights` on the engine's model, which fails on the CPU build once its
  linear weights are repacked ("'Parameter' object has no attribute 'weight_loader'"); `sync_weights` is
  replaced by vLLM's layerwise `reload_weights` (the path the native engine's generator uses), the prefix
  cache reset after it;
- forced interruption: TRL samples a whole batch to one token limit, so phase 1 would sample every row to
  max_thinking; `vllm_interrupting_rollout` samples each row to its own thinking budget with
  recipe.vllm_generator.VllmGenerator on TRL's engine, then the phrase and the answer, in two engine calls.

Server mode syncs weights over NCCL only (TRL's VLLMClient), so on CPU only colocate can train.
"""

from __future__ import annotations

import importlib
import os
from contextlib import contextmanager

import numpy as np
import torch

from recipe.config import RecipeConfig
from recipe.engines.launch import free_port

# What TRL's colocate mode writes into os.environ for vLLM's env:// rendezvous when one process trains.
RENDEZVOUS_KEYS = ("RANK", "LOCAL_RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT")

@contextmanager
def colocated_engine(cfg: RecipeConfig, device: str):
    """While TRL's trainer is built: its colocated vLLM engine gets the recipe's dtype and head and runs eager on
    CPU, in a process left with its threads and random state (recipe.vllm_generator.engine_process).

    One process has no launcher's rendezvous: TRL writes one into os.environ, on port 29500 whenever it is free
    at that instant, so two runs starting together on a machine (a sweep's local jobs, pytest's workers) took
    the same port, and every process the run started later inherited it. Here the port is one the OS picks, and
    the environment is as it was once the engine has started (its process group is up by then).
    """
    from recipe.vllm_generator import engine_process, head_dtype_override

    module = importlib.import_module("trl.generation.vllm_generation")
    original = module.LLM
    # Chunked prefill off, as start_engine's: vLLM's CPU sampler cannot rewind a seeded request's generator after a
    # partial prefill, and vllm_interrupting_rollout seeds each request; a step then takes whole prompts.
    settings = {"dtype": cfg.model.dtype, "enforce_eager": device == "cpu", "use_tqdm_on_load": False,
                "hf_overrides": head_dtype_override(cfg.model.dtype, cfg.precision["fp32_head"]),
                "enable_chunked_prefill": False}

    def start(*args, **kwargs):
        batched = max(kwargs.get("max_num_batched_tokens") or 0, kwargs.get("max_model_len") or 0)
        return original(*args, **{**kwargs, **settings, "max_num_batched_tokens": batched or None})

    module.LLM = start
    before = {key: os.environ.get(key) for key in RENDEZVOUS_KEYS}
    os.environ.setdefault("MASTER_PORT", str(free_port()))
    try:
        with engine_process(torch.device(device), cfg.rollout.vllm_cpu_kv_cache_gib):
            yield
    finally:
        module.LLM = original
        for key, value in before.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value


def reload_weights_on_sync(vllm_generation) -> None:
    """TRL's sync_weights, through vLLM's layerwise reload instead of load_weights (which the CPU build refuses
    after its first load). The parameters come from TRL's own iterator (names fixed, sharded ones gathered)."""

    def sync_weights() -> None:
        weights = list(vllm_generation._iter_named_params())
        vllm_generation.llm.collective_rpc("reload_weights", kwargs={"weights_iterator": iter(weights),
                                                                     "is_checkpoint_format": True})
        vllm_generation.llm.reset_prefix_cache()

    vllm_generation.sync_weights = sync_weights


def vllm_interrupting_rollout(prompts: list, trainer) -> dict:
    """interrupting_rollout (recipe/engines/trl/rollout.py) on TRL's colocated engine, each row to its own budget.

    TRL has loaded this step's weights before calling the rollout function. Budgets and sampling seeds come from
    streams seeded by (seed, step, process), as the transformers path's budgets; the phrase's tokens carry
    env_mask 0 and logprob 0, as there.
    """
    from recipe.vllm_generator import VllmGenerator

    tokenizer = trainer.processing_class
    prompt_ids, _, _ = trainer._tokenize_prompts(prompts)
    seed = [trainer.args.seed, trainer.state.global_step, trainer.accelerator.process_index]
    torch_rng = torch.Generator().manual_seed(int(np.random.SeedSequence(seed).generate_state(1)[0]))
    generator = VllmGenerator(trainer.vllm_generation.llm, None, tokenizer, device="cpu")
    rollout = generator.generate_ids(prompt_ids, length_control=trainer.recipe_components.length_control,
                                     max_new_tokens=trainer.args.max_completion_length,
                                     temperature=trainer.args.temperature, torch_rng=torch_rng,
                                     numpy_rng=np.random.default_rng(seed), version=trainer.state.global_step)
    lengths = rollout.lengths.tolist()
    responses = rollout.response_ids.tolist()
    masks = rollout.loss_mask.int().tolist()
    logprobs = rollout.old_logprobs.tolist()
    return {"prompt_ids": prompt_ids, "completion_ids": [row[:n] for row, n in zip(responses, lengths)],
            "logprobs": [row[:n] for row, n in zip(logprobs, lengths)],
            "env_mask": [row[:n] for row, n in zip(masks, lengths)],
            "interrupted": rollout.interrupted.tolist()}


def evaluation_generator(trainer, model, tokenizer):
    """What evaluation samples with: TRL's colocated vLLM engine, its weights synced to this step, when the job
    generates with it (the curve is then measured by what sampled the training data), else the torch generator
    on the trained model."""
    from recipe.generator import TorchGenerator
    from recipe.vllm_generator import VllmGenerator

    if not (trainer.use_vllm and trainer.vllm_mode == "colocate"):
        return TorchGenerator(model, tokenizer)
    if trainer.state.global_step != trainer._last_loaded_step:
        trainer.vllm_generation.sync_weights()
        trainer._last_loaded_step = trainer.state.global_step
    return VllmGenerator(trainer.vllm_generation.llm, None, tokenizer, device=next(model.parameters()).device)
