"""Launchers: submitit executors behind one small interface (local processes, SLURM, in-process debug).

Deciding which runs to make (the planner) is separate from launching them. A launcher submits
picklable callables and reports on them; it never decides what to run next. Logs of job N land in
<sweep_dir>/logs/ as submitit writes them (N_0_log.out, N_0_log.err). The folder is given without
submitit's "%j" placeholder: its local job controller creates the folder unexpanded, which left an
empty `logs/%j/` in every sweep.
"""

from __future__ import annotations

import contextlib
import os
import re
import time
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

from components.registry import ConfigError
from sweeps.slurm_options import submitit_parameters
from sweeps.spec import SweepSpec

# How often the driver looks for a finished local job while it waits out a poll interval: on one machine a
# check is one process poll, and the next queued job should start when a core frees, not up to a whole
# interval later (that wait was ~3 s of every job's ~4 s gap in the demo). On SLURM a check is a scheduler
# query, so the driver waits the whole interval there.
FINISH_CHECK_SECONDS = 0.1

THREAD_VARIABLES = ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS", "NUMEXPR_NUM_THREADS")

# sbatch's words for a controller it could not reach right now (not a refusal of the request): such a
# submission is tried again after each of these waits before it is reported.
TRANSIENT_SUBMIT_ERRORS = ("socket timed out", "unable to contact slurm controller", "temporarily unavailable",
                           "slurm temporarily unable", "connection refused")
SUBMIT_RETRY_SECONDS = (10.0, 30.0, 90.0)


class SubmissionRefused(ConfigError):
    """The scheduler refused a submission (sbatch's error): an input of executor.slurm, named in one line."""


def refusal_message(error: BaseException) -> str:
    """One line for a refused sbatch: its own words, then the keys that usually cause one."""
    words = " ".join(str(error).split()) or type(error).__name__
    return (f"the scheduler refused the sweep's jobs: {words}; check executor.slurm.partition, account, qos, "
            "time_minutes, gpus_per_node, mem_gb and constraint against the cluster (sinfo; sacctmgr show assoc "
            "user=$USER), then rerun `sweep run` (finished and running jobs are kept)")


@contextlib.contextmanager
def thread_environment(threads: int) -> Iterator[None]:
    """Set the BLAS/OpenMP thread variables for processes started inside the block.

    Local jobs inherit the driver's environment at submission; each gets its share of the cores
    (oversubscribed CPU jobs ran 4.8x slower on the testbed machine).
    """
    saved = {name: os.environ.get(name) for name in THREAD_VARIABLES}
    os.environ.update({name: str(threads) for name in THREAD_VARIABLES})
    try:
        yield
    finally:
        for name, value in saved.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value


