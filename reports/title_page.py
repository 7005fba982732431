"""The report's first page, laid out as a paper's: title, what was swept, one sentence per verdict; and its setup page.

    title_page(fits)  # Figure: title; base, seeds, budget, machine, date; the base's fit; a finding per variant
    setup_page(fits)  # Figure: the base recipe, the budget, the fit and the verdict rule, in full

Proportional type throughout (matplotlib text only); the numbers behind each sentence are the LOO
table's (reports.tables), worded by reports.verdicts.
"""

from __future__ import annotations

import datetime
import functools

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt  # noqa: E402
import pandas as pd  # noqa: E402
from matplotlib.font_manager import FontProperties  # noqa: E402
from matplotlib.lines import Line2D  # noqa: E402

from reports import figures, schema  # noqa: E402
from reports.scan import scan_info  # noqa: E402
from reports.table_text import verdict_text  # noqa: E402
from reports.text import sig3  # noqa: E402
from reports.verdicts import verdict_sentence  # noqa: E402

LEFT, RIGHT = 0.05, 0.95  # page margins, figure fractions
GREY = "0.35"
# Findings lead with what the sweep found: verdicts first, then the nulls, then what could not be called.
VERDICT_ORDER = ["ceiling mover", "efficiency shaper", "no detectable effect", "no verdict", "-", "not fitted"]


@functools.lru_cache(maxsize=None)
def _renderer():
    from matplotlib.backends.backend_agg import RendererAgg

    return RendererAgg(1, 1, 72)  # measures text in points


def _width(text: str, size: float, weight: str = "normal") -> float:
    """The width of `text` in DejaVu Sans at `size` points, in figure fractions of the page's width."""
    font = FontProperties(size=size, weight=weight)
    return _renderer().get_text_width_height_descent(text, font, ismath=False)[0] / 72 / figures.PAGE[0]


def _wrap(text: str, width: float, size: float, weight: str = "normal") -> list[str]:
    """`text` broken at spaces into lines no wider than `width` (a figure fraction) at `size` points."""
    lines: list[str] = []
    for word in text.split():
        if lines and _width(f"{lines[-1]} {word}", size, weight) <= width:
            lines[-1] += f" {word}"
        else:
            lines.append(word)
    return lines


def _date(stamp) -> str:
    """'2026-11-21 10:00' from sweep.json's ISO timestamp; '' when unknown."""
    try:
        return datetime.datetime.fromisoformat(str(stamp)).strftime("%Y-%m-%d %H:%M")
    except ValueError:
        return ""


def title_text(fits) -> tuple[str, str]:
    """(title, the one line of what was swept: base, variants x seeds, budget, machine and date when known)."""
    data, budget, meta = fits.data, fits.data.budget, fits.data.meta
    scan = scan_info(data)
    title = (f"Scaling scan of {scan['key']}" if scan else "Leave-one-out ablation") + f": {data.name}"
    seeds = meta.get(schema.SWEEP_SEEDS) or sorted(data.runs["seed"].unique().tolist())
    unit = figures.UNIT_LABELS.get(budget.unit, budget.unit)
    others = data.runs["variant"].nunique() - int(schema.BASE in set(data.runs["variant"]))
    changed = f"{others} value{'s' if others != 1 else ''} against {scan['reference']}" if scan else (
        f"{others} variant{'s' if others != 1 else ''}")
    parts = [f"base {meta.get(schema.SWEEP_BASE, 'unknown')}",
             f"{changed} x {len(seeds)} seed{'s' if len(seeds) != 1 else ''} ({', '.join(map(str, seeds))})",
             f"budget in {unit}: fit to {budget.fit_at:g}, predicted at {budget.target:g}"
             + ("; verdicts fit to the target" if budget.verdicts_from == "run" else "")]
    if meta.get(schema.SWEEP_MACHINE):
        parts.append(str(meta[schema.SWEEP_MACHINE]))
    if _date(meta.get(schema.SWEEP_CREATED)):
        parts.append(_date(meta[schema.SWEEP_CREATED]))
    return title, " · ".join(parts)


