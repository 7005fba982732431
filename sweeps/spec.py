"""The sweep spec: a YAML file that says which runs to make, with what budget, where, and how.

    name: scalerl-loo             # names the sweep, its MLflow experiment and output directory
    base: scalerl                 # the built-in ScaleRL recipe, or a recipe YAML path
    axes:                         # LOO: each alternative replaces the base's choice on one axis
      loss: dapo                  #   a name, a {name: ..., param: ...} mapping, or a list of them
      precision: {fp32_head: false}
    # or, instead of axes, a scaling scan (sweeps/scan.py): one recipe key over values, each against a reference
    # scan: {rollout.prompts_per_batch: [16, 32, 64], reference: 32}
    seeds: [0]
    overrides: {max_steps: 300}   # recipe keys applied to every job (base and variants)
    budget: {unit: device_seconds, burn_in: 0, fit_at: 120, target: 240}
    executor: {name: local, local: {max_parallel: 2, cores_per_job: 1}}
    tracking: {mlflow_uri: null, experiment: null}
    output_dir: runs/scalerl-loo

Loading is strict like recipes: every problem fails before anything launches, naming the key path,
the bad value and the fix; `${...}` interpolation is refused, and a `base` that is not a recipe YAML
is named as such. Torch-free.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Dict, Literal, Optional, Tuple

from components.registry import ConfigError, describe_value, shown_key
from recipe.presets import SCALERL, looks_like_a_name, preset_names, preset_path
from recipe.config import (MAX_SEED, build_dataclass, check_no_interpolation, check_output_path, check_section,
                           load_config_file, read_yaml)
from sweeps.slurm_options import check_slurm_options

# Compute axes a run records at every evaluation point (recipe/compute accounting).
COMPUTE_UNITS = ("device_seconds", "device_hours", "flops", "samples", "tokens")
FIT_METHODS = ("default", "paper")  # fitting.fit.METHODS, kept here so the spec stays numpy-free
FIT_WEIGHTS = ("compute", "equal")  # fitting.fit.WEIGHTS
VERDICT_FITS = ("window", "run")  # reports.schema.VERDICT_FITS, kept here so the spec stays numpy-free


@dataclasses.dataclass(frozen=True)
class BudgetSpec:
    # Runs train until `target` (in `unit`); curves are fit on [burn_in, fit_at] and scored at target.
    unit: str = "device_seconds"
    burn_in: float = 0.0
    fit_at: Optional[float] = None
    target: Optional[float] = None
    # Half-width of the window around `target` whose evaluation points are averaged as "observed".
    observed_window: float = 0.05
    # How each curve is fitted (fitting/fit.py): "default", the continuous solver (C_mid continuous, A in
    # [R0, 1]); or "paper", the paper's grid (A by 0.005, C_mid on a grid derived from the fit window:
    # (first C / 15, last C x 5), which is the paper's [100, 40000] for its [1500, 8000] window).
    fit_method: str = "default"
    # Least-squares weight of each evaluation point: "compute", the compute it stands for (half-way to
    # its neighbours; all 1 on an evenly spaced schedule, the paper's), so the early, densely evaluated
    # steps do not outweigh the rest of the window; or "equal" (fitting.point_weights).
    fit_weights: str = "compute"
    # The smallest effects a verdict is made on (fitting.seeds.seed_verdicts): a compute-to-reach ratio
    # must lie beyond x min_compute_ratio (or below its inverse), dA beyond +-min_a_shift. 1.10: the CPU
    # clock reproduces a run within ~10%; with GPU timings (a device held whole) 1.0 is the plain test.
    # (fitting.seeds.MIN_COMPUTE_RATIO / MIN_A_SHIFT, written out so the spec stays numpy-free.)
    min_compute_ratio: float = 1.10
    min_a_shift: float = 0.02
    # Which fits the verdicts (and the table's A, B, C_mid) come from: "window", the fits on [burn_in,
    # fit_at] whose predictions the target scores (the paper's LOO protocol); or "run", fits on [burn_in,
    # target], every point each run observed, while the predictions at the target still come from the
    # window's fits and are scored there. A fitted ceiling is extrapolated from where its window ends, so
    # the whole run places A better (BENCHMARKS.md, "What the demo can detect").
    verdicts_from: str = "window"
    # Which pass rate the table's fits and verdicts read: "whole" (eval/pass_rate: a single task's, a mixture's
    # weighted whole), or a mixture's part or downstream set by name (eval/pass_rate/<name>; recipe/task_parts.py).
    # `sweep report --metric` reads any other afterwards.
    metric: str = "whole"


@dataclasses.dataclass(frozen=True)
class LocalExecutorSpec:
    # Jobs run side by side as local processes, each pinned to `cores_per_job` threads:
    # oversubscribed CPU jobs ran 4.8x slower on the testbed machine. Two cores by default: the
    # ScaleRL base (PipelineRL) runs a generator and a trainer process, one core each.
    max_parallel: int = 1
    cores_per_job: int = 2


@dataclasses.dataclass(frozen=True)
class SlurmExecutorSpec:
    partition: Optional[str] = None
    account: Optional[str] = None
    qos: Optional[str] = None
    gpus_per_node: int = 0
    cpus_per_task: int = 8
    mem_gb: Optional[int] = None
    time_minutes: int = 240
    array_parallelism: int = 32
    # SLURM sends USR2 this long before the time limit; the job then requeues itself and resumes from
    # its last checkpoint, at most max_requeues times.
    signal_delay_s: int = 120
    max_requeues: int = 20
    # Nodes a job spans: > 1 for engine trl only, one accelerate launcher per node, engine.num_processes (all
    # nodes' processes together) split evenly. tasks_per_node stays 1: that launcher starts its node's processes.
    nodes: int = 1
    tasks_per_node: int = 1
    # hydra's submitit launcher's escape hatches (sweeps/slurm_options.py): node features (--constraint,
    # e.g. "a100&ib"), generic resources (--gres, e.g. "gpu:a100:8"), nodes never to use (--exclude, e.g.
    # "node[07-08]"), shell lines the batch script runs before the job (module load, source venv/bin/activate),
    # and any other sbatch option ({mail-type: END, reservation: mine}).
    constraint: Optional[str] = None
    gres: Optional[str] = None
    exclude: Optional[str] = None
    setup: Tuple[str, ...] = ()
    additional_parameters: Dict[str, Any] = dataclasses.field(default_factory=dict)


@dataclasses.dataclass(frozen=True)
class ExecutorSpec:
    name: Literal["local", "slurm", "debug"] = "local"
    local: LocalExecutorSpec = dataclasses.field(default_factory=LocalExecutorSpec)
    slurm: SlurmExecutorSpec = dataclasses.field(default_factory=SlurmExecutorSpec)
    # A failed job is retried by later `sweep run` calls until it has failed this many times.
    max_attempts: int = 3
    poll_seconds: float = 2.0


@dataclasses.dataclass(frozen=True)
class TrackingSpec:
    # None: MLFLOW_TRACKING_URI if set, else sqlite:///<output_dir>/mlflow.db.
    mlflow_uri: Optional[str] = None
    # None: the sweep's name.
    experiment: Optional[str] = None


@dataclasses.dataclass(frozen=True)
class SweepSpec:
    name: str
    budget: BudgetSpec
    base: str = "scalerl"
    axes: Dict[str, Any] = dataclasses.field(default_factory=dict)
    # A scaling scan instead of axes: {<dotted recipe key>: [values], reference: v} (sweeps/scan.py).
    scan: Dict[str, Any] = dataclasses.field(default_factory=dict)
    # Whole recipes compared instead of axes: {compare: [names], reference: name, overrides: {name: keys}}
    # (sweeps/recipes.py).
    recipes: Dict[str, Any] = dataclasses.field(default_factory=dict)
    seeds: Tuple[int, ...] = (0,)
    overrides: Dict[str, Any] = dataclasses.field(default_factory=dict)
    executor: ExecutorSpec = dataclasses.field(default_factory=ExecutorSpec)
    tracking: TrackingSpec = dataclasses.field(default_factory=TrackingSpec)
    # None: runs/<name>. Relative paths are from the current directory.
    output_dir: Optional[str] = None
    # Curves from different engines are not comparable on device-seconds (two implementations of the
    # same step run at different speeds), so a sweep whose jobs use several engines (axes: {engine: trl})
    # is refused unless this says it is meant.
    allow_mixed_engines: bool = False
    # Testing aid: variant ("base", "loss=dapo", ...) -> training step at which that job crashes.
    faults: Dict[str, int] = dataclasses.field(default_factory=dict)
    # Where a relative `base` recipe path is resolved from (set to the spec file's folder).
    root: str = "."


def check_budget(budget: BudgetSpec) -> None:
    """The budget's cross-field rules (shared by sweep and tune specs)."""
    if budget.unit not in COMPUTE_UNITS:
        raise ConfigError(f"budget.unit: got {budget.unit!r}, expected one of {list(COMPUTE_UNITS)}")
    for key in ("fit_at", "target"):
        if getattr(budget, key) is None:
            raise ConfigError(f"budget.{key}: missing; runs train to budget.target and are fit up to budget.fit_at")
    if budget.burn_in < 0:
        raise ConfigError(f"budget.burn_in: got {budget.burn_in}, expected >= 0")
    if not budget.burn_in < budget.fit_at:
        raise ConfigError(f"budget.fit_at: got {budget.fit_at}, expected > burn_in ({budget.burn_in})")
    if not budget.fit_at < budget.target:
        raise ConfigError(
            f"budget.fit_at: got {budget.fit_at}, expected < target ({budget.target}): the fit must stop "
            "before the point it predicts (the paper fits on half the target budget)"
        )
    if budget.fit_method not in FIT_METHODS:
        raise ConfigError(f"budget.fit_method: got {budget.fit_method!r}, expected one of {', '.join(FIT_METHODS)}")
    if budget.fit_weights not in FIT_WEIGHTS:
        raise ConfigError(f"budget.fit_weights: got {budget.fit_weights!r}, expected one of {', '.join(FIT_WEIGHTS)}")
    if not 0 <= budget.observed_window < 1:
        raise ConfigError(f"budget.observed_window: got {budget.observed_window}, expected a fraction in [0, 1)")
    if not budget.min_compute_ratio >= 1:
        raise ConfigError(f"budget.min_compute_ratio: got {budget.min_compute_ratio}, expected >= 1 (a ratio such "
                          "as 1.10 for +-10%; 1 calls any compute difference the intervals clear)")
    if not budget.min_a_shift >= 0:
        raise ConfigError(f"budget.min_a_shift: got {budget.min_a_shift}, expected >= 0 (0 calls any dA the "
                          "intervals clear)")
    if budget.verdicts_from not in VERDICT_FITS:
        raise ConfigError(f"budget.verdicts_from: got {budget.verdicts_from!r}, expected window (fits on [burn_in, "
                          "fit_at], the paper's protocol) or run (fits on [burn_in, target], every point observed)")


