"""A tune study's trial records and curves on disk: what the `sweep tune` driver writes and its report reads.

Torch- and Optuna-free, so reports.study reads a study without importing the driver (sweeps.tune).

    <tune_dir>/trials/<n>.json              trial n's TrialRecord
    <tune_dir>/runs/<run_id>/metrics.jsonl  its evaluations (curve_points)
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Any, Optional

from recipe.tracking import write_json_atomic
from sweeps.progress import PASS_RATE_KEY, compute_key

RUNNING, COMPLETE, PRUNED, FAILED = "running", "complete", "pruned", "failed"


@dataclasses.dataclass
class TrialRecord:
    """What the driver knows of one trial; <tune_dir>/trials/<number>.json."""

    number: int
    params: dict[str, Any]
    run_id: str
    state: str = RUNNING
    value: Optional[float] = None  # the objective (complete trials)
    lower: Optional[float] = None  # its interval at the pruner's level
    upper: Optional[float] = None
    compute: float = 0.0  # compute of the trial's last evaluation
    pass_rate: Optional[float] = None  # its last evaluated pass rate
    pruned: Optional[dict[str, Any]] = None  # the pruning decision: compute, estimate, best trial's estimate
    error: Optional[str] = None
    note: Optional[str] = None


def record_path(tune_dir: Path, number: int) -> Path:
    return tune_dir / "trials" / f"{number}.json"


def write_record(tune_dir: Path, record: TrialRecord) -> None:
    write_json_atomic(record_path(tune_dir, record.number), dataclasses.asdict(record))


def read_records(tune_dir: Path) -> list[TrialRecord]:
    paths = sorted((tune_dir / "trials").glob("*.json"), key=lambda path: int(path.stem))
    return [TrialRecord(**json.loads(path.read_text())) for path in paths]


def best_record(records: list[TrialRecord], maximize: bool) -> TrialRecord | None:
    complete = [record for record in records if record.state == COMPLETE and record.value is not None]
    if not complete:
        return None
    return (max if maximize else min)(complete, key=lambda record: record.value)


def compute_summary(records: list[TrialRecord], fit_at: float) -> tuple[float, dict[int, float]]:
    """(compute the study spent, {pruned trial: compute its pruning saved, fit_at - where it stopped}).

    A trial that shared another's run (same parameters) spent nothing of its own.
    """
    spent = sum(record.compute for record in records if not record.note)
    saved = {record.number: max(0.0, fit_at - record.compute) for record in records if record.state == PRUNED}
    return spent, saved


def curve_points(run_dir: Path, unit: str) -> tuple[list[int], list[float], list[float]]:
    """(steps, compute, pass rates) of a run's evaluations so far (complete lines of metrics.jsonl)."""
    from reports.sweep_data import read_metrics_file

    steps, compute, pass_rate = [], [], []
    key = compute_key(unit)
    for record in read_metrics_file(run_dir / "metrics.jsonl"):
        if PASS_RATE_KEY in record and key in record:
            steps.append(int(record["step"]))
            compute.append(float(record[key]))
            pass_rate.append(float(record[PASS_RATE_KEY]))
    return steps, compute, pass_rate


def fit_trial_curve(points: tuple[list[int], list[float], list[float]], burn_in: float, fit_method: str = "default",
                    fit_weights: str = "compute"):
    """R(C) = R0 + (A - R0) / (1 + (C_mid / C)^B) fitted on a trial's evaluations with C >= burn_in.

    R0 is the step-0 evaluation (fitted when the curve has none). Raises fitting.FitInputError when
    the curve cannot be fitted yet.
    """
    from fitting import FitInputError, fit_sigmoid
    from fitting.fit import window_method_options

    steps, compute, pass_rate = points
    if not steps:
        raise FitInputError("no evaluation yet")
    r0 = {"r0": pass_rate[0]} if steps[0] == 0 else {"fit_r0": True}
    return fit_sigmoid(compute, pass_rate, burn_in=burn_in, **window_method_options(fit_method), weights=fit_weights,
                       **r0)
