"""The LOO planner: a sweep spec -> the list of jobs, each a fully resolved recipe. Torch-free.

Jobs are base x seeds plus, for every axis alternative, variant x seeds; a variant differs from the
base of the same seed on exactly that axis. A scan (sweeps/scan.py) plans the same way: its reference
value is the base, every other value a variant "<key>=<value>" that differs in the scanned keys only.
A job's id is its recipe's run id (a hash of the resolved
config), so planning the same spec twice gives the same ids and the same directories.
"""

from __future__ import annotations

import dataclasses
import json
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from components import REGISTRIES
from components.registry import ConfigError, shown_key
from recipe.config import RecipeConfig, compose_data, compose_recipe, flatten_config, params_layer, run_id, to_dict
from recipe.engines.launch import Machines, accelerate_config, is_launched, launch_command, planned_machines
from sweeps.recipes import RECIPE, check_recipes
from sweeps.recipes import label as recipe_label
from sweeps.spec import BudgetSpec, SweepSpec, base_source, output_dir, resolve_base

BASE = "base"


@dataclasses.dataclass(frozen=True)
class Job:
    run_id: str
    axis: str  # "base" or the axis this variant changes
    choice: str  # a readable label of the alternative ("dapo", "fp32_head=false", ...)
    seed: int
    recipe: RecipeConfig
    run_dir: Path
    scan_key: str | None = None  # a scan's job: the scanned recipe key and this job's value of it
    scan_value: Any = None
    recipe_name: str | None = None  # a recipes sweep's job: the recipe it runs (sweeps/recipes.py)

    @property
    def variant(self) -> str:
        """The variant's name across seeds: "base" or "<axis>=<choice>"."""
        return BASE if self.axis == BASE else f"{self.axis}={self.choice}"


def choice_label(value: Any) -> str:
    """loss: dapo -> "dapo"; {name: pipeline_rl, k: 4} -> "pipeline_rl(k=4)";
    {fp32_head: false} -> "fp32_head=false"."""
    if isinstance(value, str):
        return value
    if isinstance(value, Mapping):
        params = ", ".join(f"{key}={format_value(item)}" for key, item in value.items() if key != "name")
        if "name" in value:
            return f"{value['name']}({params})" if params else str(value["name"])
        return params
    return repr(value)


def format_value(value: Any) -> str:
    return str(value).lower() if isinstance(value, bool) else str(value)


def alternatives(axis: str, value: Any) -> list[Any]:
    """An axis entry is one alternative or a list of them."""
    return list(value) if isinstance(value, (list, tuple)) else [value]


def differing_paths(first: RecipeConfig, second: RecipeConfig) -> list[str]:
    """Field paths (e.g. "loss.name", "precision.fp32_head") whose values differ."""
    a, b = flatten_config(to_dict(first)), flatten_config(to_dict(second))
    return sorted(path for path in set(a) | set(b) if a.get(path, object()) != b.get(path, object()))


