"""Plain-text tables: columns aligned to their widest cell, numbers to three significant figures.

Shared by the LOO and scan tables (reports.tables, reports.scan) and `sweep fit` (sweeps.fit_command).
"""

from __future__ import annotations

import math


def sig3(value: float | None) -> str:
    """Three significant figures, no exponent for compute-sized numbers (2542 -> 2540, 61.27 -> 61.3); '-' if none."""
    if value is None or not math.isfinite(value):
        return "-"
    if abs(value) >= 100:
        return f"{round(value, 2 - int(math.floor(math.log10(abs(value))))):.0f}"
    return f"{value:.3g}"


def aligned_lines(header: list[str], rows: list[list[str]]) -> list[str]:
    """A plain-text table: columns padded to their widest cell, a dashed rule under the header."""
    widths = [max(len(row[i]) for row in [header] + rows) for i in range(len(header))]
    lines = ["  ".join(cell.ljust(w) for cell, w in zip(row, widths)).rstrip() for row in [header] + rows]
    lines.insert(1, "  ".join("-" * w for w in widths))
    return lines
