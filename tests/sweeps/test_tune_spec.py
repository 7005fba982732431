"""Tune specs: a malformed search space fails at load time, before any trial, naming the key and the fix."""

from pathlib import Path

import pytest
import yaml

from components.registry import ConfigError
from recipe.config import run_id
from sweeps.cli import main
from recipe.config import params_layer
from sweeps.tune_spec import load_tune_spec, trial_recipe

REPO = Path(__file__).resolve().parents[2]
GOOD = {
    "name": "t",
    "space": {"optimizer.lr": {"type": "float", "low": 1.0e-5, "high": 3.0e-4, "log": True},
              "rollout.samples_per_prompt": {"type": "int", "low": 4, "high": 16, "step": 4}},
    "budget": {"unit": "device_seconds", "fit_at": 150, "target": 300},
    "trials": 4,
}


def write(tmp_path, **changes):
    spec = {**GOOD, **changes, "output_dir": str(tmp_path / "out")}
    path = tmp_path / "tune.yaml"
    path.write_text(yaml.safe_dump(spec))
    return path


def test_a_good_spec_loads(tmp_path):
    spec = load_tune_spec(write(tmp_path))
    assert [param.path for param in spec.params] == ["optimizer.lr", "rollout.samples_per_prompt"]
    assert spec.maximize and spec.objective.metric == "pred_at_target"


@pytest.mark.parametrize("path", sorted((REPO / "sweeps").glob("tune*.yaml")), ids=lambda path: path.name)
def test_every_shipped_tune_spec_loads(path):
    assert len(load_tune_spec(path).space) >= 2


@pytest.mark.parametrize("space, message", [
    ({"optimizer.lrr": {"type": "float", "low": 1e-5, "high": 1e-3}},
     r"space\.optimizer\.lrr: unknown parameter path .* did you mean optimizer\.lr"),
    ({"optimizer.lr": {"type": "float", "low": 1e-3, "high": 1e-3}}, r"space\.optimizer\.lr: empty range"),
    ({"optimizer.lr": {"type": "float", "low": 1e-2, "high": 1e-3}}, r"space\.optimizer\.lr: empty range"),
    ({"rollout.samples_per_prompt": {"type": "float", "low": 4, "high": 8}},
     r"space\.rollout\.samples_per_prompt\.type: the recipe key holds an integer .* use type: int"),
    ({"loss.name": {"type": "int", "low": 1, "high": 2}}, r"space\.loss\.name\.type: int does not fit .* categorical"),
    ({"optimizer.lr": {"type": "float", "low": "small", "high": 1e-3}}, r"space\.optimizer\.lr\.low: got 'small'"),
    ({"rollout.samples_per_prompt": {"type": "int", "low": 4.5, "high": 8}},
     r"space\.rollout\.samples_per_prompt\.low: got 4\.5, expected an integer"),
    ({"optimizer.lr": {"type": "float", "low": 0.0, "high": 1e-3, "log": True}}, r"log range needs low > 0"),
    ({"optimizer.lr": {"type": "real", "low": 0.0, "high": 1e-3}}, r"space\.optimizer\.lr\.type: got 'real'"),
    ({"optimizer.lr": {"type": "float", "low": 1e-5}}, r"space\.optimizer\.lr\.high: missing"),
    ({"optimizer.lr": {"type": "float", "low": 1e-5, "high": 1e-3, "lgo": True}},
     r"space\.optimizer\.lr\.lgo: unknown key"),
    ({"loss.name": {"type": "categorical", "choices": []}}, r"space\.loss\.name\.choices: .* non-empty list"),
    ({"loss.name": {"type": "categorical", "choices": ["cispo", "ppo2"]}},
     r"space\.loss\.name: the recipe refuses 'ppo2'"),
    # A range end the recipe refuses: G = 1 gives groups without spread.
    ({"rollout.samples_per_prompt": {"type": "int", "low": 1, "high": 8}},
     r"space\.rollout\.samples_per_prompt: the recipe refuses 1: .*rollout\.samples_per_prompt: got 1, expected >= 2"),
    ({"loss.eps_max": {"type": "float", "low": -1.0, "high": 8.0}}, r"space\.loss\.eps_max: the recipe refuses -1\.0"),
    ({"loss.name": {"type": "categorical", "choices": ["cispo", "dapo"]},
      "loss.eps_max": {"type": "float", "low": 2.0, "high": 8.0}}, r"loss\.name is also tuned"),
    ({"tracking.experiment": {"type": "categorical", "choices": ["a", "b"]}}, r"not tunable"),
    ({}, r"space: empty"),
])
def test_a_malformed_space_fails_before_any_trial_naming_the_key(tmp_path, capsys, space, message):
    path = write(tmp_path, space=space)
    with pytest.raises(ConfigError, match=message):
        load_tune_spec(path)
    # The command prints the one-line error, exits 2 and creates nothing (no study, no trial).
    assert main(["tune", str(path)]) == 2
    assert "sweep tune: error:" in capsys.readouterr().err
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("changes, message", [
    ({"objective": {"metric": "pass_rate"}}, r"objective\.metric: got 'pass_rate'"),
    ({"objective": {"direction": "up"}}, r"objective\.direction"),
    ({"trials": 0}, r"trials: got 0"),
    ({"parallelism": 0}, r"parallelism: got 0"),
    ({"sampler": {"name": "cmaes"}}, r"sampler\.name"),
    ({"pruner": {"name": "sigmoid_bound", "level": 2.0}}, r"pruner: .*level"),
    ({"pruner": "median"}, r"pruner: .*median"),
    ({"start_with": [{"optimizer.lr": 1e-4}]}, r"start_with\[0\]: missing rollout\.samples_per_prompt"),
    ({"start_with": [{"optimizer.lr": 1.0, "rollout.samples_per_prompt": 8}]},
     r"start_with\[0\]\.optimizer\.lr: 1\.0 lies outside"),
    ({"budget": {"unit": "device_seconds", "fit_at": 300, "target": 300}}, r"budget\.fit_at"),
    ({"trails": 4}, r"trails: unknown key"),
])
def test_other_spec_errors_name_their_key(tmp_path, changes, message):
    with pytest.raises(ConfigError, match=message):
        load_tune_spec(write(tmp_path, **changes))


