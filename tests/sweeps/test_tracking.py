"""The driver's MLflow mirror: every metrics.jsonl line lands in its job's run exactly once, even when a driver
dies between logging a batch and saving how far it got."""

import json

import pytest

from sweeps.planner import plan_sweep
from sweeps.spec import spec_from_dict
from sweeps.tracking import LINES_MIRRORED_KEY, SweepTracker


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


def append_lines(job, steps):
    with open(job.run_dir / "metrics.jsonl", "a") as handle:
        for step in steps:
            record = {"step": step, "eval/pass_rate": step / 100, "compute/samples": 16.0 * step}
            handle.write(json.dumps(record) + "\n")


def history(tracker, job, key="eval/pass_rate"):
    return [m.step for m in tracker.client.get_metric_history(tracker.state["child_runs"][job.run_id], key)]


def test_a_driver_killed_between_logging_and_saving_its_count_does_not_log_lines_twice(sweep):
    spec, sweep_dir, jobs = sweep
    job = jobs[0]
    tracker = SweepTracker(spec, sweep_dir, jobs)
    append_lines(job, [0, 2, 4])
    assert tracker.mirror(job) == 3
    append_lines(job, [6, 8])

    def die():
        raise KeyboardInterrupt("killed before mlflow.json was written")

    tracker.save = die
    with pytest.raises(KeyboardInterrupt):
        tracker.mirror(job)  # lines 6 and 8 reached MLflow; mlflow.json still says 3
    assert json.loads((sweep_dir / "mlflow.json").read_text())["mirrored_lines"][job.run_id] == 3

    restarted = SweepTracker(spec, sweep_dir, jobs)
    assert restarted.mirror(job) == 0
    append_lines(job, [10])
    assert restarted.mirror(job) == 1
    assert history(restarted, job) == [0, 2, 4, 6, 8, 10]
    assert sorted(m.value for m in restarted.client.get_metric_history(
        restarted.state["child_runs"][job.run_id], LINES_MIRRORED_KEY)) == [1, 2, 3, 4, 5, 6]


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
