"""A scaling scan's own view: A, B and C_mid (with intervals) against the scanned value, and its curves.

    fits = fit_sweep(load_sweep("runs/scalerl-scan-batch"))
    scan_info(fits.data)             # {"key", "values", "reference"} from sweep.json, None for a LOO
    print(format_scan_table(fits))   # one row per value: A, B, C_mid with 95% bootstrap intervals, verdict
    scan_figure(fits)                # the report page: curves of every value; A, B, C_mid against the value

The fits and verdicts are the LOO's (reports.tables.fit_sweep): the reference value is the base, each
other value a variant, compared on paired seeds. Intervals here are the residual bootstrap of each
value's seed-mean curve (within-run noise); the dots are the per-seed fits, whose spread is the
run-to-run noise the verdicts' paired intervals use.
"""

from __future__ import annotations

import textwrap

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt  # noqa: E402
from matplotlib import ticker  # noqa: E402

from reports import figures, schema  # noqa: E402
from reports.sweep_data import choice_order  # noqa: E402
from reports.table_text import verdict_words  # noqa: E402
from reports.text import aligned_lines, sig3  # noqa: E402


def scan_info(data) -> dict | None:
    """sweep.json's scan record ({key, values, reference}), or None for a LOO sweep."""
    scan = data.meta.get(schema.SWEEP_SCAN)
    return scan if isinstance(scan, dict) and scan.get("key") else None


def scan_values(fits) -> dict[str, object]:
    """variant -> its value of the scanned key, read from its first run's config; in value order (the reference
    in its place among them)."""
    key = scan_info(fits.data)["key"]
    values = {}
    for name in fits.data.variants():
        run_ids = fits.data.runs[fits.data.runs["variant"] == name]["run_id"]
        configs = fits.data.configs
        text = next((configs[r][key] for r in run_ids if r in configs and key in configs[r]), None)
        if text is None:  # no config (an MLflow store without params): the job's choice is the value's label
            text = str(fits.data.runs[fits.data.runs["variant"] == name]["choice"].iloc[0])
        try:
            values[name] = float(text)
        except ValueError:
            values[name] = text
    return dict(sorted(values.items(), key=lambda item: choice_order(str(item[1]))))


def scan_rows(fits) -> list[dict]:
    """One dict per fitted value, in value order: value, seeds, A/B/C_mid with 95% intervals, verdict."""
    comparison, rows = fits.comparison, []
    values = scan_values(fits)
    for name, value in values.items():
        v = fits.variants.get(name)
        if v is None:
            continue
        c = comparison.variants.get(name) if comparison is not None else None
        rows.append({
            "variant": name, "value": value, "reference": name == schema.BASE, "seeds": len(v.seeds),
            "A": v.fit.a, "A_ci": v.boot.a_ci, "B": v.fit.b, "B_ci": v.boot.b_ci,
            "C_mid": v.fit.c_mid, "C_mid_ci": v.boot.c_mid_ci, "pred": v.score.predicted,
            "seed_A": [f.a for f in v.seed_fits.values() if f is not None],
            "seed_B": [f.b for f in v.seed_fits.values() if f is not None],
            "seed_C_mid": [f.c_mid for f in v.seed_fits.values() if f is not None],
            "verdict": "reference" if name == schema.BASE else (verdict_words(c.verdict, c.direction) if c else "-"),
            "verdict_key": c.verdict if c else "no verdict", "flags": ", ".join(v.boot.flags)})
    return rows


def _value_text(value) -> str:
    return f"{value:g}" if isinstance(value, float) else str(value)


def scan_cells(fits, *, stacked: bool = False) -> tuple[list[str], list[list[str]]]:
    """Header and cells of the per-value table."""
    key, target = scan_info(fits.data)["key"], fits.data.budget.target
    split = "\n" if stacked else " "
    header = [key, "seeds", f"A{split}[95% CI]", f"B{split}[95% CI]", f"C_mid{split}[95% CI]", f"pred@{target:g}",
              "verdict against the reference"]

    def ci(value, interval, digits):
        text = sig3 if digits == "sig3" else (lambda x: format(x, digits))
        return f"{text(value)}{split}[{text(interval[0])}, {text(interval[1])}]"

    rows = [[_value_text(r["value"]) + (" (ref)" if r["reference"] else ""), str(r["seeds"]),
             ci(r["A"], r["A_ci"], ".3f"), ci(r["B"], r["B_ci"], ".2f"), ci(r["C_mid"], r["C_mid_ci"], "sig3"),
             f"{r['pred']:.3f}", r["verdict"]]
            for r in scan_rows(fits)]
    return header, rows


