"""Reading a sweep directory into tidy frames: eval points, compute axis, diagnostics, configs, and bad input."""

import json

import pytest

from reports import schema
from reports.sweep_data import SweepDataError, flatten_config, load_sweep

from tests.reports.synthetic import DEFAULT_SEEDS, EVAL_EVERY, R0, make_sweep


@pytest.fixture(scope="module")
def data(sweep_dir):
    return load_sweep(sweep_dir)


def test_one_eval_row_per_evaluation_line_with_the_budget_unit_as_compute(data, sweep_dir):
    plan = json.loads((sweep_dir / schema.PLAN_FILE).read_text())
    run = plan[1]
    lines = [json.loads(line) for line in (sweep_dir / run["run_dir"] / schema.METRICS_FILE).read_text().splitlines()]
    evals = [line for line in lines if schema.PASS_RATE in line]
    rows = data.evals[data.evals["run_id"] == run["run_id"]]
    assert len(rows) == len(evals) == 260 // EVAL_EVERY + 1
    assert rows["compute"].tolist() == [line["compute/device_seconds"] for line in evals]
    assert rows["pass_rate"].tolist() == [line["eval/pass_rate"] for line in evals]
    first = rows.iloc[0]
    assert (first["step"], first["compute"], first["pass_rate"]) == (0, 0.0, R0)
    assert set(rows["variant"]) == {run["variant"]} and set(rows["axis"]) == {run["axis"]}


def test_variants_come_base_first_then_in_axis_order(data):
    assert data.variants() == ["base", "loss=dapo", "aggregation=sample_mean", "precision=fp32_head=false"]
    assert data.budget.fit_at == 120 and data.budget.target == 240 and data.budget.observed_window == 0.05


def test_diagnostics_keep_what_each_run_logged(data):
    dapo = data.diagnostics[data.diagnostics["variant"] == "loss=dapo"]
    base = data.diagnostics[data.diagnostics["variant"] == "base"]
    assert dapo["loss/clip_frac"].notna().all() and dapo["rollout/interrupted_frac"].isna().all()
    assert base["loss/clip_frac"].isna().all() and base["loss/truncated_frac"].notna().all()
    assert len(base) == 260 * len(DEFAULT_SEEDS)  # one training line per step after step 0, per seed


def test_configs_are_flattened_to_the_strings_mlflow_params_hold(data):
    precision = data.runs[data.runs["variant"] == "precision=fp32_head=false"]["run_id"].iloc[0]
    config = data.configs[precision]
    assert config["precision.fp32_head"] == "False" and config["loss.eps_max"] == "4.0"
    assert config["optimizer.betas"] == "[0.9, 0.999]" and config["tracking.mlflow_uri"] == "None"
    assert flatten_config({"a": {"b": {"c": 1}}, "d": True}) == {"a.b.c": "1", "d": "True"}


def test_steps_unit_torn_line_and_missing_compute(tmp_path):
    sweep_dir = make_sweep(tmp_path, variants=("base",))
    meta = json.loads((sweep_dir / schema.SWEEP_FILE).read_text())
    meta["budget"]["unit"] = "steps"
    (sweep_dir / schema.SWEEP_FILE).write_text(json.dumps(meta))
    run_dir = next((sweep_dir / "runs").iterdir())
    with open(run_dir / schema.METRICS_FILE, "a") as handle:
        handle.write('{"step": 265, "eval/pass_rate": 0.6')  # a kill mid-write
    data = load_sweep(sweep_dir)
    assert data.evals["compute"].tolist() == data.evals["step"].astype(float).tolist()
    assert data.evals["step"].max() == 260

    meta["budget"]["unit"] = "tokens_per_joule"
    (sweep_dir / schema.SWEEP_FILE).write_text(json.dumps(meta))
    data = load_sweep(sweep_dir)
    assert data.evals.empty
    assert any("compute/tokens_per_joule" in note and "left out" in note for note in data.notes)


def test_missing_files_name_the_problem(tmp_path):
    with pytest.raises(SweepDataError, match="no such sweep directory"):
        load_sweep(tmp_path / "nope")
    sweep_dir = make_sweep(tmp_path, variants=("base",))
    (sweep_dir / schema.PLAN_FILE).unlink()
    with pytest.raises(SweepDataError, match="plan.json not found"):
        load_sweep(sweep_dir)
    sweep_dir = make_sweep(tmp_path / "second", variants=("base",))
    (sweep_dir / schema.SWEEP_FILE).write_text(json.dumps({"name": "x", "budget": {"unit": "steps"}}))
    with pytest.raises(SweepDataError, match="budget needs 'unit' and 'target'"):
        load_sweep(sweep_dir)


def test_fit_at_defaults_to_half_the_target_with_a_note(tmp_path):
    sweep_dir = make_sweep(tmp_path, variants=("base",))
    meta = json.loads((sweep_dir / schema.SWEEP_FILE).read_text())
    del meta["budget"]["fit_at"]
    (sweep_dir / schema.SWEEP_FILE).write_text(json.dumps(meta))
    data = load_sweep(sweep_dir)
    assert data.budget.fit_at == 120
    assert any("half the target" in note for note in data.notes)
