"""The PDF ablation report: title page, LOO table, figures, diagnostics and config diffs (matplotlib PdfPages).

    build_report("runs/scalerl-loo", "report.pdf")          # load, fit, write
    write_report(fit_sweep(data), "report.pdf", figures_dir)  # from fits already made (no refit)

Pages, A4 landscape: title (a sentence per verdict: reports/title_page.py); LOO table (more pages past
ROWS_PER_TABLE_PAGE variants); all curves; one panel per variant; fixed-A slopes and delta bars (only
with a fitted base); the power-law comparison (only when asked: power_law=True); stability diagnostics
(figure and numbers); setup (provenance, budget, base recipe, fit and verdict rule); config diffs;
notes (only when something was skipped).
"""

from __future__ import annotations

import textwrap
from pathlib import Path

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt  # noqa: E402
import pandas as pd  # noqa: E402
from matplotlib.backends.backend_pdf import PdfPages  # noqa: E402
from matplotlib.lines import Line2D  # noqa: E402
from matplotlib.patches import Rectangle  # noqa: E402

from fitting.extrapolation import DEFAULT_OBSERVED_HALFWIDTH  # noqa: E402
from reports import figures, schema  # noqa: E402
from reports.parts import mixture_pages  # noqa: E402
from reports.scan import scan_cells, scan_figure, scan_has_values, scan_info  # noqa: E402
from reports.table_text import (  # noqa: E402
    SWEEP_NOTES,
    TRUNCATION_NOTE,
    evidence_cells,
    evidence_note,
    regime_lines,
    table_cells,
)
from reports.tables import DEFAULT_N_BOOT, config_diff, diagnostics_table  # noqa: E402
from reports.text import sig3  # noqa: E402
from reports.title_page import setup_page, title_page  # noqa: E402

ROWS_PER_TABLE_PAGE = 10
DIFF_LINES_PER_PAGE = 40
MONO = "DejaVu Sans Mono"


def _short(value: str, limit: int) -> str:
    """A config value cut to `limit` characters (length control's phrase is a whole sentence)."""
    return value if len(value) <= limit else value[:limit - 3] + "..."


def _text_page(title: str, lines: list[str], *, size: float = 10, mono: bool = False):
    with plt.rc_context(figures.STYLE):
        fig = figures._new_figure(title)
        fig.text(0.04, 0.88, "\n".join(lines), va="top", ha="left", fontsize=size, linespacing=1.45,
                 family=MONO if mono else None)
    return fig


TABLE_FONT = 9.0  # points; DejaVu Sans Mono advances 0.602 em per character
TABLE_GAP = 2  # characters between columns
TEXT_COLUMN_MIN = 12  # the variant, change and verdict columns wrap down to this many characters


def _column_widths(cells: list[list[str]], max_chars: int, only_first: bool = False) -> list[int]:
    """Characters per column: the longest line of each column, wrapping the text columns when too wide."""
    widths = [max(len(line) for row in cells for line in row[i].split("\n")) for i in range(len(cells[0]))]
    # The variant and change columns wrap first; the last (the verdict) only once they cannot.
    stages = [[0]] if only_first else [[0, 1], [len(widths) - 1]]
    while sum(widths) + TABLE_GAP * (len(widths) - 1) > max_chars:
        candidates = next(([i for i in stage if widths[i] > TEXT_COLUMN_MIN] for stage in stages
                           if any(widths[i] > TEXT_COLUMN_MIN for i in stage)), [])
        if not candidates:
            break
        widths[max(candidates, key=lambda i: widths[i])] -= 1
    return widths


