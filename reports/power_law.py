"""The optional power-law comparison of the report: R = A - D / C^B against the sigmoid, on the same window.

    table, notes = power_law_table(fits)   # one row per fitted variant (POWER_LAW_COLUMNS)
    figure = power_law_figure(fits, table)

The paper (arXiv 2510.13786) fits both forms to the same runs and finds that the power law misjudges
the ceiling of a saturating curve: fit on 1.5k-50k GPU-hours it put A at 1.0 where the curve
saturates near 0.65, while the sigmoid gave A = 0.645 on every fit window. Each variant's curve (the
seed mean when several seeds) is fitted both ways on burn_in <= C <= fit_at and both are read at the
target. Off by default; `sweep report --power-law` adds these pages.
"""

from __future__ import annotations

import math

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402

from reports import figures  # noqa: E402
from reports.table_text import fmt  # noqa: E402

POWER_LAW_COLUMNS = ("variant", "sigmoid_A", "power_law_A", "power_law_A_at_bound", "sigmoid_pred", "power_law_pred",
                     "observed_at_target", "sigmoid_error", "power_law_error")
PAPER_POINT = ("The paper (arXiv 2510.13786) fits both forms to the same runs: the power law misjudges the ceiling "
               "of a saturating curve (fit on 1.5k-50k GPU-hours it gave A = 1.0 where the curve saturates near "
               "0.65; the sigmoid gave 0.645 on every fit window), so its ceiling is no basis for choosing a recipe.")
EXTEND = 2.0  # the figure draws both fits out to EXTEND x target, where their ceilings part


def power_law_table(fits) -> tuple[pd.DataFrame, list[str]]:
    """Per fitted variant: both fits' ceilings and predictions at target, the observation there and the errors.

    Columns POWER_LAW_COLUMNS, then power_law_fit (the fitting.PowerLawFit, for the figure).
    A power-law A at its bound (1.0) means the fit found no ceiling. A variant whose power law cannot be
    fitted (fewer than 3 points with C > 0 in the window) is left out with a note.
    """
    from fitting import FitInputError, fit_power_law

    budget, rows, notes = fits.data.budget, [], []
    for name, v in fits.variants.items():
        try:
            power = fit_power_law(v.curve["compute"].to_numpy(), v.curve["pass_rate"].to_numpy(),
                                  burn_in=budget.burn_in, fit_until=budget.fit_at)
        except FitInputError as error:
            notes.append(f"{name}: power law not fitted: {error}")
            continue
        observed = v.score.observed
        sigmoid = v.prediction_fit  # fitted on the same window as the power law
        sigmoid_pred, power_pred = float(sigmoid.predict(budget.target)), float(power.predict(budget.target))
        rows.append({"variant": name, "sigmoid_A": sigmoid.a, "power_law_A": power.a,
                     "power_law_A_at_bound": power.a_at_bound, "sigmoid_pred": sigmoid_pred,
                     "power_law_pred": power_pred, "observed_at_target": observed,
                     "sigmoid_error": sigmoid_pred - observed, "power_law_error": power_pred - observed,
                     "power_law_fit": power})
    table = pd.DataFrame(rows, columns=list(POWER_LAW_COLUMNS) + ["power_law_fit"])
    table.attrs["target"] = budget.target
    return table, notes


def power_law_cells(table: pd.DataFrame) -> tuple[list[str], list[list[str]]]:
    """Header and formatted cells of the comparison (A and predictions to 3 decimals)."""
    at = f"@{table.attrs.get('target', math.nan):g}"
    header = ["variant", "A\nsigmoid", "A\npower law", f"pred{at}\nsigmoid", f"pred{at}\npower law", f"obs{at}",
              "error\nsigmoid", "error\npower law"]
    rows = []
    for _, r in table.iterrows():
        power_a = fmt(r["power_law_A"], ".3f") + (" (bound:\nno ceiling)" if r["power_law_A_at_bound"] else "")
        rows.append([r["variant"], fmt(r["sigmoid_A"], ".3f"), power_a, fmt(r["sigmoid_pred"], ".3f"),
                     fmt(r["power_law_pred"], ".3f"), fmt(r["observed_at_target"], ".3f"),
                     fmt(r["sigmoid_error"], "+.3f"), fmt(r["power_law_error"], "+.3f")])
    return header, rows


