"""Scaling scans in a spec (sweeps/scan.py): the jobs they plan, the inputs they refuse, one line each."""

import subprocess
import sys
from pathlib import Path

import pytest

from components.registry import ConfigError
from sweeps.planner import BASE, differing_paths, format_plan, plan_sweep
from sweeps.spec import load_spec, spec_from_dict

REPO = Path(__file__).resolve().parents[2]
SCAN_BATCH = REPO / "sweeps" / "scan-batch.yaml"


def scan_spec(scan, **changes):
    data = {"name": "s", "budget": {"fit_at": 10, "target": 20}, "scan": scan, "seeds": [0, 1, 2]}
    data.update(changes)
    return spec_from_dict(data, "spec.yaml")


def test_a_scan_plans_values_x_seeds_with_the_reference_as_the_shared_base():
    jobs = plan_sweep(scan_spec({"rollout.prompts_per_batch": [16, 32, 64], "reference": 32}))
    assert len(jobs) == 3 * 3
    # seed by seed, the reference (the base) first, then the other values in spec order
    assert [(job.axis, job.choice, job.seed) for job in jobs[:3]] == [
        (BASE, "32", 0), ("rollout.prompts_per_batch", "16", 0), ("rollout.prompts_per_batch", "64", 0)]
    assert [job.seed for job in jobs] == [0, 0, 0, 1, 1, 1, 2, 2, 2]
    base = {job.seed: job for job in jobs if job.axis == BASE}
    for job in jobs:
        assert job.scan_key == "rollout.prompts_per_batch"
        assert job.recipe.rollout.prompts_per_batch == job.scan_value
        expected = [] if job.axis == BASE else ["rollout.prompts_per_batch"]
        assert differing_paths(base[job.seed].recipe, job.recipe) == expected
    # the reference value is the base recipe's own value here, so its jobs are the LOO's base jobs
    loo = plan_sweep(spec_from_dict({"name": "s", "budget": {"fit_at": 10, "target": 20}, "axes": {"loss": "dapo"},
                                     "seeds": [0, 1, 2]}, "spec.yaml"))
    assert {job.run_id for job in loo if job.axis == BASE} == {job.run_id for job in base.values()}
    assert "scan rollout.prompts_per_batch: 16, 32, 64, each against the reference 32" in format_plan(
        scan_spec({"rollout.prompts_per_batch": [16, 32, 64]}), jobs)


def test_a_scan_over_replicate_is_an_aa_sweep_of_the_base_on_other_rollout_draws():
    jobs = plan_sweep(scan_spec({"replicate": [0, 1, 2]}))  # the reference: the recipe's own replicate 0
    assert [(job.variant, job.seed) for job in jobs[:3]] == [("base", 0), ("replicate=1", 0), ("replicate=2", 0)]
    base = {job.seed: job for job in jobs if job.axis == BASE}
    assert all(differing_paths(base[job.seed].recipe, job.recipe) == ([] if job.axis == BASE else ["replicate"])
               for job in jobs)
    # replicate 0 is the recipe every sweep runs: the same ids as a LOO's base, so its runs can be shared
    loo = plan_sweep(spec_from_dict({"name": "s", "budget": {"fit_at": 10, "target": 20}, "axes": {"loss": "dapo"},
                                     "seeds": [0, 1, 2]}, "spec.yaml"))
    assert {job.run_id for job in loo if job.axis == BASE} == {job.run_id for job in base.values()}


def test_the_reference_defaults_to_the_base_value_and_can_be_any_listed_value():
    jobs = plan_sweep(scan_spec({"rollout.prompts_per_batch": [64, 32]}))  # the base recipe's 32
    assert [job.choice for job in jobs if job.axis == BASE] == ["32"] * 3
    jobs = plan_sweep(scan_spec({"rollout.prompts_per_batch": [16, 32, 64], "reference": 64}))
    assert {job.recipe.rollout.prompts_per_batch for job in jobs if job.axis == BASE} == {64}


def test_g_at_a_fixed_total_batch_sets_prompts_to_total_over_g():
    jobs = plan_sweep(scan_spec({"rollout.samples_per_prompt": [4, 8, 16], "total_batch": 256}))
    got = {(job.recipe.rollout.samples_per_prompt, job.recipe.rollout.prompts_per_batch) for job in jobs}
    assert got == {(4, 64), (8, 32), (16, 16)}
    assert {job.choice for job in jobs if job.axis == BASE} == {"8"}