def base_sentence(fits) -> str:
    """The reference's own fit, the figures every sentence is measured against."""
    table = fits.table.set_index("variant")
    if schema.BASE not in table.index or pd.isna(table.loc[schema.BASE, "A"]):
        return "The base was not fitted: no verdicts (the notes page says why)."
    r, budget = table.loc[schema.BASE], fits.data.budget
    unit = figures.UNIT_LABELS.get(budget.unit, budget.unit)
    return (f"Ceiling A {r['A']:.3f} [{r['A_lo']:.3f}, {r['A_hi']:.3f}], exponent B {r['B']:.2f}, half the gain at "
            f"{sig3(r['C_mid'])} {unit}; pass rate {r['pred_at_target']:.3f} predicted at {budget.target:g}, "
            f"{r['observed_at_target']:.3f} observed.".replace("nan observed", "none observed"))


def findings(fits) -> list[tuple[str, str, str, str]]:
    """(variant, change, verdict words, sentence): the base first, then every variant, verdicts before nulls."""
    table, budget = fits.table, fits.data.budget
    target = f"{budget.target:g} {figures.UNIT_LABELS.get(budget.unit, budget.unit)}"
    base, rows = [], []
    for _, r in table.iterrows():
        change = r["changed"] or ""
        if change.startswith(f"{r['axis']}: "):
            change = change[len(r["axis"]) + 2:]  # the variant's name already says the axis
        if r["variant"] == schema.BASE:
            base.append((r["variant"], change or "the reference", "reference", base_sentence(fits)))
            continue
        sentence = ("Fitted, not compared: the base was not fitted." if r["verdict"] == "-" else
                    verdict_sentence(r, target=target, min_compute_ratio=budget.min_compute_ratio))
        rows.append((r["variant"], change, verdict_text(r, "\n"), sentence))
    order = {name: i for i, name in enumerate(VERDICT_ORDER)}
    return base + sorted(rows, key=lambda row: order.get(_kind(row[2]), len(order)))


def _kind(verdict: str) -> str:
    """'efficiency shaper' from 'efficiency shaper\n(faster)'; the base's 'reference' is its 'base'."""
    kind = verdict.split("\n")[0]
    return "base" if kind == "reference" else kind


def _rule_text(fits) -> str:
    budget = fits.data.budget
    return (
        "How a verdict is called: every variant runs on the base's seeds, so each seed gives a difference, variant "
        "minus base, read from that seed's own fit of R(C) = R0 + (A - R0) / (1 + (C_mid / C)^B); effects are paired "
        "over seeds, with t-intervals at the table-wide level (Bonferroni). A ceiling mover's dA interval clears "
        f"±{budget.min_a_shift:g} and every A is identifiable; an efficiency shaper's compute to reach 50% or 90% of "
        f"the base's gain lies beyond x{budget.min_compute_ratio:.2f} (or below x{1 / budget.min_compute_ratio:.2f}); "
        "otherwise no detectable effect, at the MDE: the smallest effect the sweep sees 80% of the time. "
        "The pages after this one give the table, the evidence behind each verdict ('How sure'), the curves, the "
        "diagnostics and the setup.")


def _block(fig, x: float, y: float, lines: list[str], size: float, **style) -> float:
    """Draw `lines` from `y` down; returns the y under them."""
    if lines:
        fig.text(x, y, "\n".join(lines), va="top", ha="left", fontsize=size, linespacing=1.3, **style)
    return y - len(lines) * _line(size)


# the findings' three columns: the variant (and its change, in grey), the verdict (in its colour), the sentence
NAME_X, VERDICT_X, SENTENCE_X = LEFT, 0.31, 0.51
RULE_SIZE = 9.5


def _line(size: float) -> float:
    return 1.3 * size / 72 / figures.PAGE[1]


def _small(size: float) -> float:
    """The grey line under a variant's name: 1.5 points smaller, never under 9."""
    return max(9.0, size - 1.5)


def _wrap_name(name: str, width: float, size: float) -> list[str]:
    """A variant's name in bold, broken where figures.wrap_name breaks (after '=', ',' or '(', or at spaces)."""
    per_char = _width(name, size, "bold") / max(len(name), 1)
    return figures.wrap_name(name, max(8, int(width / per_char)))


