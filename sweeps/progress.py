"""The live view of a sweep: per job its state, compute done / target, last pass rate and ETA.

Read from the run directories alone (metrics.jsonl tails and state files), so `sweep status` shows
the same thing from another shell, or after the driver died.
"""

from __future__ import annotations

import dataclasses
import json
import time
from pathlib import Path

from recipe.compute import COMPUTE_AXES
from recipe.tracking import read_phase
from sweeps.planner import Job
from sweeps.spec import SweepSpec
from sweeps.state import DONE, FAILED, PENDING, RUNNING, is_done, is_locked, read_state

PASS_RATE_KEY = "eval/pass_rate"
# The run's own clock (recipe.compute.ComputeMeter): generation + training, and evaluation.
WALL_KEY, EVALUATION_KEY = "compute/wall_seconds", "compute/evaluation_seconds"
TAIL_BYTES = 65536


def compute_key(unit: str) -> str:
    """The metrics.jsonl key of a compute unit, as the training loop's accounting names it."""
    return COMPUTE_AXES[unit]


@dataclasses.dataclass
class JobProgress:
    job: Job
    status: str
    failures: int = 0  # launches that failed (sweeps.state.JobState.failures)
    compute: float = 0.0
    pass_rate: float | None = None
    eta_seconds: float | None = None
    error: str | None = None
    log_path: str | None = None
    launcher_id: str | None = None  # local: the submitit controller's pid; slurm: the job id
    phase: dict | None = None  # before the first evaluation: what the job is doing (e.g. building the warm start)


def last_eval(run_dir: Path, unit: str) -> tuple[float, float | None, float | None]:
    """(compute, pass rate, the run's own seconds so far) of the last evaluation in metrics.jsonl.

    The seconds are the run's clock as its compute meter keeps it (generation + training wall-clock
    plus evaluation; checkpointed, so a resumed run continues it), which makes the ETA independent of
    start-up, waits in a queue and earlier attempts.
    """
    path = run_dir / "metrics.jsonl"
    if not path.exists():
        return 0.0, None, None
    with open(path, "rb") as handle:
        handle.seek(0, 2)
        size = handle.tell()
        handle.seek(max(0, size - TAIL_BYTES))
        tail = handle.read().decode(errors="replace").splitlines()
    for line in reversed(tail):
        try:
            record = json.loads(line)
        except json.JSONDecodeError:
            continue  # the first (cut) or last (being written) line of the tail
        if PASS_RATE_KEY in record:
            seconds = record.get(WALL_KEY, 0.0) + record.get(EVALUATION_KEY, 0.0)
            return float(record.get(compute_key(unit), 0.0)), float(record[PASS_RATE_KEY]), seconds
    return 0.0, None, None


def job_progress(spec: SweepSpec, sweep_dir: Path, job: Job) -> JobProgress:
    state = read_state(sweep_dir, job.run_id)
    compute, pass_rate, seconds = last_eval(job.run_dir, spec.budget.unit)
    if is_done(job.run_dir, spec.budget.unit, spec.budget.target):
        status = DONE
    elif is_locked(job.run_dir):
        status = RUNNING
    elif state.status == FAILED:
        status = FAILED
    else:
        status = PENDING  # never started, or stopped mid-way (resumes from its checkpoint)
    progress = JobProgress(job, status, state.failures, compute, pass_rate, error=state.last_error,
                           log_path=state.log_path, launcher_id=state.launcher_id,
                           phase=read_phase(job.run_dir) if status == RUNNING else None)
    target = spec.budget.target
    if status == RUNNING and seconds and 0 < compute < target:
        progress.eta_seconds = seconds * (target - compute) / compute
    return progress


def format_duration(seconds: float | None) -> str:
    if seconds is None:
        return "-"
    seconds = int(seconds)
    if seconds >= 3600:
        return f"{seconds // 3600}h{seconds % 3600 // 60:02d}m"
    return f"{seconds // 60}m{seconds % 60:02d}s"


def format_state(row: JobProgress) -> str:
    """"done", "failed x2", "running", or the phase of a running job: "running: warm start 300/1000 (30%)"."""
    if row.status == FAILED:
        return f"failed x{row.failures}"
    phase = row.phase
    if row.status != RUNNING or not phase:
        return row.status
    done, total = phase.get("done"), phase.get("total")
    if done is None or not total:
        return f"running: {phase['phase']}"
    return f"running: {phase['phase']} {done:,}/{total:,} ({done / total:.0%})"


def format_progress(spec: SweepSpec, rows: list[JobProgress], started: float | None = None) -> str:
    """The table `sweep run` redraws and `sweep status` prints."""
    target, unit = spec.budget.target, spec.budget.unit
    header = ("job", "variant", "seed", "state", f"{unit} done", "pass rate", "eta")
    lines = []
    for row in rows:
        fraction = min(row.compute / target, 1.0) if target else 0.0
        lines.append((row.job.run_id, row.job.variant, str(row.job.seed), format_state(row),
                      f"{row.compute:,.0f} / {target:,.0f} ({fraction:4.0%})",
                      "-" if row.pass_rate is None else f"{row.pass_rate:.3f}", format_duration(row.eta_seconds)))
    widths = [max(len(line[i]) for line in [header, *lines]) for i in range(len(header))]
    text = ["  ".join(cell.ljust(width) for cell, width in zip(line, widths)).rstrip() for line in [header, *lines]]
    counts = {status: sum(row.status == status for row in rows) for status in (DONE, RUNNING, PENDING, FAILED)}
    done_compute = sum(min(row.compute, target) for row in rows)
    overall = done_compute / (target * len(rows)) if rows and target else 0.0
    elapsed = f", {format_duration(time.time() - started)} elapsed" if started else ""
    states = ", ".join(f"{n} {s}" for s, n in counts.items())
    text.append(f"sweep {spec.name}: {overall:.0%} of compute; {states}{elapsed}")
    for row in rows:
        if row.status == FAILED:
            text.append(f"  {row.job.variant} seed {row.job.seed} failed: {row.error} (log: {row.log_path})")
    return "\n".join(text) + "\n"


def collect_progress(spec: SweepSpec, sweep_dir: Path, jobs: list[Job]) -> list[JobProgress]:
    return [job_progress(spec, sweep_dir, job) for job in jobs]


__all__ = ["JobProgress", "collect_progress", "format_progress", "compute_key", "PASS_RATE_KEY", "RUNNING"]
