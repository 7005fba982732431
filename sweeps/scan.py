"""Scaling scans: one recipe key (or a group of keys that change together) swept over values. Torch-free.

    scan:
      rollout.prompts_per_batch: [16, 32, 64]     # the scanned key and its values (the report's x axis)
      reference: 32                               # the value every other is compared with

Every value runs on the sweep's seeds; the reference value's jobs are the sweep's base (variant
"base"), the others are variants "<key>=<value>", so the LOO machinery (paired seeds, verdicts,
MDE, the table and its CSV) compares each value with the reference unchanged. `reference` defaults
to the base recipe's own value of the key when it is among the values.

Keys that change together (the paper's model sizes: hidden and MLP widths) follow the scanned key,
one value per scanned value:

    scan:
      model.hidden_size: [64, 128, 256]
      model.intermediate_size: [256, 512, 1024]   # the i-th value goes with the i-th hidden size
      reference: 128

G at a fixed total batch, as `sweep tune` holds it (the paper's 8/16/24/32 generations at batch 768):
rollout.prompts_per_batch = total_batch / G for every G, so the samples per batch stay fixed.

    scan:
      rollout.samples_per_prompt: [4, 8, 16]
      total_batch: 256
      reference: 8

Structure is checked at load (check_scan); the values are composed into recipes and checked by the
recipe's own rules at plan time (scan_layers), each error naming the key and the value.
"""

from __future__ import annotations

import dataclasses
import difflib
import math
from collections.abc import Mapping
from typing import Any

from components.registry import ConfigError, describe_value, shown_key

REFERENCE, TOTAL_BATCH = "reference", "total_batch"  # the scan's own keys; every other key is a recipe key path
G_PATH, PROMPTS_PATH = "rollout.samples_per_prompt", "rollout.prompts_per_batch"  # total_batch couples them
# Keys that do not change what a run computes, or that the sweep sets itself.
NOT_SCANNABLE = ("seed", "tracking.", "warm_start.cache_dir", "warm_start.use_shipped", "max_steps")
MAX_VALUES = 64  # each value is a set of training runs; a longer list is a mistake or belongs in `sweep tune`


@dataclasses.dataclass(frozen=True)
class Scan:
    """A checked scan: `key` over `values` (the x axis), `together` keys set alongside, the reference value."""

    key: str
    values: tuple
    reference: Any
    together: dict[str, tuple] = dataclasses.field(default_factory=dict)
    total_batch: int | None = None

    @property
    def keys(self) -> list[str]:
        """Every recipe key the scan sets (total_batch's prompts_per_batch included)."""
        return [self.key, *self.together] + ([PROMPTS_PATH] if self.total_batch else [])

    def settings(self, index: int) -> dict[str, Any]:
        """{key path: value} of the index-th value: the scanned key, the keys set with it, prompts = total / G."""
        settings = {self.key: self.values[index], **{key: values[index] for key, values in self.together.items()}}
        if self.total_batch:
            settings[PROMPTS_PATH] = self.total_batch // self.values[index]
        return settings

    def label(self, index: int) -> str:
        """The value as a job's choice: '64', 'true', '1e-05'."""
        return value_label(self.values[index])

    def meta(self) -> dict[str, Any]:
        """What sweep.json records of the scan (the report's scan page reads it)."""
        return {"key": self.key, "values": list(self.values), "reference": self.reference,
                "together": {key: list(values) for key, values in self.together.items()},
                "total_batch": self.total_batch}


def value_label(value: Any) -> str:
    """A value as a variant name: 'true', '0.0001', '16'; a float in 6 significant digits unless it needs more
    (1.0000001e-04 and 1.0000002e-04 both read 0.0001 there, and the report merged their jobs into one variant)."""
    if isinstance(value, bool):
        return str(value).lower()
    if isinstance(value, float):
        short = f"{value:g}"
        return short if float(short) == value else repr(value)
    return str(value)


def _plain_values(key: str, values: Any) -> tuple:
    if not isinstance(values, (list, tuple)) or not values:
        raise ConfigError(f"scan.{key}: got {describe_value(values)}, expected a non-empty list of values, "
                          f"e.g. {key}: [16, 32, 64]")
    if len(values) > MAX_VALUES:
        raise ConfigError(f"scan.{key}: {len(values)} values, expected at most {MAX_VALUES} (each value is a set of "
                          "training runs)")
    for value in values:
        if isinstance(value, float) and not math.isfinite(value):
            raise ConfigError(f"scan.{key}: {describe_value(value)} is not a finite number")
        if not isinstance(value, (str, int, float, bool)):
            raise ConfigError(f"scan.{key}: {describe_value(value)} is not a plain value (number, string, bool)")
    return tuple(values)


