"""The parts of a task mixture and its downstream sets, as the config states them, checked at load time.

    task:
      name: embedded              # the kind a part is unless it says otherwise
      parts:                      # each part: the task keys it changes, its weight and its reward
        short: {max_digits: 2, weight: 0.5}
        long: {min_digits: 3, weight: 0.5}
      downstream:                 # evaluated at every point, never trained on
        four_digit: {min_digits: 4}

A part is the task section with its own keys laid over (train_path, digits, sizes, ...), plus `weight`
(its share of every batch: batch counts by largest remainder of P w / sum w) and `reward` (its checker).
`source` keeps only the rows whose task.part_key field equals it (verl's `data_source`), so one file can
hold several parts. Names become metric keys (`eval/pass_rate/<name>`), so they are lowercase words.
Torch-free: the planner checks specs with it. recipe/mixture.py builds the tasks.
"""

from __future__ import annotations

import dataclasses
import math
import re
import typing
from collections.abc import Mapping
from typing import Any

from components.registry import ConfigError, check_value_type, describe_value, shown_key
from recipe.run_config import FILE_TASKS, TaskConfig
from recipe.tasks import count_addition_problems

# A part's checker: "default" is its task's own (the embedded task's exact answer, math-verify on a task
# file); "math_verify" and "exact_match" (the answer section's text equals the answer) choose one.
REWARDS = ("default", "math_verify", "exact_match")
EXTRA_KEYS = {"weight": float, "reward": str, "source": str}  # the keys a part has beyond the task section's
NESTED_KEYS = ("parts", "downstream")  # the task keys a part cannot set (a part is not itself a mixture)
WHOLE = "whole"  # the weighted mean of the parts: the name a part cannot take
NAME_PATTERN = re.compile(r"[a-z][a-z0-9_]{0,39}")


@dataclasses.dataclass(frozen=True)
class Part:
    """One part or downstream set: its name, its task section, its weight and its reward."""

    name: str
    task: TaskConfig
    weight: float = 1.0
    reward: str = "default"
    source: str = ""


def task_hints() -> dict[str, Any]:
    """The task section's keys a part may set, with their types."""
    return {name: hint for name, hint in typing.get_type_hints(TaskConfig).items() if name not in NESTED_KEYS}


def check_part_spec(spec: Any, path: str, hints: Mapping[str, Any]) -> None:
    """Keys and types of one part's mapping (`path`: task.parts.<name>)."""
    if not isinstance(spec, Mapping):
        raise ConfigError(f"{path}: got {describe_value(spec)}, expected a mapping of task keys (e.g. "
                          "{train_path: ..., weight: 0.5})")
    valid = [*hints, *EXTRA_KEYS]
    for key, value in spec.items():
        if key not in valid:
            raise ConfigError(f"{path}.{shown_key(key)}: unknown key; valid keys here: {', '.join(valid)}")
        check_value_type(value, EXTRA_KEYS.get(key) or hints[key], f"{path}.{key}")
    weight = spec.get("weight", 1.0)
    if not (math.isfinite(weight) and weight > 0):
        raise ConfigError(f"{path}.weight: got {weight!r}, expected a number > 0 (the part's share of every batch "
                          "is its weight over the parts' sum)")
    if spec.get("reward", "default") not in REWARDS:
        raise ConfigError(f"{path}.reward: got {spec['reward']!r}, expected one of {', '.join(REWARDS)}")


def check_names(section: Mapping[str, Any], path: str) -> None:
    for name in section:
        if not (isinstance(name, str) and NAME_PATTERN.fullmatch(name)) or name == WHOLE:
            raise ConfigError(f"{path}.{shown_key(name)}: a part's name becomes a metric key "
                              f"(eval/pass_rate/<name>); use lowercase letters, digits and _ (not {WHOLE!r})")


