"""The typed recipe config (recipe/run_config.py's RecipeConfig), loaded from layers of YAML and key=value overrides.

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
import functools
import hashlib
import json
import math
import os
import typing
from collections.abc import Collection, Mapping, Sequence
from pathlib import Path
from typing import Any

from omegaconf import OmegaConf

from components import REGISTRIES
from components.registry import ConfigError, check_value_type, describe_value, shown_key
from recipe.compute import COMPUTE_AXES
from recipe.engines.launch import check_sharding_value
from recipe.engines.support import check_engine
from recipe.run_config import (
    CONTROL_VARIATES,
    EVAL_DRAWS,
    FILE_TASKS,
    GENERATORS,
    MODEL_DTYPES,
    TASK_NAMES,
    RecipeConfig,
)
from recipe.scalerl import SCALERL
from recipe.task_parts import check_task_parts

AXES = tuple(REGISTRIES)
# Field paths that do not change what a run computes (where it logs, where caches live, whether
# the warm start with the same key is the shipped build or this machine's, how often the clock checkpoints
# it: a resume is bit-identical), so they stay out of its id.
NOT_IN_RUN_ID = ("tracking", "warm_start.cache_dir", "warm_start.use_shipped", "checkpoint.every_minutes")
# Keys added after runs existed, and the value at which a run computes what those runs computed: at
# that value the key stays out of the id, so a sweep begun before the key existed resumes its jobs.
ID_UNCHANGED_AT = {"eval.draws": "common", "engine.sharding": "none", "optimizer.micro_batch_tokens": 0,
                   "optimizer.gradient_checkpointing": False, "engine.vllm_server_url": "http://localhost:8000",
                   "engine.vllm_server_devices": 0, "rollout.decode_token_budget": 0, "eval.decode_token_budget": 0,
                   "rollout.generator": "torch", "rollout.vllm_cpu_kv_cache_gib": 1,
                   "rollout.vllm_gpu_memory_utilization": 0.3, "warm_start.terse_frac": 0.0,
                   "warm_start.code_frac": 0.0, "eval.min_gap_steps": 1,
                   "eval.compute_unit": "flops", "eval.at_compute": (), "eval.schedule_until": 0.0,
                   "eval.late_from": 0.0, "eval.late_samples_per_prompt": 0,
                   "off_policy.timing": "real", "off_policy.trainer_speed": 3.4, "replicate": 0,
                   "eval.control_variate": "none", "task.prompt_key": "prompt", "task.answer_key": "",
                   "task.part_key": "", "task.system_prompt": "", "length_control.depth": 1.0,
                   "kl_penalty.name": "none", "loss.eps_min": 0.0}


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
    """Recursively merge `layer` into a copy of `current` (axes merge by component name).

    Sections the layer does not touch are shared with `current`, not copied: no dict here is ever
    changed in place, and a plan merges one layer per job over the same base.
    """
    merged = dict(current)
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
            raise ConfigError(f"{prefix}{shown_key(key)}: unknown key; valid keys here: {', '.join(fields)}")
    hints = field_types(schema)
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


MAX_SEED = 2**32 - 1
# Ranges of the numeric run settings, checked at load time (a bad value names its key, not a crash
# an hour into a run). path -> (lowest, highest, whether the lowest is allowed).
RANGES: dict[str, tuple[float, float, bool]] = {
    **{f"model.{key}": (1, math.inf, True) for key in
       ("hidden_size", "intermediate_size", "num_layers", "num_heads", "max_positions")},
    "warm_start.steps": (0, math.inf, True), "warm_start.batch_size": (1, math.inf, True),
    "warm_start.lr": (0, math.inf, False), "warm_start.teacher_correct_prob": (0, 1, True),
    "warm_start.interrupted_frac": (0, 1, True), "warm_start.terse_frac": (0, 1, True),
    "warm_start.code_frac": (0, 1, True),
    "task.train_size": (1, math.inf, True), "task.validation_size": (1, math.inf, True),
    "task.min_digits": (1, math.inf, True), "task.max_digits": (1, math.inf, True),
    # A group of one sample has no spread, so no advantage: G >= 2.
    "rollout.prompts_per_batch": (1, math.inf, True), "rollout.samples_per_prompt": (2, math.inf, True),
    "rollout.temperature": (0, math.inf, False), "rollout.max_new_tokens": (1, math.inf, True),
    "rollout.rows_per_call": (1, math.inf, True), "rollout.decode_token_budget": (0, math.inf, True),
    "rollout.vllm_cpu_kv_cache_gib": (1, math.inf, True), "rollout.vllm_gpu_memory_utilization": (0, 1, False),
    "optimizer.lr": (0, math.inf, False), "optimizer.warmup_steps": (0, math.inf, True),
    "optimizer.weight_decay": (0, math.inf, True), "optimizer.eps": (0, math.inf, False),
    "optimizer.beta1": (0, 1, True), "optimizer.beta2": (0, 1, True), "optimizer.grad_clip": (0, math.inf, False),
    "optimizer.micro_batch_size": (0, math.inf, True), "optimizer.micro_batch_tokens": (0, math.inf, True),
    "eval.every_steps": (1, math.inf, True), "eval.points_per_doubling": (0, math.inf, True),
    "eval.min_gap_steps": (1, math.inf, True),
    "eval.num_prompts": (1, math.inf, True),
    "eval.samples_per_prompt": (1, math.inf, True), "eval.batch_size": (1, math.inf, True),
    "eval.decode_token_budget": (0, math.inf, True),
    "eval.seed": (0, math.inf, True),
    "eval.schedule_until": (0, math.inf, True), "eval.late_from": (0, math.inf, True),
    "eval.late_samples_per_prompt": (0, math.inf, True),
    "checkpoint.every_steps": (1, math.inf, True), "checkpoint.every_minutes": (0, math.inf, False),
    "max_steps": (0, math.inf, True), "engine.num_processes": (1, math.inf, True),
    "engine.vllm_server_devices": (0, math.inf, True),
    # Seeds feed numpy and Python generators as well as torch's: numpy takes 0 <= seed < 2^32.
    **{key: (0, MAX_SEED, True) for key in ("seed", "warm_start.seed", "task.data_seed", "eval.seed", "replicate")},
}


# The string run settings with a fixed set of values (component names are checked by their registries).
# engine.sharding: a name or an accelerate config file's path (recipe.engines.launch.check_sharding_value).
CHOICES: dict[str, tuple[str, ...]] = {"eval.draws": EVAL_DRAWS, "task.name": TASK_NAMES, "model.dtype": MODEL_DTYPES,
                                       "rollout.generator": GENERATORS, "eval.compute_unit": tuple(COMPUTE_AXES),
                                       "eval.control_variate": CONTROL_VARIATES}


def check_ranges(data: Mapping[str, Any]) -> None:
    """Every RANGES key of a (type-checked) recipe dict lies in its range; every CHOICES key is one of its values."""
    flat = flatten_config(data)
    for path, allowed in CHOICES.items():
        if path in flat and flat[path] not in allowed:
            raise ConfigError(f"{path}: got {flat[path]!r}, expected one of {', '.join(allowed)}")
    if "engine.sharding" in flat:
        check_sharding_value(flat["engine.sharding"])
    for path, (low, high, low_allowed) in RANGES.items():
        value = flat.get(path)
        if value is None:
            continue
        if not ((value >= low if low_allowed else value > low) and value <= high):
            lower = f">= {low:g}" if low_allowed else f"> {low:g}"
            bounded = f"in [{low:g}, {high:g}]" if low_allowed else f"in ({low:g}, {high:g}]"
            expected = lower if high == math.inf else bounded
            raise ConfigError(f"{path}: got {value!r}, expected {expected}")
    if flat.get("eval.min_gap_steps", 1) > flat.get("eval.every_steps", math.inf):
        raise ConfigError(f"eval.min_gap_steps: got {flat['eval.min_gap_steps']!r}, expected <= eval.every_steps "
                          f"({flat['eval.every_steps']!r}), the largest gap")
    for index, value in enumerate(flat.get("eval.at_compute", ())):
        if not (math.isfinite(value) and value > 0):
            raise ConfigError(f"eval.at_compute[{index}]: got {value!r}, expected a compute value > 0 "
                              f"(in eval.compute_unit)")
    if flat.get("task.max_digits", 1) < flat.get("task.min_digits", 1):
        raise ConfigError(f"task.max_digits: got {flat['task.max_digits']!r}, expected >= task.min_digits "
                          f"({flat['task.min_digits']!r})")


# The embedded model's shape a job could not build or hold: its widths must split into heads, and its
# parameters must stay far below any one machine's memory (the weights, gradients and AdamW moments
# of 10^10 parameters are 160 GB). Checked before anything is allocated.
MAX_EMBEDDED_PARAMETERS = 10**10


def embedded_parameters(flat: Mapping[str, Any], vocabulary: int = 200) -> int:
    """Parameters of the embedded llama-style model (recipe/model.py): embedding and head, then per layer
    4 h^2 (attention) + 3 h ff (gated MLP) + 2 h (norms); the testbed's tokenizer has ~100 tokens."""
    h, ff, layers = flat["model.hidden_size"], flat["model.intermediate_size"], flat["model.num_layers"]
    return 2 * vocabulary * h + layers * (4 * h * h + 3 * h * ff + 2 * h) + h


