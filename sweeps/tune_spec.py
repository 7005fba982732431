"""The tune spec: a YAML file that says which recipe parameters `sweep tune` searches, for what objective.

    name: scalerl-tune               # names the study, its MLflow experiment and output directory
    base: scalerl                    # the built-in ScaleRL recipe, or a recipe YAML path
    overrides: {max_steps: 2000}     # recipe keys applied to every trial, before the trial's parameters
    seed: 0                          # the recipe seed of every trial
    space:                           # recipe key path -> its search range
      optimizer.lr: {type: float, low: 1.0e-5, high: 3.0e-4, log: true}
      loss.eps_max: {type: float, low: 2.0, high: 8.0}
      rollout.samples_per_prompt: {type: int, low: 4, high: 16, step: 4}      # G
      aggregation.name: {type: categorical, choices: [prompt_mean, sample_mean]}
    total_batch: null                # e.g. 256: samples per batch held fixed, see below
    objective: {metric: pred_at_target, direction: maximize}   # or A, or B
    budget: {unit: device_seconds, burn_in: 0, fit_at: 150, target: 300}
    trials: 12                       # trials in the study, counting pruned and failed ones
    parallelism: 1                   # trials running at once
    sampler: {name: tpe, seed: 0}    # tpe or random
    start_with: []                   # parameter sets tried first (e.g. the base recipe's values)
    pruner: {name: sigmoid_bound, min_compute_frac: 0.5}       # `none` turns pruning off
    executor: {name: local, local: {cores_per_job: 2}}         # as in sweep specs
    storage: null                    # Optuna storage URL; null: sqlite:///<output_dir>/optuna.db
    output_dir: null                 # null: runs/<name>

A trial trains its recipe until `budget.fit_at` and its objective comes from the sigmoid fit of that
curve: `pred_at_target` is the fit's pass rate at `budget.target` (the compute the study is about),
`A` its asymptote, `B` its efficiency exponent. Spending past fit_at would not change the objective.

With `total_batch: N` the batch holds N samples in every trial: a trial with G samples per prompt
(`rollout.samples_per_prompt`, which must then be in `space`) trains on rollout.prompts_per_batch =
N / G prompts, as the paper varies G at a fixed total batch (arXiv 2510.13786, its 8/16/24/32
generations per prompt at batch 768). N must be divisible by every G the space allows, and
rollout.prompts_per_batch is then set by it alone (not in `space` or `overrides`). Without it
(null), prompts per batch stay at the base's value and the batch grows with G.

Every problem fails before any trial runs, naming the key path and the fix: an unknown parameter
path, an empty or inverted range, a type that does not fit the recipe field, a value the recipe
itself refuses (each range's ends and every choice are composed into a recipe and checked).
Torch-free.
"""

from __future__ import annotations

import dataclasses
import difflib
import itertools
import math
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Dict, Iterator, List, Optional

from omegaconf import OmegaConf

from components.registry import ConfigError, describe_value
from recipe.config import AXES, RecipeConfig, check_section, compose_recipe, flatten_config, params_layer, to_dict
from sweeps.pruning import PRUNERS
from sweeps.spec import (BudgetSpec, ExecutorSpec, TrackingSpec, base_source, check_budget, check_executor,
                         check_mlflow_uri, check_name, check_output_path, output_dir, read_spec_file,
                         with_root)

OBJECTIVES = ("pred_at_target", "A", "B")
G_PATH, PROMPTS_PATH = "rollout.samples_per_prompt", "rollout.prompts_per_batch"  # total_batch couples them
DIRECTIONS = ("maximize", "minimize")
SAMPLERS = ("tpe", "random")
PARAM_TYPES = ("float", "int", "categorical")


@dataclasses.dataclass(frozen=True)
class ObjectiveSpec:
    metric: str = "pred_at_target"
    direction: str = "maximize"


@dataclasses.dataclass(frozen=True)
class SamplerSpec:
    name: str = "tpe"
    seed: int = 0


@dataclasses.dataclass(frozen=True)
class ParamSpec:
    """One dimension of the search space: a float or int range (optionally log or stepped), or choices."""

    path: str
    type: str
    low: Optional[float] = None
    high: Optional[float] = None
    log: bool = False
    step: Optional[float] = None
    choices: Optional[tuple] = None

    def values_to_check(self) -> list[Any]:
        """The values composed into a recipe at load time: both ends of a range, every choice."""
        return list(self.choices) if self.type == "categorical" else [self.low, self.high]


