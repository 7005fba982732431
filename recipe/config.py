"""The typed recipe config: one frozen dataclass, loaded from layers of YAML and key=value overrides.

Loading order: the ScaleRL base recipe, then a YAML file, then overrides. Each layer is merged and
checked strictly before the next: unknown keys, unknown component names, wrong types (no coercion:
"3" is not an int) and out-of-range component parameters fail with one message naming the full key
path, the bad value and what was expected. An axis (loss, aggregation, ...) merges by name: a layer
that names a different component replaces the spec with that component's defaults, a layer that only
sets parameters (`loss: {eps_max: 5}` or `loss.eps_max=5`) tunes the current one.

Nothing is interpolated: a `${...}` value (OmegaConf's `${oc.env:HOME}`, `${other.key}`) in a recipe,
a spec or an override is refused with its key path, never resolved, so what a file says is what runs.
"""

from __future__ import annotations

import copy
import dataclasses
import hashlib
import json
import math
import typing
from collections.abc import Collection, Mapping, Sequence
from pathlib import Path
from typing import Any, Dict

from omegaconf import OmegaConf

from components import REGISTRIES
from components.registry import ConfigError, check_value_type, describe_value
from recipe.engines.support import check_engine
from recipe.run_config import (
    EVAL_DRAWS,
    CheckpointConfig,
    EngineConfig,
    EvalConfig,
    ModelConfig,
    OptimizerConfig,
    WarmStartConfig,
    RolloutConfig,
    TaskConfig,
    TrackingConfig,
)


@dataclasses.dataclass(frozen=True)
class RecipeConfig:
    """Everything a training run depends on. Axis fields hold a component spec {"name": ..., **params}."""

    loss: Dict[str, Any]
    aggregation: Dict[str, Any]
    advantage_norm: Dict[str, Any]
    batch_filter: Dict[str, Any]
    curriculum: Dict[str, Any]
    length_control: Dict[str, Any]
    off_policy: Dict[str, Any]
    precision: Dict[str, Any]
    model: ModelConfig = dataclasses.field(default_factory=ModelConfig)
    warm_start: WarmStartConfig = dataclasses.field(default_factory=WarmStartConfig)
    task: TaskConfig = dataclasses.field(default_factory=TaskConfig)
    rollout: RolloutConfig = dataclasses.field(default_factory=RolloutConfig)
    optimizer: OptimizerConfig = dataclasses.field(default_factory=OptimizerConfig)
    eval: EvalConfig = dataclasses.field(default_factory=EvalConfig)
    checkpoint: CheckpointConfig = dataclasses.field(default_factory=CheckpointConfig)
    tracking: TrackingConfig = dataclasses.field(default_factory=TrackingConfig)
    engine: EngineConfig = dataclasses.field(default_factory=EngineConfig)
    seed: int = 0
    max_steps: int = 250


AXES = tuple(REGISTRIES)
# Field paths that do not change what a run computes (where it logs, where caches live, whether
# the warm start with the same key is the shipped build or this machine's), so they stay out of its id.
NOT_IN_RUN_ID = ("tracking", "warm_start.cache_dir", "warm_start.use_shipped")
# Keys added after runs existed, and the value at which a run computes what those runs computed: at
# that value the key stays out of the id, so a sweep begun before the key existed resumes its jobs.
ID_UNCHANGED_AT = {"eval.draws": "common"}


def merge_component(current: Mapping[str, Any] | None, value: Any, path: str) -> dict[str, Any]:
    """Merge one layer's value for an axis into the current spec and return the checked spec."""
    registry = REGISTRIES[path]
    if isinstance(value, str):
        spec: dict[str, Any] = {"name": value}
    elif isinstance(value, Mapping):
        same_component = current is not None and value.get("name", current["name"]) == current["name"]
        spec = {**current, **value} if same_component else dict(value)
    else:
        raise ConfigError(
            f"{path}: got {describe_value(value)}, expected a component name ({', '.join(registry.names())}) "
            "or a mapping like {name: ..., param: value}"
        )
    return registry.check(spec, path)


def merge_layer(current: dict[str, Any], layer: Mapping[str, Any], path: str = "") -> dict[str, Any]:
    """Recursively merge `layer` into a copy of `current` (axes merge by component name)."""
    merged = copy.deepcopy(current)
    for key, value in layer.items():
        key_path = f"{path}{key}"
        if not path and key in AXES:
            merged[key] = merge_component(current.get(key), value, key_path)
        elif isinstance(value, Mapping) and isinstance(current.get(key), Mapping):
            merged[key] = merge_layer(current[key], value, f"{key_path}.")
        else:
            merged[key] = value
    return merged