def plan_sweep(spec: SweepSpec) -> list[Job]:
    """Every job of the sweep in run order: seed by seed, each seed's base first, then its variants (axes in
    spec order).

    Why seed-major: on a shared machine the compute clock drifts over a sweep (two demos on one 2-core
    machine: CPU-seconds per step of recipes with the same cost spread 0.46-0.53 in one, and
    ppo_off_policy's read 0.48 in one run and 0.52 in the next; BENCHMARKS.md, "Verdicts beyond the
    clock's tolerance"). Run recipe by recipe, a recipe's seeds run back to back and share that
    drift, which then passes for a recipe effect that seed pairing cannot remove; seed by seed, a
    recipe's runs lie apart, so drift across the sweep becomes a seed effect (paired away) and drift
    within a seed's block run-to-run noise (in the intervals).
    """
    source = base_source(spec)
    runs_dir = output_dir(spec) / "runs"
    if spec.scan:
        return finish_plan(spec, plan_scan(spec, source, runs_dir))
    if spec.recipes:
        return finish_plan(spec, plan_recipes(spec, runs_dir))
    # The overrides are composed once and every variant over them; a variant's seeds differ from it in
    # `seed` alone (its range is the spec's seeds check), so a plan is linear in jobs at a few ms each.
    overrides = [("overrides", spec.overrides)] if spec.overrides else []
    common = compose_data(source, overrides)

    def jobs_of(axis: str, label: str, recipe: RecipeConfig) -> list[Job]:
        seeded = [dataclasses.replace(recipe, seed=seed) for seed in spec.seeds]
        return [Job(identifier, axis, label, each.seed, each, runs_dir / identifier)
                for each, identifier in ((each, run_id(each)) for each in seeded)]

    base_recipe = compose_recipe(source, overrides)  # its errors name the overrides
    jobs = jobs_of(BASE, BASE, base_recipe)
    seen: dict[str, str] = {}
    for axis, entry in spec.axes.items():
        for value in alternatives(axis, entry):
            label = choice_label(value)
            path = f"axes.{axis}"
            layer = {axis: {"name": value} if axis == "engine" and isinstance(value, str) else value}
            variant = compose_recipe(source, [(path, layer)], start=common)
            if getattr(variant, axis) == getattr(base_recipe, axis):
                raise ConfigError(
                    f"{path}: {label!r} resolves to the base's own choice {getattr(base_recipe, axis)}; "
                    "a LOO variant must change the axis (remove it or pick another alternative)"
                )
            resolved = (axis, repr(getattr(variant, axis)))  # per axis: batch_filter none is not length_control none
            if resolved in seen:
                raise ConfigError(f"{path}: {label!r} is the same variant as {seen[resolved]!r}; list it once")
            seen[resolved] = label
            jobs.extend(jobs_of(axis, label, variant))
    return finish_plan(spec, jobs)


def finish_plan(spec: SweepSpec, jobs: list[Job]) -> list[Job]:
    """The checks every plan passes (cores, GPUs, one engine, faults naming variants), then seed-major order."""
    for planned in jobs:
        check_cores(spec, planned)
        check_gpus(spec, planned)
    check_engines(spec, jobs)
    check_metric(spec.budget.metric, jobs)
    variants = {planned.variant for planned in jobs}
    for variant in spec.faults:
        if variant not in variants:
            raise ConfigError(f"faults.{shown_key(variant)}: not a variant of this sweep; its variants: "
                              f"{', '.join(sorted(variants)[:10])}{', ...' if len(variants) > 10 else ''}")
    return sorted(jobs, key=lambda planned: spec.seeds.index(planned.seed))  # stable: base, then axes, per seed


def check_metric(metric: str, jobs: list[Job]) -> None:
    """budget.metric names the whole or a set every job's task evaluates (a mixture's part or downstream set)."""
    for planned in jobs:
        task = planned.recipe.task
        names = ["whole", *task.parts, *task.downstream]
        if metric not in names:
            fix = f"use one of {', '.join(names)}" if len(names) > 1 else \
                "use whole (this task has no parts: task.parts names them)"
            raise ConfigError(f"budget.metric: got {metric!r}, but {planned.variant}'s task evaluates no set of that "
                              f"name; {fix}")


def plan_recipes(spec: SweepSpec, runs_dir: Path) -> list[Job]:
    """A recipes sweep's jobs (sweeps/recipes.py): the reference x seeds as the base, then every other recipe x
    seeds. Each recipe is composed over the spec's overrides and its own; an error names the recipe."""
    recipes = check_recipes(spec.recipes)
    overrides = [("overrides", spec.overrides)] if spec.overrides else []
    jobs, seen = [], {}
    for name in recipes.names:
        source = resolve_base(name, Path(spec.root), f"recipes.compare ({name})")
        own = [(f"recipes.overrides.{name}", recipes.overrides[name])] if name in recipes.overrides else []
        try:
            recipe = compose_recipe(source, [*overrides, *own])
        except ConfigError as error:
            raise ConfigError(f"recipes.compare ({name}): {error}") from None
        identity = run_id(dataclasses.replace(recipe, seed=spec.seeds[0]))
        if identity in seen:
            raise ConfigError(f"recipes.compare: {name} gives the same recipe as {seen[identity]}; list it once")
        seen[identity] = name
        axis, shown = (BASE if name == recipes.reference else RECIPE), recipe_label(name)
        for seed in spec.seeds:
            seeded = dataclasses.replace(recipe, seed=seed)
            identifier = run_id(seeded)
            jobs.append(Job(identifier, axis, shown, seed, seeded, runs_dir / identifier, recipe_name=shown))
    return jobs


