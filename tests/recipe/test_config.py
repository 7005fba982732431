"""Recipe config: the ScaleRL base value and YAML agree, loading is strict, ids are stable."""

import dataclasses
from pathlib import Path

import pytest

from components import REGISTRIES
from components.registry import ConfigError
from recipe.config import RecipeConfig, check_section, load_recipe, resolved_yaml, run_id, to_dict
from recipe.scalerl import SCALERL

RECIPE_DIR = Path(__file__).resolve().parents[2] / "recipe"


def write(tmp_path, text):
    path = tmp_path / "recipe.yaml"
    path.write_text(text)
    return path


def test_scalerl_yaml_is_the_scalerl_value():
    assert load_recipe(RECIPE_DIR / "scalerl.yaml") == SCALERL
    assert load_recipe() == SCALERL


def test_the_base_value_is_fully_resolved_and_valid():
    check_section(to_dict(SCALERL), RecipeConfig, "", checked=REGISTRIES)
    for axis, registry in REGISTRIES.items():
        spec = getattr(SCALERL, axis)
        assert registry.check(spec, axis) == spec, f"{axis} is missing a default in SCALERL"


def test_scalerl_axis_choices_are_the_papers():
    assert SCALERL.loss == {"name": "cispo", "eps_max": 4.0, "eps_min": 0.0}
    assert SCALERL.aggregation["name"] == "prompt_mean"
    assert SCALERL.advantage_norm["name"] == "batch"
    assert SCALERL.batch_filter["name"] == "zero_variance"
    assert SCALERL.curriculum == {"name": "no_positive_resampling", "threshold": 0.9}
    assert SCALERL.length_control["name"] == "interruption"
    assert SCALERL.precision == {"name": "lm_head", "fp32_head": True}


def test_switching_a_component_takes_its_defaults_and_tuning_keeps_it(tmp_path):
    recipe = load_recipe(write(tmp_path, "loss: dapo\n"))
    assert recipe.loss == {"name": "dapo", "eps_low": 0.2, "eps_high": 0.26}
    assert load_recipe(overrides=["loss.eps_max=5"]).loss == {"name": "cispo", "eps_max": 5, "eps_min": 0.0}
    assert load_recipe(overrides=["precision.fp32_head=false"]).precision == {"name": "lm_head", "fp32_head": False}
    both = load_recipe(write(tmp_path, "loss: {name: dapo, eps_high: 0.28}\noptimizer: {lr: 3.0e-4}\n"),
                       overrides=["optimizer.warmup_steps=5"])
    assert both.loss["eps_high"] == 0.28 and both.optimizer.lr == 3e-4 and both.optimizer.warmup_steps == 5
    assert both.optimizer.weight_decay == SCALERL.optimizer.weight_decay


@pytest.mark.parametrize("text, message", [
    ("loss: cispoo\n", r"recipe\.yaml: loss: unknown loss 'cispoo'; valid choices: cispo, dapo, grpo, gspo"),
    ("loss: {name: dapo, eps_max: 4}\n",
     r"loss\.eps_max: unknown parameter of loss 'dapo'; its parameters: eps_low, eps_high"),
    ("optimizer: {lrr: 0.1}\n", r"optimizer\.lrr: unknown key; valid keys here: lr, warmup_steps"),
    ("optimiser: {lr: 0.1}\n", r"optimiser: unknown key; valid keys here: loss, aggregation"),
    ("optimizer: {lr: fast}\n", r"optimizer\.lr: got 'fast' \(str\), expected float"),
    ("rollout: {samples_per_prompt: 8.5}\n", r"rollout\.samples_per_prompt: got 8\.5 \(float\), expected int"),
    ("rollout: {samples_per_prompt: '8'}\n", r"rollout\.samples_per_prompt: got '8' \(str\), expected int"),
    ("precision: {fp32_head: 'no'}\n", r"precision\.fp32_head: got 'no' \(str\), expected bool"),
    ("loss: {eps_max: -1}\n", r"loss\.eps_max: got -1, expected > 0"),
    ("optimizer: 3\n", r"optimizer: got 3 \(int\), expected a mapping"),
    ("eval: {min_gap_steps: 0}\n", r"eval\.min_gap_steps: got 0, expected >= 1"),
    ("eval: {min_gap_steps: 30, every_steps: 20}\n",
     r"eval\.min_gap_steps: got 30, expected <= eval\.every_steps \(20\), the largest gap"),
    ("loss: [cispo]\n", r"loss: got \['cispo'\] \(list\), expected a component name"),
    ("loss: {name: [\n", r"not valid YAML"),
    ("off_policy: {timing: wallclock}\n", r"off_policy\.timing: got 'wallclock', expected 'real' or 'modeled'"),
    ("off_policy: {timing: modeled, trainer_speed: 0}\n", r"off_policy\.trainer_speed: got 0, expected in \(0, 1000\]"),
])
def test_bad_recipes_fail_with_one_message_naming_path_value_and_expectation(tmp_path, text, message):
    with pytest.raises(ConfigError, match=message):
        load_recipe(write(tmp_path, text))


