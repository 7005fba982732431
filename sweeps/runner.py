"""The sweep driver: plan, launch, watch, resume; then fit every curve and report.

`run_sweep` is idempotent. Finished jobs (done.json) are skipped; a job whose run directory is
locked is still running from an earlier driver and is watched, not relaunched; an interrupted job
resumes from its checkpoint; a failed job is retried by a later call until it has failed
`executor.max_attempts` times. All state is in the sweep directory (see sweeps/state.py), so the
driver can die at any time: after a kill -9 its local jobs keep training and the next driver watches
them; a Ctrl-C at the terminal reaches the local jobs too (they share its process group) and stops
them, and each resumes from its last checkpoint (checkpoint.every_steps / every_minutes); SLURM jobs
run on regardless. A resume is a launch, not a failure: only failures count against max_attempts.
"""

from __future__ import annotations

import dataclasses
import contextlib
import json
import platform
import socket
import sys
import time
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, TextIO

from omegaconf import OmegaConf

from components.registry import ConfigError
from sweeps.job import TRAINED_ELSEWHERE, TrainingJob
from sweeps.planner import Job, check_jobs_can_run, check_size, plan_sweep
from sweeps.progress import collect_progress, format_progress
from sweeps.spec import SweepSpec, base_source, check_output_dir, output_dir
from recipe.tracking import read_json_file, write_text_atomic
from sweeps.state import DONE, FAILED, PENDING, RUNNING, is_done, is_locked, read_state, write_json_atomic, write_state

# Without a terminal the table is printed at most this often (plus on every state change).
PLAIN_PRINT_SECONDS = 30.0


def machine_description() -> str:
    import os

    return (f"{socket.gethostname()} ({platform.machine()}, {os.cpu_count()} cpus, "
            f"{platform.system()} {platform.release()})")


def write_sweep_files(spec: SweepSpec, sweep_dir: Path, jobs: list[Job]) -> None:
    """sweep.json (what the report's title page needs) and plan.json (the job list)."""
    sweep_dir.mkdir(parents=True, exist_ok=True)
    info_path = sweep_dir / "sweep.json"
    created = read_json_file(info_path).get("created") if info_path.exists() else None
    if not isinstance(created, str):
        created = datetime.now(timezone.utc).isoformat(timespec="seconds")
    write_json_atomic(info_path, {
        "name": spec.name, "base": spec.base, "seeds": list(spec.seeds),
        "budget": dataclasses.asdict(spec.budget), "executor": spec.executor.name,
        "axes": spec.axes, "scan": scan_record(jobs), "created": created, "machine": machine_description(),
    })
    # The spec with absolute paths, so `sweep status <sweep_dir>` works from any directory.
    frozen = dataclasses.asdict(spec)
    del frozen["root"]
    source = base_source(spec)
    frozen["base"] = "scalerl" if source is None else str(source.resolve())
    frozen["output_dir"] = str(sweep_dir.resolve())
    frozen["seeds"] = list(spec.seeds)
    write_text_atomic(sweep_dir / "spec.yaml", OmegaConf.to_yaml(OmegaConf.create(frozen)))  # status reads it
    write_json_atomic(sweep_dir / "plan.json", [
        {"run_id": job.run_id, "axis": job.axis, "choice": job.choice, "variant": job.variant, "seed": job.seed,
         "run_dir": str(job.run_dir.relative_to(sweep_dir))}
        for job in jobs
    ])


def scan_record(jobs: list[Job]) -> dict | None:
    """sweep.json's scan: the scanned key, its values in plan order (the reference first) and the reference
    value; None for a LOO. The report's scan page reads it (reports/scan.py)."""
    scanned = [job for job in jobs if job.scan_key is not None]
    if not scanned:
        return None
    values = list({repr(job.scan_value): job.scan_value for job in scanned}.values())
    return {"key": scanned[0].scan_key, "values": values, "reference": values[0]}


INPUT_ERROR_PREFIX = "input error: "


def job_result_field(handle: Any, key: str) -> str | None:
    """A field of the dict a finished job returned (sweeps.job.INPUT_ERROR, TRAINED_ELSEWHERE), or None."""
    try:
        result = handle.result()
    except Exception:
        return None
    return result.get(key) if isinstance(result, dict) else None


def job_input_error(handle: Any) -> str | None:
    """The input error a job returned (sweeps.job.INPUT_ERROR), or None."""
    from sweeps.job import INPUT_ERROR

    return job_result_field(handle, INPUT_ERROR)


def check_run_configs(jobs: list[Job]) -> None:
    """A started job's config.yaml must be its recipe's: a damaged one would fail that job at every attempt
    (recipe.run.prepare_run_dir refuses a run directory of another config). Named here, before launching."""
    from recipe.config import resolved_yaml
    from recipe.tracking import DamagedFileError

    for job in jobs:
        path = job.run_dir / "config.yaml"
        if path.is_file() and not is_done(job.run_dir):
            try:
                same = path.read_bytes().decode("utf-8") == resolved_yaml(sweep_job_recipe(job))
            except (OSError, ValueError):
                same = False
            if not same:
                raise DamagedFileError(f"{path}: damaged or of another config (not job {job.variant} seed {job.seed}'s "
                                       f"resolved recipe); restore it, or remove {job.run_dir} to train that job again "
                                       "from the start")


