"""A trl job's processes under `accelerate launch`: starting them, watching their supervisor, their errors.

With engine.num_processes > 1 or engine.sharding fsdp the job process runs `launch_processes`, which starts
`python -m recipe.engines.trl RUN_DIR` once per GPU (recipe/engines/launch.py builds the command); each of
those runs __main__.py's `main`, which trains through recipe.engines.trl.engine.train_trl. Only the main process
logs.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import time
from contextlib import contextmanager
from pathlib import Path
from typing import Callable

import torch

from components.registry import ConfigError
from recipe.config import RecipeConfig
from recipe.engines.launch import free_port, launch_command
from recipe.run import prepare_run_dir
from recipe.tracking import read_metrics

LAUNCH_LOG = "launch.log"  # a launched job's processes' output, in its run directory
# What a launched process that died of an input error (a ConfigError) wrote, in its run directory: launch_processes
# raises it as a ConfigError, which a sweep does not retry (the same inputs fail the same way on every attempt).
INPUT_ERROR_FILE = "input_error.txt"
LAUNCHED_ENV = "SCALERL_TRL_LAUNCHED"  # set in the processes launch_processes starts
SUPERVISOR_ENV = "SCALERL_TRL_SUPERVISOR"  # the pid of the job process that launched them (watch_supervisor)
SUPERVISOR_POLL_SECONDS = 2.0


def launch_environment(num_processes: int) -> dict[str, str]:
    """The launched processes' environment: this one's, the flag that they are launched, and OMP_NUM_THREADS.

    Unset, accelerate would guess each process's CPU threads itself, and the job's compute (devices_held: the
    processes x their threads on CPU) would depend on that guess; so they share this process's torch threads
    (at least one each) unless OMP_NUM_THREADS says otherwise. GPU processes ignore it for their compute."""
    env = {**os.environ, LAUNCHED_ENV: "1", SUPERVISOR_ENV: str(os.getpid())}
    env.setdefault("OMP_NUM_THREADS", str(max(1, torch.get_num_threads() // num_processes)))
    return env


def process_alive(pid: int) -> bool:
    """Whether process `pid` runs (a zombie, killed and not yet reaped, does not)."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except FileNotFoundError:
        return False
    except OSError:  # no /proc: ask the kernel
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return False
        return True
    return state not in ("Z", "X")


def watch_supervisor(pid: int, poll_seconds: float = SUPERVISOR_POLL_SECONDS) -> None:
    """In a launched process: end the launched session (the launcher and every rank) once the job process that
    started it is gone. Why: the session is its own (launch_processes starts it apart, so a signal to the
    job's group does not tear a collective), so a job killed by SIGKILL (sweep cancel's escalation, the OOM
    killer) would leave its ranks training on, and a relaunch would put a second set of writers in the run
    directory. A daemon thread polls every poll_seconds."""
    import threading

    def watch() -> None:
        while process_alive(pid):
            time.sleep(poll_seconds)
        os.killpg(os.getpgrp(), signal.SIGTERM)

    threading.Thread(target=watch, name="watch-supervisor", daemon=True).start()


def launch_processes(cfg: RecipeConfig, run_dir: Path, on_eval: Callable[[dict], None] | None) -> list[dict]:
    """Run the job under `accelerate launch` (one process per GPU); config.yaml carries the recipe to them.

    The launched processes cannot call back into this one, so on_eval is called here on every new
    record of metrics.jsonl; if it raises (the sweep's target reached), the processes are stopped
    and its exception propagates, as from an in-process engine.
    """

    prepare_run_dir(cfg, run_dir)
    (run_dir / INPUT_ERROR_FILE).unlink(missing_ok=True)  # an earlier attempt's, whose inputs have since changed
    command = launch_command(run_dir, cfg.engine.num_processes, cfg.engine.sharding, cfg.model.dtype, port=free_port())
    seen = len(read_metrics(run_dir))
    log_path = run_dir / LAUNCH_LOG
    with open(log_path, "ab") as log:  # the processes' output, kept across attempts (a failure names its cause)
        # The flag, not accelerate's variables (which its single-process launcher does not set), tells the
        # started processes not to launch again.
        process = subprocess.Popen(command, start_new_session=True, stdout=log, stderr=subprocess.STDOUT,
                                   env=launch_environment(cfg.engine.num_processes))
    try:
        while True:
            finished = process.poll() is not None
            records = read_metrics(run_dir)
            for record in records[seen:]:
                seen += 1
                if on_eval is not None:
                    on_eval(record)
            if finished:
                break
            time.sleep(1.0)
    finally:
        if process.poll() is None:
            os.killpg(process.pid, signal.SIGTERM)
            process.wait()
    if process.returncode != 0:
        input_error = run_dir / INPUT_ERROR_FILE
        if input_error.is_file():
            raise ConfigError(f"engine trl: {input_error.read_text()} (the processes' output: {log_path})")
        raise RuntimeError(f"engine trl: `{' '.join(command)}` exited with {process.returncode} "
                           f"({first_error(log_path)}; the processes' output: {log_path}); "
                           f"rerun the job to resume from {run_dir / 'trl'}")
    return read_metrics(run_dir)


@contextmanager
def input_errors_reported(run_dir: Path):
    """In a launched process: a ConfigError (or subclass) raised inside is written to INPUT_ERROR_FILE, then
    re-raised, so launch_processes tells the inputs' failure from the process's."""
    try:
        yield
    except ConfigError as error:
        (run_dir / INPUT_ERROR_FILE).write_text(" ".join(str(error).split()))
        raise


def first_error(log_path: Path) -> str:
    """The exception a launched process died of: the first "[rankN]: SomeError: ..." line of its log, else the
    last error line (torchrun's own ChildFailedError says only that a child failed)."""
    lines = log_path.read_text(errors="replace").splitlines()[-2000:]
    exception = re.compile(r"^(\[rank\d+\]:\s*)?[\w.]*(Error|Exception)\b.*:")
    errors = [line.strip() for line in lines if exception.match(line.strip()) and "ChildFailedError" not in line]
    errors += [line.strip() for line in lines if line.startswith("terminate called")]  # a C++ abort, no traceback
    ranked = [line for line in errors if line.startswith("[rank")]
    found = (ranked or errors or ["no error line in the log"])[0 if ranked else -1]
    return found if len(found) <= 300 else found[:300] + "..."