def _draw_table(fig, header: list[str], rows: list[list[str]], colours: list[str], top: float, *,
                colour_last: bool = True) -> float:
    """A monospace table (exact column widths at TABLE_FONT) from figure-fraction `top`; returns its bottom."""
    width_in, height_in = fig.get_size_inches()
    char = 0.602 * TABLE_FONT / 72 / width_in  # one character, in figure fractions
    line = 1.3 * TABLE_FONT / 72 / height_in
    left = 0.025
    widths = _column_widths([header] + rows, int((1 - 2 * left) / char), only_first=not colour_last)
    xs = [left + char * (sum(widths[:i]) + TABLE_GAP * i) for i in range(len(widths))]
    right = xs[-1] + char * widths[-1]
    y = top
    for index, row in enumerate([header] + rows):
        wrapped = [figures.wrap_name(cell, w) for cell, w in zip(row, widths)]
        height = line * max(len(w) for w in wrapped) + 0.5 * line
        if index == 0:
            fig.add_artist(Rectangle((left - 0.005, y - height), right - left + 0.01, height, transform=fig.transFigure,
                                     color="0.9", zorder=0))
        for column, (x, lines) in enumerate(zip(xs, wrapped)):
            style = {"fontweight": "bold"} if index == 0 else {}
            if index and colour_last and column == len(widths) - 1:
                style = {"fontweight": "bold", "color": colours[index - 1]}
            fig.text(x, y - 0.25 * line, "\n".join(lines), va="top", ha="left", family=MONO, fontsize=TABLE_FONT,
                     linespacing=1.3, **style)
        y -= height
        fig.add_artist(Line2D([left - 0.005, right + 0.005], [y, y], color="0.75", lw=0.6))
    return y


LEGEND_FONT = 9
LEGEND_SPACING = 1.45


def _legend_below(fig, bottom: float, text: str, continued_title: str) -> list:
    """Write `text` under a table ending at `bottom`; returns the pages (a second one when it would not fit).

    A tall table (many variants with wrapped names) leaves too little room, and text drawn past the
    page's edge is silently lost, so the legend then moves to a page of its own.
    """
    line = LEGEND_SPACING * LEGEND_FONT / 72 / fig.get_size_inches()[1]
    needed = line * (text.count("\n") + 1)
    pages = [fig]
    if bottom - 0.03 - needed < 0.02:
        fig = figures._new_figure(continued_title)
        pages.append(fig)
        bottom = 0.93
    fig.text(0.025, bottom - 0.03, text, va="top", fontsize=LEGEND_FONT, linespacing=LEGEND_SPACING)
    return pages


def _table_pages(fits) -> list:
    table = fits.table
    header, rows = table_cells(table, stacked=True)
    colours = [figures.VERDICT_COLOURS.get(v, "0.2") for v in table["verdict"]]
    pages = []
    for start in range(0, max(len(rows), 1), ROWS_PER_TABLE_PAGE):
        with plt.rc_context(figures.STYLE):
            part = f" ({start // ROWS_PER_TABLE_PAGE + 1})" if len(rows) > ROWS_PER_TABLE_PAGE else ""
            fig = figures._new_figure(f"Leave-one-out summary{part}")
            bottom = _draw_table(fig, header, rows[start:start + ROWS_PER_TABLE_PAGE],
                                 colours[start:start + ROWS_PER_TABLE_PAGE], top=0.9)
            pages += _legend_below(fig, bottom, _table_legend(fits), f"Leave-one-out summary{part}: how to read it")
    return pages


def _evidence_pages(fits) -> list:
    """The seed evidence behind each verdict: paired effects with intervals, MDEs, verdicts, then each one's why."""
    table = fits.table
    if fits.comparison is None or not (table["variant"] != schema.BASE).any():
        return []
    header, rows = evidence_cells(table, stacked=True)
    seeds = sorted({int(n) for n in table["n_seeds"] if pd.notna(n)})
    verdicts = [v for v, name in zip(table["verdict"], table["variant"]) if name != schema.BASE]
    colours = [figures.VERDICT_COLOURS.get(v, "0.2") for v in verdicts]
    # columns: variant, the effects, then the coloured verdict; each why is a line of its own under the table
    # (in a column it wrapped to 12 characters a line, the figures' columns being wide)
    whys = [f"{row[0]}: {row[-1]}" for row in rows]
    order = [0, *range(2, len(header) - 1)]  # all but the seed count (in the title) and the why
    header = [header[i] for i in order]
    rows = [[row[i] for i in order] for row in rows]
    pages = []
    for start in range(0, len(rows), ROWS_PER_TABLE_PAGE):
        with plt.rc_context(figures.STYLE):
            part = f" ({start // ROWS_PER_TABLE_PAGE + 1})" if len(rows) > ROWS_PER_TABLE_PAGE else ""
            count = "/".join(map(str, seeds)) or "0"
            fig = figures._new_figure(f"How sure: the evidence behind each verdict ({count} paired seeds){part}")
            bottom = _draw_table(fig, header, rows[start:start + ROWS_PER_TABLE_PAGE],
                                 colours[start:start + ROWS_PER_TABLE_PAGE], top=0.9)
            why = [textwrap.fill(line, 165, subsequent_indent="    ")
                   for line in whys[start:start + ROWS_PER_TABLE_PAGE]]
            pages += _legend_below(fig, bottom, "\n".join(["Why each verdict:", *why, "", textwrap.fill(
                evidence_note(table), 165)]), f"How sure{part}: why each verdict, how to read it")
    return pages


