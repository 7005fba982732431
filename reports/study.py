"""The study report of `sweep tune`: trials.csv and a PDF (title, trial table, objective vs parameters, curves).

Read from the tune directory alone (tune.json, trials/<n>.json, runs/<run_id>/metrics.jsonl), so it
can be rebuilt at any time. Pruned trials are shown where they stopped: the compute at which the
pruner stopped them and the interval that lost to the best trial's.
"""

from __future__ import annotations

import csv
import datetime
import json
import math
from pathlib import Path

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
from matplotlib.backends.backend_pdf import PdfPages  # noqa: E402

from reports import figures  # noqa: E402
from reports.pdf import MONO, _draw_table, _text_page  # noqa: E402
from sweeps.trials import best_record, compute_summary, curve_points, fit_trial_curve, read_records  # noqa: E402

TRIALS_FILE = "trials.csv"
STUDY_REPORT_FILE = "tune_report.pdf"
STATE_COLOURS = {"complete": "#2471a3", "pruned": "#c0392b", "failed": "0.5", "running": "#7d3c98"}
ROWS_PER_PAGE = 14


def write_trials_csv(tune_dir: Path, records) -> Path:
    """One row per trial: number, state, objective and interval, compute, pruning, then one column per parameter."""
    paths = sorted({path for record in records for path in record.params})
    out = tune_dir / TRIALS_FILE
    with open(out, "w", newline="") as handle:
        writer = csv.writer(handle)
        writer.writerow(["trial", "state", "objective", "lower", "upper", "compute", "pass_rate", "pruned_at_compute",
                         "run_id", *paths, "error", "note"])
        for record in records:
            pruned = (record.pruned or {}).get("compute")
            writer.writerow([record.number, record.state, record.value, record.lower, record.upper, record.compute,
                             record.pass_rate, pruned, record.run_id, *[record.params.get(path) for path in paths],
                             record.error or "", record.note or ""])
    return out


def _fmt(value, digits: int = 3) -> str:
    return "-" if value is None else f"{value:.{digits}f}"


def _param_text(value) -> str:
    return f"{value:.4g}" if isinstance(value, float) else str(value)


def _title_page(info: dict, records, tune_dir: Path):
    identity = info["identity"]
    budget, objective = identity["budget"], identity["objective"]
    maximize = objective["direction"] == "maximize"
    best = best_record(records, maximize)
    counts = {state: sum(r.state == state for r in records) for state in ("complete", "pruned", "failed", "running")}
    spent, saved_by_trial = compute_summary(records, budget["fit_at"])
    unit = figures.UNIT_LABELS.get(budget["unit"], budget["unit"])
    space = [f"    {path:<32} " + (f"choices {entry['choices']}" if entry["type"] == "categorical" else
                                   f"{entry['type']} [{entry['low']:g}, {entry['high']:g}]"
                                   + (" log" if entry.get("log") else "")
                                   + (f" step {entry['step']:g}" if entry.get("step") else ""))
             for path, entry in identity["space"].items()]
    metric = objective["metric"]
    lines = [
        f"Study          {info['name']}   ({tune_dir})",
        f"Created        {info.get('created', 'unknown')}",
        f"Report made    {datetime.datetime.now().astimezone().isoformat(timespec='seconds')}",
        f"Machine        {info.get('machine', 'unknown')}",
        f"Storage        {info.get('storage')}",
        "",
        f"Objective      {objective['direction']} {metric}"
        + ("  (the fit's pass rate at the target compute)" if metric == "pred_at_target" else ""),
        f"Budget         each trial trains to {budget['fit_at']:g} {unit}; predictions at {budget['target']:g}",
        f"Base recipe    {identity['base']}; seed {identity['seed']}",
        "Space",
        *space,
        *([f"Batch          {identity['total_batch']} samples per batch in every trial: rollout.prompts_per_batch = "
           f"{identity['total_batch']} / G"] if identity.get("total_batch") else []),
        f"Sampler        {info['sampler']['name']} (seed {info['sampler']['seed']})",
        f"Pruner         {info['pruner']}",
        "",
        f"Trials         {len(records)} of {info['trials']}: " + ", ".join(f"{n} {s}" for s, n in counts.items()),
        f"Compute        spent {spent:,.0f} {unit}; pruning stopped {len(saved_by_trial)} trial(s) early, "
        f"saving {sum(saved_by_trial.values()):,.0f} {unit}",
    ]
    if best is not None:
        lines += ["", f"Best           trial {best.number}: {metric} = {best.value:.4f} "
                      f"[{best.lower:.4f}, {best.upper:.4f}]",
                  *[f"    {path:<32} {_param_text(value)}" for path, value in best.params.items()]]
    with plt.rc_context(figures.STYLE):
        fig = plt.figure(figsize=figures.PAGE)
        fig.text(0.04, 0.93, "Tuning study report", fontsize=22, fontweight="bold", va="top")
        fig.text(0.04, 0.86, info["name"], fontsize=15, va="top", color="0.25")
        fig.text(0.04, 0.79, "\n".join(lines), fontsize=9.5, va="top", family=MONO, linespacing=1.45)
    return fig


