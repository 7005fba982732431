"""The progress table: a running job's phase before its first evaluation (e.g. the warm start)."""

from pathlib import Path

from recipe.tracking import write_phase
from sweeps.planner import Job
from sweeps.progress import JobProgress, format_progress, format_state, job_progress
from sweeps.spec import spec_from_dict
from sweeps.state import LOCK_FILE, RUNNING

SPEC = spec_from_dict({"name": "t", "budget": {"unit": "device_seconds", "fit_at": 150, "target": 300}}, "test")


def make_job(run_dir: Path) -> Job:
    return Job(run_id="abc123", axis="base", choice="base", seed=0, recipe=None, run_dir=run_dir)


def test_a_running_job_building_the_warm_start_shows_the_phase_and_its_progress(tmp_path):
    import fcntl

    job = make_job(tmp_path / "run")
    job.run_dir.mkdir()
    write_phase(job.run_dir, "warm start", 300, 1000)
    with open(job.run_dir / LOCK_FILE, "w") as lock:  # held, as by the training process
        fcntl.flock(lock, fcntl.LOCK_EX)
        row = job_progress(SPEC, tmp_path, job)
    assert row.status == RUNNING
    table = format_progress(SPEC, [row])
    assert "running: warm start 300/1,000 (30%)" in table and "0 / 300 (  0%)" in table
    write_phase(job.run_dir, None)
    assert format_state(JobProgress(job, RUNNING)) == "running"


def test_a_phase_is_shown_only_while_the_job_runs(tmp_path):
    job = make_job(tmp_path / "run")
    job.run_dir.mkdir()
    write_phase(job.run_dir, "warm start", 10, 1000)  # left by a job that was killed
    row = job_progress(SPEC, tmp_path, job)
    assert row.status == "pending" and format_state(row) == "pending"


def test_the_eta_comes_from_the_runs_own_clock(tmp_path):
    import fcntl
    import json

    job = make_job(tmp_path / "run")
    job.run_dir.mkdir()
    records = [{"step": 0, "eval/pass_rate": 0.1, "compute/device_seconds": 0.0, "compute/wall_seconds": 0.0,
                "compute/evaluation_seconds": 1.0},
               {"step": 40, "eval/pass_rate": 0.5, "compute/device_seconds": 100.0, "compute/wall_seconds": 50.0,
                "compute/evaluation_seconds": 10.0}]
    (job.run_dir / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))
    with open(job.run_dir / LOCK_FILE, "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        row = job_progress(SPEC, tmp_path, job)
    # 60 s of the run's clock bought 100 of 300 device-seconds: 200 more take 120 s.
    assert row.compute == 100.0 and row.pass_rate == 0.5 and row.eta_seconds == 120.0
    assert format_progress(SPEC, [row]).splitlines()[1].rstrip().endswith("2m00s")
