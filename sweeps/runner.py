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
from sweeps.planner import BASE, Job, check_jobs_can_run, check_size, plan_sweep
from sweeps.progress import collect_progress, format_progress
from sweeps.spec import SweepSpec, base_source, check_output_dir, output_dir
from sweeps.recipes import absolute_recipes
from recipe.tracking import read_json_file, write_text_atomic
from sweeps.state import (DONE, FAILED, PENDING, RUNNING, DriverLock, JobState, is_done, is_locked, read_state,
                          write_json_atomic, write_state)

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
    recipes = recipes_record(jobs)
    write_json_atomic(info_path, {
        "name": spec.name, "base": recipes["reference"] if recipes else spec.base,
        "seeds": list(spec.seeds),
        "budget": dataclasses.asdict(spec.budget), "executor": spec.executor.name,
        "axes": spec.axes, "scan": scan_record(jobs), "recipes": recipes, "created": created,
        "machine": machine_description(),
    })
    # The spec with absolute paths, so `sweep status <sweep_dir>` works from any directory.
    frozen = dataclasses.asdict(spec)
    del frozen["root"]
    source = base_source(spec)
    frozen["base"] = "scalerl" if source is None else str(source.resolve())
    if spec.recipes:  # its recipes, not a base; a recipe file's path made absolute as the base's is
        del frozen["base"]
        frozen["recipes"] = absolute_recipes(spec.recipes, Path(spec.root))
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


def recipes_record(jobs: list[Job]) -> dict | None:
    """sweep.json's recipes: the reference and every recipe compared, in plan order; None unless a recipes sweep.
    The report's Figure-2 page reads it (reports/pdf.py)."""
    names = list(dict.fromkeys(job.recipe_name for job in jobs if job.recipe_name is not None))
    if not names:
        return None
    reference = next(job.recipe_name for job in jobs if job.axis == BASE)
    return {"reference": reference, "compare": names}


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


@dataclasses.dataclass(frozen=True)
class Outcome:
    """What a finished job's launch came to, as the driver reads it from the launcher and the run directory."""

    error: str | None = None  # the launch raised (its summarized traceback)
    input_error: str | None = None  # the job refused its inputs (sweeps.job.INPUT_ERROR): rerunning fails alike
    trained_elsewhere: bool = False  # another process held the run (a second launch of the same job)
    reached_target: bool = False  # done.json at or past the spec's target


@dataclasses.dataclass(frozen=True)
class Settlement:
    """The settled job: its new state, how to close its MLflow run (None: leave it open) and whether to watch it."""

    state: JobState
    mlflow_status: str | None
    watch: bool = False


def settle(outcome: Outcome, state: JobState, max_attempts: int) -> Settlement:
    """The state a finished launch leaves its job in. Pure: the driver writes what it returns.

    A second launch that found the run held by another process is watched, not failed; an input error fails for
    good (failures raised to max_attempts); a launch that ended at the target is done; anything else is one
    more failure, retried by a later driver while failures < max_attempts.
    """
    if outcome.error is None and outcome.trained_elsewhere:
        return Settlement(state, None, watch=True)
    if outcome.input_error is not None:
        failed = dataclasses.replace(state, status=FAILED, last_error=f"{INPUT_ERROR_PREFIX}{outcome.input_error}",
                                     failures=max(state.failures + 1, max_attempts))
        return Settlement(failed, "FAILED")
    if outcome.error is None and outcome.reached_target:
        return Settlement(dataclasses.replace(state, status=DONE), "FINISHED")
    failed = dataclasses.replace(state, status=FAILED, failures=state.failures + 1,
                                 last_error=outcome.error or "job ended without reaching its target")
    return Settlement(failed, "FAILED")


def failure_lines(job: Job, state: JobState, sweep_dir: Path, max_attempts: int) -> str:
    """What the driver prints for a job that did not finish: its error, its log and what a rerun will do."""
    state_file = f"{sweep_dir}/state/{job.run_id}.json"
    if (state.last_error or "").startswith(INPUT_ERROR_PREFIX):
        retry = (f"rerunning fails the same way: fix the input it names, then delete {state_file} and rerun "
                 "`sweep run`")
    elif state.failures < max_attempts:
        retry = "retried by the next `sweep run`"
    else:
        retry = f"failed {state.failures} times (executor.max_attempts); delete {state_file} to retry"
    return f"FAILED {job.variant} seed {job.seed}: {state.last_error}\n  log: {state.log_path}\n  {retry}"


