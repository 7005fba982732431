"""Rewrite the README's table of what one 80 GB GPU holds from recipe.memory.memory_table().

    python scripts/readme_memory_table.py      # after changing recipe/memory.py or the trainer's memory
"""

from __future__ import annotations

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from recipe.memory import memory_table  # noqa: E402


def main() -> None:
    readme = ROOT / "README.md"
    lines = readme.read_text().split("\n")
    start = next(i for i, line in enumerate(lines) if line.startswith("| model | parameters | trainer state |"))
    end = start
    while end < len(lines) and lines[end].startswith("|"):
        end += 1
    end += 2  # the blank line and the note under the table
    readme.write_text("\n".join([*lines[:start], memory_table(), *lines[end:]]))


if __name__ == "__main__":
    main()
