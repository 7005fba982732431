"""A recipes sweep end to end on tiny budgets: ScaleRL against DAPO's preset, paired seeds, the table's verdict,
the Figure-2 page and MLflow runs tagged by recipe."""

import json

import pandas as pd

from reports import schema
from sweeps.cli import main
from tests.sweeps.test_runner import assert_complete_curves
from tests.sweeps.test_scan_run import shared_cache  # noqa: F401 (autouse: the jobs share one warm-start cache)
from tests.sweeps.tiny_spec import TINY_JOB_OVERRIDES

RECIPES = """\
name: tiny-recipes
recipes: {{compare: [scalerl, dapo], reference: scalerl}}
seeds: [0, 1]
overrides:
  max_steps: 400
{overrides}budget: {{unit: samples, fit_at: 256, target: 512}}
executor: {{name: local, local: {{max_parallel: 2, cores_per_job: 1}}, poll_seconds: 0.5}}
output_dir: {out}
"""


def test_a_recipes_sweep_runs_each_recipe_on_paired_seeds_and_reports_figure_2(tmp_path, capsys):
    spec, out = tmp_path / "recipes.yaml", tmp_path / "out"
    spec.write_text(RECIPES.format(overrides=TINY_JOB_OVERRIDES, out=out))
    assert main(["run", str(spec)]) == 0
    assert_complete_curves(out, 4)
    assert main(["status", str(out)]) == 0  # the frozen spec reads back from the sweep directory
    meta = json.loads((out / "sweep.json").read_text())
    assert meta["recipes"] == {"reference": "scalerl", "compare": ["scalerl", "dapo"]} and meta["base"] == "scalerl"
    table = pd.read_csv(out / schema.LOO_TABLE_FILE)
    assert list(table["variant"]) == ["base", "recipe=dapo"]
    assert table["A"].notna().all() and table["verdict"].iloc[0] == "base"
    assert table["verdict"].iloc[1] in ("ceiling mover", "efficiency shaper", "no detectable effect")
    assert (out / schema.FIGURES_DIR / "recipes.png").stat().st_size > 10_000
    from mlflow.tracking import MlflowClient

    info = json.loads((out / "mlflow.json").read_text())
    client = MlflowClient(tracking_uri=info["tracking_uri"])
    plan = {entry["run_id"]: entry for entry in json.loads((out / "plan.json").read_text())}
    tags = {run_id: client.get_run(mlflow_id).data.tags for run_id, mlflow_id in info["child_runs"].items()}
    assert sorted(t["scalerl.recipe"] for t in tags.values()) == ["dapo", "dapo", "scalerl", "scalerl"]
    assert all(t["scalerl.recipe"] == plan[run_id]["choice"] for run_id, t in tags.items())