def _row_lines(row: tuple[str, str, str, str], size: float) -> tuple[list[str], list[str], list[str], list[str]]:
    """A finding wrapped to its columns at `size` points: (name, change (_small), verdict, sentence)."""
    name, change, verdict, sentence = row
    gap = 0.015
    return (_wrap_name(name, VERDICT_X - NAME_X - gap, size),
            _wrap(change, VERDICT_X - NAME_X - gap, _small(size)),
            [line for part in verdict.split("\n") for line in _wrap(part, SENTENCE_X - VERDICT_X - gap, size, "bold")],
            _wrap(sentence, RIGHT - SENTENCE_X, size))


def _row_height(row, size: float) -> float:
    name, change, verdict, sentence = _row_lines(row, size)
    return max(len(name) * _line(size) + len(change) * _line(_small(size)),
               max(len(verdict), len(sentence)) * _line(size)) + 0.7 * _line(size)


def _fit_findings(rows: list, rule: list[str], room: float) -> tuple[list, list[str], float]:
    """(rows, rule lines, type size) that fit `room` (a figure fraction): the largest type down to 9 points; past
    that the paragraph on verdicts gives way to a pointer to the setup page, and then the last rows to a line
    saying how many more the table holds."""
    def height(rows, rule, size):
        heading = _line(size + 2) + 0.4 * _line(size)  # "Findings" and the gap under it
        return heading + sum(_row_height(r, size) for r in rows) + (len(rule) + 1.5) * _line(RULE_SIZE)

    pointer = ["How a verdict is called: the setup page; the evidence behind each: the 'How sure' page."]
    for lines in (rule, pointer):
        for size in (12, 11, 10, 9):
            if height(rows, lines, size) <= room:
                return rows, lines, size
    kept = list(rows)
    while len(kept) > 1 and height(kept, pointer * 2, 9) > room:  # room for the pointer and the "more" line
        kept.pop()
    more = len(rows) - len(kept)
    return kept, pointer + [f"{more} more variant{'s' if more != 1 else ''}: the table on the next page."], 9


def title_page(fits):
    """Page 1: title, what was swept, a sentence per variant (the base's fit first), how a verdict is called."""
    title, swept = title_text(fits)
    rows = findings(fits)
    rule = _wrap(_rule_text(fits), RIGHT - LEFT, RULE_SIZE)
    with plt.rc_context(figures.STYLE):
        fig = plt.figure(figsize=figures.PAGE)
        y = _block(fig, LEFT, 0.93, _wrap(title, RIGHT - LEFT, 22, "bold"), 22, fontweight="bold")
        y = _block(fig, LEFT, y - 0.015, _wrap(swept, RIGHT - LEFT, 12), 12, color=GREY)
        fig.add_artist(Line2D([LEFT, RIGHT], [y - 0.02, y - 0.02], color="0.6", lw=0.8))
        y -= 0.05
        rows, rule, size = _fit_findings(rows, rule, room=y - 0.08)
        y = _block(fig, LEFT, y, ["Findings"], size + 2, fontweight="bold") - 0.4 * _line(size)
        for row in rows:
            name, change, verdict, sentence = _row_lines(row, size)
            under_name = _block(fig, NAME_X, y, name, size, fontweight="bold")
            _block(fig, NAME_X, under_name, change, _small(size), color=GREY)
            _block(fig, VERDICT_X, y, verdict, size, fontweight="bold",
                   color=figures.VERDICT_COLOURS.get(_kind(row[2]), "0.2"))
            _block(fig, SENTENCE_X, y, sentence, size)
            y -= _row_height(row, size)
        _block(fig, LEFT, y - 1.5 * _line(RULE_SIZE), rule, RULE_SIZE, color=GREY)
        made = datetime.datetime.now().astimezone().strftime("%Y-%m-%d %H:%M")
        _block(fig, LEFT, 0.045, _wrap(f"Report made {made} from {fits.data.source}", RIGHT - LEFT, 9), 9,
               color=GREY)
    return fig