def _scan_table_page(fits):
    """A scan's fits per value: A, B and C_mid with their bootstrap intervals, and the verdict against the reference."""
    header, rows = scan_cells(fits, stacked=True)
    colours = [figures.VERDICT_COLOURS.get(r, "0.2") for r in
               ["base" if "(ref)" in row[0] else row[-1].split(" (")[0] for row in rows]]
    with plt.rc_context(figures.STYLE):
        fig = figures._new_figure(f"Scan of {scan_info(fits.data)['key']}: the fit of every value")
        bottom = _draw_table(fig, header, rows, colours, top=0.9)
        fig.text(0.025, bottom - 0.03, textwrap.fill(
            "Each row fits the value's seed-mean curve; intervals: 95% residual bootstrap of that curve (within-run "
            "noise only). Verdicts compare each value with the reference on paired seeds, as the LOO table does "
            "(the 'How sure' page gives the paired effects, their intervals and the MDE).", 165),
            va="top", fontsize=9, linespacing=1.45)
    return fig


def _power_page(fits):
    """The seed planner on this sweep's own noise and variants (reports/power.py); None without paired seeds."""
    from reports.power import format_power_plan, sweep_noise

    if fits.comparison is None or fits.data.runs["seed"].nunique() < 2 or len(fits.variants) < 2:
        return None
    budget, noise = fits.data.budget, sweep_noise(fits)
    text = format_power_plan(noise, variants=noise.variants, target=budget.target, unit=budget.unit,
                             pilot="this sweep", min_a_shift=budget.min_a_shift,
                             min_compute_ratio=budget.min_compute_ratio)
    lines = [wrapped for line in text.splitlines() for wrapped in (textwrap.wrap(line, 135, subsequent_indent="    ")
                                                                   or [""])]
    return _text_page("Planning the next sweep: what more seeds would detect, and what they cost", lines, size=9,
                      mono=True)


def _diagnostics_page(fits):
    """Stability diagnostics as numbers: last-quarter mean / max per variant, threshold breaches marked."""
    summary = diagnostics_table(fits.data)
    keys = [k for k in schema.DIAGNOSTICS if f"{k} tail" in summary.columns]
    header = ["variant"] + ["\n".join(figures.wrap_name(schema.DIAGNOSTICS[k][0], 14)) for k in keys]
    rows, breached = [], False
    for _, r in summary.iterrows():
        cells = [r["variant"]]
        for key in keys:
            threshold = schema.DIAGNOSTICS[key][2]
            tail, peak = r[f"{key} tail"], r[f"{key} max"]
            mark = "  (!)" if threshold is not None and tail > threshold else ""
            breached |= bool(mark)
            cells.append("-" if pd.isna(tail) else f"{sig3(tail)}{mark}\nmax {sig3(peak)}")
        rows.append(cells)
    with plt.rc_context(figures.STYLE):
        fig = figures._new_figure("Stability diagnostics: mean over the last quarter of training (max over the run)")
        bottom = _draw_table(fig, header, rows, ["0.2"] * len(rows), top=0.9, colour_last=False)
        legend = ["Units: " + "; ".join(f"{schema.DIAGNOSTICS[k][0]}: {schema.DIAGNOSTICS[k][1]}" for k in keys),
                  "-: the variant's runs did not log it. With several seeds: mean of the runs' means, largest max."]
        legend.append("Truncation rate: the share of samples forcibly stopped, interrupted by the length control or "
                      "cut at the length limit (counted once when both), the paper's instability signal; its two "
                      "parts are the next two columns.")
        if breached:
            legend.append("(!): above the paper's instability threshold (truncation rates above 10-15% signal "
                          "instability).")
        fig.text(0.025, bottom - 0.03, "\n".join(textwrap.fill(line, 160) for line in legend), va="top",
                 fontsize=9, linespacing=1.45)
    return fig