NAME_BYTES = 255  # the most a path component holds (NAME_MAX on Linux and macOS)
# PATH_MAX is 4,096 bytes; the sweep writes up to ~300 bytes beneath its directory (runs/<id>/trl/checkpoint-N/...).
MAX_OUTPUT_PATH_BYTES = 3_700


def check_output_path(key: str, path: str) -> None:
    """A directory path the harness will create and write beneath: no component past NAME_BYTES, and room below
    PATH_MAX for what it writes there, so the failure is this line at plan time, not ENAMETOOLONG mid-sweep."""
    too_long = [part for part in Path(path).parts if len(os.fsencode(part)) > NAME_BYTES]
    if too_long:
        raise ConfigError(f"{key}: a path component of {len(os.fsencode(too_long[0]))} bytes "
                          f"({too_long[0][:20]!r}...), expected at most {NAME_BYTES} (the file system's limit); "
                          "shorten it")
    absolute = len(os.fsencode(os.path.abspath(path)))
    if absolute > MAX_OUTPUT_PATH_BYTES:
        raise ConfigError(f"{key}: {absolute} bytes as an absolute path, expected at most {MAX_OUTPUT_PATH_BYTES:,} "
                          "(the files written beneath it must stay under the 4,096-byte path limit); choose a "
                          "shorter directory")