class SweepDriver:
    """One `sweep run`: prepare (plan, checks, the driver lock, sweep files, MLflow), triage the jobs on disk,
    then launch, poll and settle until none is left, and finalize (fits, table, report) or report failures.

    The queue holds jobs to launch, `active` the jobs this driver launched, `watched` the jobs another
    process trains (an earlier driver's local jobs, a second launch's first copy): watched until their run
    lock is released, then done or queued again to resume from their checkpoint.
    """

    def __init__(self, spec: SweepSpec, stream: TextIO, allow_large: bool = False, wait: bool = False) -> None:
        self.spec, self.stream, self.allow_large, self.wait_for_driver = spec, stream, allow_large, wait
        self.sweep_dir = output_dir(spec)
        self.started, self.timer = time.time(), HarnessTimer()
        self.queue: list[Job] = []
        self.watched: list[Job] = []
        self.active: dict[str, tuple[Job, Any]] = {}
        self.display = Display(stream)
        self.previous_statuses: list[str] = []

    def echo(self, line: str) -> None:
        print(line, file=self.stream)

    def finished(self, job: Job) -> bool:
        """At this spec's target: a raised target trains finished runs on."""
        return is_done(job.run_dir, self.spec.budget.unit, self.spec.budget.target)

    def prepare(self) -> None:
        """Plan and check everything a job would refuse and every file earlier drivers left, before the sweep
        directory is touched (the driver lock's file included)."""
        from sweeps.tracking import mlflow_record

        spec = self.spec
        self.jobs = plan_sweep(spec)
        check_size(len(self.jobs), spec.budget, "jobs", self.allow_large)
        for note in check_jobs_can_run(spec, self.jobs):  # what only a job's node can check, an oversubscribed machine
            print(note, file=self.stream)
        check_output_dir(spec)
        check_run_configs(self.jobs)
        for job in self.jobs:  # a damaged state file or mlflow.json is named before anything is written
            read_state(self.sweep_dir, job.run_id)
        mlflow_record(self.sweep_dir)

    def prepare_files(self) -> None:
        """With the driver lock held: write the sweep's files, open its MLflow runs, start the launcher."""
        from sweeps.launcher import Launcher
        from sweeps.tracking import SweepTracker

        spec = self.spec
        write_sweep_files(spec, self.sweep_dir, self.jobs)
        self.tracker = SweepTracker(spec, self.sweep_dir, self.jobs)
        print(f"sweep {spec.name}: {len(self.jobs)} jobs in {self.sweep_dir}; MLflow {self.tracker.uri} "
              f"(experiment {self.tracker.experiment_id})", file=self.stream)
        self.launcher = Launcher(spec, self.sweep_dir / "logs")

    def triage(self) -> None:
        """Sort the planned jobs by what is on disk: finished (closed), trained by another process (watched),
        still queued on SLURM from an earlier driver (active), given up (left), or to launch (queued)."""
        states = {job.run_id: read_state(self.sweep_dir, job.run_id) for job in self.jobs}
        # On SLURM an earlier driver's jobs may still wait in the queue (holding no run lock yet): watched, not
        # submitted again.
        live = self.launcher.live_jobs([state.launcher_id for state in states.values() if state.status == RUNNING])
        for job in self.jobs:
            state = states[job.run_id]
            if self.finished(job):
                self.tracker.close_finished(job)  # it may have finished after an earlier driver died
            elif is_locked(job.run_dir):
                self.watched.append(job)
            elif state.status == RUNNING and state.launcher_id in live:
                self.active[job.run_id] = (job, live[state.launcher_id])
            elif not (state.status == FAILED and state.failures >= self.spec.executor.max_attempts):
                self.queue.append(job)  # (a job failed max_attempts times is reported; delete its state to retry)

    def launch(self, batch: list[Job]) -> None:
        from sweeps.launcher import job_log

        spec = self.spec
        functions = [TrainingJob(sweep_job_recipe(job), str(job.run_dir), spec.budget.unit, spec.budget.target,
                                 self.launcher.threads, spec.faults.get(job.variant)) for job in batch]
        with self.timer.phase("launch"):
            try:
                handles = self.launcher.submit(functions)
            except ConfigError:  # the scheduler refused them (launcher.SubmissionRefused): nothing more starts
                self.tracker.finish_sweep("FAILED")
                raise
        for job, handle in zip(batch, handles):
            state = read_state(self.sweep_dir, job.run_id)
            state.status, state.attempts, state.last_error = RUNNING, state.attempts + 1, None
            state.launcher_id, state.log_path = str(handle.job_id), job_log(handle)
            write_state(self.sweep_dir, job.run_id, state)
            self.active[job.run_id] = (job, handle)

    def outcome(self, job: Job, handle: Any) -> Outcome:
        from sweeps.launcher import job_error

        error = job_error(handle)
        return Outcome(error=error, input_error=job_input_error(handle) if error is None else None,
                       trained_elsewhere=job_result_field(handle, TRAINED_ELSEWHERE) is not None,
                       reached_target=self.finished(job))

    def poll(self) -> None:
        """Mirror every job's new metric lines; settle the launches that ended; release watched jobs that ended."""
        from sweeps.launcher import job_finished

        # A process from an earlier launch may still hold a run (a cancelled job still dying, or one that escaped
        # its kill): watch it rather than start a second writer.
        for job in [job for job in self.queue if is_locked(job.run_dir)]:
            self.queue.remove(job)
            self.watched.append(job)
        for run_id, (job, handle) in list(self.active.items()):
            self.tracker.mirror(job)
            if not job_finished(handle):
                continue
            del self.active[run_id]
            self.tracker.mirror(job)
            settled = settle(self.outcome(job, handle), read_state(self.sweep_dir, run_id),
                             self.spec.executor.max_attempts)
            if settled.watch:
                self.watched.append(job)  # a second launch found the run trained by the first: watch that one
                continue
            self.tracker.finish(job, settled.mlflow_status)
            write_state(self.sweep_dir, run_id, settled.state)
        for job in list(self.watched):
            self.tracker.mirror(job)
            if not is_locked(job.run_dir):
                self.watched.remove(job)
                if self.finished(job):
                    self.tracker.finish(job, "FINISHED")
                else:
                    self.queue.append(job)  # its process died: resume it from its checkpoint

    def show_progress(self, force: bool = False) -> list:
        """Draw the job table (on a change, now and then, or when forced); returns its rows."""
        rows = collect_progress(self.spec, self.sweep_dir, self.jobs)
        statuses = [row.status for row in rows]
        changed = force or statuses != self.previous_statuses
        self.display.show(format_progress(self.spec, rows, self.started), changed=changed, force=force)
        self.previous_statuses = statuses
        return rows

    def loop(self) -> None:
        """Poll, launch into free slots and show progress until no job is queued, active or watched."""
        while self.queue or self.active or self.watched:
            with self.timer.phase("poll"):
                self.poll()
            # Launch after the poll: a job that just finished frees its slot for the next one at once.
            free = self.launcher.parallelism - len(self.active) - len(self.watched)
            if self.queue and free > 0:
                batch, self.queue = self.queue[:free], self.queue[free:]
                self.launch(batch)
            with self.timer.phase("poll"):
                self.show_progress()
            if self.queue or self.active or self.watched:
                self.launcher.wait([handle for _, handle in self.active.values()], self.spec.executor.poll_seconds)

    def report_failures(self, failed: list) -> int:
        for row in failed:
            state = read_state(self.sweep_dir, row.job.run_id)
            print(failure_lines(row.job, state, self.sweep_dir, self.spec.executor.max_attempts), file=self.stream)
        self.tracker.finish_sweep("FAILED")
        return 1

    def finalize(self) -> int:
        from sweeps.finalize import finalize_sweep

        with self.timer.phase("finalize"):
            finalize_sweep(self.spec, self.sweep_dir, self.tracker, self.stream)
            self.tracker.finish_sweep("FINISHED")
        self.timer.write(self.sweep_dir)
        return 0

    def run(self) -> int:
        """0 when every job is done (and the sweep finalized), 1 if any failed, 130 on Ctrl-C."""
        with self.timer.phase("plan"):
            self.prepare()
        with DriverLock(self.sweep_dir, "sweep run").take(self.wait_for_driver, self.echo,
                                                          hint="or rerun with --wait to go on once it has ended"):
            with self.timer.phase("plan"):
                self.prepare_files()
                self.triage()
            try:
                self.loop()
            except KeyboardInterrupt:
                stopped = ("; the local jobs it started stopped with it and resume from their last checkpoints"
                           if self.spec.executor.name == "local" and self.active else "")
                print(f"\ninterrupted{stopped}: rerun `sweep run` on the same spec to resume ({self.sweep_dir})",
                      file=self.stream)
                return 130
            failed = [row for row in self.show_progress(force=True) if row.status != DONE]
            return self.report_failures(failed) if failed else self.finalize()


def run_sweep(spec: SweepSpec, stream: TextIO | None = None, allow_large: bool = False, wait: bool = False) -> int:
    """Run every job of `spec` to its target; returns 0 when all are done, 1 if any failed. More than
    planner.LARGE_RUNS jobs are refused unless allow_large; another driver on the sweep directory is refused
    (DriverBusyError) unless wait, which waits for it to end."""
    return SweepDriver(spec, stream or sys.stdout, allow_large, wait).run()


__all__ = ["run_sweep", "settle", "Outcome", "Settlement", "PENDING"]
