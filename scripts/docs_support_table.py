"""Rewrite docs/engines.md's support table from recipe.engines.support.support_table() (the table the code enforces).

    .venv/bin/python scripts/docs_support_table.py      # after changing recipe/engines/support.py

tests/recipe/test_trl_engine.py fails while the page's table is not the code's.
"""

from __future__ import annotations

from pathlib import Path

from recipe.engines.support import support_table

PAGE = Path(__file__).resolve().parents[1] / "docs" / "engines.md"
HEADER = "| axis | choice | native | trl | trl verified |"


def main() -> None:
    lines = PAGE.read_text().split("\n")
    start = lines.index(HEADER)
    end = start
    while end < len(lines) and lines[end].startswith("|"):
        end += 1
    PAGE.write_text("\n".join([*lines[:start], support_table(), *lines[end:]]))


if __name__ == "__main__":
    main()