REFERENCE_TASKS = ("embedded", "embedded_code")  # the tasks whose problems carry a reference solution


def check_model_and_task(flat: Mapping[str, Any]) -> None:
    """Cross-field rules of model and task that a job would otherwise hit only after building them.

    Checked on the composed recipe (compose_recipe), not per layer: `task.name=jsonl task.train_path=...`
    are two layers, and the first alone lacks the path."""
    if flat.get("model.path") == "embedded" and "model.hidden_size" in flat:
        hidden, heads = flat["model.hidden_size"], flat["model.num_heads"]
        if hidden % heads:
            raise ConfigError(f"model.num_heads: got {heads}, expected a divisor of model.hidden_size ({hidden}): "
                              "each head takes hidden_size / num_heads dimensions")
        parameters = embedded_parameters(flat)
        if parameters > MAX_EMBEDDED_PARAMETERS:
            raise ConfigError(f"model.hidden_size: the embedded model of hidden_size {hidden}, intermediate_size "
                              f"{flat['model.intermediate_size']} and num_layers {flat['model.num_layers']} has "
                              f"{parameters:.2e} parameters, over the {MAX_EMBEDDED_PARAMETERS:.0e} any one machine "
                              "holds for training; use a smaller shape")
    if flat.get("warm_start.cache_dir"):
        check_output_path("warm_start.cache_dir", flat["warm_start.cache_dir"])
    if (flat.get("off_policy.name") == "pipeline_rl" and flat.get("off_policy.timing") == "modeled"
            and flat.get("rollout.generator", "torch") != "torch"):
        raise ConfigError(f"off_policy.timing: 'modeled' charges the generator's forward passes one decode step at "
                          f"a time, which rollout.generator {flat['rollout.generator']!r} does not expose; use "
                          "rollout.generator=torch or off_policy.timing=real")
    if flat.get("replicate", 0) and flat.get("engine.name") == "trl":
        raise ConfigError(f"replicate: got {flat['replicate']}, but the trl engine seeds its prompt order and its "
                          "sampling from one seed, so a replicate would not share its seed's prompts; use "
                          "engine.name=native, or other seeds (seed=...) instead")
    check_code_warm_start(flat)
    if flat.get("eval.control_variate") == "reference":
        for key, value in flat.items():
            if (key.startswith(("task.parts.", "task.downstream.")) and key.endswith(".name")
                    and value not in REFERENCE_TASKS):
                raise ConfigError(f"eval.control_variate: 'reference' needs problems with a reference solution, which "
                                  f"{key[:-5]} ({value!r}) does not have; use eval.control_variate=none")
        if flat.get("task.name", "embedded") not in REFERENCE_TASKS:
            raise ConfigError(f"eval.control_variate: 'reference' needs problems with a reference solution, which task "
                              f"{flat['task.name']!r} does not have (only the embedded tasks do); use "
                              "eval.control_variate=none")
        if flat.get("rollout.generator", "torch") != "torch":
            raise ConfigError(f"eval.control_variate: 'reference' takes the reference's probability from the torch "
                              f"model, which rollout.generator {flat['rollout.generator']!r} does not sample with; use "
                              "rollout.generator=torch or eval.control_variate=none")
    if any(key.startswith("task.parts.") for key in flat):
        return  # a mixture: its parts are the tasks, checked by recipe.task_parts
    # the validation split is task.validation_size rows unless a validation file gives its own
    held_out = flat.get("task.name") not in FILE_TASKS or not flat.get("task.validation_path")
    if held_out and flat.get("eval.num_prompts", 0) > flat.get("task.validation_size", math.inf):
        raise ConfigError(f"eval.num_prompts: got {flat['eval.num_prompts']:,}, but the validation set holds "
                          f"{flat['task.validation_size']:,} prompts (task.validation_size); set it to at most "
                          f"{flat['task.validation_size']:,}, or raise task.validation_size")
    if flat.get("task.name") in FILE_TASKS and not flat.get("task.train_path"):
        raise ConfigError(f"task.train_path: required when task.name is {flat['task.name']!r} (a JSONL or Parquet file "
                          "of prompt/answer rows, or a datasets directory)")
    if flat.get("task.name") == "embedded" and "task.max_digits" in flat:
        from recipe.tasks import count_addition_problems

        needed = flat["task.train_size"] + flat["task.validation_size"]
        available = count_addition_problems(flat["task.min_digits"], flat["task.max_digits"])
        if needed > available:
            raise ConfigError(f"task.train_size: train_size + validation_size = {needed}, but operands of "
                              f"{flat['task.min_digits']}..{flat['task.max_digits']} digits give only {available} "
                              "distinct problems with a carry; lower them or raise task.max_digits")
    if flat.get("task.name") == "embedded_code":
        from recipe.embedded_code import count_code_problems

        needed = flat.get("task.train_size", 0) + flat.get("task.validation_size", 0)
        if needed > count_code_problems():
            raise ConfigError(f"task.train_size: train_size + validation_size = {needed}, but the embedded code task "
                              f"has {count_code_problems()} distinct problems; lower them")


