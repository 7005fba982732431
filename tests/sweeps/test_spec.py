"""Malformed sweep specs fail before anything launches, naming the key path, the value and the fix."""

import re
from pathlib import Path

import pytest

from components.registry import ConfigError
from sweeps.planner import plan_sweep
from sweeps.spec import load_spec

VALID = """\
name: t
axes: {loss: dapo}
budget: {unit: device_seconds, fit_at: 10, target: 20}
executor: {name: local, local: {max_parallel: 1, cores_per_job: 2}}
"""


def load(tmp_path, text):
    path = tmp_path / "spec.yaml"
    path.write_text(text)
    return plan_sweep(load_spec(path))


def test_valid_spec_plans(tmp_path):
    assert len(load(tmp_path, VALID)) == 2


@pytest.mark.parametrize("text, message", [
    (VALID.replace("loss: dapo", "losses: dapo"), r"axes\.losses: unknown axis; valid axes: loss, aggregation"),
    (VALID.replace("loss: dapo", "loss: dappo"), r"unknown loss 'dappo'; valid choices: cispo, dapo, grpo, gspo"),
    (VALID.replace("loss: dapo", "loss: cispo"), r"axes\.loss: 'cispo' resolves to the base's own choice"),
    (VALID.replace("budget: {unit: device_seconds, fit_at: 10, target: 20}\n", ""), r"budget: missing"),
    (VALID.replace("target: 20", "target: 5"), r"budget\.fit_at: got 10(\.0)?, expected < target \(5(\.0)?\)"),
    (VALID.replace("fit_at: 10, ", ""), r"budget\.fit_at: missing"),
    (VALID.replace("device_seconds", "gpu_days"), r"budget\.unit: got 'gpu_days', expected one of"),
    (VALID.replace("name: local,", "name: kubernetes,"),
     r"executor\.name: got 'kubernetes' \(str\), expected one of \['local', 'slurm', 'debug'\]"),
    (VALID.replace("max_parallel: 1", "max_parallel: two"),
     r"executor\.local\.max_parallel: got 'two' \(str\), expected int"),
    (VALID.replace("max_parallel: 1", "max_parallel: 0"), r"executor\.local\.max_parallel: got 0, expected >= 1"),
    (VALID.replace("cores_per_job: 2", "cores_per_job: 100000000000000000000"),
     r"executor\.local\.cores_per_job: got 100000000000000000000, expected 1 to 4096"),
    (VALID.replace("cores_per_job: 2", "cores: 2"),
     r"executor\.local\.cores: unknown key; valid keys here: max_parallel, cores_per_job"),
    (VALID + "seeds: []\n", r"seeds: empty"),
    (VALID + "overrides: {optimizer: {lr: fast}}\n", r"overrides: optimizer\.lr: got 'fast' \(str\), expected float"),
    (VALID + "executor2: {}\n", r"executor2: unknown key"),
    (VALID.replace("axes: {loss: dapo}", "axes: {loss: [dapo"), r"not valid YAML"),
])
def test_malformed_specs_fail_with_a_clear_message(tmp_path, text, message):
    with pytest.raises(ConfigError, match=message):
        load(tmp_path, text)


def test_missing_spec_file(tmp_path):
    with pytest.raises(ConfigError, match="no such sweep spec"):
        load_spec(tmp_path / "nope.yaml")


@pytest.mark.parametrize("text, message", [
    (VALID.replace("name: t", "name: x${oc.env:HOME}"), r"spec\.yaml: name: got 'x\$\{oc\.env:HOME\}'; interpolation "
                                                        r"is not supported; write the value literally"),
    (VALID + "overrides:\n  optimizer: {lr: '${oc.env:LR}'}\n", r"overrides\.optimizer\.lr: got '\$\{oc\.env:LR\}'"),
    (VALID + "seeds: [0, '${seed}']\n", r"seeds\[1\]: got '\$\{seed\}'"),
    (VALID + "output_dir: ${oc.env:HOME}/runs\n", r"output_dir: got '\$\{oc\.env:HOME\}/runs'"),
])
def test_interpolation_in_a_spec_is_refused_unresolved(tmp_path, text, message):
    with pytest.raises(ConfigError, match=message) as error:
        load(tmp_path, text)
    home = str(Path.home())
    assert home + "/runs" not in str(error.value) and "x" + home not in str(error.value)  # nothing resolved


def test_interpolation_in_a_spec_built_in_code_is_refused():
    from sweeps.spec import spec_from_dict

    data = {"name": "t", "budget": {"fit_at": 10, "target": 20}, "tracking": {"experiment": "${oc.env:HOME}"}}
    with pytest.raises(ConfigError, match=r"code: tracking\.experiment: got '\$\{oc\.env:HOME\}'; interpolation"):
        spec_from_dict(data, "code")


