"""The SLURM options of a sweep's jobs: checked, handed to submitit, and shown by `sweep plan --verbose`.

hydra's submitit launcher's escape hatches, under executor.slurm: node features (`constraint`), generic
resources (`gres`), nodes to avoid (`exclude`), shell lines the batch script runs before the job
(`setup`: module load, environment activation) and any other sbatch option (`additional_parameters`),
plus the nodes a job spans (`nodes`, `tasks_per_node`). Each is checked at load time with one line
naming the key, the value and the fix; what a job's batch script will say is printed by the plan in
submitit's own `#SBATCH --key=value` form (sorted, values shell-quoted). Torch-free.
"""

from __future__ import annotations

import re
import shlex
from typing import Any

from components.registry import ConfigError, describe_value

# SLURM's syntaxes (sbatch(1)): a feature expression (a100&ib, [rack1|rack2], gpu*2), a comma list of
# name[:type][:count] resources, a node list with ranges (node[01-04],gpu7), a long option's name.
CONSTRAINT = re.compile(r"[A-Za-z0-9_.\-&|,\[\]()*:!]+")
GRES = re.compile(r"[A-Za-z][\w.\-]*(:[\w.\-]+)*(,[A-Za-z][\w.\-]*(:[\w.\-]+)*)*")
NODELIST = re.compile(r"[A-Za-z0-9_.\-\[\],]+")
OPTION = re.compile(r"[a-z][a-z0-9]*([-_][a-z0-9]+)*")

SYNTAX = {"constraint": (CONSTRAINT, "node features, e.g. a100 or 'a100&ib' or '[rack1|rack2]'"),
          "gres": (GRES, "name[:type][:count] resources, comma separated, e.g. gpu:a100:8"),
          "exclude": (NODELIST, "a node list, e.g. node07 or 'node[07-09],gpu3'")}

# sbatch options a spec key already sets (the fix names the key), and those submitit sets itself.
OWN_OPTIONS = {"partition": "partition", "account": "account", "qos": "qos", "time": "time_minutes",
               "cpus-per-task": "cpus_per_task", "gpus-per-node": "gpus_per_node", "mem": "mem_gb",
               "nodes": "nodes", "ntasks-per-node": "tasks_per_node", "constraint": "constraint", "gres": "gres",
               "exclude": "exclude", "signal": "signal_delay_s"}
SUBMITIT_OPTIONS = ("array", "output", "error", "open-mode", "job-name")


def check_slurm_options(slurm: Any) -> None:
    """The options of this module (executor.slurm's escape hatches and nodes), one ConfigError line per problem."""
    if slurm.nodes < 1:
        raise ConfigError(f"executor.slurm.nodes: got {slurm.nodes}, expected >= 1 (nodes per job; > 1 needs "
                          "engine trl)")
    if slurm.tasks_per_node != 1:
        raise ConfigError(f"executor.slurm.tasks_per_node: got {slurm.tasks_per_node}, expected 1: each node runs one "
                          "task, whose accelerate launcher starts that node's processes; set engine.num_processes "
                          "(the processes of all nodes together) instead")
    for key, (pattern, expected) in SYNTAX.items():
        value = getattr(slurm, key)
        if value is not None and not (isinstance(value, str) and pattern.fullmatch(value)):
            raise ConfigError(f"executor.slurm.{key}: got {describe_value(value)}, expected {expected} (or null)")
    for index, line in enumerate(slurm.setup):
        if not isinstance(line, str) or not line.strip() or "\n" in line:
            raise ConfigError(f"executor.slurm.setup[{index}]: got {describe_value(line)}, expected one non-empty "
                              "shell line, e.g. 'module load cuda/12.4' or 'source /shared/venv/bin/activate'")
        if line.lstrip().startswith("#SBATCH"):
            raise ConfigError(f"executor.slurm.setup[{index}]: got {describe_value(line)}; sbatch ignores #SBATCH "
                              "lines after the first command: put the option in executor.slurm.additional_parameters")
    for name, value in slurm.additional_parameters.items():
        check_additional_parameter(name, value)


def check_additional_parameter(name: Any, value: Any) -> None:
    """One sbatch option of additional_parameters: a long option's name and a one-line value (or true for a flag)."""
    key = f"executor.slurm.additional_parameters.{name}"
    if not (isinstance(name, str) and OPTION.fullmatch(name)):
        raise ConfigError(f"{key}: not an sbatch long option's name; give it without dashes, e.g. mail-type: END")
    option = name.replace("_", "-")
    if option in OWN_OPTIONS:
        raise ConfigError(f"{key}: set by executor.slurm.{OWN_OPTIONS[option]}; use that key instead")
    if option in SUBMITIT_OPTIONS:
        raise ConfigError(f"{key}: submitit sets --{option} itself (job arrays, logs in the sweep directory); "
                          "remove it")
    if value is True or (isinstance(value, (int, float, str)) and not isinstance(value, bool)
                         and "\n" not in str(value) and str(value).strip()):
        return
    raise ConfigError(f"{key}: got {describe_value(value)}, expected a one-line value (a string or number), or true "
                      "for a flag without value (remove the key to leave the option unset)")


def submitit_parameters(slurm: Any) -> dict[str, Any]:
    """submitit AutoExecutor.update_parameters arguments for this module's options."""
    parameters: dict[str, Any] = {"nodes": slurm.nodes, "tasks_per_node": slurm.tasks_per_node}
    for key in ("constraint", "gres", "exclude"):
        if getattr(slurm, key) is not None:
            parameters[f"slurm_{key}"] = getattr(slurm, key)
    if slurm.setup:
        parameters["slurm_setup"] = list(slurm.setup)
    if slurm.additional_parameters:
        parameters["slurm_additional_parameters"] = dict(slurm.additional_parameters)
    if slurm.nodes > 1:  # a failed node's task ends the step on every node (no rank waits out a timeout)
        parameters["slurm_srun_args"] = ["--kill-on-bad-exit=1"]
    return parameters


def sbatch_flag(key: str, value: Any) -> str:
    """One line as submitit writes it into the batch script (slurm._as_sbatch_flag)."""
    key = key.replace("_", "-")
    return f"#SBATCH --{key}" if value is True else f"#SBATCH --{key}={shlex.quote(str(value))}"


def batch_script_lines(spec: Any) -> list[str]:
    """The lines of each job's batch script the spec decides: its sbatch options, then the setup lines."""
    slurm = spec.executor.slurm
    options: dict[str, Any] = {"job-name": spec.name, "time": slurm.time_minutes, "cpus-per-task": slurm.cpus_per_task,
                               "gpus-per-node": slurm.gpus_per_node, "nodes": slurm.nodes,
                               "ntasks-per-node": slurm.tasks_per_node, "signal": f"USR2@{slurm.signal_delay_s}"}
    for key in ("partition", "account", "qos", "constraint", "gres", "exclude"):
        if getattr(slurm, key) is not None:
            options[key] = getattr(slurm, key)
    if slurm.mem_gb is not None:
        options["mem"] = f"{slurm.mem_gb}GB"
    options.update((name.replace("_", "-"), value) for name, value in slurm.additional_parameters.items())
    return [sbatch_flag(key, options[key]) for key in sorted(options)] + list(slurm.setup)
