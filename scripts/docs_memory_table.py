"""Rewrite docs/memory.md's table of what one 80 GB GPU holds from recipe.memory.memory_table().

    .venv/bin/python scripts/docs_memory_table.py      # after changing recipe/memory.py or the trainer's memory

tests/recipe/test_memory.py fails while the page's table is not the one computed.
"""

from __future__ import annotations

from pathlib import Path

from recipe.memory import memory_table

PAGE = Path(__file__).resolve().parents[1] / "docs" / "memory.md"


def main() -> None:
    lines = PAGE.read_text().split("\n")
    start = next(i for i, line in enumerate(lines) if line.startswith("| model | parameters | trainer state |"))
    end = start
    while end < len(lines) and lines[end].startswith("|"):
        end += 1
    end += 2  # the blank line and the note under the table
    PAGE.write_text("\n".join([*lines[:start], memory_table(), *lines[end:]]))


if __name__ == "__main__":
    main()
