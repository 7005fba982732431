"""After every job is done: fit every curve, print and save the LOO table, build the report."""

from __future__ import annotations

from pathlib import Path
from typing import TextIO

from sweeps.spec import SweepSpec


def finalize_sweep(spec: SweepSpec, sweep_dir: Path, tracker, stream: TextIO) -> None:
    print(f"all jobs done; fitting and reporting is not wired yet ({sweep_dir})", file=stream)