def check_section(data: Any, schema: type, path: str, checked: Collection[str] = ()) -> None:
    """Strictly check a plain dict against a config dataclass: keys, required fields and types.

    `checked` names top-level fields already validated elsewhere (the axes, by their registries).
    """
    fields = {field.name: field for field in dataclasses.fields(schema)}
    if not isinstance(data, Mapping):
        raise ConfigError(
            f"{path or 'recipe'}: got {describe_value(data)}, expected a mapping with keys: {', '.join(fields)}"
        )
    prefix = f"{path}." if path else ""
    for key in data:
        if key not in fields:
            raise ConfigError(f"{prefix}{short_key(key)}: unknown key; valid keys here: {', '.join(fields)}")
    hints = typing.get_type_hints(schema)
    for name, field in fields.items():
        if name not in data:
            required = field.default is dataclasses.MISSING and field.default_factory is dataclasses.MISSING
            if required:
                raise ConfigError(f"{prefix}{name}: missing; it has no default")
            continue
        if dataclasses.is_dataclass(hints[name]):
            check_section(data[name], hints[name], f"{prefix}{name}")
        elif name not in checked:
            check_value_type(data[name], hints[name], f"{prefix}{name}")


# Ranges of the numeric run settings, checked at load time (a bad value names its key, not a crash
# an hour into a run). path -> (lowest, highest, whether the lowest is allowed).
RANGES: dict[str, tuple[float, float, bool]] = {
    **{f"model.{key}": (1, math.inf, True) for key in
       ("hidden_size", "intermediate_size", "num_layers", "num_heads", "max_positions")},
    "warm_start.steps": (0, math.inf, True), "warm_start.batch_size": (1, math.inf, True),
    "warm_start.lr": (0, math.inf, False), "warm_start.teacher_correct_prob": (0, 1, True),
    "warm_start.interrupted_frac": (0, 1, True),
    "task.train_size": (1, math.inf, True), "task.validation_size": (1, math.inf, True),
    "task.min_digits": (1, math.inf, True), "task.max_digits": (1, math.inf, True),
    # A group of one sample has no spread, so no advantage: G >= 2.
    "rollout.prompts_per_batch": (1, math.inf, True), "rollout.samples_per_prompt": (2, math.inf, True),
    "rollout.temperature": (0, math.inf, False), "rollout.max_new_tokens": (1, math.inf, True),
    "rollout.rows_per_call": (1, math.inf, True),
    "optimizer.lr": (0, math.inf, False), "optimizer.warmup_steps": (0, math.inf, True),
    "optimizer.weight_decay": (0, math.inf, True), "optimizer.eps": (0, math.inf, False),
    "optimizer.beta1": (0, 1, True), "optimizer.beta2": (0, 1, True), "optimizer.grad_clip": (0, math.inf, False),
    "optimizer.micro_batch_size": (0, math.inf, True),
    "eval.every_steps": (1, math.inf, True), "eval.points_per_doubling": (0, math.inf, True),
    "eval.num_prompts": (1, math.inf, True),
    "eval.samples_per_prompt": (1, math.inf, True), "eval.batch_size": (1, math.inf, True),
    "eval.seed": (0, math.inf, True),
    "checkpoint.every_steps": (1, math.inf, True),
    "max_steps": (0, math.inf, True), "engine.num_processes": (1, math.inf, True),
}


# The string run settings with a fixed set of values (component names are checked by their registries).
CHOICES: dict[str, tuple[str, ...]] = {"eval.draws": EVAL_DRAWS}


def check_ranges(data: Mapping[str, Any]) -> None:
    """Every RANGES key of a (type-checked) recipe dict lies in its range; every CHOICES key is one of its values."""
    flat = flatten_config(data)
    for path, allowed in CHOICES.items():
        if path in flat and flat[path] not in allowed:
            raise ConfigError(f"{path}: got {flat[path]!r}, expected one of {', '.join(allowed)}")
    for path, (low, high, low_allowed) in RANGES.items():
        value = flat.get(path)
        if value is None:
            continue
        if not ((value >= low if low_allowed else value > low) and value <= high):
            lower = f">= {low:g}" if low_allowed else f"> {low:g}"
            expected = lower if high == math.inf else f"in [{low:g}, {high:g}]" if low_allowed else f"in ({low:g}, {high:g}]"
            raise ConfigError(f"{path}: got {value!r}, expected {expected}")
    if flat.get("task.max_digits", 1) < flat.get("task.min_digits", 1):
        raise ConfigError(f"task.max_digits: got {flat['task.max_digits']!r}, expected >= task.min_digits "
                          f"({flat['task.min_digits']!r})")


