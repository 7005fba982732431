"""The driver's MLflow mirror: every metrics.jsonl line lands in its job's run exactly once, by its line number
(whatever a killed driver or a resumed job did before), and a run holding a line twice is rebuilt."""

import json
import os
import shutil

import pytest

from sweeps.planner import plan_sweep
from sweeps.spec import spec_from_dict
from sweeps.state import DriverBusyError, DriverLock
from sweeps.tracking import (LINES_MIRRORED_KEY, SweepTracker, duplicated_lines, line_metrics, open_client,
                             repair_duplicates)


@pytest.fixture
def sweep(tmp_path):
    spec = spec_from_dict({"name": "mirror", "axes": {"loss": "dapo"}, "seeds": [0],
                           "budget": {"unit": "samples", "fit_at": 32, "target": 64},
                           "output_dir": str(tmp_path / "out")}, "test")
    jobs = plan_sweep(spec)
    sweep_dir = tmp_path / "out"
    for job in jobs:
        job.run_dir.mkdir(parents=True)
    return spec, sweep_dir, jobs


def append_lines(job, steps, time=None):
    with open(job.run_dir / "metrics.jsonl", "a") as handle:
        for step in steps:
            record = {"step": step, "eval/pass_rate": step / 100, "compute/samples": 16.0 * step,
                      "time": 1.7e9 + step if time is None else time + step}
            handle.write(json.dumps(record) + "\n")


def history(tracker, job, key="eval/pass_rate"):
    return [m.step for m in tracker.client.get_metric_history(tracker.state["child_runs"][job.run_id], key)]


def test_a_new_driver_reads_which_lines_the_store_holds_and_logs_each_line_once(sweep):
    # Line identity decides: the first driver logged lines 1-5 and died; the job then resumed from an earlier
    # checkpoint, truncated metrics.jsonl to 3 lines and recomputed lines 4-5 (same steps and values, later
    # times). The next driver reads the markers from the store and logs only line 6.
    spec, sweep_dir, jobs = sweep
    job = jobs[0]
    tracker = SweepTracker(spec, sweep_dir, jobs)
    append_lines(job, [0, 2, 4, 6, 8])
    assert tracker.mirror(job) == 5
    lines = (job.run_dir / "metrics.jsonl").read_text().splitlines()[:3]
    (job.run_dir / "metrics.jsonl").write_text("\n".join(lines) + "\n")
    append_lines(job, [6, 8], time=1e9)
    restarted = SweepTracker(spec, sweep_dir, jobs)
    assert restarted.mirror(job) == 0
    append_lines(job, [10])
    assert restarted.mirror(job) == 1
    assert history(restarted, job) == [0, 2, 4, 6, 8, 10]
    assert sorted(m.value for m in restarted.client.get_metric_history(
        restarted.state["child_runs"][job.run_id], LINES_MIRRORED_KEY)) == [1, 2, 3, 4, 5, 6]
    assert "mirrored_lines" not in json.loads((sweep_dir / "mlflow.json").read_text())


def test_a_run_holding_lines_twice_is_rebuilt_from_metrics_jsonl_by_sweep_report(sweep):
    # Two drivers mirrored one job at once (before the driver lock): lines 2-3 reached the store twice, with other
    # timestamps. The repair rebuilds the child run from metrics.jsonl, each line once, and deletes the old run.
    spec, sweep_dir, jobs = sweep
    job = jobs[0]
    tracker = SweepTracker(spec, sweep_dir, jobs)
    append_lines(job, [0, 2, 4])
    tracker.mirror(job)
    child = tracker.state["child_runs"][job.run_id]
    tracker.client.log_batch(child, metrics=line_metrics({"step": 2, "eval/pass_rate": 0.02, "time": 5.0}, 2)
                             + line_metrics({"step": 4, "eval/pass_rate": 0.04, "time": 6.0}, 3))
    tracker.client.set_terminated(child, status="FINISHED")
    assert len(history(tracker, job)) == 5 and duplicated_lines(tracker.client, child) == 2
    said = []

    assert repair_duplicates(sweep_dir, echo=said.append) == 1

    rebuilt = json.loads((sweep_dir / "mlflow.json").read_text())["child_runs"][job.run_id]
    assert rebuilt != child and "held 2 metrics line(s) twice" in said[0]
    run = tracker.client.get_run(rebuilt)
    assert [m.step for m in tracker.client.get_metric_history(rebuilt, "eval/pass_rate")] == [0, 2, 4]
    assert run.info.status == "FINISHED" and run.data.tags["scalerl.variant"] == job.variant
    assert run.data.params == tracker.client.get_run(child).data.params
    assert tracker.client.get_run(child).info.lifecycle_stage == "deleted"
    assert repair_duplicates(sweep_dir, echo=said.append) == 0 and len(said) == 1