def check_scan(scan: Mapping[str, Any]) -> Scan:
    """The scan section's structure (module docstring): keys, list lengths, the reference, total_batch.

    The recipe is not consulted here (scan_layers does that at plan time).
    """
    keys = [key for key in scan if key not in (REFERENCE, TOTAL_BATCH)]
    for key in keys:
        if not isinstance(key, str) or not key:  # whether the recipe has it: check_scannable, at plan time
            raise ConfigError(f"scan.{shown_key(key)}: unknown key; a scan names a recipe key (e.g. "
                              f"rollout.prompts_per_batch, or replicate) with its values, plus optional "
                              f"{REFERENCE} and {TOTAL_BATCH}")
    if not keys:
        raise ConfigError("scan: names no recipe key; give one with its values, e.g. "
                          "scan: {rollout.prompts_per_batch: [16, 32, 64], reference: 32}")
    values = {key: _plain_values(key, scan[key]) for key in keys}
    first, *together = keys
    if len({repr(v) for v in values[first]}) != len(values[first]):
        raise ConfigError(f"scan.{first}: {list(values[first])} repeats a value")
    for key in together:
        if len(values[key]) != len(values[first]):
            raise ConfigError(f"scan.{key}: {len(values[key])} values, expected {len(values[first])}, one for each "
                              f"value of {first} (the first key is scanned; the others change together with it)")
    total = scan.get(TOTAL_BATCH)
    if total is not None:
        if isinstance(total, bool) or not isinstance(total, int) or total < 2:
            raise ConfigError(f"scan.{TOTAL_BATCH}: got {describe_value(total)}, expected an integer >= 2 (samples per "
                              "batch), or leave it out")
        if first != G_PATH:
            raise ConfigError(f"scan.{TOTAL_BATCH}: holds prompts x G at {total} as G varies, so the scanned key "
                              f"must be {G_PATH} (it is {first})")
        if PROMPTS_PATH in together:
            raise ConfigError(f"scan.{PROMPTS_PATH}: {TOTAL_BATCH} sets it ({TOTAL_BATCH} / G); remove it")
        bad = [g for g in values[first] if isinstance(g, bool) or not isinstance(g, int) or g < 1 or total % g]
        if bad:
            raise ConfigError(f"scan.{TOTAL_BATCH}: {total} is not divisible by {G_PATH} = "
                              f"{', '.join(map(value_label, bad))}; every G must divide it so that each value "
                              f"trains on {TOTAL_BATCH} / G prompts")
    reference = scan.get(REFERENCE)
    if reference is not None and not any(reference == v and type(reference) is type(v) for v in values[first]):
        raise ConfigError(f"scan.{REFERENCE}: got {describe_value(reference)}, expected one of the values of {first} "
                          f"({', '.join(map(value_label, values[first]))})")
    if len(values[first]) < 2:
        raise ConfigError(f"scan.{first}: one value; a scan compares values with a reference, give at least two")
    return Scan(first, values[first], reference, {key: values[key] for key in together}, total)


def check_scannable(scan: Scan, base_flat: Mapping[str, Any], overrides_flat: Mapping[str, Any]) -> None:
    """Every scanned key is a key of the base recipe that changes what a run computes, and not in `overrides`."""
    for key in [scan.key, *scan.together]:
        if key not in base_flat:
            close = difflib.get_close_matches(key, list(base_flat), n=3, cutoff=0.6)
            hint = f"; did you mean {', '.join(close)}?" if close else \
                "; `sweep components` lists each axis's parameters and recipe/scalerl.yaml every recipe key"
            raise ConfigError(f"scan.{key}: unknown recipe key{hint}")
        if key.startswith(NOT_SCANNABLE) or key in NOT_SCANNABLE:
            raise ConfigError(f"scan.{key}: not scannable (it does not change what a run computes, or the sweep sets "
                              "it); scan another key")
    for key in scan.keys:
        if key in overrides_flat:
            raise ConfigError(f"overrides.{key}: the scan sets it for every job; remove it from overrides")


def resolve_reference(scan: Scan, base_flat: Mapping[str, Any]) -> Scan:
    """The scan with its reference set: the stated one, else the base recipe's own value when it is scanned."""
    if scan.reference is not None:
        return scan
    own = base_flat.get(scan.key)
    if not any(own == v and type(own) is type(v) for v in scan.values):
        raise ConfigError(f"scan.{REFERENCE}: missing, and the base recipe's {scan.key} ({own!r}) is not "
                          f"among the values; name the value every other is compared with, e.g. "
                          f"{REFERENCE}: {value_label(scan.values[0])}")
    return dataclasses.replace(scan, reference=own)


def reference_index(scan: Scan) -> int:
    return next(i for i, v in enumerate(scan.values) if v == scan.reference and type(v) is type(scan.reference))
