"""`python -m recipe.engines.trl RUN_DIR`: one process of an accelerate-launched trl job (processes.py starts them)."""

import os
import sys
from pathlib import Path

import torch

from recipe.config import load_recipe
from recipe.engines.trl.engine import train_trl
from recipe.engines.trl.processes import SUPERVISOR_ENV, input_errors_reported, watch_supervisor


def main(argv: list[str]) -> None:
    """`python -m recipe.engines.trl RUN_DIR` (its __main__): one process of an accelerate-launched trl job; it
    exits the process (status 0) once the job is done, or raises."""
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
    main(sys.argv[1:])
