"""Whole recipes side by side, the paper's Figure 2: every named recipe on the same seeds. Torch-free.

    recipes:
      compare: [scalerl, deepseek_grpo, dapo, magistral, minimax_m1]   # preset names or recipe YAML paths
      reference: scalerl                      # the recipe every other is compared with (default: the first)
      overrides:                              # per recipe, over the spec's overrides (optional)
        scalerl: {off_policy: {timing: modeled}}

The reference's jobs are the sweep's base (variant "base"), every other recipe a variant "recipe=<name>", so
the LOO machinery (paired seeds, verdicts on A, B, C_mid and compute to 50% / 90%, MDEs, the table and its
CSV) compares each recipe with the reference unchanged; each job carries its recipe's name (MLflow tag
scalerl.recipe). Structure is checked at load (check_recipes); each recipe is composed and checked by the
recipe's own rules at plan time (sweeps.planner.plan_recipes), an error naming the recipe.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from components.registry import ConfigError, describe_value, shown_key

RECIPE = "recipe"  # the axis of a recipes sweep's variants
KEYS = ("compare", "reference", "overrides")


@dataclasses.dataclass(frozen=True)
class Recipes:
    names: tuple[str, ...]  # the reference first, then the others in spec order
    reference: str
    overrides: dict[str, dict[str, Any]]


def check_recipes(section: Mapping[str, Any]) -> Recipes:
    """The `recipes` section's structure: two or more distinct names, a reference among them, overrides by name."""
    for key in section:
        if key not in KEYS:
            raise ConfigError(f"recipes.{shown_key(key)}: unknown key; a recipes section has {', '.join(KEYS)}")
    compare = section.get("compare")
    if not (isinstance(compare, (list, tuple)) and len(compare) >= 2
            and all(isinstance(name, str) and name for name in compare)):
        raise ConfigError(f"recipes.compare: got {describe_value(compare)}, expected a list of two or more recipe "
                          "names (presets such as scalerl, dapo) or recipe YAML paths")
    repeated = sorted({name for name in compare if compare.count(name) > 1})
    if repeated:
        raise ConfigError(f"recipes.compare: {', '.join(repeated)} listed twice; list each recipe once")
    reference = section.get("reference", compare[0])
    if reference not in compare:
        raise ConfigError(f"recipes.reference: got {describe_value(reference)}, not one of recipes.compare "
                          f"({', '.join(compare)})")
    overrides = section.get("overrides") or {}
    if not isinstance(overrides, Mapping):
        raise ConfigError(f"recipes.overrides: got {describe_value(overrides)}, expected a mapping recipe name -> "
                          "recipe keys")
    for name, layer in overrides.items():
        if name not in compare:
            raise ConfigError(f"recipes.overrides.{shown_key(name)}: not one of recipes.compare "
                              f"({', '.join(compare)})")
        if not isinstance(layer, Mapping):
            raise ConfigError(f"recipes.overrides.{name}: got {describe_value(layer)}, expected a mapping of recipe "
                              "keys, e.g. {off_policy: {timing: modeled}}")
    names = (reference, *[name for name in compare if name != reference])
    return Recipes(names, reference, {name: dict(layer) for name, layer in overrides.items()})


def label(name: str) -> str:
    """A recipe's name as its variant shows it: a preset's name, a recipe file's stem."""
    return Path(name).stem if name.endswith((".yaml", ".yml")) else name


def absolute_recipes(section: Mapping[str, Any], root: Path) -> dict[str, Any]:
    """The section with every recipe file named by its absolute path (in compare, reference and overrides alike),
    so a frozen spec read from another folder names the same files; preset names stay."""
    from recipe.presets import looks_like_a_name

    def absolute(name: str) -> str:
        return name if looks_like_a_name(name) else str((root / name).resolve())

    out = {**section, "compare": [absolute(name) for name in section["compare"]]}
    if "reference" in section:
        out["reference"] = absolute(section["reference"])
    if section.get("overrides"):
        out["overrides"] = {absolute(name): layer for name, layer in section["overrides"].items()}
    return out
