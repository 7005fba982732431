"""`sweep components`: every ablation axis, its registered components, parameters and formula."""

from __future__ import annotations

import argparse
import inspect


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("axis", nargs="?", help="show only this axis (e.g. loss)")
    parser.add_argument("--full", action="store_true", help="print whole docstrings, not only the formula line")


def format_parameters(registry, name: str) -> str:
    parts = []
    for key, param in registry.parameters(name).items():
        type_text = getattr(param.annotation, "__name__", str(param.annotation))
        default = "" if param.default is inspect.Parameter.empty else f" = {param.default!r}"
        parts.append(f"{key}: {type_text}{default}")
    return ", ".join(parts) if parts else "no parameters"


def describe_axes(axis: str | None = None, full: bool = False) -> str:
    from components import REGISTRIES
    from components.registry import ConfigError
    from recipe.scalerl import SCALERL

    if axis is not None and axis not in REGISTRIES:
        raise ConfigError(f"unknown axis {axis!r}; valid axes: {', '.join(REGISTRIES)}")
    lines = ["* marks the ScaleRL base choice (recipe/scalerl.yaml)", ""]
    for axis_name, registry in REGISTRIES.items():
        if axis is not None and axis_name != axis:
            continue
        base_choice = getattr(SCALERL, axis_name)["name"]
        lines.append(f"{axis_name}:")
        for name in registry.names():
            marker = "*" if name == base_choice else " "
            lines.append(f" {marker} {name}({format_parameters(registry, name)})")
            doc = inspect.getdoc(registry.get(name)) or "(undocumented)"
            doc_lines = doc.splitlines() if full else doc.splitlines()[:1]
            lines.extend(f"      {line}".rstrip() for line in doc_lines)
        lines.append("")
    return "\n".join(lines).rstrip() + "\n"


def run(args: argparse.Namespace) -> int:
    print(describe_axes(args.axis, args.full), end="")
    return 0