def _short(value: str, limit: int) -> str:
    """A config value cut to `limit` characters (length control's phrase is a whole sentence)."""
    return value if len(value) <= limit else value[:limit - 3] + "..."


def setup_rows(fits) -> list[tuple[str, str]]:
    """(key, value) rows of the setup page: where the sweep came from, its budget, the base recipe, fit and verdict."""
    data, budget, meta = fits.data, fits.data.budget, fits.data.meta
    seeds = meta.get(schema.SWEEP_SEEDS) or sorted(data.runs["seed"].unique().tolist())
    base_id = data.runs[data.runs["variant"] == schema.BASE]["run_id"]
    base_config = data.configs.get(base_id.iloc[0], {}) if len(base_id) else {}
    unit = figures.UNIT_LABELS.get(budget.unit, budget.unit)
    rows = [
        ("Sweep", data.name),
        ("Created", str(meta.get(schema.SWEEP_CREATED, "unknown"))),
        ("Report made", datetime.datetime.now().astimezone().isoformat(timespec="seconds")),
        ("Machine", str(meta.get(schema.SWEEP_MACHINE, "unknown"))),
        ("Executor", str(meta.get(schema.SWEEP_EXECUTOR, "unknown"))),
        ("Read from", str(data.source)),
        ("Budget", f"unit {unit}; burn-in {budget.burn_in:g}; fit at {budget.fit_at:g}; target {budget.target:g}; "
                   f"fit method {budget.fit_method}, weights {budget.fit_weights}; verdicts from the "
                   + ("whole run's fits (to the target)" if budget.verdicts_from == "run" else "window's fits")),
        ("Seeds", ", ".join(map(str, seeds))),
        ("Jobs", f"{len(data.runs)} ({data.runs['variant'].nunique()} variants x seeds); "
                 f"{len(data.evals)} evaluation points"),
        ("Base recipe", str(meta.get(schema.SWEEP_BASE, "unknown"))),
    ]
    for axis in schema.AXES:
        if f"{axis}.name" in base_config:
            rows.append((f"    {axis}", str(base_config[f"{axis}.name"]) + "".join(
                f", {k.split('.', 1)[1]}={_short(v, 40)}" for k, v in sorted(base_config.items())
                if k.startswith(axis + ".") and not k.endswith(".name") and len(k.split(".")) == 2)))
    rows += [
        ("Fit", "R(C) = R0 + (A - R0) / (1 + (C_mid / C)^B), R0 = the step-0 evaluation; least squares with each "
                "point weighted by the compute it stands for" + (" (here: equally)" if budget.fit_weights == "equal"
                                                                 else "")
                + f"; A intervals: residual block bootstrap ({fits.n_boot} draws, 95%); with >= 2 seeds the "
                "prediction interval adds run-to-run variance and the fits' window-end miss."),
        ("Verdicts", "paired over seeds (variant - base of the same seed, each seed's own fit; t-intervals at the "
                     f"table-wide level): ceiling mover = the dA interval clears ±{budget.min_a_shift:g} and every "
                     "seed's A is identifiable (no seed-mean A interval at its bound either); efficiency shaper = "
                     "the compute to reach 50% or 90% of the base's gain differs beyond "
                     f"x{budget.min_compute_ratio:.2f}; else no detectable effect; one seed: no verdict. "
                     "Details: the 'How sure' page."),
    ]
    return rows


def setup_page(fits):
    """The sweep's setup in full: provenance, budget, the base recipe axis by axis, the fit and the verdict rule."""
    size, key_x, value_x = 10, LEFT, 0.2
    with plt.rc_context(figures.STYLE):
        fig = figures._new_figure("Setup: the sweep, its budget, the base recipe, the fit and the verdict rule")
        y = 0.9
        for key, value in setup_rows(fits):
            lines = _wrap(value, RIGHT - value_x, size) or [""]
            sub = key.startswith(" ")  # an axis of the base recipe, under "Base recipe"
            _block(fig, key_x + (0.015 if sub else 0), y, [key.strip()], size, fontweight="normal" if sub else "bold",
                   color=GREY if sub else "0.1")
            y = _block(fig, value_x, y, lines, size) - 0.006
    return fig
