"""Drivers started, killed and resumed at random points on one sweep directory; then MLflow against metrics.jsonl.

    python -m tests.sweeps.driver_soak --rounds 20 [--seed 0] [--work /tmp/soak]

One round: a 6-job sweep (loss dapo and batch_filter none beside the base, 2 seeds, seconds-long jobs) is started
with `sweep run`; a second `sweep run` two seconds later must refuse (exit 2, naming the first's pid) or, with
--wait, wait and take over; the driver in charge is killed with kill -9 at a random moment (alone, or with its
jobs: a lost node), three times over; a last `sweep run` finishes the sweep. Every child run's MLflow history
must then equal its job's metrics.jsonl: each line's eval/pass_rate once, at its step, and each line's marker
once. `make test` runs one round (tests/sweeps/test_driver_soak.py); this script runs many.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

from tests.sweeps.tiny_spec import TINY_JOB_OVERRIDES

REPO = Path(__file__).resolve().parents[2]
SPEC = """\
name: soak
axes: {{loss: dapo, batch_filter: none}}
seeds: [0, 1]
overrides:
  max_steps: 400
{overrides}budget: {{unit: samples, fit_at: 192, target: 384}}
executor: {{name: local, local: {{max_parallel: 2, cores_per_job: 1}}, poll_seconds: 0.5}}
output_dir: {out}
"""


def start_driver(spec: Path, *extra: str) -> subprocess.Popen:
    """`sweep run SPEC` in a session of its own (so killpg takes its local jobs too)."""
    return subprocess.Popen([sys.executable, "-m", "sweeps.cli", "run", str(spec), *extra], cwd=REPO,
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, start_new_session=True)


def wait_for_lock(out: Path, driver: subprocess.Popen, seconds: float = 120.0) -> None:
    """Until `driver` holds the sweep directory (its pid in the driver lock) or has exited."""
    from sweeps.state import DRIVER_LOCK_FILE, DriverLock

    deadline = time.time() + seconds
    while time.time() < deadline and driver.poll() is None:
        lock = DriverLock(out, "probe")
        if (out / DRIVER_LOCK_FILE).exists() and lock.is_held() and lock.holder_pid() == driver.pid:
            return
        time.sleep(0.1)


def kill(driver: subprocess.Popen, with_jobs: bool) -> None:
    if with_jobs:
        os.killpg(driver.pid, signal.SIGKILL)
    else:
        driver.kill()
    driver.wait()


def check_second_driver_refused(spec: Path, first: subprocess.Popen) -> None:
    second = start_driver(spec)
    _, err = second.communicate(timeout=120)
    lines = [line for line in err.splitlines() if line.strip()]
    assert second.returncode == 2, err[-2000:]
    assert len(lines) == 1 and f"pid {first.pid}, sweep run" in lines[0], err[-2000:]


def soak_round(work: Path, rng: random.Random, kills: int = 3) -> dict:
    """One round in a fresh directory under `work`; returns what happened (raises AssertionError on a mismatch)."""
    work.mkdir(parents=True, exist_ok=True)
    out = work / "out"
    spec = work / "spec.yaml"
    spec.write_text(SPEC.format(overrides=TINY_JOB_OVERRIDES, out=out))
    events = []
    driver = start_driver(spec)
    wait_for_lock(out, driver)
    time.sleep(2.0)
    check_second_driver_refused(spec, driver)
    status = subprocess.run([sys.executable, "-m", "sweeps.cli", "status", str(spec)], cwd=REPO, capture_output=True,
                            text=True, timeout=120)
    assert status.returncode == 0 and "soak" in status.stdout, status.stderr[-2000:]  # beside the driver
    for _ in range(kills):
        waiter = start_driver(spec, "--wait") if rng.random() < 0.5 else None  # takes over at the kill
        time.sleep(rng.uniform(1.0, 12.0))
        if driver.poll() is not None:  # the sweep ended first: the waiter is killed while it starts instead
            if waiter is not None:
                kill(waiter, with_jobs=False)
            break
        with_jobs = rng.random() < 0.5
        kill(driver, with_jobs)
        events.append(f"kill -9 {'driver and jobs' if with_jobs else 'driver'}"
                      f"{', a waiting driver takes over' if waiter else ''}")
        driver = waiter if waiter is not None else start_driver(spec)
        wait_for_lock(out, driver)
    if driver.poll() is None:
        kill(driver, with_jobs=False)
    last = subprocess.run([sys.executable, "-m", "sweeps.cli", "run", str(spec)], cwd=REPO, capture_output=True,
                          text=True, timeout=900)
    assert last.returncode == 0, last.stdout[-2000:] + last.stderr[-2000:]
    return {"events": events, "runs": check_mlflow_equals_metrics(out)}


def check_mlflow_equals_metrics(out: Path) -> int:
    """Every child run's eval/pass_rate history and markers against its job's metrics.jsonl; returns the runs."""
    from mlflow.tracking import MlflowClient

    from sweeps.tracking import LINES_MIRRORED_KEY

    record = json.loads((out / "mlflow.json").read_text())
    client = MlflowClient(record["tracking_uri"])
    for run_id, child in record["child_runs"].items():
        lines = [json.loads(line) for line in (out / "runs" / run_id / "metrics.jsonl").read_text().splitlines()]
        expected = [(line["step"], line["eval/pass_rate"]) for line in lines]
        logged = sorted((m.step, m.value) for m in client.get_metric_history(child, "eval/pass_rate"))
        assert logged == expected, f"{run_id}: MLflow {logged} against metrics.jsonl {expected}"
        markers = sorted(int(m.value) for m in client.get_metric_history(child, LINES_MIRRORED_KEY))
        assert markers == list(range(1, len(lines) + 1)), f"{run_id}: markers {markers}"
    return len(record["child_runs"])


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=20)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--work", type=Path, default=Path("/tmp/driver-soak"))
    args = parser.parse_args(argv)
    os.environ.setdefault("SCALERL_CACHE", str(args.work / "cache"))
    rng = random.Random(args.seed)
    for number in range(args.rounds):
        started = time.time()
        result = soak_round(args.work / f"round-{number}", rng)
        print(f"round {number}: {result['runs']} runs equal to their metrics.jsonl after "
              f"{'; '.join(result['events']) or 'no kill'} ({time.time() - started:.0f} s)", flush=True)
    print(f"{args.rounds} rounds: every MLflow history equal to its metrics.jsonl")
    return 0


if __name__ == "__main__":
    sys.exit(main())
