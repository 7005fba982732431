"""How a launched trl job starts on its node (torch-free: `sweep plan --verbose` prints it).

A trl job runs under `accelerate launch` when it has several processes (one GPU each) or shards its
model. accelerate is started by the job's own interpreter (`python -m accelerate.commands.launch`),
not a bare `accelerate` from PATH, and on a free rendezvous port, so two jobs on one node never collide.
"""

from __future__ import annotations

import socket
import sys
from pathlib import Path

# engine.sharding -> what it passes to accelerate. fsdp: PyTorch FSDP2, every decoder layer its own
# shard unit (accelerate reads the layer class from the model's _no_split_modules), parameters
# re-sharded after each forward, checkpoints saved as shards (what TRL's resume reads back).
SHARDING_FLAGS = {
    "none": [],
    "fsdp": ["--use_fsdp", "--fsdp_version", "2", "--fsdp_auto_wrap_policy", "TRANSFORMER_BASED_WRAP",
             "--fsdp_reshard_after_forward", "true", "--fsdp_state_dict_type", "SHARDED_STATE_DICT"],
}


def is_launched(num_processes: int, sharding: str) -> bool:
    """Whether a trl job runs under accelerate launch rather than in the job's own process."""
    return num_processes > 1 or sharding != "none"


def free_port() -> int:
    """A TCP port nothing listens on now (the OS picks it), for the processes' rendezvous."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.bind(("", 0))
        return probe.getsockname()[1]


# model.dtype -> accelerate's --mixed_precision (the trainer's autocast; master weights stay as loaded).
MIXED_PRECISION = {"float32": "no", "bfloat16": "bf16", "float16": "fp16"}


def launch_command(run_dir: str | Path, num_processes: int, sharding: str = "none", dtype: str = "float32", *,
                   port: int | None = None) -> list[str]:
    """accelerate starts recipe/engines/trl.py once per GPU; each process reads the recipe from run_dir/config.yaml.

    port None prints a placeholder (what `sweep plan --verbose` shows: the port is chosen at launch).
    """
    # --multi_gpu: torchrun starts the N processes, on GPUs or (gloo) CPUs; without it accelerate starts one.
    several = ["--multi_gpu"] if num_processes > 1 and sharding == "none" else []
    return [sys.executable, "-m", "accelerate.commands.launch", *several, "--num_processes", str(num_processes),
            "--num_machines", "1", "--main_process_port", str(port) if port else "<free port>",
            "--mixed_precision", MIXED_PRECISION[dtype], "--dynamo_backend", "no", *SHARDING_FLAGS[sharding],
            "-m", "recipe.engines.trl", str(run_dir)]
