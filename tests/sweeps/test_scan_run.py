"""A scan end to end on tiny budgets: plan, run, kill -9 of the driver, resume, fit, report (scan page, table, CSV,
MLflow tags)."""

import json

import pandas as pd
import pytest

from reports import schema
from sweeps.cli import main
from tests.sweeps.test_runner import assert_complete_curves, kill_driver_mid_sweep_then_rerun
from tests.sweeps.tiny_spec import TINY_JOB_OVERRIDES


# The tiny jobs of test_runner with prompts_per_batch scanned: 4 (the reference) and 8. Each value runs to 512
# samples (32 and 16 steps), fit on 256: the larger batch still has 4 evaluation points in the window.
SCAN = """\
name: tiny-scan
scan: {{rollout.prompts_per_batch: [4, 8], reference: 4}}
seeds: [0, 1]
overrides:
  max_steps: 400
{overrides}budget: {{unit: samples, fit_at: 256, target: 512}}
executor: {{name: local, local: {{max_parallel: 2, cores_per_job: 1}}, poll_seconds: 0.5}}
output_dir: {out}
"""


@pytest.fixture(autouse=True)
def shared_cache(tmp_path_factory, monkeypatch):
    monkeypatch.setenv("SCALERL_CACHE", str(tmp_path_factory.getbasetemp() / "warm-start-cache"))


def test_a_scan_plans_runs_resumes_after_kill_9_fits_and_reports_each_value(tmp_path, capsys):
    # the scan sets prompts_per_batch, so the shared tiny overrides must not
    overrides = TINY_JOB_OVERRIDES.replace("rollout: {prompts_per_batch: 4, samples_per_prompt: 4}",
                                           "rollout: {samples_per_prompt: 4}")
    spec = tmp_path / "scan.yaml"
    spec.write_text(SCAN.format(overrides=overrides, out=tmp_path / "out"))
    out = tmp_path / "out"
    assert main(["plan", str(spec)]) == 0
    assert "4 jobs: 2 variants x 2 seed(s)" in capsys.readouterr().out
    # kill -9 the driver and its jobs once a job has a few evaluation points, then resume
    result = kill_driver_mid_sweep_then_rerun(spec, out)
    assert_complete_curves(out, 4)
    assert json.loads((out / "sweep.json").read_text())["scan"] == {
        "key": "rollout.prompts_per_batch", "values": [4, 8], "reference": 4}
    # the LOO's table and CSV, one row per value, the reference as the base, every value fitted
    table = pd.read_csv(out / schema.LOO_TABLE_FILE)
    assert list(table.columns) == list(schema.LOO_COLUMNS)
    assert list(table["variant"]) == ["base", "rollout.prompts_per_batch=8"]
    assert list(table["changed"]) == ["reference: rollout.prompts_per_batch = 4", "rollout.prompts_per_batch: 4 -> 8"]
    assert table["A"].notna().all() and table["verdict"].iloc[0] == "base"
    assert table["verdict"].iloc[1] in ("ceiling mover", "efficiency shaper", "no detectable effect")
    # the printed per-value table: A, B, C_mid with intervals for every value
    text = result.stdout
    assert "scan of rollout.prompts_per_batch against the reference 4" in text
    rows = text[text.index("scan of rollout.prompts_per_batch"):].splitlines()[3:5]
    assert [row.split()[:2] for row in rows] == [["4", "(ref)"], ["8", "2"]]
    assert all(row.count("[") == 3 for row in rows), rows  # A, B and C_mid intervals
    assert (out / schema.FIGURES_DIR / "scan.png").stat().st_size > 10_000
    # the MLflow runs carry the scanned key and value
    from mlflow.tracking import MlflowClient

    info = json.loads((out / "mlflow.json").read_text())
    client = MlflowClient(tracking_uri=info["tracking_uri"])
    plan = {entry["run_id"]: entry for entry in json.loads((out / "plan.json").read_text())}
    for run_id, mlflow_id in info["child_runs"].items():
        tags = client.get_run(mlflow_id).data.tags
        assert tags[schema.TAG_SCAN_KEY] == "rollout.prompts_per_batch"
        assert tags[schema.TAG_SCAN_VALUE] == plan[run_id]["choice"]
