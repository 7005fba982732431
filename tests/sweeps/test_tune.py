"""`sweep tune` end to end on the tiny model: real trials, the study's storage, resume, pruning, the report."""

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import optuna
import pytest
import yaml

from recipe.config import parse_overrides
from sweeps.cli import main
from sweeps.pruning import PRUNERS, Pruner
from sweeps.state import is_locked
from tests.conftest import tiny_override_list

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(autouse=True)
def shared_cache(tmp_path_factory, monkeypatch):
    monkeypatch.setenv("SCALERL_CACHE", str(tmp_path_factory.getbasetemp() / "warm-start-cache"))


def tiny_overrides(model_dir) -> dict:
    """The tiny model's recipe overrides as one nested mapping (tracking stays the driver's job)."""
    overrides: dict = {}
    for item in tiny_override_list(model_dir, run_steps=200):
        if item.startswith("tracking."):
            continue
        layer = parse_overrides([item])
        key = next(iter(layer))
        if isinstance(overrides.get(key), str):  # a component name, then one of its parameters
            overrides[key] = {"name": overrides[key]}
        if isinstance(layer[key], dict) and isinstance(overrides.get(key), dict):
            overrides[key].update(layer[key])
        else:
            overrides[key] = layer[key]
    overrides["eval"]["every_steps"] = 2
    overrides["eval"]["points_per_doubling"] = 0
    overrides["checkpoint"]["every_steps"] = 2
    return overrides


def write_spec(tmp_path, model_dir, **changes) -> Path:
    spec = {
        "name": "tiny-tune",
        "space": {"optimizer.lr": {"type": "float", "low": 1e-4, "high": 3e-3, "log": True},
                  "rollout.samples_per_prompt": {"type": "int", "low": 2, "high": 6, "step": 2}},
        "start_with": [{"optimizer.lr": 1e-3, "rollout.samples_per_prompt": 4}],
        "trials": 3,
        "sampler": {"name": "random", "seed": 0},
        "pruner": "none",
        "overrides": tiny_overrides(model_dir),
        "budget": {"unit": "samples", "fit_at": 160, "target": 320},
        "executor": {"name": "local", "local": {"max_parallel": 1, "cores_per_job": 1}, "poll_seconds": 0.5},
        "output_dir": str(tmp_path / "out"),
        **changes,
    }
    path = tmp_path / "tune.yaml"
    path.write_text(yaml.safe_dump(spec))
    return path


def load_study(out: Path) -> optuna.Study:
    return optuna.load_study(study_name="tiny-tune", storage=f"sqlite:///{out.resolve()}/optuna.db")


def eval_steps(run_dir: Path) -> list[int]:
    return [json.loads(line)["step"] for line in (run_dir / "metrics.jsonl").read_text().splitlines()]