def check_code_warm_start(flat: Mapping[str, Any]) -> None:
    """The embedded code domain on the embedded model needs a warm start that has seen it (warm_start.code_frac)."""
    if flat.get("model.path") != "embedded" or flat.get("warm_start.code_frac", 0.0) > 0:
        return
    for key, value in flat.items():
        if value == "embedded_code" and (key == "task.name" or (
                key.startswith(("task.parts.", "task.downstream.")) and key.endswith(".name"))):
            raise ConfigError(f"{key}: the embedded model's warm start never saw the code domain (warm_start.code_frac "
                              "is 0), so it would answer none of it; set warm_start.code_frac (e.g. 0.5)")


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


def read_yaml_value(path: str | Path, what: str) -> Any:
    """The plain value a YAML file holds (None when empty), nothing resolved; a file that cannot be read as
    YAML is one ConfigError line naming the file.

    `what` names the expected file ("recipe file", "sweep spec") in the errors. Shared by recipes,
    sweep specs and tune specs, so all of them refuse interpolation the same way. Read by
    recipe.config_yaml (safe YAML, bounded size and alias expansion).
    """
    from recipe.config_yaml import MAX_BYTES, load_config_yaml

    path = Path(path)
    if path.is_dir():
        raise ConfigError(f"{path}: is a directory; expected a {what} (a YAML file)")
    if not path.is_file():
        raise ConfigError(f"{path}: no such {what}" if not path.exists() else
                          f"{path}: not a regular file; expected a {what} (a YAML file)")
    try:
        if path.stat().st_size > MAX_BYTES:
            raise ConfigError(f"{path}: {path.stat().st_size:,} bytes, over the {MAX_BYTES:,} a {what} may hold; "
                              f"is it a {what}?")
        raw = load_config_yaml(path.read_bytes().decode("utf-8"))
    except OSError as error:
        raise ConfigError(f"{path}: cannot read the {what}: {error.strerror or error}") from None
    except RecursionError:
        raise ConfigError(f"{path}: not valid YAML for a {what}: nested too deeply") from None
    except ConfigError:
        raise
    except Exception as error:  # yaml.YAMLError, UnicodeDecodeError: report where and why
        raise ConfigError(f"{path}: {yaml_error_line(error)}") from None
    return raw


