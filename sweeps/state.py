"""Run state on disk: what a sweep has done survives any crash of the driver or a job.

    <sweep_dir>/plan.json              the planned jobs (id, axis, choice, seed, run_dir)
    <sweep_dir>/state/<run_id>.json    per job: status, attempts, last error, log path, launcher id
    <sweep_dir>/runs/<run_id>/         the run directory the training loop owns:
        config.yaml, metrics.jsonl, checkpoints/, done.json (written once the job reached its target),
        .lock (held by the process training it)

The run directory is the truth for "done" (done.json) and "running" (its lock is held); the state
file adds attempts and errors. Every write is atomic (write a temp file, then rename).
"""

from __future__ import annotations

import dataclasses
import fcntl
import os
import time
import typing
from pathlib import Path
from typing import Any, Optional

from components.registry import ConfigError, check_value_type
from recipe.tracking import DamagedFileError, read_json_file, write_json_atomic

# A job's state file only counts attempts and keeps its last error: the run directory is the truth.
STATE_FIX = ("remove it (the job's attempts and last error are forgotten; its run directory is kept) "
             "and rerun `sweep run`")

PENDING, RUNNING, DONE, FAILED = "pending", "running", "done", "failed"
DONE_FILE = "done.json"
LOCK_FILE = ".lock"
# How long a starting job waits for the lock of a predecessor that is still exiting.
LOCK_WAIT_SECONDS = 60.0


@dataclasses.dataclass
class JobState:
    status: str = PENDING
    attempts: int = 0  # launches, resumes after an interrupted driver included
    failures: int = 0  # launches that ended in a failure: what executor.max_attempts caps
    last_error: Optional[str] = None
    log_path: Optional[str] = None
    launcher_id: Optional[str] = None
    updated_at: float = 0.0


def state_path(sweep_dir: Path, run_id: str) -> Path:
    return sweep_dir / "state" / f"{run_id}.json"


def read_state(sweep_dir: Path, run_id: str) -> JobState:
    path = state_path(sweep_dir, run_id)
    if not path.exists():
        return JobState()
    data = read_json_file(path, dict, STATE_FIX)
    hints = typing.get_type_hints(JobState)
    for field in dataclasses.fields(JobState):
        try:
            check_value_type(data.get(field.name, field.default), hints[field.name], field.name)
        except ConfigError as error:
            raise DamagedFileError(f"{path}: damaged ({error}); {STATE_FIX}") from None
    state = JobState(**{field.name: data.get(field.name, field.default) for field in dataclasses.fields(JobState)})
    if "failures" not in data and state.status == FAILED:  # a state file from before the failure count
        state.failures = state.attempts
    return state


def write_state(sweep_dir: Path, run_id: str, state: JobState) -> None:
    state.updated_at = time.time()
    write_json_atomic(state_path(sweep_dir, run_id), dataclasses.asdict(state))


DONE_FIX = "remove it and rerun `sweep run`: the job resumes from its last checkpoint"


def is_done(run_dir: Path, unit: str | None = None, target: float | None = None) -> bool:
    """The run finished (its done.json exists) and, given a budget's unit and target, finished at or past it.

    A run id hashes the recipe, not the budget: raise budget.target and rerun, and a run that finished at
    the old target is not done at the new one (its job resumes from its last checkpoint and trains on).
    """
    path = run_dir / DONE_FILE
    if not path.exists():
        return False
    if unit is None or target is None:
        return True
    from recipe.compute import COMPUTE_AXES

    reached = read_json_file(path, dict, DONE_FIX).get(COMPUTE_AXES[unit])
    return isinstance(reached, (int, float)) and not isinstance(reached, bool) and reached >= target


def mark_done(run_dir: Path, summary: dict[str, Any]) -> None:
    write_json_atomic(run_dir / DONE_FILE, summary)


class FileLock:
    """An exclusive lock on a file (fcntl.flock: released by the kernel when the holding process dies, even by
    kill -9, so a stale lock never blocks the next holder). The holder writes one line into it: its pid, then
    what it is (read by `holder` and `holder_pid`)."""

    def __init__(self, path: Path, what: str = "") -> None:
        self.path = Path(path)
        self.what = what
        self.handle = None

    def try_lock(self):
        """The locked file's handle, or None when another process holds the lock."""
        self.path.parent.mkdir(parents=True, exist_ok=True)
        handle = open(self.path, "a+")
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            handle.close()
            return None
        return handle

    def acquire(self) -> bool:
        handle = self.try_lock()
        if handle is None:
            return False
        handle.seek(0)
        handle.truncate()
        handle.write(f"{os.getpid()} {self.what}".rstrip() + "\n")
        handle.flush()
        self.handle = handle
        return True

    def release(self) -> None:
        if self.handle is not None:
            fcntl.flock(self.handle, fcntl.LOCK_UN)
            self.handle.close()
            self.handle = None

    def wait(self, seconds: float) -> bool:
        """Try to take the lock for up to `seconds` (a killed predecessor may take a moment to exit)."""
        deadline = time.time() + seconds
        while not self.acquire():
            if time.time() >= deadline:
                return False
            time.sleep(0.5)
        return True

    def holder(self) -> str:
        """The pid written into the lock by the process holding it ("?" when unreadable)."""
        pid = self.holder_pid()
        return "?" if pid is None else str(pid)

    def holder_pid(self) -> int | None:
        try:
            return int(self.path.read_text().split()[0])
        except (OSError, ValueError, IndexError):
            return None

    def is_held(self) -> bool:
        """True while some process holds the lock (checked by briefly trying to take it)."""
        if self.handle is not None:
            return True
        if not self.path.exists():
            return False
        handle = self.try_lock()  # a probe: it writes nothing, so the holder's line stays as it was
        if handle is None:
            return True
        handle.close()  # closing the only descriptor releases the lock
        return False