INTERPOLATION_FIX = "interpolation is not supported; write the value literally"


def check_no_interpolation(data: Any, source: str, path: str = "") -> None:
    """Refuse an OmegaConf interpolation (`${...}`) anywhere in a plain layer, naming its key path.

    Specs, recipes and overrides are read without resolving anything, and a value that still says
    `${oc.env:HOME}` is refused rather than resolved later: configs state every value literally, so
    the resolved config.yaml and the run id mean the same thing on every machine.
    """
    if isinstance(data, Mapping):
        for key, value in data.items():
            check_no_interpolation(value, source, f"{path}.{key}" if path else str(key))
    elif isinstance(data, (list, tuple)):
        for index, value in enumerate(data):
            check_no_interpolation(value, source, f"{path}[{index}]")
    elif isinstance(data, str) and "${" in data:
        raise ConfigError(f"{source}: {path or 'value'}: got {data!r}; {INTERPOLATION_FIX}")


def to_plain(layer: Any, source: str) -> dict[str, Any]:
    """An OmegaConf/YAML layer -> a plain dict, unresolved; an interpolation is a ConfigError."""
    if layer is None:
        return {}
    container = OmegaConf.to_container(layer, resolve=False) if OmegaConf.is_config(layer) else layer
    if not isinstance(container, dict):
        raise ConfigError(f"{source}: expected a mapping at the top level, got a {type(container).__name__}")
    check_no_interpolation(container, source)
    return container


def yaml_error_line(error: Exception) -> str:
    """A YAML/OmegaConf parse error as one line: the problem and where, or the interpolation refused."""
    from omegaconf.errors import GrammarParseError
    from yaml import MarkedYAMLError

    if isinstance(error, GrammarParseError):  # a malformed `${...}`: OmegaConf parses it at load
        return f"{error.full_key}: holds '${{'; {INTERPOLATION_FIX}"
    if isinstance(error, MarkedYAMLError) and error.problem_mark is not None:
        mark = error.problem_mark
        return f"not valid YAML: {error.problem} (line {mark.line + 1}, column {mark.column + 1})"
    if isinstance(error, UnicodeDecodeError):
        return "not a UTF-8 text file"
    return "not valid YAML: " + " ".join(str(error).split())


def load_yaml_file(path: str | Path, what: str) -> dict[str, Any]:
    """A YAML file as a plain mapping, nothing resolved; every problem is one ConfigError line naming the file.

    `what` names the expected file ("recipe file", "sweep spec") in the errors. Shared by recipes,
    sweep specs and tune specs, so all of them refuse interpolation the same way.
    """
    path = Path(path)
    if path.is_dir():
        raise ConfigError(f"{path}: is a directory; expected a {what} (a YAML file)")
    if not path.is_file():
        raise ConfigError(f"{path}: no such {what}")
    try:
        raw = OmegaConf.load(path)
    except OSError as error:
        raise ConfigError(f"{path}: cannot read the {what}: {error.strerror or error}") from None
    except Exception as error:  # yaml.YAMLError and OmegaConf's own errors: report where and why
        raise ConfigError(f"{path}: {yaml_error_line(error)}") from None
    return to_plain(raw, str(path))


def short_key(key: Any) -> str:
    """A key as printed in an error: long or multi-line keys (a file that is not YAML config) cut short."""
    text = str(key)
    return text if len(text) <= 40 and text.isprintable() else repr(text[:30]) + "..."


def read_yaml(path: str | Path) -> dict[str, Any]:
    """A recipe YAML as a plain mapping; a file that is not one is refused as a whole.

    Not a recipe: a top-level key that is not a name (another kind of file that happens to parse as
    YAML, e.g. /etc/passwd), or several keys none of which is a recipe key (a sweep spec, say). One
    misspelt key is left to check_section, which names it and the valid keys.
    """
    data = load_yaml_file(path, "recipe file")
    fields = [field.name for field in dataclasses.fields(RecipeConfig)]
    not_names = [key for key in data if not (isinstance(key, str) and key.replace(".", "_").isidentifier())]
    if not_names or (len(data) >= 2 and not any(key in fields for key in data)):
        # Keys that are not names are another file's content (a passwd line, say): never echoed.
        found = (f"{len(not_names)} of its top-level keys are not names" if not_names else
                 "its top-level keys are: " + ", ".join(short_key(key) for key in list(data)[:5])
                 + (", ..." if len(data) > 5 else ""))
        raise ConfigError(f"{path}: not a recipe YAML (a mapping of recipe keys: {', '.join(fields)}); {found}")
    return data