class Launcher:
    """Submits jobs through one submitit executor; `parallelism` is how many may run at once."""

    def __init__(self, spec: SweepSpec, log_dir: Path) -> None:
        import submitit

        self.spec = spec
        self.name = spec.executor.name
        self.folder = log_dir
        log_dir.mkdir(parents=True, exist_ok=True)
        # A job runs until its compute target; a generous wall-clock limit only guards against hangs.
        if self.name == "local":
            self.executor = submitit.LocalExecutor(folder=str(log_dir))
            self.executor.update_parameters(timeout_min=24 * 60)
            self.parallelism = spec.executor.local.max_parallel
            self.threads = spec.executor.local.cores_per_job
        elif self.name == "debug":
            self.executor = submitit.DebugExecutor(folder=str(log_dir))
            self.parallelism = 1
            self.threads = os.cpu_count() or 1
        else:
            slurm = spec.executor.slurm
            self.executor = submitit.AutoExecutor(folder=str(log_dir), cluster="slurm",
                                                  slurm_max_num_timeout=slurm.max_requeues)
            parameters: dict[str, Any] = {
                "timeout_min": slurm.time_minutes,
                "cpus_per_task": slurm.cpus_per_task,
                "gpus_per_node": slurm.gpus_per_node,
                "slurm_array_parallelism": slurm.array_parallelism,
                "slurm_signal_delay_s": slurm.signal_delay_s,
                "name": spec.name,
            }
            if slurm.partition:
                parameters["slurm_partition"] = slurm.partition
            if slurm.mem_gb:
                parameters["mem_gb"] = slurm.mem_gb
            if slurm.account:
                parameters["slurm_account"] = slurm.account
            if slurm.qos:
                parameters["slurm_qos"] = slurm.qos
            parameters.update(submitit_parameters(slurm))  # nodes, constraint, gres, exclude, setup, sbatch extras
            self.executor.update_parameters(**parameters)
            self.parallelism = slurm.array_parallelism
            self.threads = slurm.cpus_per_task

    def submit(self, functions: Sequence[Callable[[], Any]]) -> list[Any]:
        """Submit callables; on SLURM they go as one job array. Returns submitit Job handles.

        On SLURM a controller that does not answer (TRANSIENT_SUBMIT_ERRORS) is tried again after each of
        SUBMIT_RETRY_SECONDS; a refusal (a wrong partition, account, QOS, limit) raises SubmissionRefused.
        """
        if self.name != "slurm":
            with thread_environment(self.threads):
                return [self.executor.submit(function) for function in functions]
        from submitit.core.utils import FailedJobError, FailedSubmissionError

        for wait in (*SUBMIT_RETRY_SECONDS, None):
            try:
                with thread_environment(self.threads):
                    if len(functions) == 1:
                        return [self.executor.submit(functions[0])]
                    with self.executor.batch():  # one job array: submitted whole or not at all
                        handles = [self.executor.submit(function) for function in functions]
                    return handles
            except (FailedJobError, FailedSubmissionError) as error:
                transient = any(words in str(error).lower() for words in TRANSIENT_SUBMIT_ERRORS)
                if wait is None or not transient:
                    raise SubmissionRefused(refusal_message(error)) from None
                time.sleep(wait)
        raise AssertionError("unreachable")

    def live_jobs(self, launcher_ids: Sequence[str | None]) -> dict[str, Any]:
        """SLURM only: of the jobs an earlier driver submitted (their launcher ids), those squeue lists as still
        to run or running (sweeps.slurm.LIVE_SLURM_STATES), as submitit handles to watch: submitting their runs
        again would start a second copy that waits for the first's run lock and fails. {} for other executors."""
        if self.name != "slurm":
            return {}
        from submitit import SlurmJob

        from sweeps.slurm import live_slurm_jobs

        return {job_id: SlurmJob(folder=self.folder, job_id=job_id)
                for job_id in live_slurm_jobs([job_id for job_id in launcher_ids if job_id])}

    def wait(self, handles: Sequence[Any], seconds: float) -> None:
        """Sleep `seconds`, or less: until one of `handles` (submitted jobs) has finished, where that is cheap
        to see (local processes)."""
        if self.name == "debug" and handles:
            return  # a debug job runs in-process when it is next polled: nothing to wait for
        deadline = time.monotonic() + seconds
        watch = self.name == "local" and len(handles) > 0
        while (left := deadline - time.monotonic()) > 0:
            if watch and any(job_finished(handle) for handle in handles):
                return
            time.sleep(min(FINISH_CHECK_SECONDS, left) if watch else left)


def job_finished(handle: Any) -> bool:
    """Whether a submitted job has stopped (debug jobs run, in-process, when first asked)."""
    if type(handle).__name__ == "DebugJob":
        with contextlib.suppress(Exception):
            handle.result()
        return True
    return handle.done()


# The line of a Python traceback that names the exception: "ValueError: bad value".
EXCEPTION_LINE = re.compile(r"^(?:[A-Za-z_][\w]*\.)*[A-Za-z_]\w*(?:Error|Exception|Fault|Exit|Interrupt)\b.*")


def summarize_error(text: str) -> str:
    """The last exception line of a traceback (submitit appends log paths after it)."""
    lines = [line.strip() for line in text.strip().splitlines()]
    named = [line for line in lines if EXCEPTION_LINE.match(line)]
    return named[-1] if named else (lines[-1] if lines else "unknown error")


def job_error(handle: Any) -> str | None:
    """None if the job returned normally, else its exception line (the full trace is in its log)."""
    try:
        error = handle.exception()
    except Exception as failure:  # submitit raises when the job died without a result (kill -9, OOM)
        return f"{type(failure).__name__}: {summarize_error(str(failure))}"
    return None if error is None else summarize_error(str(error)) if str(error).strip() else type(error).__name__


def job_log(handle: Any) -> str:
    """The job's stderr log path (where tracebacks land)."""
    try:
        return str(handle.paths.stderr)
    except Exception:
        return "(no log)"
