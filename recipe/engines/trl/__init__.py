"""The trl engine: the recipe trained by Hugging Face TRL's GRPOTrainer, with our evaluation and compute keys.

    pip install -e '.[trl]'          (TRL 1.16; accelerate and datasets come with it)

TRL does the RL step (generation with transformers or vLLM, the forward pass, the optimizer, accelerate's
multi-GPU plumbing, its own checkpoints); recipe/engines/support.py is the table of what maps, what we
emulate and what is refused. The package, one job a module:

    arguments.py   the recipe as GRPOConfig (and AsyncGRPOConfig) keyword arguments
    rollout.py     the reward function (the task's checker, length control) and forced interruption on
                   TRL's generation path (its rollout_func)
    trainer.py     ScaleRLGRPOTrainer: our curriculum, advantages, batch filter, aggregation and loss at
                   TRL's extension points; building the trainer
    callback.py    compute per step, evaluations at the native steps, checkpoint state (the run ledger)
    checkpoints.py our state file in TRL's checkpoints, and the newest complete checkpoint
    engine.py      train_trl: load, resume, train (the engine contract of recipe.engines.train)
    processes.py   a job of several processes under `accelerate launch`, each `python -m recipe.engines.trl`
                   (__main__.py)

A curve from this engine reads like a native one: same evaluation steps, same compute keys, the same
metrics.jsonl and MLflow records through the same run ledger (recipe/ledger.py).
"""

from recipe.engines.trl.arguments import async_grpo_arguments, loss_arguments, trl_arguments
from recipe.engines.trl.checkpoints import STATE_NAME, newest_checkpoint
from recipe.engines.trl.engine import train_trl
from recipe.engines.trl.processes import (INPUT_ERROR_FILE, LAUNCH_LOG, LAUNCHED_ENV, first_error,
                                          input_errors_reported, launch_environment, launch_processes,
                                          watch_supervisor)
from recipe.engines.trl.rollout import RecipeRewards, interrupting_rollout, interruption_point
from recipe.engines.trl.trainer import (build_trainer, embeddings_in_compute_dtype, generation_layout,
                                        row_weights)

__all__ = ["INPUT_ERROR_FILE", "LAUNCHED_ENV", "LAUNCH_LOG", "STATE_NAME", "RecipeRewards", "async_grpo_arguments",
           "build_trainer", "embeddings_in_compute_dtype", "first_error", "generation_layout", "input_errors_reported",
           "interrupting_rollout", "interruption_point", "launch_environment", "launch_processes", "loss_arguments",
           "newest_checkpoint", "row_weights", "train_trl", "trl_arguments", "watch_supervisor"]