def _table_pages(records, metric: str) -> list:
    paths = sorted({path for record in records for path in record.params})
    header = ["trial", "state", metric, "interval", "compute", "pass rate", "pruned at", *paths]
    rows, colours = [], []
    for r in records:
        pruned = r.pruned or {}
        interval = f"[{_fmt(r.lower)}, {_fmt(r.upper)}]" if r.value is not None else "-"
        if pruned:  # the interval that lost, at the compute where it lost
            estimate = pruned.get("estimate", {})
            interval = f"[{_fmt(estimate.get('lower'))}, {_fmt(estimate.get('upper'))}] < best's lower " \
                       f"{_fmt(pruned.get('best', {}).get('lower'))}"
        rows.append([str(r.number), r.state, _fmt(r.value), interval, f"{r.compute:,.0f}", _fmt(r.pass_rate),
                     f"{pruned['compute']:,.0f}" if pruned else "-",
                     *[_param_text(r.params.get(path)) for path in paths]])
        colours.append(STATE_COLOURS.get(r.state, "0.2"))
    pages = []
    for start in range(0, max(len(rows), 1), ROWS_PER_PAGE):
        with plt.rc_context(figures.STYLE):
            page = f" ({start // ROWS_PER_PAGE + 1})" if len(rows) > ROWS_PER_PAGE else ""
            fig = figures._new_figure("Trials" + page)
            # colour the state column: reorder so _draw_table's coloured last column is the state
            reordered = [[row[0], *row[2:], row[1]] for row in rows[start:start + ROWS_PER_PAGE]]
            _draw_table(fig, [header[0], *header[2:], header[1]], reordered, colours[start:start + ROWS_PER_PAGE],
                        top=0.9)
        pages.append(fig)
    return pages


def _objective_figure(info: dict, records):
    """Objective vs each parameter: complete trials with their intervals, pruned ones at the estimate that lost."""
    identity = info["identity"]
    space, metric = identity["space"], identity["objective"]["metric"]
    best = best_record(records, identity["objective"]["direction"] == "maximize")
    n = len(space)
    columns = min(n, 3)
    rows = math.ceil(n / columns)
    with plt.rc_context(figures.STYLE):
        fig = figures._new_figure(f"Objective ({metric}) against each parameter")
        for index, (path, entry) in enumerate(space.items()):
            ax = fig.add_subplot(rows, columns, index + 1)
            categories = [str(choice) for choice in entry.get("choices") or []]
            for r in records:
                if path not in r.params:
                    continue
                x = categories.index(str(r.params[path])) if categories else r.params[path]
                if r.state == "complete":
                    ax.errorbar(x, r.value, yerr=[[r.value - r.lower], [r.upper - r.value]], fmt="o",
                                color=STATE_COLOURS["complete"], ms=6, capsize=3, lw=1)
                    ax.annotate(str(r.number), (x, r.value), textcoords="offset points", xytext=(5, 4), fontsize=8)
                elif r.state == "pruned" and r.pruned:
                    estimate = r.pruned["estimate"]
                    ax.errorbar(x, estimate["value"], yerr=[[estimate["value"] - estimate["lower"]],
                                                            [estimate["upper"] - estimate["value"]]],
                                fmt="x", color=STATE_COLOURS["pruned"], ms=7, capsize=3, lw=1)
                    ax.annotate(str(r.number), (x, estimate["value"]), textcoords="offset points", xytext=(5, 4),
                                fontsize=8, color=STATE_COLOURS["pruned"])
            if best is not None:
                x = categories.index(str(best.params[path])) if categories else best.params[path]
                ax.scatter([x], [best.value], marker="*", s=220, color="#f1c40f", edgecolors="k", zorder=5)
            if categories:
                ax.set_xticks(range(len(categories)), categories)
            elif entry.get("log"):
                ax.set_xscale("log")
            ax.set_xlabel(path)
            ax.set_ylabel(metric)
        handles = [plt.Line2D([], [], marker="o", ls="", color=STATE_COLOURS["complete"], label="complete (interval)"),
                   plt.Line2D([], [], marker="x", ls="", color=STATE_COLOURS["pruned"],
                              label="pruned: its estimate when stopped"),
                   plt.Line2D([], [], marker="*", ls="", color="#f1c40f", markeredgecolor="k", ms=12, label="best")]
        fig.legend(handles=handles, loc="lower center", ncol=3, frameon=False)
        fig.tight_layout(rect=(0, 0.06, 1, 0.95))
    return fig