def test_bad_overrides_fail_clearly():
    with pytest.raises(ConfigError, match=r"override 'loss': expected key=value"):
        load_recipe(overrides=["loss"])
    with pytest.raises(ConfigError, match=r"overrides: off_policy\.k: got 0, expected in \[1, 1024\]"):
        load_recipe(overrides=["off_policy.k=0"])


def test_modeled_pipeline_timing_needs_a_generator_that_reports_each_decode_step():
    with pytest.raises(ConfigError, match=r"off_policy\.timing: 'modeled' .* rollout\.generator 'vllm'.*"
                                          r"use rollout\.generator=torch or off_policy\.timing=real"):
        load_recipe(overrides=["off_policy.timing=modeled", "rollout.generator=vllm"])
    assert load_recipe(overrides=["off_policy.timing=modeled"]).off_policy["timing"] == "modeled"


def test_missing_file_fails_clearly(tmp_path):
    with pytest.raises(ConfigError, match="no such recipe file"):
        load_recipe(tmp_path / "absent.yaml")


def test_resolved_yaml_round_trips_to_the_same_config_and_id(tmp_path):
    recipe = load_recipe(overrides=["loss=gspo", "seed=3"])
    reloaded = load_recipe(write(tmp_path, resolved_yaml(recipe)))
    assert reloaded == recipe and run_id(reloaded) == run_id(recipe)


def test_run_id_depends_on_what_is_computed_only():
    base = run_id(SCALERL)
    assert base == run_id(load_recipe()) and len(base) == 12
    assert run_id(load_recipe(overrides=["seed=1"])) != base
    assert run_id(load_recipe(overrides=["loss.eps_max=5"])) != base
    assert run_id(load_recipe(overrides=["tracking.experiment=elsewhere"])) == base
    assert run_id(load_recipe(overrides=["warm_start.cache_dir=/elsewhere"])) == base
    assert run_id(load_recipe(overrides=["warm_start.steps=7"])) != base
    assert run_id(load_recipe(overrides=["eval.draws=per_point"])) != base
    assert run_id(load_recipe(overrides=["off_policy.timing=modeled"])) != base
    assert run_id(load_recipe(overrides=["replicate=0"])) == base  # every run before replicates existed
    assert run_id(load_recipe(overrides=["replicate=1"])) != base


def test_a_replicate_needs_the_native_engine_and_a_seed_range():
    with pytest.raises(ConfigError, match=r"replicate: got 1, but the trl engine .* use engine\.name=native"):
        load_recipe(overrides=["replicate=1", "engine.name=trl", "off_policy=ppo_off_policy"])
    with pytest.raises(ConfigError, match=r"replicate: got -1, expected in \[0, "):
        load_recipe(overrides=["replicate=-1"])


def test_a_replicate_draws_other_rollouts_from_the_same_seed():
    import torch

    from recipe.run import rollout_rngs

    def draws(**changes):
        rngs = rollout_rngs(dataclasses.replace(SCALERL, **changes), "cpu")
        return torch.rand(4, generator=rngs["torch"]).tolist() + rngs["numpy"].random(2).tolist()

    legacy = torch.rand(4, generator=torch.Generator().manual_seed(3)).tolist()
    assert draws(seed=3)[:4] == legacy  # replicate 0: the streams every run had before replicates
    assert draws(seed=3, replicate=1) == draws(seed=3, replicate=1)
    assert len({tuple(draws(seed=3, replicate=r)) for r in range(3)} | {tuple(draws(seed=4, replicate=1))}) == 4


# The phrase of the runs before the base recipe took the paper's (issue 39); their ids hashed it.
EARLIER_PHRASE = ("length_control.phrase="
                  "Okay, time is up. Let me stop thinking and formulate a final answer now.</think>")


def test_a_key_added_later_keeps_the_ids_of_runs_made_before_it():
    # eval.draws (2026-11-25) at "common" computes what every earlier run computed: the ids of 3e2f471.
    assert run_id(load_recipe(overrides=[EARLIER_PHRASE])) == "c34a635383ba"
    assert run_id(load_recipe(overrides=[EARLIER_PHRASE, "seed=3", "loss=dapo"])) == "2556771f8c6e"


def test_a_run_started_before_a_key_existed_resumes_in_its_directory(tmp_path):
    from recipe.run import prepare_run_dir

    # config.yaml as code without checkpoint.every_minutes wrote it, and with another MLflow setting: the
    # same run (same id), so its directory is taken up again; a run of another seed is not.
    text = resolved_yaml(SCALERL).replace("  every_minutes: 10.0\n", "").replace("mlflow: true", "mlflow: false")
    assert "every_minutes" not in text and text != resolved_yaml(SCALERL)
    (tmp_path / "config.yaml").write_text(text)
    prepare_run_dir(SCALERL, tmp_path)
    assert (tmp_path / "config.yaml").read_text() == text  # the record of how the run began stays
    with pytest.raises(ValueError, match="config.yaml differs"):
        prepare_run_dir(dataclasses.replace(SCALERL, seed=1), tmp_path)