def test_keys_that_change_together_follow_the_scanned_key_and_each_shape_needs_its_own_warm_start():
    spec = scan_spec({"model.hidden_size": [64, 128, 256], "model.intermediate_size": [256, 512, 1024]})
    jobs = plan_sweep(spec)
    assert {(job.recipe.model.hidden_size, job.recipe.model.intermediate_size) for job in jobs} == {
        (64, 256), (128, 512), (256, 1024)}
    assert "warm starts: 3, one per model/warm-start/task setting" in format_plan(spec, jobs)
    # a scan of a key that leaves the model alone needs no warm start beyond the base's
    batch = scan_spec({"rollout.prompts_per_batch": [16, 32]})
    assert "warm starts" not in format_plan(batch, plan_sweep(batch))


@pytest.mark.parametrize("scan, message", [
    ({"rollout.prompt_per_batch": [16, 32]},
     r"^scan\.rollout\.prompt_per_batch: unknown recipe key; did you mean rollout\.prompts_per_batch"),
    ({"rollout.prompts_per_batch": [16, -1]}, r"^scan\.rollout\.prompts_per_batch=-1: rollout\.prompts_per_batch: "
                                              r"got -1, expected >= 1$"),
    ({"rollout.prompts_per_batch": [16, "many"], "reference": 16},
     r"^scan\.rollout\.prompts_per_batch=many: rollout\.prompts_per_batch: got 'many' \(str\), expected int$"),
    ({"model.hidden_size": [64, 30, 128]}, r"^scan\.model\.hidden_size=30: model\.num_heads: got 4, expected a "
                                           r"divisor of model\.hidden_size \(30\)"),
    ({"rollout.prompts_per_batch": [16, 64]}, r"^scan\.reference: missing, and the base recipe's "
                                              r"rollout\.prompts_per_batch \(32\) is not among the values"),
    ({"optimizer.lr": [0.001, 0.0010]}, r"^spec\.yaml: scan\.optimizer\.lr: \[0\.001, 0\.001\] repeats a value$"),
    ({"optimizer.lr": [1, 1.0], "reference": 1}, r"^scan\.optimizer\.lr: 1 gives the same recipe as 1; list it once$"),
    ({"rollout.prompts_per_batch": [16, 32], "reference": 8},
     r"^spec\.yaml: scan\.reference: got 8 \(int\), expected one of the values of rollout\.prompts_per_batch"),
    ({"rollout.prompts_per_batch": [32]}, r"scan\.rollout\.prompts_per_batch: one value; .* at least two$"),
    ({"rollout.prompts_per_batch": []}, r"scan\.rollout\.prompts_per_batch: got \[\] \(list\), expected a non-empty"),
    ({"rollout.prompts_per_batch": 32}, r"scan\.rollout\.prompts_per_batch: got 32 \(int\), expected a non-empty"),
    ({"rollout.prompts_per_batch": [16, {"a": 1}]}, r"\{'a': 1\} \(dict\) is not a plain value"),
    ({"seed": [1, 2], "reference": 1}, r"^scan\.seed: not scannable .* the sweep sets it"),
    ({"seeds": [1, 2], "reference": 1}, r"^scan\.seeds: unknown recipe key; did you mean seed"),
    ({"tracking.mlflow": [True, False], "reference": True}, r"^scan\.tracking\.mlflow: not scannable"),
    ({"reference": 3}, r"scan: names no recipe key"),
    ({"rollout.prompts_per_batch": [16, 32], "model.hidden_size": [64]},
     r"scan\.model\.hidden_size: 1 values, expected 2, one for each value of rollout\.prompts_per_batch"),
    ({"rollout.samples_per_prompt": [4, 8, 16], "total_batch": 100},
     r"scan\.total_batch: 100 is not divisible by rollout\.samples_per_prompt = 8, 16"),
    ({"rollout.prompts_per_batch": [16, 32], "total_batch": 256},
     r"scan\.total_batch: .* the scanned key must be rollout\.samples_per_prompt \(it is rollout\.prompts_per_batch\)"),
    ({"rollout.samples_per_prompt": [4, 8], "total_batch": True}, r"scan\.total_batch: got True \(bool\), expected"),
])
def test_bad_scan_keys_and_values_fail_at_plan_time_in_one_line(scan, message):
    with pytest.raises(ConfigError, match=message) as caught:
        plan_sweep(scan_spec(scan))
    assert "\n" not in str(caught.value)