SLURM_MAX_MINUTES = 366 * 24 * 60
MAX_CORES = 4096  # cores_per_job above any machine's (torch takes the thread count as a C int)
# Tracking URI schemes MLflow stores accept (a bare path is a file store).
MLFLOW_SCHEMES = ("file", "sqlite", "postgresql", "mysql", "mssql", "http", "https", "databricks")


def check_mlflow_uri(uri: str | None) -> None:
    """An MLflow tracking URI with a scheme MLflow has a store for, checked before any file is written."""
    if uri is None:
        return
    scheme = uri.split("://", 1)[0].split("+", 1)[0] if "://" in uri else ""
    if scheme and scheme not in MLFLOW_SCHEMES:
        raise ConfigError(f"tracking.mlflow_uri: scheme {scheme!r} has no MLflow store; expected one of "
                          f"{', '.join(MLFLOW_SCHEMES)} (e.g. sqlite:///runs/mlflow.db or http://host:5000), or null")


def check_seeds(seeds, key: str = "seeds") -> None:
    for seed in seeds:
        if not 0 <= seed <= MAX_SEED:
            raise ConfigError(f"{key}: got {seed}, expected seeds in [0, {MAX_SEED}] (2^32 - 1)")


MAX_NAME_BYTES = 100  # a name is a directory (a path component holds 255 bytes), a SLURM job and an MLflow experiment