def test_a_study_completes_reports_its_best_and_a_rerun_repeats_nothing(tmp_path, tiny_model_dir, capsys):
    spec = write_spec(tmp_path, tiny_model_dir)
    assert main(["tune", str(spec)]) == 0
    out = tmp_path / "out"
    printed = capsys.readouterr().out
    study = load_study(out)
    trials = study.get_trials()
    assert [trial.state for trial in trials] == [optuna.trial.TrialState.COMPLETE] * 3
    assert trials[0].params == {"optimizer.lr": 1e-3, "rollout.samples_per_prompt": 4}  # start_with first
    records = [json.loads((out / "trials" / f"{n}.json").read_text()) for n in range(3)]
    for trial, record in zip(trials, records):
        # the objective told to Optuna is the fit's prediction at the target, inside its interval
        assert trial.value == pytest.approx(record["value"])
        assert record["lower"] <= record["value"] <= record["upper"]
        assert record["compute"] >= 160  # trained to fit_at
        assert eval_steps(out / "runs" / record["run_id"])[-1] * 4 * trial.params["rollout.samples_per_prompt"] \
            == record["compute"]
    best = study.best_trial
    assert f"best: trial {best.number}, pred_at_target = {best.value:.4f}" in printed
    assert (out / "trials.csv").read_text().count("\n") == 4
    assert (out / "tune_report.pdf").stat().st_size > 10_000
    # MLflow: a child run per trial with its objective and the parent with the best trial
    from mlflow.tracking import MlflowClient

    client = MlflowClient(tracking_uri=f"sqlite:///{out.resolve()}/mlflow.db")
    experiment = client.get_experiment_by_name("tiny-tune")
    runs = client.search_runs([experiment.experiment_id])
    children = [run for run in runs if "mlflow.parentRunId" in run.data.tags]
    assert len(children) == 3 and all("tune/objective" in run.data.metrics for run in children)
    parent = [run for run in runs if "mlflow.parentRunId" not in run.data.tags][0]
    assert parent.data.metrics["tune/best_trial"] == best.number

    before = {path: path.stat().st_mtime_ns for path in out.glob("runs/*/metrics.jsonl")}
    assert main(["tune", str(spec)]) == 0
    assert len(load_study(out).get_trials()) == 3
    assert {path: path.stat().st_mtime_ns for path in out.glob("runs/*/metrics.jsonl")} == before
    assert f"best: trial {best.number}" in capsys.readouterr().out

    # A changed study in the same directory is refused; more trials extend it.
    data = yaml.safe_load(spec.read_text())
    data["space"]["optimizer.lr"]["high"] = 1e-2
    spec.write_text(yaml.safe_dump(data))
    assert main(["tune", str(spec)]) == 2
    assert "space: differ from the study already in" in capsys.readouterr().err
    data["space"]["optimizer.lr"]["high"] = 3e-3
    data["trials"] = 4
    spec.write_text(yaml.safe_dump(data))
    assert main(["tune", str(spec)]) == 0
    assert [trial.state.name for trial in load_study(out).get_trials()] == ["COMPLETE"] * 4


def test_a_killed_driver_resumes_its_running_trial_in_place(tmp_path, tiny_model_dir):
    # Trial 1 runs 80 steps (G = 2, 8 samples a step) and checkpoints every 2: seconds between its
    # first checkpoint and its end on any machine. (At the shared budget, 160 samples, a random G = 6
    # trial ran 7 steps, 0.18 s from first checkpoint to done.json: a CI machine's poll missed it.)
    # Trial 2 is the sampler's: the resumed driver goes on to ask for it.
    start_with = [{"optimizer.lr": 1e-3, "rollout.samples_per_prompt": 4},
                  {"optimizer.lr": 1e-3, "rollout.samples_per_prompt": 2}]
    spec = write_spec(tmp_path, tiny_model_dir, start_with=start_with,
                      budget={"unit": "samples", "fit_at": 640, "target": 1280})
    out = tmp_path / "out"
    command = [sys.executable, "-m", "sweeps.cli", "tune", str(spec)]
    log = tmp_path / "driver.log"
    with log.open("w") as sink:
        driver = subprocess.Popen(command, cwd=REPO, stdout=sink, stderr=subprocess.STDOUT, start_new_session=True)
    # Kill the driver (and its job) once trial 1 has a checkpoint but has not finished.
    deadline = time.time() + 300
    while time.time() < deadline and driver.poll() is None:
        record = out / "trials" / "1.json"
        if record.exists():
            run_dir = out / "runs" / json.loads(record.read_text())["run_id"]
            if (run_dir / "checkpoint.pt").exists() and not (run_dir / "done.json").exists():
                break
        time.sleep(0.05)
    else:
        driver.kill()
        pytest.fail(f"trial 1 never seen with a checkpoint and unfinished; driver exit {driver.wait()}, "
                    f"its output ends: {log.read_text()[-2000:]}")
    os.killpg(driver.pid, signal.SIGKILL)
    driver.wait()
    assert [trial.state.name for trial in load_study(out).get_trials()] == ["COMPLETE", "RUNNING"]
    assert main(["tune", str(spec)]) == 0
    trials = load_study(out).get_trials()
    assert [trial.state.name for trial in trials] == ["COMPLETE"] * 3
    # trial 1 kept its number and parameters and finished in its own run directory: its curve has
    # every evaluation once (resumed from the checkpoint, not restarted and not duplicated)
    record = json.loads((out / "trials" / "1.json").read_text())
    steps = eval_steps(out / "runs" / record["run_id"])
    assert steps == list(range(0, steps[-1] + 1, 2)) and steps[-1] == 80
    assert len(list((out / "runs").iterdir())) == 3


