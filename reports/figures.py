"""The report's figures (matplotlib, Agg): curves with fits and extrapolation, fixed-A slopes, deltas, diagnostics.

Every function takes SweepFits (or SweepData) and returns one Figure sized for an A4 landscape page,
with fonts >= 9 pt at 100% zoom, units on the axes and legends outside the data. Colours follow the
variant across figures: the base in black, the others in tab10 order.
"""

from __future__ import annotations

import math
import re
import textwrap

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt  # noqa: E402  (after the backend is chosen)
from matplotlib import ticker  # noqa: E402
from matplotlib.patches import Patch  # noqa: E402
import numpy as np  # noqa: E402

from reports import schema  # noqa: E402

PAGE = (11.69, 8.27)  # A4 landscape, inches
STYLE = {
    "font.size": 10, "axes.titlesize": 11, "axes.labelsize": 10, "xtick.labelsize": 9, "ytick.labelsize": 9,
    "legend.fontsize": 9, "figure.titlesize": 13, "axes.grid": True, "grid.alpha": 0.3, "grid.linewidth": 0.6,
    "axes.spines.top": False, "axes.spines.right": False, "savefig.dpi": 150,
}
UNIT_LABELS = {"device_seconds": "device-seconds", "device_hours": "device-hours", "flops": "FLOPs",
               "samples": "samples", "tokens": "tokens", "steps": "training steps"}
SMOOTHING = 20  # diagnostics: rolling mean over 1/SMOOTHING of a run's lines (raw per-step values are noise)
VERDICT_COLOURS = {"base": "0.35", "ceiling mover": "#c0392b", "efficiency shaper": "#2471a3",
                   "no detectable effect": "0.65", "no verdict": "#b9770e"}


def compute_label(unit: str) -> str:
    return f"RL compute C ({UNIT_LABELS.get(unit, unit)}, log scale)"


def wrap_name(text: str, width: int) -> list[str]:
    """Lines of at most `width` characters, broken at spaces or after '=', ',' or '(' (variant names and
    choice labels have few spaces: length_control=length_penalty(max_length=24, cache_length=8))."""
    lines = []
    for part in text.split("\n"):
        current = ""
        for token in re.split(r"(?<=[=,( ])", part):
            while len(token) > width:
                if current:
                    lines.append(current.rstrip())
                    current = ""
                lines.append(token[:width])
                token = token[width:]
            if len(current) + len(token.rstrip()) > width:
                lines.append(current.rstrip())
                current = ""
            current += token
        lines.append(current.rstrip())
    return lines


def legend_label(name: str, numbers: str = "", width: int = 34) -> str:
    """A variant's legend entry: its name wrapped to fit beside the axes, then its numbers."""
    return "\n".join(wrap_name(name, width) + ([f"    {numbers}"] if numbers else []))


def verdict_label(comparison, name: str) -> str:
    """'ceiling mover (lower A)', 'efficiency shaper (slower)', 'no detectable effect', 'no verdict', ''."""
    if comparison is None:
        return ""
    from reports.table_text import verdict_words

    c = comparison.variants[name]
    return verdict_words(c.verdict, c.direction)


def variant_colours(names: list[str]) -> dict[str, str]:
    # tab10 without its grey (grey is the base in the per-variant panels), then tab20's light shades
    palette = [c for i, c in enumerate(plt.get_cmap("tab10").colors) if i != 7]
    palette += [c for i, c in enumerate(plt.get_cmap("tab20").colors) if i % 2 and i != 15]
    others = [n for n in names if n != schema.BASE]
    colours = {n: matplotlib.colors.to_hex(palette[i % len(palette)]) for i, n in enumerate(others)}
    colours[schema.BASE] = "#000000"
    return colours


def _new_figure(title: str, **kwargs):
    fig = plt.figure(figsize=PAGE, **kwargs)
    fig.suptitle(title, x=0.02, ha="left", fontweight="bold")
    return fig