def format_scan_table(fits) -> str:
    """The per-value table as aligned text, under a line naming the scan."""
    info = scan_info(fits.data)
    lines = aligned_lines(*scan_cells(fits))
    return "\n".join([f"scan of {info['key']} against the reference {_value_text(info['reference'])} "
                      "(intervals: 95% bootstrap of each value's seed-mean curve; verdicts: the evidence table above)",
                      *lines])


def _value_axis(ax, values: list) -> list:
    """Numbers on a log axis when all are > 0 (ticks at the values), else evenly spaced categories; returns x."""
    if all(isinstance(v, float) for v in values) and all(v > 0 for v in values):
        if max(values) / min(values) > 1.5 or len(values) == 1:
            ax.set_xscale("log")
        ax.xaxis.set_major_locator(ticker.FixedLocator(values))
        ax.xaxis.set_major_formatter(ticker.FixedFormatter([_value_text(v) for v in values]))
        ax.xaxis.set_minor_locator(ticker.NullLocator())
        return list(values)
    ax.set_xticks(range(len(values)), [_value_text(v) for v in values])
    return list(range(len(values)))


def scan_figure(fits):
    """The scan page: every value's curve and fit (left); A, B and C_mid against the value (right)."""
    info, budget = scan_info(fits.data), fits.data.budget
    rows = scan_rows(fits)
    cmap = plt.get_cmap("viridis")
    shades = [matplotlib.colors.to_hex(cmap(0.9 * i / max(1, len(rows) - 1))) for i in range(len(rows))]
    colours = {r["variant"]: "#000000" if r["reference"] else shade for r, shade in zip(rows, shades)}
    with plt.rc_context(figures.STYLE):
        fig = figures._new_figure(f"Scan of {info['key']}: each value against the reference "
                                  f"{_value_text(info['reference'])} (black)")
        curves = fig.add_axes([0.06, 0.1, 0.47, 0.8])
        for r in rows:
            v = fits.variants[r["variant"]]
            drawn = v.prediction_fit  # the window's fit, as the curves page draws it
            label = f"{_value_text(r['value'])}{' (ref)' if r['reference'] else ''}: A {drawn.a:.3f}, B {drawn.b:.2f}"
            figures._draw_variant(curves, v, budget, colours[r["variant"]], label, band=r["reference"], marker_size=10)
        figures._budget_lines(curves, budget)
        figures._style_curve_axes(curves, budget)
        curves.legend(loc="lower right", frameon=False, title=info["key"], fontsize=9)
        panels = [("A", "A (ceiling)", 0.60, "linear"), ("B", "B (efficiency exponent)", 0.35, "linear"),
                  ("C_mid", f"C_mid ({figures.UNIT_LABELS.get(budget.unit, budget.unit)})", 0.10, "log")]
        for key, label, bottom, scale in panels:
            ax = fig.add_axes([0.62, bottom, 0.36, 0.21])
            x = _value_axis(ax, [r["value"] for r in rows])
            for xi, r in zip(x, rows):
                colour = figures.VERDICT_COLOURS.get("base" if r["reference"] else r["verdict_key"], "0.5")
                low, high = r[f"{key}_ci"]
                ax.errorbar([xi], [r[key]], yerr=[[max(0.0, r[key] - low)], [max(0.0, high - r[key])]], fmt="o",
                            color=colour, ms=6, capsize=4, lw=1.2, zorder=3)
                ax.scatter([xi] * len(r[f"seed_{key}"]), r[f"seed_{key}"], s=12, color=colour, alpha=0.45,
                           marker="_", zorder=2)
            ax.plot(x, [r[key] for r in rows], color="0.6", lw=0.8, zorder=1)
            if scale == "log" and all(r[key] > 0 for r in rows):
                figures.log_compute_axis(ax, "y")
            ax.set_ylabel(label, fontsize=9)
            if bottom == 0.10:
                ax.set_xlabel(f"{info['key']} (the scanned value)")
        note = ("Points: each value's seed-mean fit with its 95% bootstrap interval, coloured by its verdict (red: "
                "ceiling mover, blue: efficiency shaper, light grey: no detectable effect, dark grey: the reference); "
                "dashes: the per-seed fits.")
        fig.text(0.62, 0.84, textwrap.fill(note, 64), fontsize=9, va="bottom")
    return fig


def scan_has_values(fits) -> bool:
    """A scan page can be drawn: the sweep is a scan and at least one value was fitted."""
    return scan_info(fits.data) is not None and bool(fits.variants)


__all__ = ["format_scan_table", "scan_cells", "scan_figure", "scan_has_values", "scan_info", "scan_rows",
           "scan_values"]