@dataclasses.dataclass(frozen=True)
class TuneSpec:
    name: str
    budget: BudgetSpec
    space: Dict[str, Any]
    trials: int
    base: str = "scalerl"
    overrides: Dict[str, Any] = dataclasses.field(default_factory=dict)
    seed: int = 0
    objective: ObjectiveSpec = dataclasses.field(default_factory=ObjectiveSpec)
    parallelism: int = 1
    sampler: SamplerSpec = dataclasses.field(default_factory=SamplerSpec)
    start_with: List[Any] = dataclasses.field(default_factory=list)
    pruner: Any = "sigmoid_bound"
    executor: ExecutorSpec = dataclasses.field(default_factory=ExecutorSpec)
    tracking: TrackingSpec = dataclasses.field(default_factory=TrackingSpec)
    storage: Optional[str] = None
    output_dir: Optional[str] = None
    total_batch: Optional[int] = None  # samples per batch held fixed: prompts_per_batch = total_batch / G
    # Where a relative `base` recipe path is resolved from (set to the spec file's folder).
    root: str = "."

    @property
    def params(self) -> list[ParamSpec]:
        return [parse_param(path, entry) for path, entry in self.space.items()]

    @property
    def maximize(self) -> bool:
        return self.objective.direction == "maximize"

    @property
    def faults(self) -> dict:
        return {}


def nested(path: str, value: Any) -> dict[str, Any]:
    """"optimizer.lr", 1e-4 -> {"optimizer": {"lr": 1e-4}}: a recipe layer that sets one key."""
    layer: Any = value
    for key in reversed(path.split(".")):
        layer = {key: layer}
    return layer