def _band(fit_result, boot, grid: np.ndarray, level: float = 0.95) -> tuple[np.ndarray, np.ndarray]:
    """Pointwise bootstrap band of R(C) on `grid` from the draws (a, b, c_mid, r0)."""
    from fitting import sigmoid_curve

    s = boot.samples
    curves = sigmoid_curve(grid[None, :], s[:, :1], s[:, 1:2], s[:, 2:3], s[:, 3:4])
    return np.quantile(curves, (1 - level) / 2, axis=0), np.quantile(curves, (1 + level) / 2, axis=0)


def _draw_variant(ax, v, budget, colour: str, label: str, *, band: bool = True, marker_size: float = 16,
                  forecasts=None) -> None:
    """Observed points (filled in the fit window, hollow after fit_at), the fit, its extrapolation and band; with
    `forecasts` (reports.forecasts) also the back-tests' fits, faint, and the calibrated interval at the target."""
    curve = v.curve[v.curve["compute"] > 0]
    inside = curve["compute"] <= budget.fit_at
    ax.scatter(curve["compute"][inside], curve["pass_rate"][inside], s=marker_size, color=colour, alpha=0.75,
               linewidths=0, zorder=3)
    ax.scatter(curve["compute"][~inside], curve["pass_rate"][~inside], s=marker_size, facecolors="none",
               edgecolors=colour, linewidths=0.9, zorder=3)
    fit = v.prediction_fit  # the window's fit and its extrapolation (the verdicts' fit may reach the target)
    start = max(fit.window[0], curve["compute"].min())
    fitted = np.geomspace(start, budget.fit_at, 120)
    extrapolated = np.geomspace(budget.fit_at, max(budget.target, curve["compute"].max()), 120)
    ax.plot(fitted, fit.predict(fitted), color=colour, lw=1.8, label=label, zorder=4)
    ax.plot(extrapolated, fit.predict(extrapolated), color=colour, lw=1.6, ls="--", zorder=4)
    if band:
        low, high = _band(fit, v.prediction_boot, extrapolated)
        ax.fill_between(extrapolated, low, high, color=colour, alpha=0.15, linewidth=0, zorder=2)
    if forecasts is not None and v.variant in forecasts.rows:
        _draw_backtests(ax, forecasts.row_backtests.get(v.variant, []), forecasts.rows[v.variant], colour, start)


def _draw_backtests(ax, backtests, forecast, colour: str, start: float) -> None:
    """Each back-test's fit from the window's start to the point it was scored at (thin, faint: how the window's
    fits moved as it grew), and the forecast's calibrated interval as a bar at the target."""
    for test in backtests:
        grid = np.geomspace(start, test.scored_at, 60)
        ax.plot(grid, test.fit.predict(grid), color=colour, lw=0.8, alpha=0.45, ls=(0, (1, 1)), zorder=3)
        ax.scatter([test.scored_at], [test.predicted], s=14, marker="x", color=colour, alpha=0.6, zorder=3)
    low, high = forecast.interval  # clipped to [0, 1], so the centre (prediction - bias) may lie outside it
    middle = (low + high) / 2
    ax.errorbar([forecast.target], [middle], yerr=[[middle - low], [high - middle]],
                color=colour, lw=1.2, capsize=3, fmt="none", zorder=5)


def _budget_lines(ax, budget) -> None:
    ax.axvline(budget.fit_at, color="0.3", lw=0.9, ls=":")
    ax.axvline(budget.target, color="0.3", lw=0.9, ls="-.")


def log_compute_axis(ax, axis: str = "x") -> None:
    """Log scale with plain numbers at 1, 2, 5 x 10^k (a reader wants 120, not 1.2 x 10^2)."""
    ax.set_xscale("log") if axis == "x" else ax.set_yscale("log")
    target = ax.xaxis if axis == "x" else ax.yaxis
    target.set_major_locator(ticker.LogLocator(base=10, subs=(1.0, 2.0, 5.0)))
    target.set_major_formatter(ticker.FuncFormatter(lambda value, _: f"{value:g}"))
    target.set_minor_formatter(ticker.NullFormatter())


def _style_curve_axes(ax, budget) -> None:
    log_compute_axis(ax)
    ax.set_xlabel(compute_label(budget.unit))
    ax.set_ylabel("validation pass rate R")


