"""After every job is done: fit every curve, print and save the LOO table, build the report."""

from __future__ import annotations

from pathlib import Path
from typing import TextIO

from sweeps.spec import SweepSpec


def finalize_sweep(spec: SweepSpec, sweep_dir: Path, tracker, stream: TextIO) -> None:
    """One pass of fitting (bootstrap included) feeds the printed table, loo_table.csv, the PDF and MLflow."""
    from reports.publish import report_sweep

    outputs = report_sweep(sweep_dir, echo=lambda message: print(message, file=stream))
    print(outputs.text, file=stream)
    print(f"LOO table: {outputs.csv}\nreport: {outputs.pdf}\nMLflow UI: sweep ui {sweep_dir}", file=stream)
