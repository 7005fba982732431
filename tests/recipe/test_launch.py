"""How a launched trl job starts (recipe/engines/launch.py): zero3 and config-file sharding, checked values, and the
machines of a SLURM job as each node's launcher reads them from SLURM's environment."""

from __future__ import annotations

import pytest

from components.registry import ConfigError
from recipe.config import load_recipe
from recipe.engines.launch import Machines, accelerate_config, launch_command, slurm_machines
from recipe.preflight import check_files

TRL_BASE = ["engine.name=trl", "aggregation=token_mean", "curriculum=uniform", "length_control=none",
            "off_policy=ppo_off_policy", "off_policy.k=1"]


def parsed(command: list[str]):
    """accelerate's own parser over a command's arguments (after `python -m accelerate.commands.launch`)."""
    from accelerate.commands.launch import launch_command_parser

    return launch_command_parser().parse_args(command[3:])


def test_zero3_passes_deepspeed_zero_stage_3_to_accelerate_and_the_printed_config_says_the_same():
    command = launch_command("/runs/a", 8, "zero3", "bfloat16", port=29555)
    args = parsed(command)
    assert args.use_deepspeed and args.zero_stage == 3 and args.zero3_init_flag == "true"
    assert args.offload_optimizer_device == "none" and args.offload_param_device == "none"
    assert args.zero3_save_16bit_model == "true" and args.deepspeed_multinode_launcher == "standard"
    assert not args.multi_gpu and not args.use_fsdp  # accelerate refuses --multi_gpu beside a sharding backend
    assert (args.num_processes, args.num_machines, args.main_process_port, args.mixed_precision) == \
        (8, 1, 29555, "bf16")
    config = accelerate_config(8, "zero3", "bfloat16", Machines(1, "0", "", "29555"))
    assert config["distributed_type"] == "DEEPSPEED"
    assert {key: str(value).lower() for key, value in config["deepspeed_config"].items()} == {
        key: str(getattr(args, key)).lower() for key in config["deepspeed_config"]}
    assert args.training_script == "recipe.engines.trl" and args.training_script_args == ["/runs/a"]


def test_an_accelerate_config_file_is_passed_as_config_file_after_its_existence_and_syntax_are_checked(tmp_path):
    path = tmp_path / "fsdp.yaml"
    path.write_text("distributed_type: FSDP\nfsdp_config: {fsdp_version: 2}\n")
    cfg = load_recipe(None, [*TRL_BASE, f"engine.sharding={path}"])
    check_files(cfg)
    command = launch_command("/runs/a", 2, str(path), port=29555)
    args = parsed(command)
    assert args.config_file == str(path) and not args.multi_gpu and args.num_processes == 2
    config = accelerate_config(2, str(path), "float32", Machines(1, "0", "", "29555"))
    assert config["distributed_type"] == "FSDP" and config["fsdp_config"] == {"fsdp_version": 2}
    assert config["num_processes"] == 2


@pytest.mark.parametrize("content, message", [
    (None, r"engine\.sharding: got '.*missing\.yaml', no such file; give the path of a file `accelerate config` "
           r"wrote"),
    ("distributed_type: [FSDP\n", r"engine\.sharding: '.*bad\.yaml' is not YAML or JSON \(line \d\); give the path"),
    ("- FSDP\n", r"engine\.sharding: '.*bad\.yaml' holds a list, not an accelerate config"),
])
def test_a_config_file_that_is_missing_or_does_not_parse_is_refused_in_one_line(tmp_path, content, message):
    path = tmp_path / ("missing.yaml" if content is None else "bad.yaml")
    if content is not None:
        path.write_text(content)
    cfg = load_recipe(None, [*TRL_BASE, f"engine.sharding={path}"])
    with pytest.raises(ConfigError, match=message) as error:
        check_files(cfg)
    assert "\n" not in str(error.value)


@pytest.mark.parametrize("value", ["fdsp", "zero-3", "deepspeed"])
def test_a_sharding_that_is_no_name_and_no_config_file_is_refused_in_one_line(value):
    with pytest.raises(ConfigError, match=rf"engine\.sharding: got '{value}', expected one of none, fsdp, "
                                          r"zero3 or the path of an accelerate config file \(\.yaml/\.yml/\.json"):
        load_recipe(None, [*TRL_BASE, f"engine.sharding={value}"])