def check_name(name: str) -> None:
    if not name or not name.replace("-", "").replace("_", "").replace(".", "").isalnum():
        raise ConfigError(f"name: got {name!r}, expected letters, digits, '-', '_' or '.' (it names directories)")
    if len(name.encode()) > MAX_NAME_BYTES:
        raise ConfigError(f"name: got {len(name.encode())} bytes ({name[:20]!r}...), expected at most {MAX_NAME_BYTES} "
                          "(it names the sweep's directory, its SLURM jobs and its MLflow experiment); shorten it")


def check_executor(executor: ExecutorSpec) -> None:
    """The executor's ranges (shared by sweep and tune specs)."""
    if executor.local.max_parallel < 1:
        raise ConfigError(f"executor.local.max_parallel: got {executor.local.max_parallel}, expected >= 1")
    if not 1 <= executor.local.cores_per_job <= MAX_CORES:
        raise ConfigError(f"executor.local.cores_per_job: got {executor.local.cores_per_job}, expected 1 to "
                          f"{MAX_CORES} (the cores one job's threads run on)")
    if executor.max_attempts < 1:
        raise ConfigError(f"executor.max_attempts: got {executor.max_attempts}, expected >= 1")
    if not 0 < executor.poll_seconds <= 3600:
        raise ConfigError(f"executor.poll_seconds: got {executor.poll_seconds}, expected in (0, 3600]")
    slurm = executor.slurm
    if slurm.mem_gb is not None and slurm.mem_gb < 1:
        raise ConfigError(f"executor.slurm.mem_gb: got {slurm.mem_gb}, expected >= 1 (GB per node), or null")
    if slurm.time_minutes > SLURM_MAX_MINUTES:
        raise ConfigError(f"executor.slurm.time_minutes: got {slurm.time_minutes}, expected <= {SLURM_MAX_MINUTES} "
                          "(a year); jobs requeue themselves at the limit, so a shorter one loses nothing")
    for key in ("partition", "account", "qos"):
        value = getattr(slurm, key)
        if value is not None and not (value and all(c.isalnum() or c in "_-.," for c in value)):
            raise ConfigError(f"executor.slurm.{key}: got {describe_value(value)}, expected a SLURM name (letters, "
                              "digits, '_', '-', '.', ',' between several)")
    for key in ("gpus_per_node", "cpus_per_task", "time_minutes", "array_parallelism", "signal_delay_s",
                "max_requeues"):
        minimum = 0 if key in ("gpus_per_node", "max_requeues") else 1
        if getattr(slurm, key) < minimum:
            raise ConfigError(f"executor.slurm.{key}: got {getattr(slurm, key)}, expected >= {minimum}")
    check_slurm_options(slurm)
    if slurm.signal_delay_s >= slurm.time_minutes * 60:
        raise ConfigError(f"executor.slurm.signal_delay_s: got {slurm.signal_delay_s}, expected < time_minutes * 60 "
                          f"({slurm.time_minutes * 60}): the requeue signal would arrive as the job starts")