def _curves_figure(info: dict, records, tune_dir: Path):
    """Every trial's evaluations and sigmoid fit to the target; pruned trials end with an x where they stopped."""
    from fitting import FitInputError

    budget = info["identity"]["budget"]
    with plt.rc_context(figures.STYLE):
        fig = figures._new_figure("Trial curves: evaluations, fits (solid to the last point, dashed to the target)")
        ax = fig.add_axes((0.07, 0.1, 0.62, 0.8))
        palette = plt.get_cmap("tab10").colors
        seen = set()
        for index, r in enumerate(records):
            if r.run_id in seen:
                continue
            seen.add(r.run_id)
            curve = curve_points(tune_dir / "runs" / r.run_id, budget["unit"])
            points = [(c, p) for c, p in zip(curve[1], curve[2]) if c > 0]
            if not points:
                continue
            colour = "0.55" if r.state == "pruned" else palette[index % len(palette)]
            xs, ys = zip(*points)
            label = f"trial {r.number} ({r.state}" + (f", {r.value:.3f})" if r.value is not None else ")")
            ax.scatter(xs, ys, s=12, color=colour, alpha=0.8, linewidths=0)
            try:
                fit = fit_trial_curve(curve, budget["burn_in"], budget.get("fit_method", "default"),
                                      budget.get("fit_weights", "compute"))
                grid = np.geomspace(xs[0], xs[-1], 80)
                ahead = np.geomspace(xs[-1], budget["target"], 80)
                ax.plot(grid, fit.predict(grid), color=colour, lw=1.6, label=label)
                ax.plot(ahead, fit.predict(ahead), color=colour, lw=1.2, ls="--")
            except FitInputError:
                ax.plot(xs, ys, color=colour, lw=1.0, label=label + " not fitted")
            if r.state == "pruned":
                ax.scatter([xs[-1]], [ys[-1]], marker="x", s=80, color=STATE_COLOURS["pruned"], zorder=5)
        ax.axvline(budget["fit_at"], color="0.3", lw=0.9, ls=":")
        ax.axvline(budget["target"], color="0.3", lw=0.9, ls="-.")
        figures.log_compute_axis(ax)
        ax.set_xlabel(figures.compute_label(budget["unit"]))
        ax.set_ylabel("validation pass rate R")
        ax.legend(loc="upper left", bbox_to_anchor=(1.02, 1.0), frameon=False)
        fig.text(0.72, 0.08, "dotted: fit_at (where trials stop)\ndash-dot: target (where the objective\n"
                 "is predicted)\nx: where a pruned trial was stopped", fontsize=9, va="bottom")
    return fig


def write_study_report(tune_dir: str | Path, output_pdf: str | Path | None = None) -> Path:
    """The study's PDF from its tune directory; returns its path (default <tune_dir>/tune_report.pdf)."""
    tune_dir = Path(tune_dir)
    info = json.loads((tune_dir / "tune.json").read_text())
    records = read_records(tune_dir)
    output = Path(output_pdf) if output_pdf else tune_dir / STUDY_REPORT_FILE
    pages = [_title_page(info, records, tune_dir), *_table_pages(records, info["identity"]["objective"]["metric"])]
    if records:
        pages += [_objective_figure(info, records), _curves_figure(info, records, tune_dir)]
    else:
        pages.append(_text_page("No trials", ["The study has no trials yet."]))
    with PdfPages(output) as pdf:
        for page in pages:
            pdf.savefig(page)
            plt.close(page)
    return output
