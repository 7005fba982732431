"""Tracking: metrics.jsonl survives kills without duplicates; MLflow mirrors it, compute included."""

from __future__ import annotations

import json

from recipe.run_config import TrackingConfig
from recipe.tracking import MetricsFile, Tracker, read_metrics


def test_resume_keeps_records_up_to_the_checkpoint_and_drops_torn_lines(tmp_path):
    (tmp_path / "metrics.jsonl").write_text(
        "".join(json.dumps({"step": s, "eval/pass_rate": s / 10}) + "\n" for s in (0, 2, 4, 6)) + '{"step": 8, "ev')
    assert [r["step"] for r in read_metrics(tmp_path)] == [0, 2, 4, 6]
    metrics = MetricsFile(tmp_path, resume_step=4)
    metrics.append({"step": 6, "eval/pass_rate": 0.7})
    assert [(r["step"], r["eval/pass_rate"]) for r in read_metrics(tmp_path)] == \
        [(0, 0.0), (2, 0.2), (4, 0.4), (6, 0.7)]
    assert MetricsFile(tmp_path, resume_step=None).records == []  # a fresh run starts empty
    assert (tmp_path / "metrics.jsonl").read_text() == ""


def test_mlflow_gets_every_record_with_compute_and_resume_reuses_the_run(tmp_path):
    from mlflow.tracking import MlflowClient

    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    cfg = TrackingConfig(mlflow=True, mlflow_uri=uri, experiment="test")
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    tracker = Tracker(run_dir, cfg, {"loss": {"name": "cispo"}, "seed": 0}, "run-a", resume_step=None)
    for step in (0, 10):
        tracker.log({"step": step, "eval/pass_rate": 0.1 + step / 100, "compute/device_hours": step / 3600})
    resumed = Tracker(run_dir, cfg, {}, "run-a", resume_step=10)
    assert resumed.mlflow.run_id == tracker.mlflow.run_id
    resumed.log({"step": 20, "eval/pass_rate": 0.5, "compute/device_hours": 20 / 3600})
    resumed.finish()

    client = MlflowClient(uri)
    run = client.get_run(tracker.mlflow.run_id)
    assert run.data.params["loss.name"] == "cispo" and run.info.status == "FINISHED"
    history = client.get_metric_history(run.info.run_id, "eval/pass_rate")
    assert [(m.step, round(m.value, 6)) for m in history] == [(0, 0.1), (10, 0.2), (20, 0.5)]
    assert [m.step for m in client.get_metric_history(run.info.run_id, "compute/device_hours")] == [0, 10, 20]
    assert [r["step"] for r in read_metrics(run_dir)] == [0, 10, 20]


def test_a_resumed_run_does_not_log_again_the_records_its_killed_process_logged(tmp_path):
    from mlflow.tracking import MlflowClient

    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    cfg = TrackingConfig(mlflow=True, mlflow_uri=uri, experiment="test")
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    tracker = Tracker(run_dir, cfg, {}, "run-a", resume_step=None)
    for step in (0, 10, 20):  # killed after step 20's record; its checkpoint is at step 10
        tracker.log({"step": step, "eval/pass_rate": step / 100})
    resumed = Tracker(run_dir, cfg, {}, "run-a", resume_step=10)
    for step in (20, 30):  # recomputed from the checkpoint
        resumed.log({"step": step, "eval/pass_rate": step / 100})
    history = MlflowClient(uri).get_metric_history(tracker.mlflow.run_id, "eval/pass_rate")
    assert sorted(m.step for m in history) == [0, 10, 20, 30]
    assert [r["step"] for r in read_metrics(run_dir)] == [0, 10, 20, 30]