def plan_scan(spec: SweepSpec, source: Path | None, runs_dir: Path) -> list[Job]:
    """A scan's jobs (sweeps/scan.py): the reference value x seeds as the base, then every other value x seeds.

    Each value is composed over the overrides and checked by the recipe's own rules, so a value the
    recipe refuses fails here naming the key and the value; two values that resolve to one recipe are refused.
    """
    from sweeps.scan import check_scan, check_scannable, reference_index, resolve_reference

    overrides = [("overrides", spec.overrides)] if spec.overrides else []
    common = compose_data(source, overrides)
    base_flat = flatten_config(common)
    scan = check_scan(spec.scan)
    check_scannable(scan, base_flat, flatten_config(spec.overrides))
    recipes, seen = [], {}
    for index in range(len(scan.values)):
        label = scan.label(index)
        path = f"scan.{scan.key}={label}"
        recipe = compose_recipe(source, [(path, params_layer(scan.settings(index)))], start=common)  # errors name path
        identity = run_id(dataclasses.replace(recipe, seed=spec.seeds[0]))
        if identity in seen:
            raise ConfigError(f"scan.{scan.key}: {label} gives the same recipe as {seen[identity]}; list it once")
        seen[identity] = label
        recipes.append(recipe)
    scan = resolve_reference(scan, base_flat)
    reference = reference_index(scan)
    jobs = []
    for index in [reference] + [i for i in range(len(scan.values)) if i != reference]:
        axis = BASE if index == reference else scan.key
        for seed in spec.seeds:
            seeded = dataclasses.replace(recipes[index], seed=seed)
            identifier = run_id(seeded)
            jobs.append(Job(identifier, axis, scan.label(index), seed, seeded, runs_dir / identifier, scan.key,
                            scan.values[index]))
    return jobs


# Past this many training runs a sweep (or a study) is more than a researcher launches by accident: `sweep plan`
# and `sweep tune --check` say so, `sweep run` and `sweep tune` need --allow-large to start it.
LARGE_RUNS = 1_000


def size_warning(runs: int, budget: BudgetSpec, what: str) -> str | None:
    """The warning line for `runs` training runs of `budget.target` each, or None under LARGE_RUNS."""
    if runs <= LARGE_RUNS:
        return None
    return (f"warning: {runs:,} {what}, each trained to {budget.target:g} {budget.unit} ({runs * budget.target:,.0f} "
            f"in all), more than {LARGE_RUNS:,}: starting them takes --allow-large")


def check_size(runs: int, budget: BudgetSpec, what: str, allowed: bool) -> None:
    """Refuse to start more than LARGE_RUNS training runs unless --allow-large was given."""
    warning = size_warning(runs, budget, what)
    if warning is not None and not allowed:
        raise ConfigError(f"{warning.removeprefix('warning: ')}; check the spec (axes, seeds, scan values, trials) "
                          "or add it")