def load_config_file(path: str | Path, what: str, kind: str, fields: Sequence[str]) -> dict[str, Any]:
    """A config YAML (recipe, sweep spec, tune spec) as a plain mapping; a file that is not one is refused whole.

    Not one: a top-level key that is not a name (another kind of file that happens to parse as YAML,
    e.g. /etc/passwd or a `.env` file), or several keys none of which is one of `fields` (a recipe
    given where a spec belongs, say). One misspelt key is left to check_section, which names it and
    the valid keys. Neither the file's keys nor its values are echoed: they are not known to be config.
    """
    value = read_yaml_value(path, what)
    if value is not None and not isinstance(value, dict):  # a passwd file or a `.env` file reads as one string
        raise ConfigError(f"{path}: not a {kind} YAML (a mapping of {kind} keys: {', '.join(fields)}); it holds a "
                          f"{type(value).__name__} at the top level")
    data = to_plain(value, str(path))
    not_names = [key for key in data if not (isinstance(key, str) and key.replace(".", "_").isidentifier())]
    if not_names or (len(data) >= 2 and not any(key in fields for key in data)):
        found = (f"{len(not_names)} of its {len(data)} top-level keys are not names" if not_names else
                 f"none of its {len(data)} top-level keys is one of them")
        raise ConfigError(f"{path}: not a {kind} YAML (a mapping of {kind} keys: {', '.join(fields)}); {found}")
    return data


def read_yaml(path: str | Path) -> dict[str, Any]:
    """A recipe YAML as a plain mapping; a file that is not one is refused as a whole (load_config_file)."""
    return load_config_file(path, "recipe file", "recipe", [field.name for field in dataclasses.fields(RecipeConfig)])


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
    """A checked plain dict -> the frozen RecipeConfig (fields it leaves out keep their defaults)."""
    return build_dataclass(RecipeConfig, data)


@functools.lru_cache(maxsize=None)
def field_types(schema: type) -> dict[str, Any]:
    return typing.get_type_hints(schema)


def build_dataclass(schema: type, data: Mapping[str, Any]) -> Any:
    """A config dataclass from a dict already checked against it (check_section), as OmegaConf's structured
    merge would give it: an int at a float field becomes a float (so `lr: 1` and `lr: 1.0` are one
    config and one run id), a list at a tuple field a tuple; mappings (component specs) are copied.

    Built directly, not through OmegaConf: a plan composes a recipe per job, and OmegaConf's merge
    cost ~50 ms a job (8 minutes for a spec of 10,000 jobs).
    """
    values = {}
    for name, kind, hint in field_kinds(schema):
        if name not in data:
            continue
        value = data[name]
        if kind == "dataclass":
            value = build_dataclass(hint, value)
        elif kind == "float" and isinstance(value, int) and not isinstance(value, bool):
            value = float(value)
        elif kind == "tuple":
            value = tuple(value)
        elif isinstance(value, (Mapping, list)):
            value = copy.deepcopy(value)
        values[name] = value
    return schema(**values)