def check_task_parts(task: Mapping[str, Any]) -> None:
    """The parts and downstream sets of a composed task section (a plain dict), before anything is built."""
    parts, downstream = task.get("parts") or {}, task.get("downstream") or {}
    if downstream and not parts:
        raise ConfigError("task.downstream: downstream sets are evaluated beside a mixture's parts; add "
                          "task.parts (one part is enough) to evaluate them")
    hints = task_hints()
    for section, path in ((parts, "task.parts"), (downstream, "task.downstream")):
        check_names(section, path)
        for name, spec in section.items():
            check_part_spec(spec, f"{path}.{name}", hints)
    shared = sorted(set(parts) & set(downstream))
    if shared:
        raise ConfigError(f"task.downstream.{shared[0]}: also a part's name; a set is trained on or downstream, "
                          "not both: rename one")
    for section, path in ((parts, "task.parts"), (downstream, "task.downstream")):
        for name, spec in section.items():
            check_part_task({**task, **spec}, f"{path}.{name}", task)


def check_part_task(merged: Mapping[str, Any], path: str, task: Mapping[str, Any]) -> None:
    """Cross-key rules of one part's task section: what it reads, and digits the model's prompts can hold."""
    name = merged.get("name", "embedded")
    if name in FILE_TASKS and not merged.get("train_path"):
        raise ConfigError(f"{path}.train_path: required for a part of a task file (task.name {name!r}); give the "
                          "part's JSONL / Parquet file or datasets directory")
    if merged.get("source") and not merged.get("part_key"):
        raise ConfigError(f"{path}.source: keeps the rows whose task.part_key field equals it, but task.part_key is "
                          "not set; set it (e.g. data_source)")
    if name == "embedded":
        low, high = merged.get("min_digits", 1), merged.get("max_digits", 4)
        outer_low, outer_high = task.get("min_digits", 1), task.get("max_digits", 4)
        if task.get("name", "embedded") == "embedded" and not (outer_low <= low <= high <= outer_high):
            raise ConfigError(f"{path}: digits {low}..{high} must lie inside the task's {outer_low}..{outer_high} "
                              "(the embedded model's prompts and warm start are sized by task.min_digits / "
                              "max_digits); narrow the part, or widen the task")
        needed = merged.get("train_size", 6144) + merged.get("validation_size", 256)
        available = count_addition_problems(low, high) if low <= high else 0
        if needed > available:
            raise ConfigError(f"{path}.train_size: train_size + validation_size = {needed}, but operands of "
                              f"{low}..{high} digits give only {available} distinct problems with a carry; set the "
                              "part's train_size and validation_size lower, or widen its digits")
    if name == "embedded_code":
        from recipe.embedded_code import count_code_problems

        needed = merged.get("train_size", 6144) + merged.get("validation_size", 256)
        if needed > count_code_problems():
            raise ConfigError(f"{path}.train_size: train_size + validation_size = {needed}, but the embedded code task "
                              f"has {count_code_problems()} distinct problems; set the part's sizes lower")
    for key in ("train_size", "validation_size"):
        if merged.get(key, 1) < 1:
            raise ConfigError(f"{path}.{key}: got {merged[key]!r}, expected >= 1")


def mixture_parts(task: TaskConfig) -> tuple[list[Part], list[Part]]:
    """(parts, downstream sets) of a checked task config, each with its task section resolved; ([], []) when
    the task is not a mixture."""
    def resolve(name: str, spec: Mapping[str, Any]) -> Part:
        overrides = {key: value for key, value in spec.items() if key not in EXTRA_KEYS}
        section = dataclasses.replace(task, parts={}, downstream={}, **overrides)
        return Part(name, section, float(spec.get("weight", 1.0)), str(spec.get("reward", "default")),
                    str(spec.get("source", "")))

    return ([resolve(name, spec) for name, spec in task.parts.items()],
            [resolve(name, spec) for name, spec in task.downstream.items()])


def batch_counts(batch_size: int, weights: list[float]) -> list[int]:
    """Prompts a batch draws from each part: n_i = floor(P w_i / W) plus one for the largest remainders
    (ties to the earlier part), so the counts sum to P and every batch has the same ones."""
    total = sum(weights)
    shares = [batch_size * weight / total for weight in weights]
    counts = [math.floor(share) for share in shares]
    by_remainder = sorted(range(len(weights)), key=lambda i: (-(shares[i] - counts[i]), i))
    for i in by_remainder[: batch_size - sum(counts)]:
        counts[i] += 1
    return counts