def check_jobs_can_run(spec: SweepSpec, jobs: list[Job]) -> list[str]:
    """The checks a job repeats where it runs (recipe.preflight: files, memory), made now; returns notes.

    Local and debug jobs run on this machine, so their files and memory are checked here (memory per
    job: this machine's / max_parallel). A SLURM job's files live on the cluster's filesystem and its
    memory is the node's: the notes name what only the job can check (and memory is checked against
    executor.slurm.mem_gb where it is set).
    """
    from recipe.preflight import (check_files, check_generation_memory, check_memory, check_mixture_task,
                                  check_pretrained_source,
                                  check_sharding_machine, check_vllm_machine, cuda_devices_present,
                                  machine_memory_bytes, recipe_paths, vllm_key)

    notes, seen = [], set()
    oversubscribed = oversubscription_note(spec)
    if oversubscribed is not None:
        notes.append(oversubscribed)
    on_gpu = cuda_devices_present()
    for job in jobs:
        if spec.executor.name == "slurm":
            mem_gb, gpus = spec.executor.slurm.mem_gb, spec.executor.slurm.gpus_per_node > 0
            if mem_gb is not None:
                check_memory(job.recipe, mem_gb * 2**30, "executor.slurm.mem_gb", gpus)
                check_generation_memory(job.recipe, mem_gb * 2**30, "executor.slurm.mem_gb", gpus)
            notes += [f"checked on the job's node, not here: {key} {path}" for key, path in recipe_paths(job.recipe)
                      if (key, path) not in seen and not seen.add((key, path))]
            key = vllm_key(job.recipe)
            if key is not None and key not in seen:
                seen.add(key)
                notes.append(f"checked on the job's node, not here: {key} needs vLLM installed there (the CUDA "
                             "build: pip install -e '.[vllm]')")
            continue
        parallel = spec.executor.local.max_parallel if spec.executor.name == "local" else 1
        available, where = machine_memory_bytes() // parallel, f"this machine's memory / executor.local.max_parallel " \
            f"({parallel})"
        check_memory(job.recipe, available, where, on_gpu)
        paths = tuple(recipe_paths(job.recipe))
        if paths not in seen:
            seen.add(paths)
            check_files(job.recipe)
        mixture = repr((job.recipe.task, job.recipe.eval.num_prompts))  # a mixture is checked once per task
        if mixture not in seen:
            seen.add(mixture)
            check_mixture_task(job.recipe)
        check_sharding_machine(job.recipe)
        check_vllm_machine(job.recipe)
        check_pretrained_source(job.recipe)
        check_generation_memory(job.recipe, available, where, on_gpu)
    return notes