def _table_legend(fits) -> str:
    from fitting import FLAG_MEANINGS

    budget = fits.data.budget
    window = budget.observed_window if budget.observed_window is not None else DEFAULT_OBSERVED_HALFWIDTH
    lines = [
        f"Rows: {fits.caption()}.",
        "A: asymptote with 95% bootstrap interval; B: efficiency exponent of the free fit; B at A=...: refit with "
        "A fixed to the common value (the slope plot);",
        f"C_mid: compute at half the gain, in {figures.UNIT_LABELS.get(budget.unit, budget.unit)}; pred: the "
        f"window fit's prediction at target, with the interval the sweep's back-tests calibrate (its note below); "
        f"obs: mean of the evaluations within target x (1 +- {window:g});",
        "error = pred - obs; ok: |error| <= 0.02 (the paper's noise margin on A).",
    ]
    if fits.table["low_truncation_steps"].notna().any():
        lines.append(f"steps trunc<5%: {TRUNCATION_NOTE}")
    for note in SWEEP_NOTES:
        if fits.table.attrs.get(note):
            lines.append(fits.table.attrs[note])
    flagged = fits.table[fits.table["flags"].astype(bool)]
    if len(flagged):
        lines.append("Fit flags (reasons not to trust a fit):")
        for name, text in flagged[["variant", "flags"]].itertuples(index=False):
            lines.append(f"    {name}: {text}")
        for flag in dict.fromkeys(f for text in flagged["flags"] for f in text.split(", ")):
            if flag in FLAG_MEANINGS:
                lines.append(f"        {flag}: {FLAG_MEANINGS[flag]}")
    lines += [line.lstrip("\n") for line in regime_lines(fits.table)]
    return "\n".join(textwrap.fill(line, 165, subsequent_indent="        ") for line in lines)


def _diff_pages(fits) -> list:
    lines = []
    for name in fits.data.variants():
        if name == schema.BASE:
            continue
        diff = config_diff(fits.data, name)
        lines.append(f"{name}")
        if diff is None:
            lines.append("    (no config for this variant or its base)")
        elif not diff:
            lines.append("    (identical to the base)")
        else:
            width = max(len(key) for key, _, _ in diff)
            lines += [f"    {key:<{width}}  {_short(old, 50)}  ->  {_short(new, 50)}" for key, old, new in diff]
        lines.append("")
    pages = []
    for start in range(0, len(lines), DIFF_LINES_PER_PAGE):
        title = "Config differences from the base (key: base -> variant)"
        pages.append(_text_page(title + (" (continued)" if start else ""),
                                lines[start:start + DIFF_LINES_PER_PAGE], mono=True))
    return pages


# The pages also saved as PNG.
FIGURES = ("scan", "recipes", "curves", "variants", "parts", "downstream", "fixed_a_slopes", "deltas", "power_law",
           "diagnostics")


def _power_law_pages(fits) -> tuple[list, list[str]]:
    """The optional power-law comparison: its figure and its table page (none when no variant could be fitted)."""
    from reports.power_law import power_law_cells, power_law_figure, power_law_note, power_law_table

    table, notes = power_law_table(fits)
    if table.empty:
        return [], notes + ["power law: no variant could be fitted; its pages are left out"]
    header, rows = power_law_cells(table)
    with plt.rc_context(figures.STYLE):
        page = figures._new_figure(f"Power law against sigmoid: ceilings and predictions at "
                                   f"{fits.data.budget.target:g} {figures.UNIT_LABELS.get(fits.data.budget.unit, '')}")
        bottom = _draw_table(page, header, rows, ["0.2"] * len(rows), top=0.9, colour_last=False)
        note = "\n".join(textwrap.fill(line, 160) for line in power_law_note(table).split("\n"))
        page.text(0.025, bottom - 0.03, note, va="top", fontsize=9, linespacing=1.45)
    return [("power_law", power_law_figure(fits, table)), ("power_law_table", page)], notes


