"""How a launched trl job starts on its node or nodes (torch-free: `sweep plan --verbose` prints it).

A trl job runs under `accelerate launch` when it has several processes (one GPU each) or shards its
model. accelerate is started by the job's own interpreter (`python -m accelerate.commands.launch`),
not a bare `accelerate` from PATH, and on a free rendezvous port, so two jobs on one node never collide.

Inside a SLURM job (submitit's SUBMITIT_EXECUTOR=slurm), the command describes the job's machines: one
launcher per node (sweeps/job.py), --num_machines from SLURM_JOB_NUM_NODES, --machine_rank from
SLURM_NODEID, --main_process_ip the first host of SLURM_JOB_NODELIST; with several nodes the port is
derived from SLURM_JOB_ID (every node must name the same one, and no node can ask another for its
free port). engine.num_processes counts the processes of all nodes together, as accelerate's does.
"""

from __future__ import annotations

import os
import socket
import sys
from dataclasses import dataclass
from pathlib import Path

from components.registry import ConfigError, describe_value

# engine.sharding -> what it passes to accelerate. fsdp: PyTorch FSDP2, every decoder layer its own
# shard unit (accelerate reads the layer class from the model's _no_split_modules), parameters
# re-sharded after each forward, checkpoints saved as shards (what TRL's resume reads back).
# zero3: DeepSpeed ZeRO stage 3 (parameters, gradients and optimizer state partitioned across ranks),
# nothing offloaded to the CPU, parameters created partitioned (zero3_init), the 16-bit weights gathered
# when a model is saved; the batch sizes and accumulation left "auto" for transformers' Trainer to fill;
# `standard` multi-node launcher: torchrun on each node, started by that node's job task (no pdsh/ssh).
# Any other value is the path of an accelerate config file (`accelerate config`), passed as --config_file.
SHARDING_FLAGS = {
    "none": [],
    "fsdp": ["--use_fsdp", "--fsdp_version", "2", "--fsdp_auto_wrap_policy", "TRANSFORMER_BASED_WRAP",
             "--fsdp_reshard_after_forward", "true", "--fsdp_state_dict_type", "SHARDED_STATE_DICT"],
    "zero3": ["--use_deepspeed", "--zero_stage", "3", "--offload_optimizer_device", "none",
              "--offload_param_device", "none", "--zero3_init_flag", "true", "--zero3_save_16bit_model", "true",
              "--deepspeed_multinode_launcher", "standard"],
}
CONFIG_SUFFIXES = (".yaml", ".yml", ".json")  # what accelerate reads as a config file


def is_config_file(sharding: str) -> bool:
    """Whether engine.sharding names an accelerate config file rather than one of SHARDING_FLAGS."""
    return sharding not in SHARDING_FLAGS


def check_sharding_value(sharding: object) -> None:
    """engine.sharding is a SHARDING_FLAGS name or a config file's path (its contents: recipe.preflight)."""
    if isinstance(sharding, str) and (sharding in SHARDING_FLAGS or sharding.lower().endswith(CONFIG_SUFFIXES)):
        return
    shown = repr(sharding) if isinstance(sharding, str) and len(sharding) <= 60 else describe_value(sharding)
    raise ConfigError(f"engine.sharding: got {shown}, expected one of {', '.join(SHARDING_FLAGS)} "
                      f"or the path of an accelerate config file ({'/'.join(CONFIG_SUFFIXES)}, from "
                      "`accelerate config`)")


def is_launched(num_processes: int, sharding: str) -> bool:
    """Whether a trl job runs under accelerate launch rather than in the job's own process."""
    return num_processes > 1 or sharding != "none"


def free_port() -> int:
    """A TCP port nothing listens on now (the OS picks it), for the processes' rendezvous."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.bind(("", 0))
        return probe.getsockname()[1]


# Ports derived from a job id: above the well-known and registered services most clusters run, below
# Linux's default ephemeral range (32768-60999), which the OS hands out to outgoing connections.
DERIVED_PORTS = (20000, 32000)


def derived_port(job_id: str) -> int:
    """The rendezvous port every node of SLURM job `job_id` computes alike (distinct for consecutive ids)."""
    low, high = DERIVED_PORTS
    return low + int("".join(c for c in job_id if c.isdigit()) or "0") % (high - low)


@dataclass(frozen=True)
class Machines:
    """The nodes of one launched job, as accelerate's --num_machines/--machine_rank/--main_process_ip/port take them."""
    count: int
    rank: str  # this node's rank, or a placeholder where the plan prints it
    main_ip: str
    port: str