@functools.lru_cache(maxsize=None)
def field_kinds(schema: type) -> tuple[tuple[str, str, Any], ...]:
    """(name, kind, type) per field of a config dataclass: kind is how build_dataclass converts its value."""
    kinds = []
    for field in dataclasses.fields(schema):
        hint = field_types(schema)[field.name]
        options = typing.get_args(hint) if typing.get_origin(hint) is typing.Union else (hint,)
        kind = ("dataclass" if dataclasses.is_dataclass(hint) else "float" if float in options
                else "tuple" if typing.get_origin(hint) is tuple else "other")
        kinds.append((field.name, kind, hint))
    return tuple(kinds)


def to_dict(config: RecipeConfig) -> dict[str, Any]:
    return dataclasses.asdict(config)


def flatten_fields(value: Any, prefix: str = "") -> dict[str, Any]:
    """flatten_config(to_dict(value)) without copying anything: dataclass fields and mappings are walked in
    place (run_id runs once per planned job; asdict's deep copy was most of a plan's time)."""
    flat: dict[str, Any] = {}
    items = ((name, getattr(value, name)) for name in value.__dataclass_fields__) \
        if hasattr(value, "__dataclass_fields__") else value.items()
    for key, item in items:
        if hasattr(item, "__dataclass_fields__") or isinstance(item, Mapping):
            flat.update(flatten_fields(item, f"{prefix}{key}."))
        else:
            flat[f"{prefix}{key}"] = item
    return flat


def flatten_config(data: Mapping[str, Any], prefix: str = "") -> dict[str, Any]:
    """{"loss": {"name": "cispo"}} -> {"loss.name": "cispo"}: every leaf under its field path."""
    flat: dict[str, Any] = {}
    for key, value in data.items():
        if isinstance(value, Mapping):
            flat.update(flatten_config(value, f"{prefix}{key}."))
        else:
            flat[f"{prefix}{key}"] = value
    return flat


def params_layer(params: Mapping[str, Any]) -> dict[str, Any]:
    """{dotted path: value} as one nested recipe layer, flatten_config's inverse (a tune trial's parameters,
    a scan value's settings); component names go first, so parameters land on the component named."""
    layer: dict[str, Any] = {}
    for path, value in sorted(params.items(), key=lambda item: not item[0].endswith(".name")):
        cursor = layer
        keys = path.split(".")
        for key in keys[:-1]:
            cursor = cursor.setdefault(key, {})
        cursor[keys[-1]] = value
    return layer


def compose_data(source: str | Path | None, layers: Sequence[tuple[str, Mapping[str, Any]]],
                 start: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """The checked recipe dict of ScaleRL base <- YAML file `source` <- each (name, dict) layer in order.

    `start`: a dict this function returned before, to layer over instead of base and source (a plan
    composes its overrides once, then each variant over them).
    """
    if start is not None:
        data = dict(start)
    else:
        data = to_dict(SCALERL)
        if source is not None:
            data = apply_layer(data, read_yaml(source), str(source))
    for name, layer in layers:
        data = apply_layer(data, layer, name)
    return data


def compose_recipe(source: str | Path | None, layers: Sequence[tuple[str, Mapping[str, Any]]],
                   start: Mapping[str, Any] | None = None) -> RecipeConfig:
    """ScaleRL base <- YAML file `source` (None: the base alone) <- each (name, dict) layer in order.

    Every layer is checked as it is applied; errors are prefixed with the layer's name. `start`: see
    compose_data.
    """
    data = compose_data(source, layers, start)
    # A choice the engine cannot run fails here, before any job starts, named after the last layer
    # (the one that completed the recipe: a sweep variant's axis, the overrides, the file).
    last = layers[-1][0] if layers else (str(source) if source is not None else "")
    try:
        check_model_and_task(flatten_config(data))
        check_task_parts(data["task"])
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
    left_out = tuple(f"{path}." for path in NOT_IN_RUN_ID)
    data = {key: value for key, value in flatten_fields(config).items()
            if key not in NOT_IN_RUN_ID and not key.startswith(left_out)
            and not (key in ID_UNCHANGED_AT and value == ID_UNCHANGED_AT[key])}
    canonical = json.dumps(data, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(canonical.encode()).hexdigest()[:12]