class PruneAfterBest(Pruner):
    """Test pruner: stop every trial once a best exists and it has spent min_compute_frac x fit_at."""

    min_compute_frac = 0.3
    n_boot = 20  # the objective's interval: few refits, so a poll is quick next to a seconds-long trial

    def should_prune(self, trial, best, fit_at, maximize):
        return best is not None and trial.compute >= self.min_compute_frac * fit_at


def test_a_pruned_trial_is_stopped_told_pruned_and_reported(tmp_path, tiny_model_dir, capsys):
    if "test_prune_after_best" not in PRUNERS.names():
        PRUNERS.register("test_prune_after_best")(PruneAfterBest)
    # Trial 1 with G = 2: 80 steps to fit_at, so the driver (polling every 0.5 s) has time to stop it
    # mid-way (at 160 samples, 20 steps, a fast machine finished the trial before the driver's poll).
    start_with = [{"optimizer.lr": 1e-3, "rollout.samples_per_prompt": 4},
                  {"optimizer.lr": 1e-3, "rollout.samples_per_prompt": 2}]
    fit_at = 640
    spec = write_spec(tmp_path, tiny_model_dir, trials=2, pruner="test_prune_after_best", start_with=start_with,
                      budget={"unit": "samples", "fit_at": fit_at, "target": 2 * fit_at})
    assert main(["tune", str(spec)]) == 0
    out = tmp_path / "out"
    trials = load_study(out).get_trials()
    assert [trial.state.name for trial in trials] == ["COMPLETE", "PRUNED"]
    record = json.loads((out / "trials" / "1.json").read_text())
    run_dir = out / "runs" / record["run_id"]
    decision = json.loads((run_dir / "pruned.json").read_text())
    assert 0.3 * fit_at <= decision["compute"] < fit_at and decision["best_trial"] == 0
    # the job was stopped: it never reached fit_at, and nothing holds its run any more
    assert not (run_dir / "done.json").exists() and record["compute"] < fit_at
    assert not is_locked(run_dir)
    printed = capsys.readouterr().out
    assert "trial 1 pruned at" in printed and "pruning stopped 1 trial(s) early" in printed
    csv_text = (out / "trials.csv").read_text()
    assert ",pruned," in csv_text
    # a rerun keeps the decision
    assert main(["tune", str(spec)]) == 0
    assert [trial.state.name for trial in load_study(out).get_trials()] == ["COMPLETE", "PRUNED"]


def fixed_batch_spec(tmp_path, total_batch):
    """A study over G at a fixed total batch, on the base recipe (loaded only: nothing trains)."""
    from sweeps.tune_spec import load_tune_spec

    path = tmp_path / f"tune-{total_batch}.yaml"
    path.write_text(yaml.safe_dump({
        "name": "fixed-batch", "trials": 2, "total_batch": total_batch,
        "space": {"optimizer.lr": {"type": "float", "low": 1e-5, "high": 3e-4, "log": True},
                  "rollout.samples_per_prompt": {"type": "categorical", "choices": [4, 8, 16]}},
        "budget": {"unit": "device_seconds", "fit_at": 150, "target": 300},
        "output_dir": str(tmp_path / "out")}))
    return load_tune_spec(path)