class RunLock(FileLock):
    """The lock of a run directory while a process trains it."""

    def __init__(self, run_dir: Path) -> None:
        super().__init__(Path(run_dir) / LOCK_FILE)

    def __enter__(self) -> "RunLock":
        if self.handle is None and not self.wait(LOCK_WAIT_SECONDS):  # already taken by wait(): keep it
            raise RuntimeError(f"{self.path.parent} is being trained by another process "
                               f"(pid {self.holder()}, lock {self.path})")
        return self

    def __exit__(self, *exc: Any) -> None:
        self.release()


DRIVER_LOCK_FILE = ".driver.lock"


class DriverBusyError(ConfigError):
    """Another driver (`sweep run` or `sweep tune`) holds the directory: one line naming its pid, exit 2."""


class DriverLock(FileLock):
    """One driver per sweep (or study) directory: `sweep run` and `sweep tune` hold it while they plan, launch,
    mirror into MLflow and report. Two drivers on one directory would both mirror the same metric lines, so
    the second is refused (or waits, with --wait); `sweep status` and `sweep cancel` never take it."""

    def __init__(self, directory: Path, command: str) -> None:
        since = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime())
        super().__init__(Path(directory) / DRIVER_LOCK_FILE, f"{command}, started {since}")
        self.directory = Path(directory)
        self.command = command

    def take(self, wait: bool = False, echo=print, hint: str = "or rerun once it has ended") -> "DriverLock":
        """Hold the lock, or raise DriverBusyError naming the holder; wait=True waits for it instead."""
        if self.acquire():
            return self
        if not wait:
            raise DriverBusyError(
                f"{self.directory} is driven by another process (pid {self.holder()}, {self.holder_what()}); "
                f"`sweep status {self.directory}` shows its progress; let it finish (or stop it: kill "
                f"{self.holder()}), {hint}")
        echo(f"{self.directory}: waiting for the driver with pid {self.holder()} to end (--wait)")
        while not self.acquire():
            time.sleep(1.0)
        return self

    def holder_what(self) -> str:
        try:
            return " ".join(self.path.read_text().split()[1:]) or "a driver"
        except OSError:
            return "a driver"

    def __exit__(self, *exc: Any) -> None:
        self.release()

    def __enter__(self) -> "DriverLock":
        return self


def is_locked(run_dir: Path) -> bool:
    """True while some process holds the run's lock (checked by briefly trying to take it)."""
    return RunLock(run_dir).is_held()


def lock_holder(run_dir: Path) -> int | None:
    """The pid of the process training the run (written into its lock), or None when nobody holds it."""
    lock = RunLock(run_dir)
    return lock.holder_pid() if lock.is_held() else None


def stop_run(run_dir: Path, grace_seconds: float) -> bool:
    """Stop the process training a run: SIGINT, then SIGKILL after `grace_seconds`. True if it was running.

    Signals go to the training process itself (the lock holder), not to a launcher in between:
    submitit's job processes ignore SIGTERM (SLURM sends it before preemption) and its local
    controller only forwards it. A killed job loses nothing: checkpoints are replaced atomically.
    A PipelineRL job's generator and trainer exit on their own once this process is gone.
    """
    return stop_runs([run_dir], grace_seconds)[0]


def stop_runs(run_dirs: list[Path], grace_seconds: float) -> list[bool]:
    """stop_run on several runs at once: every one gets SIGINT first, then the same grace, then SIGKILL.

    All at once, so that stopping N jobs takes one grace period, not N, and no job trains on (or
    finishes) while an earlier one is being stopped. Returns, per run, whether it was running.
    """
    import signal

    pids = [lock_holder(run_dir) for run_dir in run_dirs]
    for signum, wait in ((signal.SIGINT, grace_seconds), (signal.SIGKILL, LOCK_WAIT_SECONDS)):
        live = [(run_dir, pid) for run_dir, pid in zip(run_dirs, pids) if pid is not None and is_locked(run_dir)]
        for _, pid in live:
            try:
                os.kill(pid, signum)
            except ProcessLookupError:
                pass
        deadline = time.time() + wait
        while live and time.time() < deadline and any(is_locked(run_dir) for run_dir, _ in live):
            time.sleep(0.1)
    return [pid is not None for pid in pids]