def sweep_job_recipe(job: Job):
    """Jobs never write to the tracking store themselves: the driver mirrors their metrics."""
    return dataclasses.replace(job.recipe, tracking=dataclasses.replace(job.recipe.tracking, mlflow=False))


class Display:
    """Redraws the progress table on a terminal; prints it now and then (and on changes) otherwise."""

    def __init__(self, stream: TextIO) -> None:
        self.stream = stream
        self.interactive = stream.isatty()
        self.last_text = ""
        self.last_print = 0.0
        self.lines_drawn = 0

    def show(self, text: str, changed: bool, force: bool = False) -> None:
        if self.interactive:
            if self.lines_drawn:
                self.stream.write(f"\x1b[{self.lines_drawn}F\x1b[J")  # cursor up, clear below
            self.stream.write(text)
            self.lines_drawn = text.count("\n")
        elif force or changed or time.time() - self.last_print > PLAIN_PRINT_SECONDS:
            self.stream.write(text + "\n")
            self.last_print = time.time()
        self.stream.flush()


class HarnessTimer:
    """Wall-clock the driver spends on its own work, by phase (plan, launch, poll, finalize).

    Written to <sweep>/harness.json at the end of a run (the overhead benchmark reads it): sleeps
    between polls are not counted, everything else the driver does is.
    """

    def __init__(self) -> None:
        self.started = time.perf_counter()
        self.seconds: dict[str, float] = {}

    def add(self, name: str, since: float) -> None:
        """Charge the time from perf_counter() value `since` to now to phase `name`."""
        self.seconds[name] = self.seconds.get(name, 0.0) + time.perf_counter() - since

    @contextlib.contextmanager
    def phase(self, name: str):
        began = time.perf_counter()
        try:
            yield
        finally:
            self.add(name, began)

    def write(self, sweep_dir: Path) -> None:
        import resource

        wall = time.perf_counter() - self.started
        record = {"wall_seconds": wall, "harness_seconds": sum(self.seconds.values()),
                  "phases": self.seconds, "driver_cpu_seconds": sum(resource.getrusage(resource.RUSAGE_SELF)[:2])}
        record["harness_fraction"] = record["harness_seconds"] / wall if wall else 0.0
        (sweep_dir / "harness.json").write_text(json.dumps(record, indent=1) + "\n")