def curves_figure(fits, title: str = "Compute-performance curves", names: dict[str, str] | None = None):
    """Every variant's curve against compute with its fit, extrapolation to target and 95% band; `names` relabels
    variants in the legend (a recipes sweep's: "recipe=dapo" -> "dapo")."""
    budget = fits.data.budget
    colours = variant_colours(list(fits.data.variants()))
    names = names or {}
    with plt.rc_context(STYLE):
        fig = _new_figure(f"{title}: fit on C <= {budget.fit_at:g}, "
                          f"extrapolated to {budget.target:g} {UNIT_LABELS.get(budget.unit, budget.unit)}")
        ax = fig.add_axes([0.07, 0.1, 0.6, 0.8])
        for name, v in fits.variants.items():
            _draw_variant(ax, v, budget, colours[name], legend_label(names.get(name, name),
                                                                      f"A = {v.prediction_fit.a:.3f}, "
                                                                      f"B = {v.prediction_fit.b:.2f}"),
                          forecasts=fits.forecasts)
        for name in fits.failures:  # still worth seeing: why it could not be fitted is often visible
            rows = fits.data.evals[(fits.data.evals["variant"] == name) & (fits.data.evals["compute"] > 0)]
            ax.scatter(rows["compute"], rows["pass_rate"], s=16, marker="x", color=colours[name],
                       label=legend_label(name, "not fitted (see notes)"))
        _budget_lines(ax, budget)
        _style_curve_axes(ax, budget)
        handles, labels = ax.get_legend_handles_labels()
        level = f"{100 * fits.forecasts.run_calibration.level:.0f}" if fits.forecasts is not None else "90"
        handles += [plt.Line2D([], [], color="0.3", ls=":"), plt.Line2D([], [], color="0.3", ls="-."),
                    plt.Line2D([], [], color="0.3", marker="o", ls="none"),
                    plt.Line2D([], [], color="0.3", marker="o", ls="none", markerfacecolor="none"),
                    plt.Line2D([], [], color="0.3", ls="--"), Patch(color="0.3", alpha=0.2),
                    plt.Line2D([], [], color="0.3", lw=0.8, ls=(0, (1, 1))),
                    plt.Line2D([], [], color="0.3", marker="|", markersize=10, ls="none")]
        labels += [f"fit_at = {budget.fit_at:g}", f"target = {budget.target:g}", "observed, inside fit window",
                   "observed after fit_at", "extrapolation", "95% bootstrap band (within-run)",
                   "back-test fits (to fit_at / r, x: scored)", f"{level}% interval from the back-tests"]
        fig.legend(handles, labels, loc="upper left", bbox_to_anchor=(0.69, 0.9), frameon=False)
        seeds = fits.data.runs["seed"].nunique()
        points = f"\nPoints: mean over {seeds} seeds per evaluation step" if seeds > 1 else ""
        fig.text(0.69, 0.1, "R(C) = R0 + (A - R0) / (1 + (C_mid / C)^B)\nR0: the step-0 evaluation (C = 0,\n"
                 f"not drawn on the log axis){points}", fontsize=9, va="bottom")
    return fig


def panels_figure(fits):
    """One panel per variant against the base: the same curves, easier to read than all on one axes."""
    budget = fits.data.budget
    names = [n for n in fits.variants if n != schema.BASE] or list(fits.variants)
    colours = variant_colours(list(fits.data.variants()))
    columns = min(3, len(names))
    rows = math.ceil(len(names) / columns)
    with plt.rc_context(STYLE):
        fig = _new_figure("Each variant against the base (grey: base; dashed: extrapolation; band: 95% bootstrap)\n"
                          "dotted: back-test fits, x where each was scored; bar at the target: back-tests' interval")
        axes = fig.subplots(rows, columns, squeeze=False, sharex=True, sharey=True,
                            gridspec_kw={"left": 0.07, "right": 0.98, "top": 0.88, "bottom": 0.09,
                                         "hspace": 0.45, "wspace": 0.08})
        for ax, name in zip(axes.flat, names):
            if name != schema.BASE and schema.BASE in fits.variants:
                _draw_variant(ax, fits.variants[schema.BASE], budget, "0.6", "base", band=False, marker_size=9)
            _draw_variant(ax, fits.variants[name], budget, colours[name], name, marker_size=12,
                          forecasts=fits.forecasts)
            _budget_lines(ax, budget)
            ax.set_title("\n".join(wrap_name(name, 48) + [verdict_label(fits.comparison, name)]), fontsize=10)
            log_compute_axis(ax)
        for index in range(len(names), rows * columns):
            axes.flat[index].set_visible(False)
            if index >= columns:  # the panel above is now the last of its column: it gets the x axis
                above = axes.flat[index - columns]
                above.xaxis.set_tick_params(labelbottom=True)
                above.set_xlabel(compute_label(budget.unit))
        for ax in axes[-1]:
            ax.set_xlabel(compute_label(budget.unit))
        for ax in axes[:, 0]:
            ax.set_ylabel("pass rate R")
    return fig