def test_base_that_is_not_a_recipe_says_what_a_base_must_be(tmp_path):
    fix = ("a base is a preset name (scalerl, dapo, dapo_authors, deepseek_grpo, deepseek_grpo_authors, magistral, "
           "minimax_m1, minimax_m1_authors) or a recipe YAML path relative to the spec file")
    (tmp_path / "passwd").write_text("root:x:0:0:root:/root:/bin/bash\ndaemon:x:1:1::/usr/sbin:/usr/sbin/nologin\n")
    with pytest.raises(ConfigError, match=r"spec\.yaml: base: got 'passwd': .*passwd: not a recipe YAML \(a mapping "
                                          r"of recipe keys: loss, .*; " + re.escape(fix)) as error:
        load(tmp_path, VALID + "base: passwd\n")
    assert "nologin" not in str(error.value)
    (tmp_path / "recipes").mkdir()
    with pytest.raises(ConfigError, match=r"base: got 'recipes', a directory \(.*recipes\); " + re.escape(fix)):
        load(tmp_path, VALID + "base: recipes\n")
    missing = r"base: got 'absent\.yaml', no such file \(.*absent\.yaml\); "
    with pytest.raises(ConfigError, match=missing + re.escape(fix)):
        load(tmp_path, VALID + "base: absent.yaml\n")
    (tmp_path / "recipe.yaml").write_text("loss: dapo\n")  # a real recipe, relative to the spec: fine
    assert len(load(tmp_path, VALID.replace("loss: dapo", "loss: gspo") + "base: recipe.yaml\n")) == 2


def test_spec_path_that_is_a_directory(tmp_path):
    with pytest.raises(ConfigError, match=r": is a directory; expected a sweep spec \(a YAML file\)"):
        load_spec(tmp_path)


def test_budget_fit_method_is_checked():
    from sweeps.spec import spec_from_dict

    data = {"name": "t", "budget": {"fit_at": 10, "target": 20, "fit_method": "grid"}}
    with pytest.raises(ConfigError, match=r"budget\.fit_method: got 'grid', expected one of default, paper"):
        spec_from_dict(data, "spec.yaml")
    assert spec_from_dict({**data, "budget": {"fit_at": 10, "target": 20, "fit_method": "paper"}},
                          "spec.yaml").budget.fit_method == "paper"


def test_budget_fit_weights_is_checked():
    from sweeps.spec import spec_from_dict

    data = {"name": "t", "budget": {"fit_at": 10, "target": 20, "fit_weights": "log"}}
    with pytest.raises(ConfigError, match=r"budget\.fit_weights: got 'log', expected one of compute, equal"):
        spec_from_dict(data, "spec.yaml")
    budget = {"fit_at": 10, "target": 20}
    assert spec_from_dict({**data, "budget": budget}, "spec.yaml").budget.fit_weights == "compute"
    assert spec_from_dict({**data, "budget": {**budget, "fit_weights": "equal"}},
                          "spec.yaml").budget.fit_weights == "equal"


def test_verdict_margins_are_checked_and_default_to_fittings():
    from fitting.seeds import MIN_A_SHIFT, MIN_COMPUTE_RATIO
    from sweeps.spec import spec_from_dict

    budget = {"fit_at": 10, "target": 20}
    spec = spec_from_dict({"name": "t", "budget": budget}, "spec.yaml")
    assert (spec.budget.min_compute_ratio, spec.budget.min_a_shift) == (MIN_COMPUTE_RATIO, MIN_A_SHIFT)
    with pytest.raises(ConfigError, match=r"budget\.min_compute_ratio: got 0\.9, expected >= 1"):
        spec_from_dict({"name": "t", "budget": {**budget, "min_compute_ratio": 0.9}}, "spec.yaml")
    with pytest.raises(ConfigError, match=r"budget\.min_a_shift: got -0\.01, expected >= 0"):
        spec_from_dict({"name": "t", "budget": {**budget, "min_a_shift": -0.01}}, "spec.yaml")
    plain = spec_from_dict({"name": "t", "budget": {**budget, "min_compute_ratio": 1, "min_a_shift": 0}}, "spec.yaml")
    assert (plain.budget.min_compute_ratio, plain.budget.min_a_shift) == (1.0, 0.0)


def test_the_fits_verdicts_come_from_are_named_and_checked():
    from sweeps.spec import spec_from_dict

    budget = {"fit_at": 10, "target": 20}
    assert spec_from_dict({"name": "t", "budget": budget}, "spec.yaml").budget.verdicts_from == "window"
    assert spec_from_dict({"name": "t", "budget": {**budget, "verdicts_from": "run"}},
                          "spec.yaml").budget.verdicts_from == "run"
    with pytest.raises(ConfigError, match=r"budget\.verdicts_from: got 'target', expected window .* or run"):
        spec_from_dict({"name": "t", "budget": {**budget, "verdicts_from": "target"}}, "spec.yaml")