def report_pages(fits, *, power_law: bool = False) -> list[tuple[str, object]]:
    """Every page of the report as (name, Figure), in order; names in FIGURES are the figure pages.

    power_law: add the power-law comparison (reports/power_law.py) after the LOO figures; off by default.
    """
    pages = [("title", title_page(fits))] + [("table", page) for page in _table_pages(fits)]
    pages += [("evidence", page) for page in _evidence_pages(fits)]
    if scan_has_values(fits):
        pages += [("scan", scan_figure(fits)), ("scan_table", _scan_table_page(fits))]
    power = _power_page(fits)
    if power is not None:
        pages.append(("power", power))
    recipes = fits.data.meta.get(schema.SWEEP_RECIPES)
    if recipes and fits.variants:  # whole recipes side by side: the paper's Figure 2
        names = {schema.BASE: f"{recipes['reference']} (reference)",
                 **{f"recipe={name}": name for name in recipes["compare"]}}
        pages.append(("recipes", figures.curves_figure(fits, "Recipes side by side (the paper's Figure 2)", names)))
    elif not fits.data.evals.empty:
        pages.append(("curves", figures.curves_figure(fits)))
    if fits.variants:
        pages.append(("variants", figures.panels_figure(fits)))
    mixture, mixture_notes = mixture_pages(fits)  # a mixture's parts (Figure 11) and downstream sets (Figure 1b)
    pages += mixture
    if fits.comparison is not None:
        pages += [("fixed_a_slopes", figures.slope_figure(fits)), ("deltas", figures.deltas_figure(fits))]
    power_law_notes = []
    if power_law and fits.variants:
        power_law_pages, power_law_notes = _power_law_pages(fits)
        pages += power_law_pages
    diagnostics, diagnostic_notes = figures.diagnostics_figure(fits.data,
                                                               figures.variant_colours(fits.data.variants()))
    pages += [("diagnostics", diagnostics), ("diagnostics_table", _diagnostics_page(fits))]
    pages += [("setup", setup_page(fits))] + [("config_diff", page) for page in _diff_pages(fits)]
    notes = fits.notes + mixture_notes + power_law_notes + diagnostic_notes
    if notes:
        wrapped = [line for note in notes for line in textwrap.wrap(note, 150, subsequent_indent="    ")]
        pages.append(("notes", _text_page("Notes: what was skipped or adjusted", wrapped, size=9.5)))
    return pages


def write_report(fits, output_pdf: str | Path, figures_dir: str | Path | None = None, *,
                 power_law: bool = False) -> list[Path]:
    """Write the PDF (and each figure page as PNG into figures_dir when given); returns the PNG paths.

    power_law: include the power-law comparison pages (report_pages)."""
    output_pdf = Path(output_pdf)
    output_pdf.parent.mkdir(parents=True, exist_ok=True)
    pages = report_pages(fits, power_law=power_law)
    pngs = []
    metadata = {"Title": f"LOO ablation report: {fits.data.name}", "Creator": "scalerl-sweep reports"}
    from recipe.tracking import atomic_destination

    try:
        with atomic_destination(output_pdf) as partial:  # a kill mid-write leaves the old report whole
            with PdfPages(partial, metadata=metadata) as pdf:
                for _, page in pages:
                    pdf.savefig(page)
        if figures_dir is not None:
            Path(figures_dir).mkdir(parents=True, exist_ok=True)
            for name, page in pages:
                if name in FIGURES:
                    pngs.append(Path(figures_dir) / f"{name}.png")
                    page.savefig(pngs[-1])
    finally:
        for _, page in pages:
            plt.close(page)
    return pngs


def build_report(sweep_dir: str | Path, output_pdf: str | Path, *, n_boot: int = DEFAULT_N_BOOT,
                 power_law: bool = False) -> Path:
    """Load a sweep directory, fit it and write the PDF report; returns the PDF path."""
    from reports.sweep_data import load_sweep
    from reports.tables import fit_sweep

    write_report(fit_sweep(load_sweep(sweep_dir), n_boot=n_boot), output_pdf, power_law=power_law)
    return Path(output_pdf)
