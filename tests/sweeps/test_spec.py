"""Malformed sweep specs fail before anything launches, naming the key path, the value and the fix."""

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
    (VALID.replace("name: local,", "name: kubernetes,"), r"executor\.name: got 'kubernetes' \(str\), expected one of \['local', 'slurm', 'debug'\]"),
    (VALID.replace("max_parallel: 1", "max_parallel: two"), r"executor\.local\.max_parallel: got 'two' \(str\), expected int"),
    (VALID.replace("max_parallel: 1", "max_parallel: 0"), r"executor\.local\.max_parallel: got 0, expected >= 1"),
    (VALID.replace("cores_per_job: 2", "cores: 2"), r"executor\.local\.cores: unknown key; valid keys here: max_parallel, cores_per_job"),
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
