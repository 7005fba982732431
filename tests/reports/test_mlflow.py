"""Fit results in MLflow, seen through the real UI (headless Chromium) and its REST API; reports from a store alone."""

import json
import os
import shutil
import urllib.request

import pandas as pd
import pytest

from reports import schema
from reports.mlflow_source import load_sweep_from_mlflow
from reports.mlflow_sync import log_fit_results
from reports.publish import report_sweep
from reports.sweep_data import load_sweep
from reports.tables import fit_sweep
from reports.ui import jobs_url, start_ui
from tests.services import record_started
from tests.reports.synthetic import EXPECTED_VERDICTS, log_to_mlflow, make_sweep
from tests.reports.tools import chromium, ink_fraction

N_BOOT = 100
FIT_KEYS = {"fit/A", "fit/B", "fit/C_mid", "fit/pred_at_target", "fit/pred_lo", "fit/pred_hi",
            "fit/observed_at_target", "fit/error"}


@pytest.fixture(scope="module")
def logged(tmp_path_factory):
    """The synthetic sweep as the driver leaves it (runs + MLflow store), then `report_sweep` on it."""
    sweep_dir = make_sweep(tmp_path_factory.mktemp("mlflow"))
    uri = log_to_mlflow(sweep_dir)
    from_params = load_sweep_from_mlflow(uri, "synthetic-loo")  # before the report adds the sweep.json artifact
    outputs = report_sweep(sweep_dir, n_boot=N_BOOT)
    return {"dir": sweep_dir, "uri": uri, "info": json.loads((sweep_dir / schema.MLFLOW_FILE).read_text()),
            "from_params": from_params, "outputs": outputs}