def power_law_figure(fits, table: pd.DataFrame):
    """One panel per variant: observed points, the sigmoid (colour), the power law (black, dashed).

    Both are drawn out to EXTEND x target, where a ceiling and a curve still rising part visibly.
    """
    budget = fits.data.budget
    names = list(table["variant"])
    colours = figures.variant_colours(list(fits.data.variants()))
    columns = min(3, max(len(names), 1))
    rows = max(1, math.ceil(len(names) / columns))
    with plt.rc_context(figures.STYLE):
        fig = figures._new_figure(f"Power law R = A - D / C^B against the sigmoid, both fit on C <= {budget.fit_at:g} "
                                  f"(thin lines: each fit's ceiling A)")
        axes = fig.subplots(rows, columns, squeeze=False, sharex=True, sharey=True,
                            gridspec_kw={"left": 0.07, "right": 0.98, "top": 0.86, "bottom": 0.1,
                                         "hspace": 0.45, "wspace": 0.08})
        for ax, (_, row) in zip(axes.flat, table.iterrows()):
            v, colour = fits.variants[row["variant"]], colours.get(row["variant"], "0.3")
            curve = v.curve[v.curve["compute"] > 0]
            ax.scatter(curve["compute"], curve["pass_rate"], s=10, color=colour, alpha=0.7, linewidths=0, zorder=3)
            grid = np.geomspace(max(v.prediction_fit.window[0], curve["compute"].min()),
                                max(EXTEND * budget.target, curve["compute"].max()), 200)
            ax.plot(grid, v.prediction_fit.predict(grid), color=colour, lw=1.7, zorder=4)
            ax.plot(grid, row["power_law_fit"].predict(grid), color="0.1", lw=1.3, ls="--", zorder=4)
            ax.axhline(row["sigmoid_A"], color=colour, lw=0.8, alpha=0.6)
            ax.axhline(row["power_law_A"], color="0.1", lw=0.8, alpha=0.6)
            figures._budget_lines(ax, budget)
            ax.set_title("\n".join(figures.wrap_name(row["variant"], 48)), fontsize=10)
            figures.log_compute_axis(ax)
        for index in range(len(names), rows * columns):
            axes.flat[index].set_visible(False)
            if index >= columns:  # the panel above is now the last of its column: it gets the x axis
                axes.flat[index - columns].xaxis.set_tick_params(labelbottom=True)
                axes.flat[index - columns].set_xlabel(figures.compute_label(budget.unit))
        for ax in axes[-1]:
            ax.set_xlabel(figures.compute_label(budget.unit))
        for ax in axes[:, 0]:
            ax.set_ylabel("pass rate R")
        handles = [plt.Line2D([], [], color="0.4", lw=1.7), plt.Line2D([], [], color="0.1", lw=1.3, ls="--"),
                   plt.Line2D([], [], color="0.3", ls=":"), plt.Line2D([], [], color="0.3", ls="-.")]
        labels = ["sigmoid R0 + (A - R0) / (1 + (C_mid / C)^B)", "power law A - D / C^B",
                  f"fit_at = {budget.fit_at:g}", f"target = {budget.target:g}"]
        fig.legend(handles, labels, loc="lower center", ncol=4, frameon=False)
    return fig


def power_law_note(table: pd.DataFrame) -> str:
    """The page's closing lines: what the columns are, and the paper's point."""
    unbounded = int(table["power_law_A_at_bound"].sum()) if len(table) else 0
    return "\n".join([
        "Both forms are fitted on the same window of the same curve (the seed mean with several seeds); pred: each "
        "fit's pass rate at the target; error = pred - obs.",
        f"Power-law A is bounded to [0, 1]: at the bound the fit found no ceiling ({unbounded} of {len(table)} "
        "variants here).",
        PAPER_POINT,
    ])