def check_spec_values(spec: SweepSpec) -> None:
    """Cross-field rules the types cannot say."""
    from components import REGISTRIES

    check_name(spec.name)
    check_output_path("output_dir" if spec.output_dir is not None else f"output_dir (default runs/{spec.name})",
                      str(output_dir(spec)))
    check_budget(spec.budget)
    if not spec.seeds:
        raise ConfigError("seeds: empty; give at least one seed, e.g. seeds: [0]")
    if len(set(spec.seeds)) != len(spec.seeds):
        raise ConfigError(f"seeds: {list(spec.seeds)} repeats a seed")
    check_seeds(spec.seeds)
    for axis, entry in spec.axes.items():
        if axis not in (*REGISTRIES, "engine"):
            raise ConfigError(f"axes.{shown_key(axis)}: unknown axis; valid axes: {', '.join(REGISTRIES)}, engine")
        if isinstance(entry, (list, tuple)) and not entry:
            raise ConfigError(f"axes.{axis}: an empty list names no alternative; give one (e.g. {axis}: <name>) "
                              "or remove the axis")
    if spec.scan:
        from sweeps.scan import check_scan

        if spec.axes:
            raise ConfigError("scan: a spec is a LOO (axes) or a scan, not both; move the scan to a spec of its own")
        check_scan(spec.scan)
    if spec.recipes:
        from sweeps.recipes import check_recipes

        if spec.axes or spec.scan:
            raise ConfigError(f"recipes: a spec compares whole recipes, or runs a LOO (axes) or a scan, not both; "
                              f"move the {'axes' if spec.axes else 'scan'} to a spec of its own (its base: one of "
                              "the recipes)")
        check_recipes(spec.recipes)
    for variant, step in spec.faults.items():
        if not (isinstance(step, int) and not isinstance(step, bool) and step >= 0):
            raise ConfigError(f"faults.{shown_key(variant)}: got {describe_value(step)}, expected a training step >= 0")
    check_mlflow_uri(spec.tracking.mlflow_uri)
    check_executor(spec.executor)
    base_source(spec)


