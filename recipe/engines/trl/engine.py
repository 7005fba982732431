"""train_trl: a recipe trained by TRL's GRPOTrainer in a run directory, resumably; the engine contract.

Resume: the newest TRL checkpoint under run_dir/trl that holds our state file (checkpoints.py: written last,
so a checkpoint torn by a kill is never used) is passed to `trainer.train(resume_from_checkpoint=...)`, and
the run ledger (recipe/ledger.py) is restored from that file.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any, Callable

from components.registry import ConfigError
from recipe.compute import ComputeMeter, ModelShape, clock_for
from recipe.config import RecipeConfig
from recipe.engines.launch import is_launched
from recipe.engines.trl.checkpoints import newest_checkpoint, read_state
from recipe.engines.trl.processes import LAUNCHED_ENV, launch_processes
from recipe.engines.trl.trainer import (bf16_head, build_async_trainer, build_trainer, embeddings_in_compute_dtype,
                                            import_trl)
from recipe.ledger import RunLedger
from recipe.model import load_model_dir
from recipe.run import build_components, devices_held, evaluation_kwargs, model_directory, prepare_run_dir
from recipe.mixture import build_run_task
from recipe.tracking import read_metrics


def check_trl_device(cfg: RecipeConfig, device: str, launched: bool) -> None:
    """What a trl recipe cannot do on this device, refused before anything loads."""
    if cfg.engine.sharding != "none" and device == "cpu" and not launched:
        # accelerate applies FSDP to GPU process groups only: on CPU it would silently train unsharded.
        raise ConfigError(f"engine.sharding: {cfg.engine.sharding} needs CUDA devices (accelerate shards on GPUs "
                          "only) and this job runs on cpu; set engine.sharding none")
    if cfg.off_policy["name"] == "pipeline_rl" and device == "cpu":
        raise ConfigError("off_policy: pipeline_rl on engine trl runs TRL's AsyncGRPOTrainer, which needs CUDA GPUs "
                          "(its packed attention kernel) and a vLLM server, and this job runs on cpu; use off_policy "
                          "ppo_off_policy, or engine native")
    if cfg.engine.vllm_mode == "server" and device == "cpu":
        raise ConfigError("engine.vllm_mode: server sends TRL's weights to the vLLM server over NCCL, which needs "
                          "CUDA GPUs, and this job runs on cpu; set engine.vllm_mode colocate (a vLLM engine in the "
                          "training process) or null")


def quiet_libraries() -> None:
    """TRL, transformers and datasets imported, with their progress bars and chatter off."""
    try:
        import datasets

        import_trl()  # this error, not one deep inside build_trainer
    except ImportError as error:
        raise RuntimeError(f"engine trl needs TRL: pip install -e '.[trl]' ({error})") from None
    import transformers

    transformers.logging.set_verbosity_error()
    datasets.disable_progress_bars()
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")


def load_trainer(cfg: RecipeConfig, model_dir: Path, components, output_dir: Path, device: str) -> tuple:
    """(trainer, model, tokenizer, task, curriculum): the async trainer for PipelineRL (it loads the model itself
    and samples its own prompts: no curriculum of ours), else ScaleRLGRPOTrainer on our model. output_dir lies in
    the run directory, where a code task's sandbox record goes."""
    if cfg.off_policy["name"] == "pipeline_rl":
        from transformers import AutoTokenizer

        tokenizer = AutoTokenizer.from_pretrained(model_dir, trust_remote_code=False)
        task = build_run_task(cfg.task, tokenizer, output_dir.parent)
        trainer = build_async_trainer(cfg, model_dir, tokenizer, task, components, output_dir)
        return trainer, trainer.model, tokenizer, task, None
    model, tokenizer = load_model_dir(model_dir, cfg.model.dtype, device)
    model.generation_config.eos_token_id = tokenizer.eos_token_id
    if not cfg.precision["fp32_head"] and cfg.model.dtype == "float32":
        bf16_head(model.get_output_embeddings())
    task = build_run_task(cfg.task, tokenizer, output_dir.parent)
    trainer = build_trainer(cfg, model, tokenizer, task, components, output_dir, device)
    return trainer, model, tokenizer, task, components.curriculum


def train_trl(cfg: RecipeConfig, run_dir: str | Path, *, device: str,
              on_eval: Callable[[dict], None] | None = None, on_step: Callable[[int, Any], None] | None = None,
              stop_at_step: int | None = None) -> list[dict]:
    """Run (or resume) `cfg` through TRL's GRPOTrainer in `run_dir`; the contract of recipe.engines.train."""
    from transformers import PrinterCallback

    from recipe.engines.trl.callback import RecipeCallback, StopRun, TrlRun

    run_dir = Path(run_dir)
    launched = os.environ.get(LAUNCHED_ENV) == "1"  # this is one of the processes launch_processes started
    check_trl_device(cfg, device, launched)
    if is_launched(cfg.engine.num_processes, cfg.engine.sharding) and not launched:
        return launch_processes(cfg, run_dir, on_eval)
    prepare_run_dir(cfg, run_dir)
    quiet_libraries()
    model_dir = model_directory(cfg, log_every=100, run_dir=run_dir)
    components = build_components(cfg)
    output_dir = run_dir / "trl"
    resume_from = newest_checkpoint(output_dir)
    trainer, model, tokenizer, task, curriculum = load_trainer(cfg, model_dir, components, output_dir, device)
    if cfg.engine.sharding != "none":
        embeddings_in_compute_dtype(model)  # after build_trainer: TRL's hooks run first
    state = read_state(resume_from) if resume_from is not None else None
    ledger = RunLedger(cfg, run_dir, ComputeMeter(devices=devices_held(cfg, device), clock=clock_for(device)),
                       curriculum, state, log=trainer.accelerator.is_main_process)
    run = TrlRun(cfg, trainer, tokenizer, task, ledger, ModelShape.of(model), output_dir,
                 evaluation_kwargs(cfg, components), on_eval, on_step, stop_at_step)
    trainer.add_callback(RecipeCallback(run))
    trainer.remove_callback(PrinterCallback)  # it prints every log dict; progress is the sweep's job
    try:
        if resume_from is None:
            run.evaluate_now(0)
        trainer.train(resume_from_checkpoint=str(resume_from) if resume_from is not None else None)
    except StopRun:
        ledger.finish()
        raise run.stopped from None
    except BaseException:
        ledger.finish("FAILED")
        raise
    ledger.finish()
    return read_metrics(run_dir)