def slope_figure(fits):
    """The paper's fixed-A comparison: F(R) against C on log-log axes, one line per variant, slope = B."""
    budget, comparison = fits.data.budget, fits.comparison
    colours = variant_colours(list(fits.data.variants()))
    with plt.rc_context(STYLE):
        fig = _new_figure(f"Fixed-A comparison: A fixed to {comparison.fixed_a:.3f} for every variant; "
                          "the slope of each line is B")
        ax = fig.add_axes([0.08, 0.1, 0.58, 0.8])
        for name, c in comparison.variants.items():
            refit = c.fixed_a_fit
            defined = np.isfinite(c.log_f)
            compute = np.exp(c.log_c)
            ax.scatter(compute[defined], np.exp(c.log_f[defined]), s=14, color=colours[name], alpha=0.7, linewidths=0)
            line = np.geomspace(compute.min(), compute.max(), 50)
            ax.plot(line, line ** refit.b, color=colours[name], lw=1.6,
                    label=legend_label(name, f"B = {refit.b:.2f} [{c.b_fixed_ci[0]:.2f}, {c.b_fixed_ci[1]:.2f}]"))
        log_compute_axis(ax)
        ax.set_yscale("log")
        ax.set_xlabel(compute_label(budget.unit))
        ax.set_ylabel("F(R) = C_mid^B / ((A - R0) / (R - R0) - 1)   (log scale)")
        ax.legend(loc="upper left", bbox_to_anchor=(1.02, 1.0), frameon=False, title="variant, B [95% CI]")
        fig.text(0.69, 0.1, "On the fitted curve F(R) = C^B: each variant is a\nstraight line of slope B in "
                 "log-log axes.\nPoints with R >= A or R <= R0 have no F (left out).\nThe verdict fits' points only.",
                 fontsize=9, va="bottom")
    return fig


def deltas_figure(fits):
    """Bars of A - A_base (free fits) and B - B_base (fixed-A refits) with 95% error bars, coloured by verdict."""
    comparison = fits.comparison
    names = [n for n in comparison.variants if n != schema.BASE]
    base = comparison.variants[schema.BASE]

    def half(interval):
        return (interval[1] - interval[0]) / 2

    with plt.rc_context(STYLE):
        fig = _new_figure("Differences from the base (error bars: 95%, both runs' bootstrap intervals combined)")
        axes = fig.subplots(1, 2, gridspec_kw={"left": 0.2, "right": 0.98, "top": 0.86, "bottom": 0.16,
                                               "wspace": 0.08}, sharey=True)
        y = np.arange(len(names))[::-1]
        colours = [VERDICT_COLOURS.get(comparison.variants[n].verdict, "0.5") for n in names]
        delta_a = [comparison.variants[n].delta_a for n in names]
        err_a = [math.hypot(half(comparison.variants[n].a_ci), half(base.a_ci)) for n in names]
        delta_b = [comparison.variants[n].delta_b for n in names]
        err_b = [math.hypot(half(comparison.variants[n].b_fixed_ci), half(base.b_fixed_ci)) for n in names]
        for ax, values, errors, title in ((axes[0], delta_a, err_a, "delta A = A - A_base (free fits)"),
                                          (axes[1], delta_b, err_b,
                                           f"delta B = B - B_base (A fixed to {comparison.fixed_a:.3f})")):
            bars = ax.barh(y, values, xerr=errors, color=colours, height=0.6, capsize=4,
                           error_kw={"elinewidth": 1.0, "ecolor": "0.2"})
            if ax is axes[1]:  # a ceiling mover's B at another run's A says little: drawn faint and hatched
                for bar, name in zip(bars, names):
                    if comparison.variants[name].verdict == "ceiling mover":
                        bar.set_alpha(0.35)
                        bar.set_hatch("//")
            ax.axvline(0, color="0.2", lw=0.8)
            ax.set_title(title)
            ax.grid(axis="y", visible=False)
        axes[0].axvspan(-comparison.margin, comparison.margin, color="0.85", zorder=0)
        axes[0].set_xlabel(f"delta A (pass rate); grey band: noise margin +-{comparison.margin:g}")
        axes[1].set_xlabel("delta B (efficiency exponent)\nhatched: ceiling mover, its B is not comparable")
        axes[0].set_yticks(y, ["\n".join(wrap_name(n, 30)) for n in names])
        handles = [Patch(color=c, label=v) for v, c in VERDICT_COLOURS.items() if v != "base"]
        fig.legend(handles=handles, loc="lower center", ncol=3, frameon=False, title="verdict")
    return fig


