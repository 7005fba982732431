"""Published recipes shipped as recipe files (recipe/presets/*.yaml), usable as a sweep's `base:` by name.

Each is a layer over recipe/scalerl.yaml that sets every axis (and the optimizer where the recipe names it),
each value's source in a comment, so the ScaleRL base's testbed model, task and lengths stay and one spec
compares them on any model. Where ScaleRL reproduced a recipe differently from its authors (arXiv 2510.13786,
appendix A.16), `<name>` is ScaleRL's form, the paper's Figure 2, and `<name>_authors` the authors'.
"""

from __future__ import annotations

from pathlib import Path

PRESETS_DIR = Path(__file__).resolve().parent / "presets"
SCALERL = "scalerl"  # the built-in base (recipe/scalerl.py), a name like the presets'


def preset_names() -> list[str]:
    """Every name a base may be: scalerl, then the shipped presets."""
    return [SCALERL, *sorted(path.stem for path in PRESETS_DIR.glob("*.yaml"))]


def preset_path(name: str) -> Path | None:
    """The recipe file of a shipped preset; None for scalerl (the built-in base) or a name that is none."""
    path = PRESETS_DIR / f"{name}.yaml"
    return path if name != SCALERL and name in preset_names() and path.is_file() else None


def looks_like_a_name(base: str) -> bool:
    """A base without a folder or a YAML suffix is meant as a preset name, not a file path."""
    return "/" not in base and "\\" not in base and not base.endswith((".yaml", ".yml"))