def with_root(data: Mapping[str, Any], source: str, root: str) -> dict[str, Any]:
    """The spec's mapping plus `root`, the folder its relative paths are read from (not a user key)."""
    if "root" in data:
        raise ConfigError(f"{source}: root: unknown key (it is set from the spec file's location)")
    return {**data, "root": root}


def spec_from_dict(data: Mapping[str, Any], source: str, root: str = ".") -> SweepSpec:
    """A checked SweepSpec from a plain mapping (interpolation refused before OmegaConf could resolve it)."""
    check_no_interpolation(data, source)
    data = with_root(data, source, root)
    try:
        if data.get("recipes") and "base" in data:
            raise ConfigError("base: a recipes spec names its recipes in recipes.compare and its reference in "
                              "recipes.reference; remove base")
        check_section(data, SweepSpec, "")
        spec: SweepSpec = build_dataclass(SweepSpec, data)
        check_spec_values(spec)
    except ConfigError as error:
        raise ConfigError(f"{source}: {error}") from None
    return spec


def read_spec_file(path: str | Path, what: str = "sweep spec", schema: type | None = None) -> dict[str, Any]:
    """A spec YAML as a plain mapping, nothing resolved: a missing file, a directory, bad YAML, a file that is
    not a spec (recipe.config.load_config_file) or an interpolation (`${...}`) is a ConfigError naming the file."""
    fields = [field.name for field in dataclasses.fields(schema or SweepSpec) if field.name != "root"]
    return load_config_file(path, what, what, fields)


def load_spec(path: str | Path) -> SweepSpec:
    """Read and check a sweep spec YAML (see the module docstring for the format)."""
    return spec_from_dict(read_spec_file(path), str(path), root=str(Path(path).resolve().parent))