def test_fixed_batch_trials_resume_in_their_run_dirs_and_a_changed_total_batch_is_refused(tmp_path):
    from types import SimpleNamespace

    import matplotlib.pyplot as plt

    from components.registry import ConfigError
    from reports.study import _title_page
    from sweeps.tune import TuneDriver, write_tune_files

    spec, out = fixed_batch_spec(tmp_path, 256), tmp_path / "out"
    driver = SimpleNamespace(spec=spec, tune_dir=out)  # job_for reads only these two
    jobs = {g: TuneDriver.job_for(driver, 0, {"optimizer.lr": 1e-4, "rollout.samples_per_prompt": g}) for g in (4, 16)}
    assert jobs[4].recipe.rollout.prompts_per_batch == 64 and jobs[16].recipe.rollout.prompts_per_batch == 16
    assert "rollout.prompts_per_batch=64" in jobs[4].choice  # the label shows the derived prompts
    # A relaunched trial (same parameters, e.g. after the driver died) gets the same run directory.
    again = TuneDriver.job_for(driver, 0, {"optimizer.lr": 1e-4, "rollout.samples_per_prompt": 4})
    assert again.run_dir == jobs[4].run_dir != jobs[16].run_dir

    write_tune_files(spec, out, "sqlite:///unused.db")
    write_tune_files(spec, out, "sqlite:///unused.db")  # the same study: accepted
    page = _title_page(json.loads((out / "tune.json").read_text()), [], out)  # the study report says so
    assert "rollout.prompts_per_batch = 256 / G" in " ".join(text.get_text() for text in page.texts)
    plt.close(page)
    with pytest.raises(ConfigError, match=r"total_batch: differ from the study already in"):
        write_tune_files(fixed_batch_spec(tmp_path, 512), out, "sqlite:///unused.db")
    # A study written before total_batch existed (no key in its identity) resumes under a spec without it.
    tune_file = out / "tune.json"
    frozen = json.loads(tune_file.read_text())
    del frozen["identity"]["total_batch"]
    tune_file.write_text(json.dumps(frozen))
    write_tune_files(fixed_batch_spec(tmp_path, None), out, "sqlite:///unused.db")
    assert json.loads(tune_file.read_text())["identity"]["total_batch"] is None
    # Budget keys that only LOO verdicts read are not part of a study's identity, so a study written
    # before they existed resumes.
    assert not {"min_compute_ratio", "min_a_shift"} & set(json.loads(tune_file.read_text())["identity"]["budget"])


# --- honest pruning intervals (issue 17) -------------------------------------------------------------

def _objective_spec(target=300.0, metric="pred_at_target"):
    from types import SimpleNamespace

    return SimpleNamespace(budget=SimpleNamespace(burn_in=0.0, target=target, fit_method="default",
                                                 fit_weights="compute"),
                           objective=SimpleNamespace(metric=metric))


def _points(until, a=0.85, b=2.0, c_mid=60.0, seed=0):
    import numpy as np

    from fitting import sigmoid_curve

    compute = np.arange(0.0, until + 1e-9, 3.0)
    rate = sigmoid_curve(compute, a, b, c_mid, 0.1) + np.random.default_rng(seed).normal(0, 0.01, compute.size)
    rate[0] = 0.1
    return list(range(compute.size)), list(compute), list(np.clip(rate, 0, 1))


def test_a_curve_that_has_not_bent_yet_is_never_bounded():
    # a late bloomer seen at half its fit window (C_mid 120, seen up to 75): the fit cannot tell where it
    # ends, so its interval is the whole range and no best trial can prune it (the BENCHMARKS.md trial that
    # was pruned at an upper bound of 0.569 and ended at 0.782)
    from sweeps.pruning import CurveEstimate, PRUNERS
    from sweeps.tune import estimate_objective

    estimate = estimate_objective(_objective_spec(), _points(75, c_mid=120.0), level=0.9, n_boot=40, run_sd=0.04)
    assert (estimate.lower, estimate.upper) == (0.0, 1.0)
    rule = PRUNERS.build({"name": "sigmoid_bound"})
    best = CurveEstimate(value=0.9, lower=0.88, upper=0.92, compute=150.0)
    assert not rule.should_prune(estimate, best, fit_at=150.0, maximize=True)



def test_a_curve_of_too_few_points_is_never_bounded():
    # 5 points for the sigmoid's 3 parameters (a GPU spec evaluating every 100 steps): a near-exact fit whose
    # bootstrap interval says nothing; simulated, its 90% upper bound missed the true value 14 times in 40
    from sweeps.tune import estimate_objective

    steps, compute, rate = _points(150)  # C_mid 60: the window is past it, no other flag
    kept = (0, 10, 20, 30, 40, 50)  # step 0 and 5 points in the window
    few = ([steps[i] for i in kept], [compute[i] for i in kept], [rate[i] for i in kept])
    estimate = estimate_objective(_objective_spec(), few, level=0.9, n_boot=40, run_sd=0.04)
    assert (estimate.lower, estimate.upper) == (0.0, 1.0)

