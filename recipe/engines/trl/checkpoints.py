"""Our part of a TRL checkpoint: the run ledger's state file, written last, and the newest complete checkpoint."""

from __future__ import annotations

import json
from pathlib import Path

from recipe.tracking import sync_tree, write_json_atomic

STATE_NAME = "scalerl_state.json"  # in each checkpoint-N folder TRL writes under run_dir/trl


def write_state(folder: Path, state: dict) -> None:
    """The ledger's state into a checkpoint folder, marking it complete (newest_checkpoint): the trainer's files
    are flushed to disk first, and the state file is written atomically."""
    sync_tree(folder)
    write_json_atomic(folder / STATE_NAME, state)


def newest_checkpoint(output_dir: Path) -> Path | None:
    """The newest checkpoint-N folder whose state file reads back (so a save torn by a kill is skipped)."""
    def complete(folder: Path) -> bool:
        try:
            return isinstance(json.loads((folder / STATE_NAME).read_text()), dict)
        except (OSError, ValueError):
            return False

    done = [p for p in output_dir.glob("checkpoint-*") if complete(p)]
    return max(done, key=lambda p: int(p.name.split("-")[-1]), default=None)


def read_state(folder: Path) -> dict:
    return json.loads((folder / STATE_NAME).read_text())