def parse_overrides(overrides: Sequence[str]) -> dict[str, Any]:
    """["loss=dapo", "optimizer.lr=3e-4"] -> a nested dict; values parse as YAML scalars, never resolved."""
    for override in overrides:
        if "=" not in override or override.startswith("="):
            raise ConfigError(f"override {override!r}: expected key=value, e.g. optimizer.lr=3e-4 or loss=dapo")
    source = f"override {overrides[0]!r}" if len(overrides) == 1 else f"overrides {list(overrides)}"
    try:
        layer = OmegaConf.from_dotlist(list(overrides))
    except Exception as error:
        raise ConfigError(f"{source}: {yaml_error_line(error)}") from None
    return to_plain(layer, source)


def apply_layer(base: Mapping[str, Any], layer: Mapping[str, Any], source: str) -> dict[str, Any]:
    """Merge one layer over `base` and check the result; a layer from code (a spec's axes, a trial's
    parameters) is checked for interpolation here, before OmegaConf could resolve it in from_dict."""
    check_no_interpolation(layer, source)
    try:
        merged = merge_layer(dict(base), layer)
        check_section(merged, RecipeConfig, "", checked=AXES)
        check_ranges(merged)
    except ConfigError as error:
        raise ConfigError(f"{source}: {error}") from None
    return merged


def from_dict(data: Mapping[str, Any]) -> RecipeConfig:
    """A checked plain dict -> the frozen RecipeConfig (through OmegaConf's structured config)."""
    structured = OmegaConf.merge(OmegaConf.structured(RecipeConfig), data)
    return OmegaConf.to_object(structured)


def to_dict(config: RecipeConfig) -> dict[str, Any]:
    return dataclasses.asdict(config)


def flatten_config(data: Mapping[str, Any], prefix: str = "") -> dict[str, Any]:
    """{"loss": {"name": "cispo"}} -> {"loss.name": "cispo"}: every leaf under its field path."""
    flat: dict[str, Any] = {}
    for key, value in data.items():
        if isinstance(value, Mapping):
            flat.update(flatten_config(value, f"{prefix}{key}."))
        else:
            flat[f"{prefix}{key}"] = value
    return flat


def compose_recipe(source: str | Path | None, layers: Sequence[tuple[str, Mapping[str, Any]]]) -> RecipeConfig:
    """ScaleRL base <- YAML file `source` (None: the base alone) <- each (name, dict) layer in order.

    Every layer is checked as it is applied; errors are prefixed with the layer's name.
    """
    from recipe.scalerl import SCALERL

    data = to_dict(SCALERL)
    if source is not None:
        data = apply_layer(data, read_yaml(source), str(source))
    for name, layer in layers:
        data = apply_layer(data, layer, name)
    # A choice the engine cannot run fails here, before any job starts, named after the last layer
    # (the one that completed the recipe: a sweep variant's axis, the overrides, the file).
    last = layers[-1][0] if layers else (str(source) if source is not None else "")
    try:
        check_engine(data)
    except ConfigError as error:
        raise ConfigError(f"{last}: {error}" if last else str(error)) from None
    return from_dict(data)


def load_recipe(source: str | Path | None = None, overrides: Sequence[str] = ()) -> RecipeConfig:
    """ScaleRL base <- YAML file `source` (None: the base alone) <- key=value `overrides`, in order.

    One layer per override, so `off_policy=pipeline_rl off_policy.k=2` switches the component and
    then sets its parameter (a single dotlist would let the second replace the first).
    """
    return compose_recipe(source, [("overrides", parse_overrides([override])) for override in overrides])


def resolved_yaml(config: RecipeConfig) -> str:
    """The fully resolved config as YAML: every component parameter and default stated."""
    return OmegaConf.to_yaml(OmegaConf.structured(config))


def run_id(config: RecipeConfig) -> str:
    """12 hex digits of sha256 over the resolved config (minus NOT_IN_RUN_ID and the ID_UNCHANGED_AT values):
    same config, same id."""
    data = {key: value for key, value in flatten_config(to_dict(config)).items()
            if not any(key == path or key.startswith(f"{path}.") for path in NOT_IN_RUN_ID)
            and not (key in ID_UNCHANGED_AT and value == ID_UNCHANGED_AT[key])}
    canonical = json.dumps(data, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(canonical.encode()).hexdigest()[:12]
