"""A mixture sweep's pages: each part's curve with its own fit (the paper's Figure 11) and each downstream set's pass
rate against the validation pass rate along the runs (Figure 1b). Runs without parts get neither page.

Each part is fitted as the table fits the whole (reports.tables.fit_sweep on SweepData.for_metric(part)), so its
A, B and prediction at the target read as the table's do.
"""

from __future__ import annotations

import math

import matplotlib.pyplot as plt

from reports import figures, schema


def part_names(data) -> list[str]:
    """The mixture's training parts: every set the runs logged but the whole and the downstream sets."""
    downstream = set(data.downstream_names())
    return [name for name in data.metric_names() if name != schema.WHOLE and name not in downstream]


def part_fits(data, n_boot: int) -> dict[str, object]:
    """part -> its SweepFits (a part none of whose variants could be fitted is left out)."""
    from reports.tables import fit_sweep

    fitted = {}
    for name in part_names(data):
        fits = fit_sweep(data.for_metric(name), n_boot=n_boot)
        if fits.variants:
            fitted[name] = fits
    return fitted


def _grid(count: int) -> tuple[int, int]:
    columns = min(3, count)
    return math.ceil(count / columns), columns


def parts_figure(data, fitted: dict[str, object]):
    """One panel per part: each variant's seed-mean points, its fit on the window and the extrapolation to the
    target, with A, B and the prediction against the observed end in the legend."""
    budget = data.budget
    colours = figures.variant_colours(list(data.variants()))
    rows, columns = _grid(len(fitted))
    with plt.rc_context(figures.STYLE):
        fig = figures._new_figure(f"Each part's curve and fit (the paper's Figure 11): fit on C <= {budget.fit_at:g}, "
                                  f"extrapolated to {budget.target:g}")
        for index, (name, fits) in enumerate(fitted.items()):
            ax = fig.add_subplot(rows, columns, index + 1)
            for variant, v in fits.variants.items():
                observed = "" if not math.isfinite(v.score.observed) else f", seen {v.score.observed:.3f}"
                label = (f"{variant}: window fit A = {v.prediction_fit.a:.3f}, B = {v.prediction_fit.b:.2f}, "
                         f"pred {v.score.predicted:.3f}{observed}")
                figures._draw_variant(ax, v, budget, colours[variant], label, band=False, marker_size=10)
            figures._budget_lines(ax, budget)
            figures.log_compute_axis(ax)
            ax.set_title(f"part {name} ({schema.pass_rate_keys(name)[0]})", fontsize=10)
            ax.set_xlabel(figures.compute_label(budget.unit))
            ax.set_ylabel("validation pass rate")
            ax.legend(fontsize=7, loc="lower right", frameon=False)
        fig.tight_layout(rect=(0, 0, 1, 0.94))
    return fig


def transfer_points(data, name: str):
    """(variant, seed, whole pass rates, the set's pass rates) of every run, in step order, at the points where
    both were logged (each run on its own: late points sit at different steps in different seeds)."""
    curves = data.curves[data.curves["metric"].isin([schema.WHOLE, name])]
    table = curves.pivot_table(index=["variant", "seed", "step"], columns="metric", values="pass_rate").dropna()
    if table.empty:
        return []
    table = table.reset_index().sort_values(["variant", "seed", "step"])
    return [(variant, seed, rows[schema.WHOLE].to_numpy(), rows[name].to_numpy())
            for (variant, seed), rows in table.groupby(["variant", "seed"], sort=False)]


def transfer_figure(data):
    """One panel per downstream set: its pass rate against the validation (whole) pass rate at the same checkpoints,
    each run's path in step order, coloured by variant (the paper's Figure 1b: does the gain on the validation set
    carry over to data never trained on)."""
    names = data.downstream_names()
    colours = figures.variant_colours(list(data.variants()))
    rows, columns = _grid(len(names))
    with plt.rc_context(figures.STYLE):
        fig = figures._new_figure("Downstream sets against the validation pass rate (the paper's Figure 1b)")
        for index, name in enumerate(names):
            ax = fig.add_subplot(rows, columns, index + 1)
            labelled = set()
            for variant, _, whole, downstream in transfer_points(data, name):
                ax.plot(whole, downstream, color=colours[variant], lw=0.9, marker="o", markersize=2.5, alpha=0.8,
                        label=None if variant in labelled else variant)
                labelled.add(variant)
            low = min(ax.get_xlim()[0], ax.get_ylim()[0])
            high = max(ax.get_xlim()[1], ax.get_ylim()[1])
            ax.plot([low, high], [low, high], color="0.6", lw=0.8, ls=":", label="y = x")
            ax.set_title(f"downstream {name} ({schema.pass_rate_keys(name)[0]})", fontsize=10)
            ax.set_xlabel("validation pass rate (the whole)")
            ax.set_ylabel(f"{name} pass rate")
            ax.legend(fontsize=7, loc="upper left", frameon=False)
        fig.tight_layout(rect=(0, 0, 1, 0.94))
    return fig


def mixture_pages(fits) -> tuple[list[tuple[str, object]], list[str]]:
    """The parts page and the downstream page of a mixture sweep (none for a single task), and notes."""
    data = fits.data
    pages, notes = [], []
    if part_names(data):
        fitted = part_fits(data, fits.n_boot)
        missing = [name for name in part_names(data) if name not in fitted]
        if missing:
            notes.append(f"parts not fitted (too few points or failed fits): {', '.join(missing)}")
        if fitted:
            pages.append(("parts", parts_figure(data, fitted)))
    if data.downstream_names():
        pages.append(("downstream", transfer_figure(data)))
    return pages, notes