def diagnostics_figure(data, colours: dict[str, str]):
    """Stability diagnostics against the training step, one panel per diagnostic, one line per run.

    Returns (figure, notes): a diagnostic no run logged gets an empty panel and a note; a run that lacks
    a diagnostic others have is named in a note. Dashed red line: the paper's instability threshold.
    """
    frame, notes = data.diagnostics, []
    keys = list(schema.DIAGNOSTICS)
    rows = 2
    columns = math.ceil((len(keys) + 1) / rows)  # one cell left for the legend
    with plt.rc_context(STYLE):
        fig = _new_figure(f"Stability diagnostics per run (training metrics against the step; rolling mean over "
                          f"1/{SMOOTHING} of the run)")
        axes = fig.subplots(rows, columns, squeeze=False,
                            gridspec_kw={"left": 0.07, "right": 0.98, "top": 0.88, "bottom": 0.08,
                                         "hspace": 0.5, "wspace": 0.45})
        for ax, key in zip(axes.flat, keys):
            title, ylabel, threshold = schema.DIAGNOSTICS[key]
            ax.set_title(textwrap.fill(title, 24), fontsize=10)
            ax.set_xlabel("training step")
            ax.set_ylabel(ylabel)
            if key not in frame.columns or frame[key].isna().all():
                ax.text(0.5, 0.5, f"not logged\n({key})", ha="center", va="center", transform=ax.transAxes,
                        fontsize=9, color="0.4")
                notes.append(f"{key}: no run logged it")
                continue
            lacking = []
            for (variant, seed), rows_ in frame.groupby(["variant", "seed"], sort=False):
                values = rows_[["step", key]].dropna()
                if values.empty:
                    lacking.append(f"{variant} seed {seed}")
                    continue
                smoothed = values[key].rolling(max(1, len(values) // SMOOTHING), min_periods=1).mean()
                ax.plot(values["step"], smoothed, color=colours.get(variant, "0.5"), lw=1.1)
            if threshold is not None:
                ax.axhline(threshold, color="#c0392b", lw=0.9, ls="--")
            if lacking:
                notes.append(f"{key}: not logged by {', '.join(lacking)}")
        legend_ax = axes.flat[len(keys)] if len(keys) < rows * columns else None
        for ax in axes.flat[len(keys) + 1:]:
            ax.set_visible(False)
        handles = [plt.Line2D([], [], color=colours[n], lw=2, label=legend_label(n, width=20))
                   for n in data.variants() if n in colours]
        threshold = f"truncation rate above\n{schema.TRUNCATION_INSTABILITY:.0%}: unstable (paper)"
        handles.append(plt.Line2D([], [], color="#c0392b", ls="--", label=threshold))
        if legend_ax is not None:
            legend_ax.axis("off")
            legend_ax.legend(handles=handles, loc="center left", bbox_to_anchor=(-0.25, 0.5), frameon=False)
        else:
            fig.legend(handles=handles, loc="lower center", ncol=4, frameon=False)
    return fig, notes
