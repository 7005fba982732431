"""Whole recipes side by side: the shipped recipes spec plans the five recipes on paired seeds; bad input is refused
in one line naming the key."""

from __future__ import annotations

from pathlib import Path

import pytest

from recipe.config import ConfigError, compose_recipe
from recipe.presets import preset_path
from sweeps.planner import BASE, plan_sweep
from sweeps.spec import load_spec, spec_from_dict

RECIPES = Path(__file__).resolve().parents[2] / "sweeps" / "recipes.yaml"
BUDGET = {"unit": "flops", "fit_at": 1.0e12, "target": 2.0e12}


def test_the_shipped_recipes_spec_runs_five_recipes_on_the_same_seeds_against_scalerl():
    spec = load_spec(RECIPES)
    jobs = plan_sweep(spec)
    assert len(jobs) == 15
    assert [job.variant for job in jobs[:5]] == ["base", "recipe=deepseek_grpo", "recipe=dapo", "recipe=magistral",
                                                 "recipe=minimax_m1"]
    assert [job.recipe_name for job in jobs[:5]] == ["scalerl", "deepseek_grpo", "dapo", "magistral", "minimax_m1"]
    assert {job.seed for job in jobs} == {0, 1, 2}
    names = sorted(job.recipe_name for job in jobs[:5])
    for seed in (0, 1, 2):  # every recipe on every seed
        assert sorted(job.recipe_name for job in jobs if job.seed == seed) == names
    dapo = next(job for job in jobs if job.recipe_name == "dapo")
    layers = [("overrides", spec.overrides)]
    assert dapo.recipe.loss == compose_recipe(preset_path("dapo"), layers).loss  # the preset, under the overrides
    # the per-recipe overrides reach only their recipes: PipelineRL's modeled timing
    assert all(job.recipe.off_policy.get("timing") == "modeled" for job in jobs
               if job.recipe_name in ("scalerl", "magistral"))
    assert all(job.axis == BASE for job in jobs if job.recipe_name == "scalerl")


def test_a_recipes_jobs_carry_their_recipe_as_an_mlflow_tag():
    from sweeps.tracking import job_tags

    job = plan_sweep(load_spec(RECIPES))[2]
    assert job_tags(job, "parent")["scalerl.recipe"] == "dapo"


def spec(**recipes_and_keys):
    data = {"name": "r", "budget": BUDGET, "recipes": {"compare": ["scalerl", "dapo"]}}
    data.update(recipes_and_keys)
    return data


@pytest.mark.parametrize("data, message", [
    (spec(axes={"loss": "dapo"}), "recipes: a spec compares whole recipes, or runs a LOO \\(axes\\) or a scan"),
    (spec(scan={"rollout.prompts_per_batch": [4, 8]}), "or a scan, not both; move the scan"),
    (spec(base="dapo"), "base: a recipes spec names its recipes in recipes.compare"),
    (spec(recipes={"compare": ["dapo"]}), "recipes.compare: got \\['dapo'\\].*two or more recipe names"),
    (spec(recipes={"compare": ["dapo", "dapo"]}), "recipes.compare: dapo listed twice"),
    (spec(recipes={"compare": ["scalerl", "dapo"], "reference": "grpo"}), "recipes.reference: got 'grpo'.*not one of"),
    (spec(recipes={"compare": ["scalerl", "dapo"], "overrides": {"magistral": {}}}),
     "recipes.overrides.magistral: not one of recipes.compare"),
    (spec(recipes={"compare": ["scalerl", "dapo"], "bases": []}), "recipes.bases: unknown key"),
])
def test_bad_recipes_sections_are_refused_at_load(data, message):
    with pytest.raises(ConfigError, match=message):
        spec_from_dict(data, "spec.yaml")


def test_an_unknown_recipe_lists_the_presets_and_a_bad_override_names_its_recipe():
    with pytest.raises(ConfigError, match="recipes.compare \\(dapoo\\): got 'dapoo', no such preset; presets: "
                                          "scalerl, dapo"):
        plan_sweep(spec_from_dict(spec(recipes={"compare": ["scalerl", "dapoo"]}), "spec.yaml"))
    # a timing for PipelineRL given to every recipe: the PPO-off-policy ones have no such parameter
    with pytest.raises(ConfigError, match="recipes.compare \\(dapo\\): .*off_policy.*timing"):
        plan_sweep(spec_from_dict(spec(overrides={"off_policy": {"timing": "modeled"}}), "spec.yaml"))
