"""The LOO planner: golden job list, one differing field per variant, stable ids, no torch."""

import re
import subprocess
import sys
from pathlib import Path

import pytest

from components.registry import ConfigError
from sweeps.planner import BASE, check_jobs_can_run, differing_paths, plan_sweep
from sweeps.spec import load_spec, spec_from_dict

REPO = Path(__file__).resolve().parents[2]
LOO = REPO / "sweeps" / "loo.yaml"

# Golden: (axis, choice) of every job of the shipped LOO spec and the field paths it changes.
GOLDEN_LOO = [
    ("base", "base", []),
    ("loss", "dapo", ["loss.eps_high", "loss.eps_low", "loss.eps_max", "loss.eps_min", "loss.name"]),
    ("aggregation", "sample_mean", ["aggregation.name"]),
    ("advantage_norm", "prompt", ["advantage_norm.name"]),
    ("batch_filter", "none", ["batch_filter.name"]),
    ("curriculum", "uniform", ["curriculum.name", "curriculum.threshold"]),
    ("length_control", "length_penalty(max_length=16, cache_length=2)",
     ["length_control.answer_budget", "length_control.cache_length", "length_control.depth",
      "length_control.max_length", "length_control.max_thinking", "length_control.min_thinking",
      "length_control.name", "length_control.phrase"]),
    ("off_policy", "ppo_off_policy(k=8)",
     ["off_policy.generator_devices", "off_policy.name", "off_policy.timing", "off_policy.trainer_devices",
      "off_policy.trainer_speed"]),
    ("precision", "fp32_head=false", ["precision.fp32_head"]),
]


def test_shipped_loo_plan_matches_the_golden_list_and_each_variant_changes_one_axis():
    spec = load_spec(LOO)
    jobs = plan_sweep(spec)
    base = {job.seed: job for job in jobs if job.axis == BASE}
    got = [(job.axis, job.choice, differing_paths(base[job.seed].recipe, job.recipe)) for job in jobs]
    assert got == [entry for _ in spec.seeds for entry in GOLDEN_LOO]
    # run order is seed by seed (each seed's base first), so a recipe's seeds do not run back to back
    # and a drifting clock cannot pass for a recipe effect (planner.plan_sweep)
    assert [job.seed for job in jobs] == [seed for seed in spec.seeds for _ in GOLDEN_LOO]
    for job in jobs:
        # every differing path lies under exactly one top-level field: the job's axis
        assert {path.split(".")[0] for path in differing_paths(base[job.seed].recipe, job.recipe)} <= {job.axis}


def test_ids_are_stable_distinct_and_name_the_run_directory():
    first, second = plan_sweep(load_spec(LOO)), plan_sweep(load_spec(LOO))
    assert [job.run_id for job in first] == [job.run_id for job in second]
    assert len({job.run_id for job in first}) == len(first)
    assert all(job.run_dir.name == job.run_id for job in first)


def spec(**changes):
    data = {"name": "t", "budget": {"fit_at": 10, "target": 20}, "axes": {"loss": "dapo"}, "seeds": [0, 1]}
    data.update(changes)
    return spec_from_dict(data, "spec.yaml")


def test_seeds_multiply_every_variant_and_overrides_reach_every_job():
    jobs = plan_sweep(spec(overrides={"max_steps": 7}, axes={"loss": ["dapo", "gspo"]}))
    assert [(job.variant, job.seed) for job in jobs] == [
        ("base", 0), ("loss=dapo", 0), ("loss=gspo", 0), ("base", 1), ("loss=dapo", 1), ("loss=gspo", 1)]
    assert {job.recipe.max_steps for job in jobs} == {7}
    assert differing_paths(jobs[0].recipe, jobs[3].recipe) == ["seed"]  # base, seed 0 and seed 1


def test_a_choice_equal_to_the_base_is_rejected():
    with pytest.raises(ConfigError, match=r"axes\.loss: 'cispo' resolves to the base's own choice"):
        plan_sweep(spec(axes={"loss": "cispo"}))
    with pytest.raises(ConfigError, match=r"axes\.precision: 'fp32_head=true' resolves to the base's own"):
        plan_sweep(spec(axes={"precision": {"fp32_head": True}}))


