"""Rewrite the README's engine support table from recipe.engines.support.support_table() (the table the code enforces).

    python scripts/readme_support_table.py      # after changing recipe/engines/support.py
"""

from __future__ import annotations

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from recipe.engines.support import support_table  # noqa: E402

HEADER = "| axis | choice | native | trl | trl verified |"


def main() -> None:
    readme = ROOT / "README.md"
    lines = readme.read_text().split("\n")
    start = lines.index(HEADER)
    end = start
    while end < len(lines) and lines[end].startswith("|"):
        end += 1
    readme.write_text("\n".join([*lines[:start], support_table(), *lines[end:]]))


if __name__ == "__main__":
    main()