def planned_machines(nodes: int) -> Machines:
    """What `sweep plan --verbose` prints for a SLURM job of `nodes` nodes: where each value comes from."""
    port = "<derived from SLURM_JOB_ID>" if nodes > 1 else "<free port>"
    return Machines(nodes, "$SLURM_NODEID", "<first host of SLURM_JOB_NODELIST>", port)


def slurm_machines(port: int | None = None) -> Machines | None:
    """This SLURM job's machines (submitit's job environment), or None outside a submitit SLURM job.

    `port`: the free port of a one-node job; with several nodes the port is derived from the job id.
    """
    if os.environ.get("SUBMITIT_EXECUTOR") != "slurm":
        return None
    import submitit

    job = submitit.JobEnvironment()
    nodes = job.num_nodes
    chosen = derived_port(job.job_id) if nodes > 1 or port is None else port
    return Machines(nodes, str(job.node), job.hostnames[0], str(chosen))


# model.dtype -> accelerate's --mixed_precision (the trainer's autocast; master weights stay as loaded).
MIXED_PRECISION = {"float32": "no", "bfloat16": "bf16", "float16": "fp16"}


def launch_command(run_dir: str | Path, num_processes: int, sharding: str = "none", dtype: str = "float32", *,
                   port: int | None = None, machines: Machines | None = None) -> list[str]:
    """accelerate starts recipe/engines/trl/ once per GPU; each process reads the recipe from run_dir/config.yaml.

    port None prints a placeholder (what `sweep plan --verbose` shows: the port is chosen at launch).
    machines None: inside a submitit SLURM job, that job's nodes (slurm_machines); elsewhere one machine.
    """
    if machines is None and port is not None:
        machines = slurm_machines(port)
    if machines is None:
        machines = Machines(1, "0", "", str(port) if port else "<free port>")
    # --multi_gpu: torchrun starts the N processes, on GPUs or (gloo) CPUs; without it accelerate starts one.
    # A config file says itself how to distribute; the flags given here take precedence over its values.
    several = ["--multi_gpu"] if (num_processes > 1 or machines.count > 1) and sharding == "none" else []
    placement = ["--machine_rank", machines.rank, "--main_process_ip", machines.main_ip] if machines.main_ip else []
    shards = ["--config_file", sharding] if is_config_file(sharding) else SHARDING_FLAGS[sharding]
    return [sys.executable, "-m", "accelerate.commands.launch", *shards, *several,
            "--num_processes", str(num_processes), "--num_machines", str(machines.count), *placement,
            "--main_process_port", machines.port, "--mixed_precision", MIXED_PRECISION[dtype], "--dynamo_backend", "no",
            "-m", "recipe.engines.trl", str(run_dir)]


def accelerate_config(num_processes: int, sharding: str, dtype: str, machines: Machines) -> dict:
    """The accelerate config (`accelerate config`'s file format) equivalent to launch_command's flags, or, for a
    config file, that file with the flags' values over it: what `sweep plan --verbose` shows a job launches with."""
    import yaml

    if is_config_file(sharding):
        config = dict(yaml.safe_load(Path(sharding).read_text()) or {}) if Path(sharding).is_file() else {}
    elif sharding == "fsdp":
        config = {"distributed_type": "FSDP", "fsdp_config": {
            "fsdp_version": 2, "fsdp_auto_wrap_policy": "TRANSFORMER_BASED_WRAP", "fsdp_reshard_after_forward": True,
            "fsdp_state_dict_type": "SHARDED_STATE_DICT"}}
    elif sharding == "zero3":
        config = {"distributed_type": "DEEPSPEED", "deepspeed_config": {
            "zero_stage": 3, "offload_optimizer_device": "none", "offload_param_device": "none",
            "zero3_init_flag": True, "zero3_save_16bit_model": True, "deepspeed_multinode_launcher": "standard"}}
    else:
        config = {"distributed_type": "MULTI_GPU" if num_processes > 1 or machines.count > 1 else "NO"}
    config.update(num_processes=num_processes, num_machines=machines.count, machine_rank=machines.rank,
                  main_process_port=machines.port, mixed_precision=MIXED_PRECISION[dtype], dynamo_backend="NO")
    if machines.main_ip:
        config["main_process_ip"] = machines.main_ip
    return config