def coupled_params(spec: TuneSpec, params: Mapping[str, Any]) -> dict[str, Any]:
    """A trial's parameters plus what total_batch derives from them: prompts_per_batch = total_batch / G."""
    if spec.total_batch is None or G_PATH not in params:
        return dict(params)
    return {**params, PROMPTS_PATH: spec.total_batch // params[G_PATH]}


def trial_recipe(spec: TuneSpec, params: Mapping[str, Any], label: str = "trial") -> RecipeConfig:
    """The recipe a trial trains: base <- overrides <- the trial's parameters (coupled) <- the study's seed."""
    layers = [("overrides", spec.overrides)] if spec.overrides else []
    layers += [(label, params_layer(coupled_params(spec, params))), ("seed", {"seed": spec.seed})]
    return compose_recipe(base_source(spec), layers)


def _number(value: Any, key: str, integer: bool = False) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        kind = "an integer" if integer else "a finite number"
        raise ConfigError(f"{key}: got {describe_value(value)}, expected {kind}")
    if integer and value != int(value):
        raise ConfigError(f"{key}: got {value!r}, expected an integer (type: int)")
    return int(value) if integer else float(value)


def parse_param(path: str, entry: Any) -> ParamSpec:
    """One `space` entry -> ParamSpec, checking its own fields (not yet against the recipe)."""
    key = f"space.{path}"
    if not isinstance(entry, Mapping):
        raise ConfigError(f"{key}: got {describe_value(entry)}, expected a mapping like "
                          "{type: float, low: 1e-5, high: 1e-3, log: true} or {type: categorical, choices: [a, b]}")
    allowed = {"type", "low", "high", "log", "step", "choices"}
    for field in entry:
        if field not in allowed:
            raise ConfigError(f"{key}.{field}: unknown key; valid keys: {', '.join(sorted(allowed))}")
    kind = entry.get("type")
    if kind not in PARAM_TYPES:
        raise ConfigError(f"{key}.type: got {kind!r}, expected one of {', '.join(PARAM_TYPES)}")
    if kind == "categorical":
        return parse_categorical(path, key, entry)
    return parse_range(path, key, kind, entry)


def parse_categorical(path: str, key: str, entry: Mapping) -> ParamSpec:
    """A `type: categorical` entry: a non-empty list of distinct plain values, nothing else."""
    for field in ("low", "high", "log", "step"):
        if field in entry:
            raise ConfigError(f"{key}.{field}: a categorical parameter takes only `choices`")
    choices = entry.get("choices")
    if not isinstance(choices, (list, tuple)) or not choices:
        raise ConfigError(f"{key}.choices: got {describe_value(choices)}, expected a non-empty list of values")
    for choice in choices:
        if not (choice is None or isinstance(choice, (str, int, float, bool))):
            raise ConfigError(f"{key}.choices: {describe_value(choice)} is not a plain value (str, number, bool)")
    if len({repr(choice) for choice in choices}) != len(choices):
        raise ConfigError(f"{key}.choices: {list(choices)} repeats a value")
    return ParamSpec(path, "categorical", choices=tuple(choices))


def parse_range(path: str, key: str, kind: str, entry: Mapping) -> ParamSpec:
    """A `type: int` or `float` entry: low < high, an optional log scale (low > 0) or step."""
    if "choices" in entry:
        raise ConfigError(f"{key}.choices: a {kind} range takes low/high, not choices (or use type: categorical)")
    integer = kind == "int"
    for field in ("low", "high"):
        if field not in entry:
            raise ConfigError(f"{key}.{field}: missing; a {kind} parameter needs low and high")
    low, high = _number(entry["low"], f"{key}.low", integer), _number(entry["high"], f"{key}.high", integer)
    if not low < high:
        raise ConfigError(f"{key}: empty range low={low!r} >= high={high!r}; give low < high "
                          "(to fix a value, put it in `overrides` instead)")
    log = entry.get("log", False)
    if not isinstance(log, bool):
        raise ConfigError(f"{key}.log: got {describe_value(log)}, expected true or false")
    if log and low <= 0:
        raise ConfigError(f"{key}.low: got {low!r}, a log range needs low > 0")
    step = entry.get("step")
    if step is not None:
        step = _number(step, f"{key}.step", integer)
        if log:
            raise ConfigError(f"{key}.step: a log range cannot have a step (Optuna samples log ranges continuously)")
        if not 0 < step <= high - low:
            raise ConfigError(f"{key}.step: got {step!r}, expected 0 < step <= high - low ({high - low!r})")
    return ParamSpec(path, kind, low, high, log, step)


def check_param_against_recipe(param: ParamSpec, base_flat: Mapping[str, Any], spec: TuneSpec) -> None:
    """The path must name a recipe key, the type must fit its value, and the recipe must accept the values."""
    key = f"space.{param.path}"
    if param.path not in base_flat:
        close = difflib.get_close_matches(param.path, list(base_flat), n=3, cutoff=0.6)
        hint = f"; did you mean {', '.join(close)}?" if close else \
            "; `sweep components` lists each axis's parameters and recipe/scalerl.yaml every recipe key"
        raise ConfigError(f"{key}: unknown parameter path (not a key of the base recipe){hint}")
    if param.path.split(".")[0] in ("tracking", "seed") or param.path == "warm_start.cache_dir":
        raise ConfigError(f"{key}: not tunable (it does not change what a run computes); remove it from space")
    current = base_flat[param.path]
    if param.type != "categorical":
        if isinstance(current, bool) or not isinstance(current, (int, float)):
            raise ConfigError(f"{key}.type: {param.type} does not fit the recipe's value {describe_value(current)}; "
                              "use type: categorical with choices")
        if isinstance(current, int) and param.type == "float":
            raise ConfigError(f"{key}.type: the recipe key holds an integer ({current!r}); use type: int")
    axis = param.path.split(".")[0]
    for value in param.values_to_check():
        try:
            recipe = trial_recipe(spec, {param.path: value}, label=f"{key}={value!r}")
        except ConfigError as error:
            raise ConfigError(f"{key}: the recipe refuses {value!r}: {error}") from None
        check_trial_cores(spec, recipe, f"{param.path}={value!r}")
    if axis in AXES and param.path != f"{axis}.name" and f"{axis}.name" in spec.space:
        raise ConfigError(f"{key}: {axis}.name is also tuned; a parameter of one {axis} component does not "
                          f"carry over to another: tune {axis}.name or its parameters, not both")


def check_trial_cores(spec: TuneSpec, recipe: RecipeConfig, label: str) -> None:
    """A local trial must get a core per process it runs (see sweeps.planner.check_cores)."""
    from sweeps.planner import Job, check_cores

    check_cores(spec, Job("", "trial", label, spec.seed, recipe, Path(".")))


def param_values(param: ParamSpec) -> Iterator[Any]:
    """Every value an int or categorical parameter can take, lazily (a range of G up to 10^8 is never
    listed: the checks below stop at the first value that matters)."""
    if param.type == "categorical":
        yield from param.choices
        return
    value, step = int(param.low), int(param.step or 1)
    while value <= param.high:
        yield value
        value += step


def divisors(total: int) -> list[int]:
    """The divisors of total, ascending, in O(sqrt(total)) steps."""
    small = [d for d in range(1, math.isqrt(total) + 1) if total % d == 0]
    return sorted(set(small + [total // d for d in small]))


def check_total_batch(spec: TuneSpec, params: list[ParamSpec]) -> None:
    """total_batch needs G in the space, owns prompts_per_batch, and must be divisible by every G."""
    total = spec.total_batch
    if total is None:
        return
    if total < 2:
        raise ConfigError(f"total_batch: got {total}, expected an integer >= 2 (samples per batch), or null")
    if PROMPTS_PATH in spec.space:
        raise ConfigError(f"space.{PROMPTS_PATH}: total_batch sets it (total_batch / G); remove it from space, "
                          "or remove total_batch")
    if PROMPTS_PATH in flatten_config(spec.overrides):
        raise ConfigError(f"overrides.{PROMPTS_PATH}: total_batch sets it (total_batch / G); remove it from "
                          "overrides, or remove total_batch")
    g = next((param for param in params if param.path == G_PATH), None)
    if g is None:
        raise ConfigError(f"total_batch: holds prompts x G at {total} as G varies, but {G_PATH} is not in space; "
                          "add it to space, or remove total_batch")
    if g.type == "float":
        return  # refused by the recipe check: G is an integer
    values = (v for v in param_values(g) if isinstance(v, int) and not isinstance(v, bool))
    bad = list(itertools.islice((v for v in values if v <= 0 or total % v), 5))
    if bad:
        ints = [] if g.type == "int" else [v for v in g.choices if isinstance(v, int)]
        low, high = (int(g.low), int(g.high)) if g.type == "int" else (min(ints), max(ints))
        fits = [d for d in divisors(total) if max(low, 2) <= d <= high][:12]
        raise ConfigError(f"total_batch: {total} is not divisible by {G_PATH} = {', '.join(map(str, bad))} "
                          f"(allowed by space.{G_PATH}); every G must divide total_batch so that each trial "
                          f"has total_batch / G prompts: e.g. {G_PATH}: {{type: categorical, choices: {fits}}}, "
                          "or another total_batch")


# Budget keys shared with a sweep spec that only LOO verdicts read: tune makes no verdicts, so it refuses
# any value but the default (check_tune_values) and leaves them out of a study's identity (tune.py).
VERDICT_ONLY_BUDGET_KEYS = ("min_compute_ratio", "min_a_shift", "verdicts_from")


MAX_TRIALS = 100_000  # each trial is a training run; Optuna's TPE slows with the study's size


def check_storage(url: str | None) -> None:
    """An Optuna storage URL whose database driver SQLAlchemy can load (no connection is made)."""
    if url is None:
        return
    from sqlalchemy.engine import make_url
    from sqlalchemy.exc import ArgumentError, NoSuchModuleError

    try:
        make_url(url).get_dialect()
    except (ArgumentError, NoSuchModuleError, ValueError):
        raise ConfigError("storage: not a database URL SQLAlchemy can open (e.g. sqlite:///runs/optuna.db or "
                          "postgresql://user@host/db); null keeps the study in the tune directory") from None
    except ImportError as error:
        raise ConfigError(f"storage: its database driver is not installed ({error.name}); install it, or null "
                          "keeps the study in a SQLite file in the tune directory") from None


def check_tune_values(spec: TuneSpec) -> None:
    check_name(spec.name)
    check_output_path("output_dir" if spec.output_dir is not None else f"output_dir (default runs/{spec.name})",
                      str(output_dir(spec)))
    check_budget(spec.budget)
    for key in VERDICT_ONLY_BUDGET_KEYS:
        if getattr(spec.budget, key) != getattr(BudgetSpec(), key):
            raise ConfigError(f"budget.{key}: tune ranks trials by their prediction and makes no LOO verdicts, so "
                              "this key would do nothing; remove it (it belongs in a `sweep run` spec)")
    check_executor(spec.executor)
    if spec.objective.metric not in OBJECTIVES:
        raise ConfigError(f"objective.metric: got {spec.objective.metric!r}, expected one of {', '.join(OBJECTIVES)}")
    if spec.objective.direction not in DIRECTIONS:
        raise ConfigError(f"objective.direction: got {spec.objective.direction!r}, expected maximize or minimize")
    if spec.sampler.name not in SAMPLERS:
        raise ConfigError(f"sampler.name: got {spec.sampler.name!r}, expected one of {', '.join(SAMPLERS)}")
    if not 1 <= spec.trials <= MAX_TRIALS:
        raise ConfigError(f"trials: got {spec.trials}, expected in [1, {MAX_TRIALS:,}]")
    check_storage(spec.storage)
    check_mlflow_uri(spec.tracking.mlflow_uri)
    if spec.parallelism < 1:
        raise ConfigError(f"parallelism: got {spec.parallelism}, expected >= 1")
    if not spec.space:
        raise ConfigError("space: empty; name at least one recipe key to search, e.g. "
                          "optimizer.lr: {type: float, low: 1.0e-5, high: 3.0e-4, log: true}")
    try:
        PRUNERS.build(spec.pruner)
    except ConfigError as error:
        raise ConfigError(f"pruner: {error}") from None
    params = spec.params
    try:
        base = compose_recipe(base_source(spec), [("overrides", spec.overrides)] if spec.overrides else [])
    except ConfigError as error:
        raise ConfigError(f"base/overrides: {error}") from None
    check_trial_cores(spec, base, "base")
    check_total_batch(spec, params)
    base_flat = flatten_config(to_dict(base))
    for param in params:
        check_param_against_recipe(param, base_flat, spec)
    for index, start in enumerate(spec.start_with):
        key = f"start_with[{index}]"
        if not isinstance(start, Mapping):
            raise ConfigError(f"{key}: got {describe_value(start)}, expected a mapping of space paths to values")
        for path in start:
            if path not in spec.space:
                raise ConfigError(f"{key}.{path}: not a parameter of `space` ({', '.join(spec.space)})")
        missing = [param.path for param in params if param.path not in start]
        if missing:
            raise ConfigError(f"{key}: missing {', '.join(missing)}; give a value for every parameter of `space`")
        for param in params:
            value = start[param.path]
            inside = value in param.choices if param.type == "categorical" else (
                isinstance(value, (int, float)) and not isinstance(value, bool) and param.low <= value <= param.high)
            if not inside:
                raise ConfigError(f"{key}.{param.path}: {value!r} lies outside its search space")


def tune_spec_from_dict(data: Mapping[str, Any], source: str, root: str = ".") -> TuneSpec:
    data = with_root(data, source, root)
    try:
        check_section(data, TuneSpec, "", checked=("space", "pruner", "start_with", "overrides"))
        if not isinstance(data["space"], Mapping):
            raise ConfigError(f"space: got {describe_value(data['space'])}, expected a mapping of recipe key paths "
                              "to ranges")
        if not isinstance(data.get("start_with", []), list):
            raise ConfigError(f"start_with: got {describe_value(data['start_with'])}, expected a list of mappings")
        space, pruner, start_with = data.pop("space"), data.pop("pruner", "sigmoid_bound"), data.pop("start_with", [])
        structured = OmegaConf.merge(OmegaConf.structured(TuneSpec(name="", budget=BudgetSpec(), space={}, trials=1)),
                                     data)
        spec: TuneSpec = OmegaConf.to_object(structured)
        spec = dataclasses.replace(spec, space=dict(space), pruner=pruner, start_with=list(start_with))
        check_tune_values(spec)
    except ConfigError as error:
        raise ConfigError(f"{source}: {error}") from None
    return spec


def load_tune_spec(path: str | Path) -> TuneSpec:
    """Read and check a tune spec YAML (see the module docstring for the format)."""
    data = read_spec_file(path, "tune spec", TuneSpec)
    return tune_spec_from_dict(data, str(path), root=str(Path(path).resolve().parent))