def test_trial_parameters_compose_into_the_recipe(tmp_path):
    spec = load_tune_spec(write(tmp_path, space={
        "loss.name": {"type": "categorical", "choices": ["cispo", "dapo"]},
        "optimizer.lr": {"type": "float", "low": 1e-5, "high": 1e-3}}))
    recipe = trial_recipe(spec, {"loss.name": "dapo", "optimizer.lr": 2e-4})
    assert recipe.loss["name"] == "dapo" and recipe.optimizer.lr == 2e-4
    # component names are applied before parameters of the same axis
    assert list(params_layer({"loss.eps_high": 0.3, "loss.name": "dapo"})["loss"]) == ["name", "eps_high"]


FIXED_BATCH = {"total_batch": 256,
               "space": {"optimizer.lr": {"type": "float", "low": 1.0e-5, "high": 3.0e-4, "log": True},
                         "rollout.samples_per_prompt": {"type": "categorical", "choices": [4, 8, 16]}}}


def test_total_batch_holds_prompts_times_g_fixed_as_g_varies(tmp_path):
    spec = load_tune_spec(write(tmp_path, **FIXED_BATCH))
    ids = set()
    for g in (4, 8, 16):
        recipe = trial_recipe(spec, {"optimizer.lr": 1e-4, "rollout.samples_per_prompt": g})
        # the paper's protocol: G varies, the batch of prompts x G samples does not
        assert (recipe.rollout.samples_per_prompt, recipe.rollout.prompts_per_batch) == (g, 256 // g)
        again = trial_recipe(spec, {"optimizer.lr": 1e-4, "rollout.samples_per_prompt": g})
        assert run_id(again) == run_id(recipe)  # the same parameters land in the same run directory (resume)
        ids.add(run_id(recipe))
    assert len(ids) == 3
    # Without total_batch, prompts per batch stay at the base's 32 and the batch grows with G.
    free = load_tune_spec(write(tmp_path, space=FIXED_BATCH["space"]))
    assert free.total_batch is None
    assert trial_recipe(free, {"optimizer.lr": 1e-4, "rollout.samples_per_prompt": 16}).rollout.prompts_per_batch == 32


def test_the_shipped_tune_spec_varies_g_at_a_fixed_batch():
    spec = load_tune_spec(REPO / "sweeps" / "tune.yaml")
    assert spec.total_batch is not None
    choices = spec.space["rollout.samples_per_prompt"]["choices"]
    assert len(choices) >= 2
    for g in choices:
        rollout = trial_recipe(spec, {"optimizer.lr": 1e-4, "rollout.samples_per_prompt": g}).rollout
        assert rollout.prompts_per_batch * rollout.samples_per_prompt == spec.total_batch


@pytest.mark.parametrize("changes, message", [
    # 12 is in the int range 4..16 step 4 but does not divide 256; the fix lists the divisors in range
    ({"space": GOOD["space"]}, r"total_batch: 256 is not divisible by rollout\.samples_per_prompt = 12 .*"
                               r"choices: \[4, 8, 16\]"),
    ({"space": {"optimizer.lr": GOOD["space"]["optimizer.lr"]}},
     r"total_batch: .* rollout\.samples_per_prompt is not in space"),
    ({"space": {**FIXED_BATCH["space"], "rollout.prompts_per_batch": {"type": "int", "low": 8, "high": 64}}},
     r"space\.rollout\.prompts_per_batch: total_batch sets it"),
    ({"overrides": {"rollout": {"prompts_per_batch": 16}}},
     r"overrides\.rollout\.prompts_per_batch: total_batch sets it"),
    ({"total_batch": 1}, r"total_batch: got 1, expected an integer >= 2"),
    ({"total_batch": "big"}, r"total_batch: got 'big'"),
])
def test_a_total_batch_that_cannot_hold_fails_naming_the_key(tmp_path, changes, message):
    with pytest.raises(ConfigError, match=message):
        load_tune_spec(write(tmp_path, **{**FIXED_BATCH, **changes}))


def test_tune_refuses_the_verdict_margins_it_would_not_use(tmp_path):
    from sweeps.tune_spec import load_tune_spec

    text = (Path(__file__).resolve().parents[2] / "sweeps" / "tune.yaml").read_text()
    spec_file = tmp_path / "tune.yaml"
    spec_file.write_text(text.replace("budget:\n", "budget:\n  min_compute_ratio: 1.2\n", 1))
    with pytest.raises(ConfigError, match=r"budget\.min_compute_ratio: tune ranks trials .* remove it"):
        load_tune_spec(spec_file)
    spec_file.write_text(text.replace("budget:\n", "budget:\n  verdicts_from: run\n", 1))
    with pytest.raises(ConfigError, match=r"budget\.verdicts_from: tune ranks trials .* remove it"):
        load_tune_spec(spec_file)
