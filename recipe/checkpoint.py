"""Checkpoints of a run: everything a resumed run needs to continue bit-identically.

One file, `checkpoint.pt`, replaced atomically (write to a temporary file, fsync, rename), so a
kill -9 at any moment leaves either the previous checkpoint or the new one, never a torn file.
It holds model and optimizer state, the lr schedule, every random stream (sampling, thinking budgets,
torch's global state), the curriculum (its sampling state is the data position), the compute meter
and the train metrics accumulated since the last eval point.
"""

from __future__ import annotations

import os
from pathlib import Path

import torch

CHECKPOINT_NAME = "checkpoint.pt"


def save_checkpoint(run_dir: Path, state: dict) -> None:
    path = Path(run_dir) / CHECKPOINT_NAME
    temporary = path.with_suffix(f".tmp-{os.getpid()}")
    with open(temporary, "wb") as handle:
        torch.save(state, handle)
        handle.flush()
        os.fsync(handle.fileno())
    os.replace(temporary, path)


def load_checkpoint(run_dir: Path) -> dict | None:
    path = Path(run_dir) / CHECKPOINT_NAME
    if not path.is_file():
        return None
    return torch.load(path, map_location="cpu", weights_only=False)
