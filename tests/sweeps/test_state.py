"""Run locks and stopping the processes that hold them (sweeps/state.py)."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

from sweeps.state import is_locked, stop_runs

REPO = Path(__file__).resolve().parents[2]

# A stand-in for a training process: holds the run's lock, notes when SIGINT arrives and keeps going
# (a job busy checkpointing), so only SIGKILL ends it.
HOLDER = """
import signal, sys, time
from pathlib import Path
from sweeps.state import RunLock
run_dir = Path(sys.argv[1])
lock = RunLock(run_dir)
assert lock.acquire()
signal.signal(signal.SIGINT, lambda *_: (run_dir / "sigint").write_text(repr(time.time())))
(run_dir / "ready").write_text("")
while True:
    time.sleep(0.05)
"""


def test_stop_runs_signals_every_job_at_once_then_kills_what_outlives_the_grace(tmp_path):
    run_dirs = [tmp_path / "a", tmp_path / "b", tmp_path / "idle"]
    for run_dir in run_dirs:
        run_dir.mkdir()
    holders = [subprocess.Popen([sys.executable, "-c", HOLDER, str(run_dir)], cwd=REPO) for run_dir in run_dirs[:2]]
    try:
        deadline = time.time() + 60
        while not all((run_dir / "ready").exists() for run_dir in run_dirs[:2]):
            assert time.time() < deadline, "the lock holders never started"
            time.sleep(0.05)
        assert stop_runs(run_dirs, grace_seconds=3.0) == [True, True, False]  # the idle run had no process
        assert not any(is_locked(run_dir) for run_dir in run_dirs)
        assert all(holder.wait(timeout=10) == -9 for holder in holders)  # SIGINT was not enough: SIGKILL
        signalled = [float((run_dir / "sigint").read_text()) for run_dir in run_dirs[:2]]
        # Both got SIGINT before either grace ran out (one by one, they would be >= 3 s apart).
        assert abs(signalled[0] - signalled[1]) < 1.5
    finally:
        for holder in holders:
            holder.kill()


def test_a_state_file_from_before_the_failure_count_counts_its_failed_attempts_as_failures(tmp_path):
    import json

    from sweeps.state import read_state, state_path

    path = state_path(tmp_path, "abc")
    path.parent.mkdir(parents=True)
    path.write_text(json.dumps({"status": "failed", "attempts": 3, "last_error": "boom"}))
    assert read_state(tmp_path, "abc").failures == 3
    path.write_text(json.dumps({"status": "running", "attempts": 3}))
    assert read_state(tmp_path, "abc").failures == 0


def test_done_means_done_at_the_budgets_target(tmp_path):
    import json

    import pytest

    from recipe.tracking import DamagedFileError
    from sweeps.state import is_done

    assert not is_done(tmp_path)
    (tmp_path / "done.json").write_text(json.dumps({"step": 40, "compute/samples": 64.0}))
    assert is_done(tmp_path) and is_done(tmp_path, "samples", 64) and not is_done(tmp_path, "samples", 96)
    assert not is_done(tmp_path, "flops", 1.0)  # finished under another unit: not known to be done
    (tmp_path / "done.json").write_text("{")
    with pytest.raises(DamagedFileError, match="done.json: damaged .*remove it and rerun `sweep run`"):
        is_done(tmp_path, "samples", 64)
