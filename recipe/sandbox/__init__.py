"""Run model-written programs against tests in a sandbox: the client a job holds (docs/sandbox.md).

    with Sandbox(workers=2) as sandbox:
        print(sandbox.layers_record()["active"])  # say once which layers hold here; save it in the run dir
        outcome = sandbox.run([Job("print(int(input()) * 2)", (StdioTest("21\\n", "42"),))])[0]
        outcome.all_passed, outcome.fraction, outcome.verdicts

Sandbox() starts the pool (recipe/sandbox/pool.py) in a fresh interpreter with an empty environment, which
probes the layers (recipe/sandbox/layers.py), runs one self-check program, and then serves batches: the
samples of a batch run in parallel, up to `workers` at a time, one sandbox each.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import threading
from pathlib import Path

from recipe.sandbox.cases import VERDICTS, CallTest, Job, Limits, Outcome, StdioTest
from recipe.sandbox.layers import LAYERS, MAX_WORKERS
from recipe.sandbox.pool import Settings, receive, send

__all__ = ["LAYERS", "VERDICTS", "CallTest", "Job", "Limits", "Outcome", "Sandbox", "SandboxError", "StdioTest"]

BOOT = "import sys; sys.path.insert(0, sys.argv[1]); from recipe.sandbox.pool import main; main()"
PROJECT_ROOT = str(Path(__file__).resolve().parents[2])


class SandboxError(RuntimeError):
    """The sandbox could not start here, lacks a required layer, or its pool failed."""


class Sandbox:
    """A pool of sandboxes for one job. Arguments:

    disable: layers to switch off (names from LAYERS); the always-on base cannot be switched off.
    require: layers that must be active, else SandboxError (e.g. ("pid", "net") on a cluster).
    workers: samples run at once (default: the CPUs this process may use).
    limits: the default Limits of a job (a Job may carry its own).
    python: the interpreter that runs the programs (default: this one's real executable, or where the slot's uid
        cannot read it without the mount layer, the first of /usr/bin/python3, /usr/local/bin/python3 it can).
    backend: force "bwrap", "unshare" or "direct" (default: the first that works).
    tag: a word in every sandbox process's command line (`pgrep -f TAG` finds a leak; the tests look for it).
    uid_base: as root, slot k runs programs as uid uid_base + k (default: a range no other live pool uses).
    warm: each slot keeps its sandbox for the next sample, a fresh child per test (False: a new sandbox, and so
        a new interpreter, per sample: ~5x the CPU a sample, BENCHMARKS.md).
    """

    def __init__(self, *, disable=(), require=(), workers: int | None = None, limits: Limits | None = None,
                 python: str | None = None, backend: str | None = None, tag: str = "scalerl-sandbox",
                 uid_base: int | None = None, warm: bool = True):
        for key, names in (("disable", disable), ("require", require)):
            unknown = sorted(set(names) - set(LAYERS))
            if unknown:
                raise ValueError(f"sandbox {key}: unknown layer {unknown[0]!r}; expected some of {', '.join(LAYERS)}")
        if backend not in (None, "bwrap", "unshare", "direct"):
            raise ValueError(f"sandbox backend: got {backend!r}, expected 'bwrap', 'unshare' or 'direct'")
        if not tag.replace("-", "").isalnum():
            raise ValueError(f"sandbox tag: got {tag!r}, expected letters, digits and dashes")
        workers = workers or len(os.sched_getaffinity(0))
        if not 1 <= workers <= MAX_WORKERS:
            raise ValueError(f"sandbox workers: got {workers}, expected 1..{MAX_WORKERS}")
        settings = Settings(frozenset(disable), python and os.path.realpath(python),
                            {name: shutil.which(name) for name in ("bwrap", "unshare")}, backend, workers,
                            limits or Limits(), tag, uid_base, warm)
        self._lock = threading.Lock()
        self._process = subprocess.Popen([sys.executable, "-I", "-c", BOOT, PROJECT_ROOT], stdin=subprocess.PIPE,
                                         stdout=subprocess.PIPE, env={}, close_fds=True)
        status, payload = self._call(settings)
        if status != "ok":
            self.close()
            raise SandboxError(f"sandbox: {payload}")
        self._record = payload
        missing = [layer for layer in require if layer not in payload["active"]]
        if missing:
            self.close()
            reasons = "; ".join(f"{layer} is {payload['layers'][layer]}" for layer in missing)
            raise SandboxError(f"sandbox require: {reasons}")

    def _call(self, message):
        with self._lock:
            if self._process is None:
                raise SandboxError("sandbox: used after close()")
            try:
                send(self._process.stdin, message)
                reply = receive(self._process.stdout)
            except (BrokenPipeError, OSError):
                reply = None
        if reply is None:
            raise SandboxError(f"sandbox: the pool process ended (exit {self._process.poll()})")
        return reply

    def run(self, jobs) -> list[Outcome]:
        """Outcomes of the jobs, in order; a job whose program is None (nothing to run) fails without a sandbox."""
        jobs = list(jobs)
        runnable = [job for job in jobs if job.program is not None]
        outcomes = iter([])
        if runnable:
            status, payload = self._call(("run", runnable))
            if status != "ok":
                raise SandboxError(f"sandbox pool: {payload}")
            outcomes = iter(payload)
        return [next(outcomes) if job.program is not None else Outcome(("no_program",) * len(job.tests))
                for job in jobs]

    def layers_record(self) -> dict:
        """Which layers are active here and why the others are not, the backend, interpreter, limits, kernel:
        the record a job prints once and saves in its run directory (write_layers_record)."""
        return json.loads(json.dumps(self._record))

    def write_layers_record(self, run_dir) -> Path:
        path = Path(run_dir) / "sandbox.json"
        path.write_text(json.dumps(self._record, indent=2) + "\n")
        return path

    def close(self) -> None:
        process, self._process = self._process, None
        if process is None:
            return
        try:
            process.stdin.close()
            process.wait(timeout=30)
        except (OSError, subprocess.TimeoutExpired):
            process.kill()
            process.wait()
        process.stdout.close()

    def __enter__(self) -> Sandbox:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def __del__(self) -> None:
        if getattr(self, "_process", None) is not None:
            self.close()