def usable_cores() -> int:
    """The cores this process may run on (its CPU affinity: a container or taskset may grant fewer than exist)."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not on Linux
        return os.cpu_count() or 1


def oversubscription_note(spec: SweepSpec) -> str | None:
    """A warning when local jobs running at once ask for more cores than this machine grants, else None.

    Not an error (a machine may be meant to be shared), but it rarely pays: each trainer's idle OpenMP worker
    spins on the cores the other job needs, and even with OMP_WAIT_POLICY=PASSIVE two jobs at once on 2
    cores took 0.97x the time of one after the other, for 15% more CPU-seconds (BENCHMARKS.md, "Two jobs
    at once").
    """
    if spec.executor.name != "local":
        return None
    local = spec.executor.local
    asked, cores = local.max_parallel * local.cores_per_job, usable_cores()
    if asked <= cores:
        return None
    return (f"warning: executor.local runs {local.max_parallel} jobs x {local.cores_per_job} cores = {asked} cores "
            f"at once, but this machine grants {cores}: jobs that share cores run no faster in all than one after "
            f"another, and with OpenMP's default spinning far slower; set executor.local.max_parallel: "
            f"{max(1, cores // local.cores_per_job)}")


def check_engines(spec: SweepSpec, jobs: list[Job]) -> None:
    """One engine per sweep unless the spec allows mixing (device-seconds of two engines do not compare)."""
    engines = sorted({job.recipe.engine.name for job in jobs})
    if len(engines) > 1 and not spec.allow_mixed_engines:
        raise ConfigError(
            f"axes.engine: the sweep's jobs use engines {' and '.join(engines)}; their curves are not comparable on "
            "compute (two implementations of the same step run at different speeds). Run one engine per sweep, "
            "or set allow_mixed_engines: true to compare the engines themselves")


def check_gpus(spec: SweepSpec, job: Job) -> None:
    """A SLURM job's nodes hold its launched trl processes: engine.num_processes split evenly over
    executor.slurm.nodes (only engine trl spans nodes), a GPU per process on each node (or, with
    gpus_per_node 0, a CPU core per gloo rank; sharding needs GPUs)."""
    if spec.executor.name != "slurm":
        return
    engine, slurm = job.recipe.engine, spec.executor.slurm
    if slurm.nodes > 1 and engine.name != "trl":
        raise ConfigError(f"executor.slurm.nodes: got {slurm.nodes}, but job {job.variant} runs engine {engine.name} "
                          "(one process per role, on one node); set nodes: 1, or engine.name trl")
    if engine.num_processes % slurm.nodes:
        raise ConfigError(f"executor.slurm.nodes: got {slurm.nodes}, but job {job.variant} runs engine.num_processes "
                          f"{engine.num_processes}, which does not split evenly over them; set engine.num_processes to "
                          f"a multiple of nodes (it counts the processes of all nodes together)")
    if not is_launched(engine.num_processes, engine.sharding):
        return
    per_node = engine.num_processes // slurm.nodes
    gpus = slurm.gpus_per_node
    if per_node > gpus and (gpus or engine.sharding != "none"):
        why = "one GPU each" if engine.sharding == "none" else f"one GPU each: engine.sharding {engine.sharding}"
        on = f" on each of {slurm.nodes} nodes" if slurm.nodes > 1 else ""
        raise ConfigError(f"executor.slurm.gpus_per_node: got {gpus}, but job {job.variant} runs engine.num_processes "
                          f"{engine.num_processes} ({why}){on}; set gpus_per_node: {per_node} or lower "
                          "engine.num_processes")
    if not gpus and per_node > slurm.cpus_per_task:
        raise ConfigError(f"executor.slurm.cpus_per_task: got {slurm.cpus_per_task}, but job {job.variant} runs "
                          f"{per_node} CPU (gloo) processes a node with gpus_per_node 0; set cpus_per_task: {per_node}")


def launch_line(spec: SweepSpec, job: Job) -> str:
    """What a job runs on its node(s): in-process, or the accelerate command of a multi-process trl job
    (on SLURM, with its machines as each node's launcher fills them in), and the accelerate config it amounts to."""
    engine = job.recipe.engine
    if engine.name == "trl" and is_launched(engine.num_processes, engine.sharding):
        machines = planned_machines(spec.executor.slurm.nodes) if spec.executor.name == "slurm" else None
        command = launch_command(job.run_dir, engine.num_processes, engine.sharding, job.recipe.model.dtype,
                                 machines=machines)
        config = accelerate_config(engine.num_processes, engine.sharding, job.recipe.model.dtype,
                                   machines or Machines(1, "0", "", "<free port>"))
        return " ".join(command) + "\n  accelerate config: " + json.dumps(config)
    return f"in the job's process (engine {engine.name})"


def role_devices(recipe: RecipeConfig) -> tuple[int, int] | None:
    """(generator, trainer) devices of a job whose off-policy mode runs them as two processes, else None."""
    mode = REGISTRIES["off_policy"].build(recipe.off_policy)
    return (mode.generator_devices, mode.trainer_devices) if mode.asynchronous else None


def check_cores(spec: SweepSpec, job: Job) -> None:
    """A local PipelineRL job needs a core per device of its two roles (oversubscribed CPU jobs crawl)."""
    roles = role_devices(job.recipe)
    if spec.executor.name != "local" or roles is None:
        return
    cores = spec.executor.local.cores_per_job
    if sum(roles) > cores:
        raise ConfigError(
            f"executor.local.cores_per_job: got {cores}, but job {job.variant} runs off_policy "
            f"{job.recipe.off_policy['name']} "
            f"with {roles[0]} generator + {roles[1]} trainer cores; set cores_per_job: {sum(roles)} "
            f"(and max_parallel to the machine's cores // {sum(roles)}) or lower "
            "off_policy.generator_devices/trainer_devices"
        )


def resources(spec: SweepSpec, job: Job) -> str:
    """What one job asks for, in the executor's terms (and how a PipelineRL job splits it)."""
    executor = spec.executor
    roles = role_devices(job.recipe)
    split = f" ({roles[0]} gen + {roles[1]} train)" if roles else ""
    if executor.name == "slurm":
        slurm = executor.slurm
        gpus = f", {slurm.gpus_per_node} gpu" if slurm.gpus_per_node else ""
        nodes = f"{slurm.nodes} nodes x " if slurm.nodes > 1 else ""
        return f"{nodes}{slurm.cpus_per_task} cpu{gpus}, {slurm.time_minutes} min{split}"
    if executor.name == "local":
        cores = executor.local.cores_per_job
        return f"{cores} core{'s' if cores > 1 else ''}{split}"
    return f"in-process{split}"


def scan_lines(jobs: list[Job]) -> list[str]:
    """What a scan's plan adds: the values against the reference, and the warm starts its model shapes need."""
    scanned = [job for job in jobs if job.scan_key is not None]
    if not scanned:
        return []
    from sweeps.scan import value_label

    values = [value_label(v) for v in sorted({repr(job.scan_value): job.scan_value for job in scanned}.values(),
                                             key=lambda v: (isinstance(v, str), v if not isinstance(v, str) else 0,
                                                            str(v)))]
    reference = next(job.choice for job in scanned if job.axis == BASE)
    lines = [f"scan {scanned[0].scan_key}: {', '.join(values)}, each against the reference {reference} (the base)"]
    # The embedded model's warm start depends on the model, warm_start and task sections (recipe.warm_start):
    # a scan of the model's shape needs one per shape, built once under a lock and shared by that shape's jobs.
    shapes = {(repr(job.recipe.model), repr(dataclasses.replace(job.recipe.warm_start, cache_dir=None)),
               repr(job.recipe.task)) for job in scanned if job.recipe.model.path == "embedded"}
    if len(shapes) > 1:
        lines.append(f"warm starts: {len(shapes)}, one per model/warm-start/task setting, each built once "
                     "(or taken from the package or the cache) and shared by its jobs; `sweep status` shows a "
                     "build's progress")
    return lines


def format_plan(spec: SweepSpec, jobs: list[Job], verbose: bool = False, notes: list[str] = ()) -> str:
    """The job table `sweep plan` prints (and the notes of check_jobs_can_run)."""
    header = ("id", "axis", "choice", "seed", "engine", "resources")
    rows = [(job.run_id, job.axis, job.choice, str(job.seed), job.recipe.engine.name, resources(spec, job))
            for job in jobs]
    widths = [max(len(row[i]) for row in [header, *rows]) for i in range(len(header))]
    lines = ["  ".join(cell.ljust(width) for cell, width in zip(row, widths)).rstrip() for row in [header, *rows]]
    variants = len({job.variant for job in jobs})
    budget = spec.budget
    lines.append("")
    lines.append(
        f"{len(jobs)} jobs: {variants} variants x {len(spec.seeds)} seed(s); executor {spec.executor.name}; "
        f"train to {budget.target:g} {budget.unit}, fit on [{budget.burn_in:g}, {budget.fit_at:g}]"
        f"{' (verdicts on the whole run)' if budget.verdicts_from == 'run' else ''}; "
        f"output {output_dir(spec)}"
    )
    lines.extend(scan_lines(jobs))
    lines.extend(notes)
    if verbose:
        if spec.executor.name == "slurm":
            from sweeps.slurm_options import batch_script_lines

            lines += ["", "each job's batch script (sbatch options; setup lines, run before the job):"]
            lines += [f"  {line}" for line in batch_script_lines(spec)]
        lines.append("")
        lines.extend(f"{job.run_id}: {launch_line(spec, job)}" for job in jobs)
    return "\n".join(lines) + "\n"