def test_zero3_is_refused_where_deepspeed_is_missing_before_anything_runs(tiny_overrides, tmp_path):
    """This CPU machine has no deepspeed (and cannot: ZeRO-3 shards over CUDA GPUs)."""
    import importlib.util

    from recipe.engines import train

    if importlib.util.find_spec("deepspeed") is not None:
        pytest.skip("deepspeed is installed here")
    cfg = load_recipe(None, [*tiny_overrides(), *TRL_BASE, "engine.sharding=zero3"])
    with pytest.raises(ConfigError, match=r"engine\.sharding: zero3 needs DeepSpeed, which is not installed where this "
                                          r"job runs .* cannot run on a CPU-only machine\); run it on a GPU machine "
                                          r"with `pip install deepspeed`, or set engine\.sharding fsdp or none"):
        train(cfg, tmp_path / "run", device="cpu")
    assert not (tmp_path / "run").exists()
    with pytest.raises(ConfigError, match=r"engine\.sharding: only engine trl shards a model"):
        load_recipe(None, ["engine.sharding=zero3"])


def slurm_environment(monkeypatch, nodes: int, node: int) -> None:
    """What SLURM and submitit set in a job's task (submitit's batch script exports SUBMITIT_EXECUTOR=slurm)."""
    for key, value in {"SUBMITIT_EXECUTOR": "slurm", "SLURM_JOB_ID": "4242", "SLURM_JOB_NUM_NODES": str(nodes),
                       "SLURM_NODEID": str(node), "SLURM_PROCID": str(node), "SLURM_LOCALID": "0",
                       "SLURM_NTASKS": str(nodes),
                       "SLURM_JOB_NODELIST": "gpu[03-04]" if nodes > 1 else "gpu03"}.items():
        monkeypatch.setenv(key, value)


def test_each_node_of_a_slurm_job_names_the_same_main_host_and_port_and_its_own_rank(monkeypatch):
    commands = []
    for node in (0, 1):
        slurm_environment(monkeypatch, 2, node)
        commands.append(parsed(launch_command("/runs/a", 16, port=29555 + node)))  # node 0's launcher gives a free port
    assert [args.machine_rank for args in commands] == [0, 1]
    assert {(args.num_machines, args.main_process_ip, args.main_process_port) for args in commands} == {
        (2, "gpu03", 20000 + 4242)}  # every node derives one port from the job id: no node can ask another
    assert all(args.multi_gpu and args.num_processes == 16 for args in commands)


def test_a_one_node_slurm_job_keeps_its_free_port_and_outside_slurm_there_are_no_machines(monkeypatch):
    slurm_environment(monkeypatch, 1, 0)
    args = parsed(launch_command("/runs/a", 2, port=29555))
    assert (args.num_machines, args.machine_rank, args.main_process_ip, args.main_process_port) == \
        (1, 0, "gpu03", 29555)
    monkeypatch.delenv("SUBMITIT_EXECUTOR")
    assert slurm_machines(29555) is None
    args = parsed(launch_command("/runs/a", 2, port=29555))
    assert (args.num_machines, args.machine_rank, args.main_process_ip) == (1, None, None)


def test_a_follower_node_starts_its_launcher_and_stops_it_once_node_0_marks_the_run_done(tmp_path, monkeypatch):
    """Node 1 of a 2-node job (sweeps/job.py): waits for node 0's config.yaml, launches its machine rank (which
    waits for a main host that never comes here), and stops its processes when done.json appears."""
    import threading
    import time

    import sweeps.job as job_module
    from recipe.config import to_dict
    from sweeps.state import mark_done

    monkeypatch.setattr(job_module, "FOLLOW_POLL_SECONDS", 0.2)
    cfg = load_recipe(None, [*TRL_BASE, "engine.num_processes=2"])
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    (run_dir / "config.yaml").write_text(str(to_dict(cfg)))  # only its presence matters before the rendezvous
    threading.Timer(3.0, mark_done, (run_dir, {"step": 0})).start()
    started = time.time()
    result = job_module.follow_main_node(cfg, run_dir, Machines(2, "1", "127.0.0.1", "20999"))
    assert result == {"node": "1", "returncode": result["returncode"]} and result["returncode"] != 0
    assert 3.0 <= time.time() - started < 30 and (run_dir / "launch-node1.log").is_file()