def test_a_scan_and_axes_in_one_spec_or_a_scanned_key_in_overrides_are_refused():
    with pytest.raises(ConfigError, match=r"scan: a spec is a LOO \(axes\) or a scan, not both"):
        scan_spec({"rollout.prompts_per_batch": [16, 32]}, axes={"loss": "dapo"})
    with pytest.raises(ConfigError, match=r"^overrides\.rollout\.prompts_per_batch: the scan sets it"):
        plan_sweep(scan_spec({"rollout.prompts_per_batch": [16, 32]}, overrides={"rollout": {"prompts_per_batch": 8}}))
    with pytest.raises(ConfigError, match=r"^overrides\.rollout\.prompts_per_batch: the scan sets it"):
        plan_sweep(scan_spec({"rollout.samples_per_prompt": [4, 8], "total_batch": 64},
                             overrides={"rollout": {"prompts_per_batch": 8}}))


def test_sweep_plan_of_a_bad_scan_exits_2_with_one_line(tmp_path):
    path = tmp_path / "scan.yaml"
    path.write_text("name: s\nscan: {rollout.prompts_per_batch: [16, 0]}\nbudget: {fit_at: 10, target: 20}\n")
    result = subprocess.run([sys.executable, "-m", "sweeps.cli", "plan", str(path)], cwd=REPO, capture_output=True,
                            text=True)
    assert result.returncode == 2
    assert result.stderr == ("sweep plan: error: scan.rollout.prompts_per_batch=0: rollout.prompts_per_batch: got 0, "
                             "expected >= 1\n")


def test_the_shipped_batch_scan_plans_three_values_on_three_seeds():
    spec = load_spec(SCAN_BATCH)
    jobs = plan_sweep(spec)
    assert sorted({job.recipe.rollout.prompts_per_batch for job in jobs}) == [16, 32, 64]
    assert len(jobs) == 9 and {job.choice for job in jobs if job.axis == BASE} == {"32"}


def test_sweep_plan_power_plans_seeds_from_a_pilots_noise(tmp_path, capsys):
    import re

    from fitting.power import seeds_needed
    from reports.power import sweep_noise
    from reports.sweep_data import load_sweep
    from reports.tables import fit_sweep
    from sweeps.cli import main
    from tests.reports.test_scan import make_scan

    pilot = make_scan(tmp_path)  # a finished synthetic scan: 3 values on 3 seeds
    spec = tmp_path / "scan.yaml"
    spec.write_text(SCAN_BATCH.read_text() + f"output_dir: {tmp_path / 'new'}\n")
    assert main(["plan", str(spec), "--power", "--pilot", str(pilot)]) == 0
    text = capsys.readouterr().out
    rows = [line.split() for line in text.splitlines() if re.match(r"^[2-8]\s+[\d.]+\s", line)]
    assert [row[0] for row in rows] == ["2", "3", "4", "6", "8"]
    mde_a = [float(row[1]) for row in rows]
    assert mde_a == sorted(mde_a, reverse=True) and mde_a[-1] > 0.02  # more seeds, smaller MDE, never below the margin
    assert [int(row[5]) for row in rows] == [3 * n for n in (2, 3, 4, 6, 8)]  # jobs: 3 values x n seeds
    noise = sweep_noise(fit_sweep(load_sweep(pilot), n_boot=200))
    needed = seeds_needed(0.05, noise.quantities["A"].s, 2, margin=0.02)
    assert f"dA 0.05: {needed} seeds ({3 * needed} jobs, {3 * needed * 180:,} device_seconds)" in text
    assert "dA 0.02: never: a verdict needs an effect beyond the margin" in text
    # without a finished sweep to measure: one line, exit 2, nothing printed
    assert main(["plan", str(spec), "--power"]) == 2
    out, err = capsys.readouterr()
    assert out == "" and err.count("\n") == 1 and "holds no finished sweep to measure noise from" in err


def test_values_that_differ_past_six_digits_keep_distinct_variant_names():
    from sweeps.scan import value_label

    assert [value_label(v) for v in (5e-05, 0.0001, 1.0, 16, True)] == ["5e-05", "0.0001", "1", "16", "true"]
    assert value_label(1.0000001e-4) != value_label(1.0000002e-4)
    assert float(value_label(1.0000001e-4)) == 1.0000001e-4
