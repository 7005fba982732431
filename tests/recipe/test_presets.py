"""The published recipes shipped as presets: each loads with its sources' settings, plans, and trains a few steps
on each engine the support table says can run it (and is refused in one line naming the setting where not)."""

from __future__ import annotations

import math

import pytest

from recipe.config import ConfigError, load_recipe
from recipe.presets import preset_names, preset_path

PRESETS = [name for name in preset_names() if name != "scalerl"]
# The tiny testbed's sizes; the presets' own axes (off-policy mode, length control) stay as they are.
KEEPS_PRESET_AXES = ("off_policy", "length_control")


def preset_recipe(tiny_model_dir, name, *overrides, run_steps=4):
    from tests.conftest import tiny_override_list

    sizes = [o for o in tiny_override_list(tiny_model_dir, run_steps) if not o.startswith(KEEPS_PRESET_AXES)]
    return load_recipe(preset_path(name), [*sizes, *overrides])


def test_the_presets_are_the_four_published_recipes_in_scalerls_and_their_authors_forms():
    assert PRESETS == ["dapo", "dapo_authors", "deepseek_grpo", "deepseek_grpo_authors", "magistral", "minimax_m1",
                       "minimax_m1_authors"]


def test_each_preset_holds_its_sources_settings(tiny_model_dir):
    recipe = {name: preset_recipe(tiny_model_dir, name) for name in PRESETS}
    assert recipe["deepseek_grpo"].loss == {"name": "grpo", "eps": 0.2}
    assert recipe["deepseek_grpo"].kl_penalty == {"name": "none"}  # ScaleRL dropped DeepSeek's KL
    assert recipe["deepseek_grpo_authors"].kl_penalty == {"name": "reference", "coef": 0.001, "estimator": "k3",
                                                          "reset_every": 400}
    assert recipe["dapo"].loss["eps_high"] == 0.26 and recipe["dapo_authors"].loss["eps_high"] == 0.28
    assert recipe["dapo"].batch_filter["name"] == "zero_variance"
    assert recipe["dapo_authors"].batch_filter["name"] == "dynamic_sampling"
    assert recipe["dapo_authors"].aggregation["name"] == "token_mean"
    assert recipe["magistral"].length_control["depth"] == 0.1 and recipe["dapo"].length_control["depth"] == 1.0
    assert recipe["magistral"].off_policy["name"] == "pipeline_rl"
    assert recipe["minimax_m1"].loss == {"name": "cispo", "eps_max": 4.0, "eps_min": 0.0}
    assert recipe["minimax_m1"].precision["fp32_head"] and recipe["minimax_m1"].optimizer.beta2 == 0.95
    for name, cfg in recipe.items():
        assert cfg.curriculum["name"] == "uniform", name  # No-Positive-Resampling is ScaleRL's own
        assert cfg.model.path == str(tiny_model_dir)  # the testbed's model and task, as the ScaleRL base's


def test_a_spec_names_a_preset_as_its_base_and_an_unknown_name_lists_them(tmp_path):
    from sweeps.planner import plan_sweep
    from sweeps.spec import load_spec

    spec = tmp_path / "spec.yaml"
    spec.write_text("name: p\nbase: dapo\naxes: {loss: cispo}\nbudget: {unit: flops, fit_at: 1.0e+12, "
                    "target: 2.0e+12}\n")
    jobs = plan_sweep(load_spec(spec))
    assert [job.recipe.loss["name"] for job in jobs] == ["dapo", "cispo"]
    assert all(job.recipe.length_control["name"] == "length_penalty" for job in jobs)
    spec.write_text(spec.read_text().replace("base: dapo", "base: dapoo"))
    with pytest.raises(ConfigError, match="base: got 'dapoo', no such preset; presets: scalerl, dapo, dapo_authors"):
        plan_sweep(load_spec(spec))


def test_a_scan_runs_on_a_preset_as_its_base(tmp_path):
    from sweeps.planner import plan_sweep
    from sweeps.spec import load_spec

    spec = tmp_path / "scan.yaml"
    spec.write_text("name: s\nbase: minimax_m1\nscan: {rollout.prompts_per_batch: [16, 32], reference: 32}\n"
                    "budget: {unit: flops, fit_at: 1.0e+12, target: 2.0e+12}\n")
    jobs = plan_sweep(load_spec(spec))
    assert [job.recipe.rollout.prompts_per_batch for job in jobs] == [32, 16]
    assert all(job.recipe.optimizer.beta2 == 0.95 and job.recipe.loss["name"] == "cispo" for job in jobs)


TRL_REFUSALS = {
    "dapo_authors": "batch_filter: dynamic_sampling cannot run on engine trl",
    "minimax_m1_authors": "batch_filter: dynamic_sampling cannot run on engine trl",
    "magistral": "pipeline_rl on engine trl runs TRL's AsyncGRPOTrainer",
}


@pytest.mark.parametrize("engine", ["native", "trl"])
@pytest.mark.parametrize("name", PRESETS)
def test_each_preset_trains_a_few_steps_where_the_engine_can_run_it(tiny_model_dir, tmp_path, name, engine):
    from recipe.engines import train

    overrides = [f"engine.name={engine}", "eval.every_steps=2"]
    if engine == "trl" and name in TRL_REFUSALS:
        with pytest.raises(ConfigError, match=TRL_REFUSALS[name]):
            preset_recipe(tiny_model_dir, name, *overrides)
        return
    cfg = preset_recipe(tiny_model_dir, name, *overrides)
    records = train(cfg, tmp_path / "run", device="cpu")
    assert [r["step"] for r in records] == [0, 2, 4]
    for record in records[1:]:
        assert math.isfinite(record["train/loss"]) and math.isfinite(record["eval/pass_rate"])
    if cfg.kl_penalty["name"] == "reference":
        assert records[-1]["compute/reference_flops"] > 0