def test_the_papers_interruption_phrase_gave_the_base_recipe_a_new_id():
    # A changed value is not a key added later: on a real model the phrase tokenizes differently, so
    # runs with the earlier phrase are other runs (a sweep begun before it starts its jobs afresh).
    assert run_id(SCALERL) == "76a77474debb" != run_id(load_recipe(overrides=[EARLIER_PHRASE]))


def test_config_is_frozen():
    with pytest.raises(dataclasses.FrozenInstanceError):
        SCALERL.seed = 1  # type: ignore[misc]


@pytest.mark.parametrize("text, message", [
    ("optimizer: {lr: '${oc.env:SCALERL_TEST_SECRET}'}\n", r"optimizer\.lr: got '\$\{oc\.env:SCALERL_TEST_SECRET\}'"),
    ("loss: {name: dapo, eps_high: '${loss.eps_low}'}\n", r"loss\.eps_high: got '\$\{loss\.eps_low\}'"),
    ("tracking: {experiment: 'x${oc.env:SCALERL_TEST_SECRET}'}\n", r"tracking\.experiment: got 'x\$\{oc\.env"),
    ("tracking:\n  experiment: x${oc.env:SCALERL_TEST_SECRET\n",
     r"tracking\.experiment: got 'x\$\{oc.env:SCALERL_TEST_SECRET'; interpolation is not supported"),
])
def test_interpolation_in_a_recipe_is_refused_unresolved(tmp_path, monkeypatch, text, message):
    # OmegaConf resolves on access; the refusal must come from the raw node, so the secret never shows.
    monkeypatch.setenv("SCALERL_TEST_SECRET", "s3cr3t")
    with pytest.raises(ConfigError, match=message) as error:
        load_recipe(write(tmp_path, text))
    assert "interpolation is not supported; write the value literally" in str(error.value)
    assert "s3cr3t" not in str(error.value)


def test_interpolation_in_an_override_or_a_code_layer_is_refused(monkeypatch):
    from recipe.config import compose_recipe

    monkeypatch.setenv("SCALERL_TEST_SECRET", "s3cr3t")
    value = r"'\$\{oc\.env:SCALERL_TEST_SECRET\}'"
    with pytest.raises(ConfigError, match=rf"override 'tracking\.experiment={value[1:-1]}': "
                                          rf"tracking\.experiment: got {value}; interpolation"):
        load_recipe(overrides=["tracking.experiment=${oc.env:SCALERL_TEST_SECRET}"])
    with pytest.raises(ConfigError, match=r"override 'seed=\$\{': seed: holds '\$\{'"):
        load_recipe(overrides=["seed=${"])
    # A layer built in code (a spec's overrides, a trial's parameters) is checked before OmegaConf merges it.
    with pytest.raises(ConfigError, match=r"axes\.loss: loss\.name: got '\$\{oc\.env:SCALERL_TEST_SECRET\}'"):
        compose_recipe(None, [("axes.loss", {"loss": {"name": "${oc.env:SCALERL_TEST_SECRET}"}})])


def test_a_file_that_is_not_a_recipe_is_refused_without_echoing_it(tmp_path):
    passwd = tmp_path / "passwd"
    passwd.write_text("root:x:0:0:root:/root:/bin/bash\ndaemon:x:1:1:daemon:/usr/sbin:/usr/sbin/nologin\n")
    with pytest.raises(ConfigError, match=r"passwd: not a recipe YAML \(a mapping of recipe keys: loss, ") as error:
        load_recipe(passwd)
    assert "nologin" not in str(error.value)  # the file's content is cut to the start of its first key
    spec = write(tmp_path, "name: t\nbudget: {fit_at: 1, target: 2}\n")  # a sweep spec given as a recipe
    with pytest.raises(ConfigError, match=r"not a recipe YAML .* none of its 2 top-level keys is one of them"):
        load_recipe(spec)
    with pytest.raises(ConfigError, match=r": is a directory; expected a recipe file \(a YAML file\)"):
        load_recipe(tmp_path)
    binary = tmp_path / "weights.bin"
    binary.write_bytes(b"\x00\xd0\xff\xfe" * 8)
    with pytest.raises(ConfigError, match=r"weights\.bin: not a UTF-8 text file"):
        load_recipe(binary)


def test_yaml_errors_and_tags_are_one_line():
    from recipe.config import parse_overrides

    for bad, message in [
        ("loss=[dapo", r"not valid YAML: did not find expected ',' or '\]' \(line 2, column 1\)"),
        ("loss=!!python/object/apply:os.system [ls]", r"not valid YAML: could not determine a constructor"),
    ]:
        with pytest.raises(ConfigError, match=message) as error:
            parse_overrides([bad])
        assert "\n" not in str(error.value)