def test_run_to_run_noise_widens_the_bootstrap_interval():
    from scipy.stats import norm

    from sweeps.tune import estimate_objective, honest_interval

    points = _points(150)  # C_mid 60: well inside the window, the ceiling is determined
    narrow = estimate_objective(_objective_spec(), points, level=0.9, n_boot=60, run_sd=0.0)
    wide = estimate_objective(_objective_spec(), points, level=0.9, n_boot=60, run_sd=0.04)
    assert narrow.value == wide.value and 0.0 < narrow.lower < narrow.upper < 1.0
    z = norm.ppf(0.95)
    assert wide.upper - wide.value == pytest.approx(((narrow.upper - narrow.value) ** 2 + (z * 0.04) ** 2) ** 0.5)
    assert wide.value - wide.lower == pytest.approx(((narrow.value - narrow.lower) ** 2 + (z * 0.04) ** 2) ** 0.5)
    assert honest_interval(0.5, 0.45, 0.6, 0.0, 0.9) == (0.45, 0.6)


def test_the_pruner_takes_a_run_sd():
    from components.registry import ConfigError
    from sweeps.pruning import PRUNERS

    assert PRUNERS.build({"name": "sigmoid_bound"}).run_sd == 0.04
    assert PRUNERS.build({"name": "sigmoid_bound", "run_sd": 0.0}).run_sd == 0.0
    with pytest.raises(ConfigError, match=r"run_sd: got -0.1, expected in \[0, 1\)"):
        PRUNERS.build({"name": "sigmoid_bound", "run_sd": -0.1})


def test_a_trial_whose_values_make_no_recipe_is_told_failed_and_the_study_goes_on(tmp_path, tiny_model_dir, capsys):
    # Each range end is a valid recipe alone with the base's window 6-8 (tune --check), a combination may not be:
    # min_thinking 8 with max_thinking 6. Left RUNNING in the study, it stopped every rerun on the same error.
    space = {"length_control.min_thinking": {"type": "int", "low": 2, "high": 8},
             "length_control.max_thinking": {"type": "int", "low": 6, "high": 12}}
    spec = write_spec(tmp_path, tiny_model_dir, space=space, trials=2,
                      start_with=[{"length_control.min_thinking": 8, "length_control.max_thinking": 6},
                                  {"length_control.min_thinking": 4, "length_control.max_thinking": 8}])
    assert main(["tune", str(spec)]) == 0
    out = tmp_path / "out"
    assert "trial 0: length_control.max_thinking=6, length_control.min_thinking=8 makes no valid recipe" \
        in capsys.readouterr().out
    assert [trial.state.name for trial in load_study(out).get_trials()] == ["FAIL", "COMPLETE"]
    record = json.loads((out / "trials" / "0.json").read_text())
    assert record["state"] == "failed" and "max_thinking" in record["error"]
    assert main(["tune", str(spec)]) == 0  # a rerun settles nothing again and stops on nothing


def test_start_with_trials_a_killed_driver_did_not_enqueue_are_enqueued_once_on_the_next_run(tmp_path, tiny_model_dir):
    from sweeps.tune import open_study
    from sweeps.tune_spec import load_tune_spec

    start_with = [{"optimizer.lr": 1e-3, "rollout.samples_per_prompt": 4},
                  {"optimizer.lr": 2e-3, "rollout.samples_per_prompt": 2}]
    spec = load_tune_spec(write_spec(tmp_path, tiny_model_dir, start_with=start_with))
    storage = f"sqlite:///{tmp_path / 'optuna.db'}"
    killed = optuna.create_study(study_name=spec.name, storage=storage, direction=spec.objective.direction)
    killed.enqueue_trial(start_with[0])  # the driver died before enqueuing the second
    for _ in range(2):  # the next run, then one more: each start_with point is in the study once
        study = open_study(spec, storage)
    waiting = [t.system_attrs["fixed_params"]["optimizer.lr"] for t in study.trials]  # enqueued, not asked yet
    assert sorted(waiting) == [1e-3, 2e-3]
