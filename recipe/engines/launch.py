"""How a multi-process trl job starts on its node (torch-free: `sweep plan --verbose` prints it)."""

from __future__ import annotations

from pathlib import Path


def launch_command(run_dir: str | Path, num_processes: int) -> list[str]:
    """accelerate starts recipe/engines/trl.py once per GPU; each process reads the recipe from run_dir/config.yaml."""
    return ["accelerate", "launch", "--num_processes", str(num_processes), "--num_machines", "1",
            "-m", "recipe.engines.trl", str(run_dir)]