def run_sweep(spec: SweepSpec, stream: TextIO | None = None, allow_large: bool = False) -> int:
    """Run every job of `spec` to its target; returns 0 when all are done, 1 if any failed. More than
    planner.LARGE_RUNS jobs are refused unless allow_large."""
    stream = stream or sys.stdout
    from sweeps.launcher import Launcher, job_error, job_finished, job_log
    from sweeps.tracking import SweepTracker, mlflow_record

    started = time.time()
    timer = HarnessTimer()
    sweep_dir = output_dir(spec)
    jobs = plan_sweep(spec)
    check_size(len(jobs), spec.budget, "jobs", allow_large)
    for note in check_jobs_can_run(spec, jobs):  # what only a job's node can check, an oversubscribed machine
        print(note, file=stream)
    check_output_dir(spec)
    check_run_configs(jobs)
    for job in jobs:  # a damaged state file or mlflow.json is named before anything is written
        read_state(sweep_dir, job.run_id)
    mlflow_record(sweep_dir)
    write_sweep_files(spec, sweep_dir, jobs)
    tracker = SweepTracker(spec, sweep_dir, jobs)
    print(f"sweep {spec.name}: {len(jobs)} jobs in {sweep_dir}; MLflow {tracker.uri} "
          f"(experiment {tracker.experiment_id})", file=stream)
    faults = spec.faults
    max_attempts = spec.executor.max_attempts

    queue: list[Job] = []
    watched: list[Job] = []  # running under an earlier driver: watched until their lock is released
    unit, target = spec.budget.unit, spec.budget.target

    def finished(job: Job) -> bool:  # at this spec's target: a raised target trains finished runs on
        return is_done(job.run_dir, unit, target)

    launcher = Launcher(spec, sweep_dir / "logs")
    active: dict[str, tuple[Job, Any]] = {}
    states = {job.run_id: read_state(sweep_dir, job.run_id) for job in jobs}
    # On SLURM an earlier driver's jobs may still wait in the queue (holding no run lock yet): watched, not
    # submitted again.
    live = launcher.live_jobs([state.launcher_id for state in states.values() if state.status == RUNNING])
    for job in jobs:
        state = states[job.run_id]
        if finished(job):
            tracker.close_finished(job)  # it may have finished after an earlier driver died
            continue
        if is_locked(job.run_dir):
            watched.append(job)
        elif state.status == RUNNING and state.launcher_id in live:
            active[job.run_id] = (job, live[state.launcher_id])
        elif state.status == FAILED and state.failures >= max_attempts:
            continue  # reported as failed; delete its state file to try again
        else:
            queue.append(job)

    display = Display(stream)
    previous_statuses: list[str] = []
    timer.add("plan", timer.started)

    def launch(batch: list[Job]) -> None:
        functions = [TrainingJob(sweep_job_recipe(job), str(job.run_dir), spec.budget.unit, spec.budget.target,
                                 launcher.threads, faults.get(job.variant)) for job in batch]
        with timer.phase("launch"):
            try:
                handles = launcher.submit(functions)
            except ConfigError:  # the scheduler refused them (launcher.SubmissionRefused): nothing more starts
                tracker.finish_sweep("FAILED")
                raise
        for job, handle in zip(batch, handles):
            state = read_state(sweep_dir, job.run_id)
            state.status, state.attempts, state.last_error = RUNNING, state.attempts + 1, None
            state.launcher_id, state.log_path = str(handle.job_id), job_log(handle)
            write_state(sweep_dir, job.run_id, state)
            active[job.run_id] = (job, handle)

    try:
        while queue or active or watched:
            # A process from an earlier launch may still hold a run (a cancelled job still dying, or
            # one that escaped its kill): watch it rather than start a second writer.
            for job in [job for job in queue if is_locked(job.run_dir)]:
                queue.remove(job)
                watched.append(job)
            polled = time.perf_counter()
            for run_id, (job, handle) in list(active.items()):
                tracker.mirror(job)
                if not job_finished(handle):
                    continue
                del active[run_id]
                tracker.mirror(job)
                state = read_state(sweep_dir, run_id)
                error = job_error(handle)
                input_error = job_input_error(handle) if error is None else None
                if error is None and job_result_field(handle, TRAINED_ELSEWHERE) is not None:
                    watched.append(job)  # a second launch found the run trained by the first: watch that one
                    continue
                if input_error is not None:  # the same inputs fail the same way: not retried
                    state.status, state.last_error = FAILED, f"{INPUT_ERROR_PREFIX}{input_error}"
                    state.failures = max(state.failures + 1, max_attempts)
                    tracker.finish(job, "FAILED")
                elif error is None and finished(job):
                    state.status = DONE
                    tracker.finish(job, "FINISHED")
                else:
                    state.status, state.last_error = FAILED, error or "job ended without reaching its target"
                    state.failures += 1
                    tracker.finish(job, "FAILED")
                write_state(sweep_dir, run_id, state)
            for job in list(watched):
                tracker.mirror(job)
                if not is_locked(job.run_dir):
                    watched.remove(job)
                    if finished(job):
                        tracker.finish(job, "FINISHED")
                    else:
                        queue.append(job)  # its process died: resume it from its checkpoint
            timer.add("poll", polled)
            # Launch after the poll: a job that just finished frees its slot for the next one at once.
            free = launcher.parallelism - len(active) - len(watched)
            if queue and free > 0:
                batch, queue = queue[:free], queue[free:]
                launch(batch)
            polled = time.perf_counter()
            rows = collect_progress(spec, sweep_dir, jobs)
            statuses = [row.status for row in rows]
            display.show(format_progress(spec, rows, started), changed=statuses != previous_statuses)
            previous_statuses = statuses
            timer.add("poll", polled)
            if queue or active or watched:
                launcher.wait([handle for _, handle in active.values()], spec.executor.poll_seconds)
    except KeyboardInterrupt:
        stopped = ("; the local jobs it started stopped with it and resume from their last checkpoints"
                   if spec.executor.name == "local" and active else "")
        print(f"\ninterrupted{stopped}: rerun `sweep run` on the same spec to resume ({sweep_dir})", file=stream)
        return 130

    rows = collect_progress(spec, sweep_dir, jobs)
    display.show(format_progress(spec, rows, started), changed=True, force=True)
    failed = [row for row in rows if row.status != DONE]
    if failed:
        for row in failed:
            state = read_state(sweep_dir, row.job.run_id)
            state_file = f"{sweep_dir}/state/{row.job.run_id}.json"
            if (state.last_error or "").startswith(INPUT_ERROR_PREFIX):
                retry = (f"rerunning fails the same way: fix the input it names, then delete {state_file} and rerun "
                         "`sweep run`")
            elif state.failures < max_attempts:
                retry = "retried by the next `sweep run`"
            else:
                retry = f"failed {state.failures} times (executor.max_attempts); delete {state_file} to retry"
            print(f"FAILED {row.job.variant} seed {row.job.seed}: {state.last_error}\n"
                  f"  log: {state.log_path}\n  {retry}", file=stream)
        tracker.finish_sweep("FAILED")
        return 1
    from sweeps.finalize import finalize_sweep

    with timer.phase("finalize"):
        finalize_sweep(spec, sweep_dir, tracker, stream)
        tracker.finish_sweep("FINISHED")
    timer.write(sweep_dir)
    return 0


__all__ = ["run_sweep", "PENDING"]
