"""executor.slurm's cluster options (sweeps/slurm_options.py): each bad value refused in one line naming key, value
and fix; what submitit is given; what `sweep plan --verbose` shows of the batch script and the launch.

The options reaching a real batch script, and the setup lines running, are tested on the one-node cluster
(tests/sweeps/test_slurm.py)."""

import os
import sys

import pytest

from components.registry import ConfigError
from sweeps.planner import format_plan, plan_sweep
from sweeps.slurm_options import batch_script_lines, submitit_parameters
from sweeps.spec import spec_from_dict

TRL = {"engine": {"name": "trl"}, "aggregation": "token_mean", "curriculum": "uniform", "length_control": "none",
       "off_policy": {"name": "ppo_off_policy", "k": 8}}


def spec(slurm=None, engine=None, **changes):
    overrides = {**TRL, "engine": {"name": "trl", **(engine or {})}}
    data = {"name": "t", "axes": {"loss": "dapo"}, "budget": {"fit_at": 10, "target": 20}, "overrides": overrides,
            "executor": {"name": "slurm", "slurm": slurm or {}}, "output_dir": "runs/t", **changes}
    return spec_from_dict(data, "spec.yaml")


@pytest.mark.parametrize("slurm, message", [
    ({"nodes": 0}, r"executor\.slurm\.nodes: got 0, expected >= 1"),
    ({"tasks_per_node": 8}, r"executor\.slurm\.tasks_per_node: got 8, expected 1: .* set engine\.num_processes"),
    ({"constraint": "a100 && ib"}, r"executor\.slurm\.constraint: got 'a100 && ib' \(str\), expected node features"),
    ({"constraint": ""}, r"executor\.slurm\.constraint: got '' \(str\), expected node features.*\(or null\)"),
    ({"gres": "gpu:8;rm -rf"}, r"executor\.slurm\.gres: got 'gpu:8;rm -rf' \(str\), expected name\[:type\]\[:count\]"),
    ({"gres": 8}, r"executor\.slurm\.gres: got 8 \(int\), expected str"),
    ({"exclude": "node 7"}, r"executor\.slurm\.exclude: got 'node 7' \(str\), expected a node list"),
    ({"setup": ["module load cuda", ""]}, r"executor\.slurm\.setup\[1\]: got '' \(str\), expected one non-empty shell"),
    ({"setup": ["a\nb"]}, r"executor\.slurm\.setup\[0\]: got .*, expected one non-empty shell line"),
    ({"setup": ["#SBATCH --exclusive"]}, r"executor\.slurm\.setup\[0\]: .*put the option in executor\.slurm\."
                                         r"additional_parameters"),
    ({"setup": "module load cuda"}, r"executor\.slurm\.setup: got 'module load cuda' \(str\), expected"),
    ({"additional_parameters": {"--mail-type": "END"}}, r"additional_parameters\.--mail-type: not an sbatch long "
                                                        r"option's name; give it without dashes"),
    ({"additional_parameters": {"time": 60}}, r"additional_parameters\.time: set by executor\.slurm\.time_minutes; "
                                              r"use that key instead"),
    ({"additional_parameters": {"cpus_per_task": 4}}, r"additional_parameters\.cpus_per_task: set by "
                                                      r"executor\.slurm\.cpus_per_task"),
    ({"additional_parameters": {"output": "x.log"}}, r"additional_parameters\.output: submitit sets --output itself"),
    ({"additional_parameters": {"exclusive": False}}, r"additional_parameters\.exclusive: got False \(bool\), "
                                                      r"expected a one-line value .*remove the key"),
    ({"additional_parameters": {"mail-type": ["END"]}}, r"additional_parameters\.mail-type: got \['END'\] \(list\)"),
    ({"additional_parameters": {"comment": None}}, r"additional_parameters\.comment: got None"),
])
def test_a_bad_slurm_option_is_refused_in_one_line_naming_key_value_and_fix(slurm, message):
    with pytest.raises(ConfigError, match=message) as error:
        spec(slurm)
    assert "\n" not in str(error.value)


def test_the_options_reach_submitit_as_its_own_parameters():
    slurm = spec({"nodes": 2, "constraint": "a100&ib", "gres": "gpu:a100:8", "exclude": "node[07-08]",
                  "setup": ["module load cuda/12.4"], "additional_parameters": {"mail-type": "END", "exclusive": True}},
                 engine={"num_processes": 16}).executor.slurm
    assert submitit_parameters(slurm) == {
        "nodes": 2, "tasks_per_node": 1, "slurm_constraint": "a100&ib", "slurm_gres": "gpu:a100:8",
        "slurm_exclude": "node[07-08]", "slurm_setup": ["module load cuda/12.4"],
        "slurm_additional_parameters": {"mail-type": "END", "exclusive": True},
        "slurm_srun_args": ["--kill-on-bad-exit=1"]}
    assert submitit_parameters(spec().executor.slurm) == {"nodes": 1, "tasks_per_node": 1}