def _rest(base: str, path: str, body: dict) -> dict:
    request = urllib.request.Request(f"{base}/api/2.0/mlflow/{path}", data=json.dumps(body).encode(),
                                     headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(request, timeout=30) as response:
        return json.loads(response.read())


def test_ui_shows_the_jobs_and_rest_api_has_fit_metrics_and_verdicts(logged, tmp_path):
    info = logged["info"]
    url, stop = start_ui(info["tracking_uri"], experiment_id=info["experiment_id"], log_path=tmp_path / "ui.log")
    record_started("mlflow ui", stop.pid)
    try:
        assert url.endswith(f"/#/experiments/{info['experiment_id']}/runs")
        base = url.split("/#")[0]
        runs = _rest(base, "runs/search", {"experiment_ids": [info["experiment_id"]], "max_results": 100})["runs"]
        children = {r["info"]["run_id"]: r for r in runs
                    if any(t["key"] == schema.TAG_PARENT for t in r["data"].get("tags", []))}
        assert set(children) == set(info["child_runs"].values())
        for run in children.values():
            metrics = {m["key"]: m["value"] for m in run["data"]["metrics"]}
            tags = {t["key"]: t["value"] for t in run["data"]["tags"]}
            assert FIT_KEYS <= set(metrics), tags[schema.TAG_VARIANT]
            assert tags[schema.TAG_VERDICT].startswith(EXPECTED_VERDICTS[tags[schema.TAG_VARIANT]])
            # that seed's own fit
            row = logged["outputs"].fits.run_table.set_index("run_id").loc[tags[schema.TAG_RUN_ID]]
            assert metrics["fit/A"] == pytest.approx(row["A"]) and metrics["fit/error"] == pytest.approx(row["error"])
            assert metrics["fit/pred_lo"] <= metrics["fit/pred_at_target"] <= metrics["fit/pred_hi"]
            assert tags[schema.TAG_REGIME] == (row["regime"] or "predictable")

        screenshot = tmp_path / "runs.png"
        chromium(jobs_url(url), tmp_path / "profile", screenshot=screenshot)
        assert screenshot.is_file() and ink_fraction(screenshot) > 0.02
        dom = chromium(jobs_url(url), tmp_path / "profile-dom")
        for run in children.values():  # every job's run is listed in the table a person sees
            assert run["info"]["run_name"] in dom
    finally:
        stop()
    with pytest.raises(ProcessLookupError):  # the UI's workers went with it
        os.killpg(stop.pid, 0)
    with pytest.raises(OSError):
        urllib.request.urlopen(f"{base}/health", timeout=2)


def test_parent_run_holds_the_report_and_sweep_json(logged):
    from mlflow.tracking import MlflowClient

    client = MlflowClient(tracking_uri=logged["uri"])
    parent = logged["info"]["parent_run_id"]
    top = {f.path for f in client.list_artifacts(parent)}
    report = {f.path for f in client.list_artifacts(parent, schema.REPORT_ARTIFACT_DIR)}
    figures = {f.path for f in client.list_artifacts(parent, f"{schema.REPORT_ARTIFACT_DIR}/figures")}
    assert schema.PARENT_SWEEP_ARTIFACT in top
    assert {"report/report.pdf", "report/loo_table.csv"} <= report
    assert {f"report/figures/{p.name}" for p in logged["outputs"].figures} == figures and len(figures) == 5


def test_store_params_give_the_same_frames_as_run_directories(logged):
    from_dirs, from_params = load_sweep(logged["dir"]), logged["from_params"]
    assert from_params.budget == from_dirs.budget and from_params.name == from_dirs.name
    key = ["run_id", "step"]
    pd.testing.assert_frame_equal(from_params.evals.sort_values(key).reset_index(drop=True),
                                  from_dirs.evals.sort_values(key).reset_index(drop=True))
    assert from_params.configs == from_dirs.configs
    assert set(from_params.diagnostics.columns) == set(from_dirs.diagnostics.columns)


def test_report_builds_from_the_store_alone_with_the_same_table(logged, tmp_path):
    from sweeps.cli import main

    copy = tmp_path / "sweep"
    shutil.copytree(logged["dir"], copy)
    expected = pd.read_csv(copy / schema.LOO_TABLE_FILE)
    for path in ("runs", schema.SWEEP_FILE, schema.PLAN_FILE, schema.LOO_TABLE_FILE):
        shutil.rmtree(copy / path) if (copy / path).is_dir() else (copy / path).unlink()
    uri = f"sqlite:///{copy / schema.DEFAULT_STORE}"
    out = tmp_path / "from_store.pdf"
    assert main(["report", "--tracking-uri", uri, "--experiment", "synthetic-loo", "-o", str(out),
                 "--n-boot", str(N_BOOT)]) == 0
    assert out.stat().st_size > 10_000
    pd.testing.assert_frame_equal(pd.read_csv(out.with_suffix(".csv")), expected)
    data = load_sweep_from_mlflow(uri, "synthetic-loo")
    assert "MLflow" in data.source and not (copy / "runs").exists()
    pd.testing.assert_frame_equal(fit_sweep(data, n_boot=N_BOOT).table, logged["outputs"].table)


def test_without_mlflow_json_nothing_is_logged_and_the_reason_is_said(tmp_path):
    sweep_dir = make_sweep(tmp_path, variants=("base",))
    said = []
    assert log_fit_results(sweep_dir, pd.DataFrame(columns=list(schema.LOO_COLUMNS)), echo=said.append) is False
    assert said == [f"no mlflow.json in {sweep_dir}: fit results not logged to MLflow"]


def test_a_store_that_refuses_the_results_costs_only_the_mlflow_copy(tmp_path):
    sweep_dir = make_sweep(tmp_path, variants=("base",))
    plan = json.loads((sweep_dir / schema.PLAN_FILE).read_text())
    (sweep_dir / schema.MLFLOW_FILE).write_text(json.dumps({
        "tracking_uri": f"sqlite:///{tmp_path / 'other.db'}", "experiment_id": "0", "parent_run_id": "f" * 32,
        "child_runs": {plan[0]["run_id"]: "e" * 32}}))  # runs this store never had
    said = []
    outputs = report_sweep(sweep_dir, n_boot=20, echo=said.append)
    assert outputs.mlflow_logged is False and outputs.pdf.is_file() and outputs.csv.is_file()
    assert len(said) == 1 and said[0].startswith("MLflow: fit results not logged (MlflowException")


def test_an_older_run_of_a_job_left_by_a_killed_driver_is_not_read(logged, tmp_path):
    # A driver killed after creating a job's child run, before recording it in mlflow.json: the next driver
    # creates the job's run again, and the store holds an older, empty run with the same job tags.
    from mlflow.tracking import MlflowClient

    copy = tmp_path / "sweep"
    shutil.copytree(logged["dir"], copy)
    uri = f"sqlite:///{copy / schema.DEFAULT_STORE}"
    client = MlflowClient(uri)
    info = logged["info"]
    job_run = client.get_run(next(iter(info["child_runs"].values())))
    client.create_run(info["experiment_id"], start_time=job_run.info.start_time - 60_000,
                      tags={key: value for key, value in job_run.data.tags.items() if key.startswith(("scalerl.",
                                                                                                      "mlflow.parent"))})
    data = load_sweep_from_mlflow(uri, "synthetic-loo")
    pd.testing.assert_frame_equal(data.evals, logged["from_params"].evals)
    assert any("1 older job run(s) left by a killed driver" in note for note in data.notes)
