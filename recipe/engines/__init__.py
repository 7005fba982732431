"""The engine boundary: a job calls `train(cfg, run_dir)` and the recipe's engine trains it.

    native    recipe/engines/native.py    the synchronous loop (PPO-off-policy-k), one process
              recipe/engines/pipeline.py  PipelineRL-k: a generator and a trainer process in flight
    trl       recipe/engines/trl/       Hugging Face TRL's GRPOTrainer (accelerate, optional vLLM)

Every engine keeps the same contract, so fitting, reports, MLflow, tune and resume do not care which
one trained: config.yaml and metrics.jsonl in the run directory (the validation pass rate at the
same evaluation steps, against the same compute keys), resumable from the run directory after a
kill, `on_eval(record)` after each evaluation (an exception from it stops the run and propagates)
and `on_step(step, meter)` after each optimizer step. recipe/engines/support.py says which recipe
choices each engine can run; a recipe it cannot run fails when the recipe is loaded.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable

if TYPE_CHECKING:  # recipe.config imports recipe.engines.support, so this package must not import it back
    from recipe.config import RecipeConfig


def train(cfg: "RecipeConfig", run_dir: str | Path, *, device: str = "auto",
          on_eval: Callable[[dict], None] | None = None, on_step: Callable[[int, Any], None] | None = None,
          stop_at_step: int | None = None) -> list[dict]:
    """Run (or resume) `cfg` in `run_dir` on `device` (auto: CUDA if present); returns the evaluation records.

    stop_at_step: return early once that step is reached (after any checkpoint due then); tests use it
    to interrupt a run at a known point.
    """
    from components import REGISTRIES
    from recipe.preflight import check_can_run
    from recipe.run import configure_cuda, resolve_device

    check_can_run(cfg)  # files and memory, before a model, a process or the run directory exists
    device = resolve_device(device)
    if device.startswith("cuda"):
        configure_cuda()
    hooks = dict(on_eval=on_eval, on_step=on_step, stop_at_step=stop_at_step)
    if cfg.engine.name == "trl":
        from recipe.engines.trl import train_trl

        return train_trl(cfg, run_dir, device=device, **hooks)
    if REGISTRIES["off_policy"].build(cfg.off_policy).asynchronous:
        from recipe.engines.pipeline import train_pipeline

        return train_pipeline(cfg, run_dir, device=device, **hooks)
    from recipe.engines.native import train_native

    return train_native(cfg, run_dir, device=device, **hooks)