def output_dir(spec: SweepSpec) -> Path:
    """The sweep directory: `output_dir`, or runs/<name>; relative paths are from the current directory."""
    return Path(spec.output_dir) if spec.output_dir is not None else Path("runs") / spec.name


def check_output_dir(spec: SweepSpec) -> None:
    """The sweep directory is new, empty, or a sweep directory of this spec (its sweep.json names this sweep).

    Anything else (a file, /dev/null, /etc, a folder of the user's, another sweep's directory) is
    refused before a file is written, so a sweep never writes into, or reads as its own, what it did
    not make. A new directory's nearest existing parent must be a writable directory.
    """
    import os

    from recipe.tracking import read_json_file

    path = output_dir(spec)
    key = "output_dir" if spec.output_dir is not None else f"output_dir (default runs/{spec.name})"
    fix = "choose a new or empty directory, or the sweep directory of this spec"
    if not path.exists():
        parent = next((p for p in path.absolute().parents if p.exists()), None)
        if parent is None or not parent.is_dir() or not os.access(parent, os.W_OK | os.X_OK):
            raise ConfigError(f"{key}: {str(path)!r} cannot be created ({parent} is not a writable directory); {fix}")
        return
    if not path.is_dir():
        raise ConfigError(f"{key}: {str(path)!r} exists and is not a directory; {fix}")
    from sweeps.state import DRIVER_LOCK_FILE

    with os.scandir(path) as entries:  # a driver's lock alone: the directory another driver is starting
        if not any(entry.name != DRIVER_LOCK_FILE for entry in entries):
            return
    # The sweep's name is in sweep.json, and in the frozen spec.yaml beside it (so a sweep directory whose
    # damaged sweep.json the user removed, as its error says to, is still recognised).
    info_path, frozen_path = path / "sweep.json", path / "spec.yaml"
    if info_path.is_file():
        name = read_json_file(info_path).get("name")
    elif frozen_path.is_file():
        name = read_spec_file(frozen_path).get("name")
    else:
        raise ConfigError(f"{key}: {str(path)!r} holds files but no sweep (no sweep.json): it is not this sweep's "
                          f"directory; {fix}")
    if name != spec.name:
        other = f"sweep {name!r}" if isinstance(name, str) and name.replace("-", "_").replace(".", "_").isidentifier() \
            else "another sweep"
        raise ConfigError(f"{key}: {str(path)!r} holds {other}, not {spec.name!r}; {fix}")


BASE_FIX = (f"a base is a preset name ({', '.join(preset_names())}) or a recipe YAML path relative to the spec "
            "file")


def base_source(spec: SweepSpec) -> Path | None:
    """None for the built-in ScaleRL recipe, a shipped preset's file (recipe/presets.py), else the recipe YAML
    (relative to the spec file).

    Checked here, where sweep and tune specs both resolve their base: the path must be a recipe
    YAML file (a mapping of recipe keys), or the error says what a base must be.
    """
    return resolve_base(spec.base, Path(spec.root), "base")


def resolve_base(base: str, root: Path, key: str) -> Path | None:
    """base_source for one base named at `key`: None (scalerl), a preset's file or the checked YAML path."""
    preset = preset_path(base)
    if base == SCALERL or preset is not None:
        return preset
    if looks_like_a_name(base) and not (root / base).exists():
        raise ConfigError(f"{key}: got {base!r}, no such preset; presets: {', '.join(preset_names())} (or a recipe "
                          "YAML path relative to the spec file)")
    path = Path(base)
    path = path if path.is_absolute() else root / path
    if path.is_dir():
        raise ConfigError(f"{key}: got {base!r}, a directory ({path}); {BASE_FIX}")
    if not path.is_file():
        raise ConfigError(f"{key}: got {base!r}, no such file ({path}); {BASE_FIX}")
    try:
        read_yaml(path)
    except ConfigError as error:
        raise ConfigError(f"{key}: got {base!r}: {error}; {BASE_FIX}") from None
    return path