def test_duplicate_alternatives_and_unknown_choices_are_rejected():
    with pytest.raises(ConfigError, match=r"is the same variant as 'dapo'"):
        plan_sweep(spec(axes={"loss": ["dapo", {"name": "dapo", "eps_low": 0.2}]}))
    with pytest.raises(ConfigError, match=r"axes\.loss: loss: unknown loss 'dappo'; valid choices: cispo"):
        plan_sweep(spec(axes={"loss": "dappo"}))


def test_sweep_plan_prints_the_table_without_importing_torch():
    code = ("import sys; from sweeps.cli import main; rc = main(['plan', %r]); "
            "assert 'torch' not in sys.modules, 'torch imported'; sys.exit(rc)") % str(LOO)
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=REPO)
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    assert lines[0].split() == ["id", "axis", "choice", "seed", "engine", "resources"]
    job_lines = [line for line in lines[1:] if re.fullmatch(r"[0-9a-f]{12}", line.split(" ")[0])]
    seeds = len(load_spec(LOO).seeds)
    assert [line.split()[1] for line in job_lines] == [axis for _ in range(seeds) for axis, _, _ in GOLDEN_LOO]
    expected = f"{len(GOLDEN_LOO) * seeds} jobs: {len(GOLDEN_LOO)} variants x {seeds} seed(s); executor local"
    assert expected in result.stdout


# Shipped sweep specs; the tune specs (tune*.yaml) are loaded by tests/sweeps/test_tune_spec.py.
SWEEP_SPECS = sorted(path for path in (REPO / "sweeps").glob("*.yaml") if not path.name.startswith("tune"))


@pytest.mark.parametrize("path", SWEEP_SPECS, ids=lambda path: path.name)
def test_every_shipped_spec_loads_and_plans(path):
    spec = load_spec(path)
    jobs = plan_sweep(spec)
    # a LOO: the base and one variant per axis; a scan (sweeps/scan.py): one variant per scanned value; a recipes
    # sweep (sweeps/recipes.py): one per recipe
    variants = (len(next(iter(spec.scan.values()))) if spec.scan else len(spec.recipes["compare"]) if spec.recipes
                else 1 + len(spec.axes))
    assert jobs[0].axis == BASE and len({job.variant for job in jobs}) == variants


def test_a_local_pipeline_job_needs_a_core_per_role():
    local = {"name": "local", "local": {"max_parallel": 2, "cores_per_job": 1}}
    with pytest.raises(ConfigError, match=r"executor\.local\.cores_per_job: got 1, but job base runs off_policy "
                                          r"pipeline_rl with 1 generator \+ 1 trainer cores; set cores_per_job: 2"):
        plan_sweep(spec(executor=local))
    # The synchronous schedule fits in one core.
    assert plan_sweep(spec(executor=local, overrides={"off_policy": {"name": "ppo_off_policy"}}))



def test_local_jobs_asking_more_cores_than_the_machine_grants_get_a_warning_naming_the_fix(monkeypatch):
    from sweeps.planner import oversubscription_note

    monkeypatch.setattr("sweeps.planner.usable_cores", lambda: 2)
    crowded = spec(executor={"name": "local", "local": {"max_parallel": 2, "cores_per_job": 2}})
    note = oversubscription_note(crowded)
    assert note.startswith("warning: executor.local runs 2 jobs x 2 cores = 4 cores at once, but this machine "
                           "grants 2")
    assert note.endswith("set executor.local.max_parallel: 1")
    assert note in check_jobs_can_run(crowded, plan_sweep(crowded))
    fitting = spec(executor={"name": "local", "local": {"max_parallel": 1, "cores_per_job": 2}})
    assert oversubscription_note(fitting) is None
    assert oversubscription_note(spec(executor={"name": "debug"})) is None
    monkeypatch.setattr("sweeps.planner.usable_cores", lambda: 8)
    assert oversubscription_note(crowded) is None

# The nearest recipe to the ScaleRL base that engine trl can run (docs/engines.md).
TRL_OVERRIDES = {"engine": {"name": "trl"}, "aggregation": "token_mean", "curriculum": "uniform",
                 "length_control": "none", "off_policy": {"name": "ppo_off_policy", "k": 8}}