def test_the_repair_waits_for_no_driver_it_names_the_one_running(sweep):
    spec, sweep_dir, jobs = sweep
    job = jobs[0]
    tracker = SweepTracker(spec, sweep_dir, jobs)
    append_lines(job, [0])
    tracker.mirror(job)
    child = tracker.state["child_runs"][job.run_id]
    tracker.client.log_batch(child, metrics=line_metrics({"step": 0, "eval/pass_rate": 0.0, "time": 9.0}, 1))
    with DriverLock(sweep_dir, "sweep run").take():
        with pytest.raises(DriverBusyError, match=f"pid {os.getpid()}, sweep run, started"):
            repair_duplicates(sweep_dir)
    assert json.loads((sweep_dir / "mlflow.json").read_text())["child_runs"][job.run_id] == child


def test_a_torn_last_line_waits_for_its_end(sweep):
    spec, sweep_dir, jobs = sweep
    job = jobs[0]
    tracker = SweepTracker(spec, sweep_dir, jobs)
    append_lines(job, [0])
    with open(job.run_dir / "metrics.jsonl", "a") as handle:
        handle.write('{"step": 2, "eval/pass')
    assert tracker.mirror(job) == 1
    with open(job.run_dir / "metrics.jsonl", "a") as handle:
        handle.write('_rate": 0.5}\n')
    assert tracker.mirror(job) == 1
    assert history(tracker, job) == [0, 2]


def test_lines_of_many_metrics_go_in_batches_mlflow_accepts(sweep):
    spec, sweep_dir, jobs = sweep
    job = jobs[0]
    tracker = SweepTracker(spec, sweep_dir, jobs)
    with open(job.run_dir / "metrics.jsonl", "a") as handle:
        for step, keys in ((0, 600), (2, 1500), (4, 700)):  # the second alone exceeds MLflow's 1000 a batch
            handle.write(json.dumps({"step": step, **{f"m/{i}": float(i) for i in range(keys)}}) + "\n")
    assert tracker.mirror(job) == 3
    assert history(tracker, job, "m/1499") == [2] and history(tracker, job, "m/0") == [0, 2, 4]


def test_a_new_store_appears_whole_and_earlier_halves_are_cleared(sweep):
    spec, sweep_dir, jobs = sweep
    sweep_dir.mkdir(parents=True, exist_ok=True)
    (sweep_dir / ".mlflow.db.creating-99999").write_bytes(b"half a store")  # a driver killed while migrating
    SweepTracker(spec, sweep_dir, jobs)
    assert (sweep_dir / "mlflow.db").exists()
    assert not list(sweep_dir.glob(".mlflow.db.creating-*"))


def test_a_store_left_at_an_older_schema_is_named_with_its_fix(sweep):
    import sqlite3

    from components.registry import ConfigError

    spec, sweep_dir, jobs = sweep
    SweepTracker(spec, sweep_dir, jobs)
    # A copy under another name: MLflow keeps the store it opened for a URI for the process's life.
    left = sweep_dir / "left.db"
    shutil.copy(sweep_dir / "mlflow.db", left)
    with sqlite3.connect(left) as db:  # what a kill in the middle of MLflow's migrations leaves
        db.execute("UPDATE alembic_version SET version_num = '75868b020152'")
    with pytest.raises(ConfigError, match="older schema.*mlflow db upgrade sqlite:///.*or delete it"):
        open_client(f"sqlite:///{left}")
