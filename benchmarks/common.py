"""What the benchmarks share: where they write, the machine and load a figure was measured at, git."""

from __future__ import annotations

import os
import subprocess
from datetime import datetime, timezone
from pathlib import Path

from recipe.machine import cpu_model

REPO = Path(__file__).resolve().parents[1]
OUT = REPO / "benchmarks" / "out"  # git-ignored: every benchmark's JSON

__all__ = ["OUT", "REPO", "cpu_model", "git", "loadavg", "machine"]


def loadavg() -> list[float]:
    """The 1-, 5- and 15-minute load averages, rounded: recorded beside every timing."""
    return [round(value, 2) for value in os.getloadavg()]


def machine() -> dict:
    """The CPU model, its core count and the UTC minute: the machine line of a benchmark's JSON."""
    now = datetime.now(timezone.utc).isoformat(timespec="minutes")
    return {"cpu": cpu_model(), "cores": os.cpu_count(), "date": now}


def git(*args: str, cwd: Path = REPO) -> str:
    """A git command's stdout in the repository (raises CalledProcessError when git fails)."""
    return subprocess.run(["git", *args], cwd=cwd, capture_output=True, text=True, check=True).stdout.strip()