def test_a_sweep_mixing_engines_is_refused_unless_the_spec_allows_it():
    native_base = {"off_policy": {"name": "ppo_off_policy", "k": 8}, "aggregation": "token_mean",
                   "curriculum": "uniform", "length_control": "none"}
    with pytest.raises(ConfigError, match=r"axes\.engine: the sweep's jobs use engines native and trl; their curves "
                                          r"are not comparable on compute .* set allow_mixed_engines: true"):
        plan_sweep(spec(overrides=native_base, axes={"engine": "trl"}))
    jobs = plan_sweep(spec(overrides=native_base, axes={"engine": "trl"}, allow_mixed_engines=True))
    assert [(job.variant, job.recipe.engine.name) for job in jobs] == [
        ("base", "native"), ("engine=trl", "trl"), ("base", "native"), ("engine=trl", "trl")]


def test_a_variant_trl_cannot_run_fails_at_plan_time_naming_the_axis_and_the_fix():
    with pytest.raises(ConfigError, match=r"axes\.off_policy: off_policy: pipeline_rl on engine trl runs TRL's "
                                          r"AsyncGRPOTrainer, which generates on a vLLM server: set "
                                          r"engine.vllm_mode server"):
        plan_sweep(spec(overrides=TRL_OVERRIDES, axes={"off_policy": "pipeline_rl"}))


def test_plan_verbose_shows_the_accelerate_command_of_a_multi_gpu_trl_job():
    from sweeps.planner import format_plan

    overrides = {**TRL_OVERRIDES, "engine": {"name": "trl", "num_processes": 4}}
    slurm = {"name": "slurm", "slurm": {"gpus_per_node": 2}}
    with pytest.raises(ConfigError, match=r"executor\.slurm\.gpus_per_node: got 2, but job base runs "
                                          r"engine\.num_processes 4 \(one GPU each\); set gpus_per_node: 4"):
        plan_sweep(spec(overrides=overrides, executor=slurm))
    planned = spec(overrides=overrides, executor={"name": "slurm", "slurm": {"gpus_per_node": 4}})
    jobs = plan_sweep(planned)
    text = format_plan(planned, jobs, verbose=True)
    # A SLURM job's launch names its machines as the node's launcher fills them in (recipe.engines.launch).
    assert f"{jobs[0].run_id}: {sys.executable} -m accelerate.commands.launch --multi_gpu --num_processes 4 " \
           "--num_machines 1 --machine_rank $SLURM_NODEID --main_process_ip <first host of SLURM_JOB_NODELIST> " \
           "--main_process_port <free port> --mixed_precision no --dynamo_backend no -m recipe.engines.trl " \
           f"{jobs[0].run_dir}\n  accelerate config: " in text
    local = spec(overrides=overrides, executor={"name": "local", "local": {"cores_per_job": 4}})
    assert "--num_processes 4 --num_machines 1 --main_process_port <free port> --mixed_precision no" \
           in format_plan(local, plan_sweep(local), verbose=True)
    sharded = spec(overrides={**overrides, "engine": {"name": "trl", "num_processes": 1, "sharding": "fsdp"}},
                   executor={"name": "slurm", "slurm": {"gpus_per_node": 0}})
    with pytest.raises(ConfigError, match=r"gpus_per_node: got 0, .* \(one GPU each: engine\.sharding fsdp\)"):
        plan_sweep(sharded)
    assert "trl" in format_plan(planned, jobs).splitlines()[1].split()


def test_the_shipped_trl_loo_is_the_native_loo_on_trl_with_ppo_off_policy_8_in_place_of_pipeline_rl():
    """sweeps/loo-trl.yaml: every job of sweeps/loo.yaml but its off_policy row (PPO-off-policy-8 is its base),
    each recipe the native LOO's own with engine trl and PPO-off-policy-8."""
    import dataclasses

    native = {(job.axis, job.choice, job.seed): job.recipe for job in plan_sweep(load_spec(LOO))}
    trl = {(job.axis, job.choice, job.seed): job.recipe for job in plan_sweep(load_spec(REPO / "sweeps/loo-trl.yaml"))}
    assert set(native) - set(trl) == {("off_policy", "ppo_off_policy(k=8)", seed) for seed in load_spec(LOO).seeds}
    assert set(trl) <= set(native)
    off_policy_8 = native[("off_policy", "ppo_off_policy(k=8)", 0)].off_policy
    for key, recipe in trl.items():
        expected = native[key]
        expected = dataclasses.replace(expected, engine=dataclasses.replace(expected.engine, name="trl"),
                                       off_policy=off_policy_8)
        assert recipe == expected, key