def test_the_batch_script_submitit_writes_holds_every_line_the_plan_shows(tmp_path, monkeypatch):
    """submitit's own sbatch text for the executor the launcher builds (no cluster needed to render it).

    submitit.AutoExecutor(cluster="slurm") refuses to build where `srun` is not on PATH; a stand-in that
    fails if run is put first on PATH, so the test needs no SLURM client (nothing here calls it)."""
    import submitit.slurm.slurm as submitit_slurm

    from sweeps.launcher import Launcher

    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "srun").write_text("#!/bin/sh\necho 'srun stand-in: not a cluster' >&2\nexit 1\n")
    (bin_dir / "srun").chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")

    planned = spec({"nodes": 2, "gpus_per_node": 8, "constraint": "a100&ib", "gres": "gpu:a100:8",
                    "exclude": "node[07-08]", "mem_gb": 800, "partition": "gpu",
                    "setup": ["module load cuda/12.4", "source /shared/venv/bin/activate"],
                    "additional_parameters": {"mail-type": "END", "exclusive": True}}, engine={"num_processes": 16})
    launcher = Launcher(planned, tmp_path / "logs")
    executor = launcher.executor._executor
    script = submitit_slurm._make_sbatch_string(command="python job.py", folder=executor.folder, **executor.parameters)
    lines = script.splitlines()
    for line in batch_script_lines(planned):
        assert line in lines, line
    assert lines.index("source /shared/venv/bin/activate") < next(i for i, x in enumerate(lines) if "srun" in x)
    assert "--kill-on-bad-exit=1" in script


def test_plan_verbose_shows_the_batch_script_and_each_nodes_launch():
    planned = spec({"nodes": 2, "gpus_per_node": 8, "constraint": "a100", "setup": ["module load cuda/12.4"]},
                   engine={"num_processes": 16, "sharding": "zero3"}, overrides={**TRL, "model": {"dtype": "bfloat16"},
                                                                              "engine": {"name": "trl",
                                                                                         "num_processes": 16,
                                                                                         "sharding": "zero3"}})
    jobs = plan_sweep(planned)
    text = format_plan(planned, jobs, verbose=True)
    assert "2 nodes x 8 cpu, 8 gpu" in text
    assert "each job's batch script (sbatch options; setup lines, run before the job):\n  #SBATCH --constraint=a100\n" \
           in text and "\n  #SBATCH --nodes=2\n" in text and "\n  module load cuda/12.4\n" in text
    assert f"{jobs[0].run_id}: {sys.executable} -m accelerate.commands.launch --use_deepspeed --zero_stage 3 " in text
    assert "--num_processes 16 --num_machines 2 --machine_rank $SLURM_NODEID --main_process_ip <first host of " \
           "SLURM_JOB_NODELIST> --main_process_port <derived from SLURM_JOB_ID> --mixed_precision bf16" in text
    assert '  accelerate config: {"distributed_type": "DEEPSPEED", "deepspeed_config": {"zero_stage": 3' in text


@pytest.mark.parametrize("slurm, engine, overrides, message", [
    ({"nodes": 2}, {"num_processes": 2}, {"engine": {"name": "native"}},
     r"executor\.slurm\.nodes: got 2, but job base runs engine native \(one process per role, on one node\); set "
     r"nodes: 1, or engine\.name trl"),
    ({"nodes": 2, "gpus_per_node": 8}, {"num_processes": 3}, None,
     r"executor\.slurm\.nodes: got 2, but job base runs engine\.num_processes 3, which does not split evenly"),
    ({"nodes": 2, "gpus_per_node": 4}, {"num_processes": 16}, None,
     r"executor\.slurm\.gpus_per_node: got 4, but job base runs engine\.num_processes 16 \(one GPU each\) on each of "
     r"2 nodes; set gpus_per_node: 8"),
    ({"cpus_per_task": 1}, {"num_processes": 2}, None,
     r"executor\.slurm\.cpus_per_task: got 1, but job base runs 2 CPU \(gloo\) processes a node with gpus_per_node 0; "
     r"set cpus_per_task: 2"),
])
def test_nodes_and_processes_that_do_not_fit_are_refused_at_plan_time(slurm, engine, overrides, message):
    if overrides is None:
        planned = spec(slurm, engine=engine)
    else:
        base = {"engine": {"name": "native"}}
        planned = spec(slurm, overrides=base)
    with pytest.raises(ConfigError, match=message):
        plan_sweep(planned)
