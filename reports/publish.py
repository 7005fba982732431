"""Everything a finished sweep publishes, in one call: LOO table CSV, PDF report, figure PNGs, MLflow fit results.

    outputs = report_sweep(sweep_dir)          # what `sweep run` calls at its end and `sweep report` runs
    print(outputs.text)                        # the LOO table as aligned text

Fits are made once (fit_sweep) and feed the CSV, the PDF and MLflow alike.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import pandas as pd

from reports import schema
from reports.pdf import write_report
from reports.scan import format_scan_table, scan_has_values
from reports.sweep_data import SweepData, load_sweep
from reports.tables import DEFAULT_N_BOOT, SweepFits, fit_sweep
from reports.table_text import format_loo_table


@dataclass
class ReportOutputs:
    fits: SweepFits
    table: pd.DataFrame  # the LOO table (schema.LOO_COLUMNS)
    text: str  # format_loo_table(table)
    csv: Path
    pdf: Path
    figures: list[Path]
    mlflow_logged: bool


def publish(data: SweepData, *, pdf: Path, csv: Path, figures_dir: Path | None, n_boot: int = DEFAULT_N_BOOT,
            mlflow_sweep_dir: Path | None = None, power_law: bool = False, echo=print) -> ReportOutputs:
    """Fit `data` once, write csv and pdf (and PNGs), and log to MLflow when mlflow_sweep_dir is given.

    power_law: the PDF also compares each variant's sigmoid with a power-law fit (off by default)."""
    fits = fit_sweep(data, n_boot=n_boot)
    table = fits.table
    from recipe.tracking import write_text_atomic

    write_text_atomic(csv, table.to_csv(index=False, float_format="%.6g"))  # a kill never leaves half a table
    pngs = write_report(fits, pdf, figures_dir, power_law=power_law)
    logged = False
    if mlflow_sweep_dir is not None:
        from mlflow.exceptions import MlflowException

        from reports.mlflow_sync import log_fit_results

        # The report files exist by now: a store that is locked or unreachable costs the MLflow copy only.
        try:
            logged = log_fit_results(mlflow_sweep_dir, table, run_table=fits.run_table,
                                     artifacts=[pdf, csv, *pngs], echo=echo)
        except (MlflowException, OSError) as error:
            echo(f"MLflow: fit results not logged ({type(error).__name__}: {error}); the report files are written")
    text = format_loo_table(table)
    if scan_has_values(fits):
        text += "\n\n" + format_scan_table(fits)
    return ReportOutputs(fits=fits, table=table, text=text, csv=csv, pdf=pdf, figures=pngs, mlflow_logged=logged)


def report_sweep(sweep_dir: str | Path, output_pdf: str | Path | None = None, *, n_boot: int = DEFAULT_N_BOOT,
                 log_mlflow: bool = True, power_law: bool = False, metric: str | None = None,
                 echo=print) -> ReportOutputs:
    """Report a sweep directory: <sweep_dir>/loo_table.csv, the PDF (default <sweep_dir>/report.pdf), its
    figures as PNG in <sweep_dir>/report_figures/, and the fit results in the sweep's MLflow store
    (skipped with a message when <sweep_dir>/mlflow.json is absent). With output_pdf elsewhere the table and
    the figures go beside it (X.csv, X_figures/): the sweep directory's own report, table and figures stay
    one consistent set.

    metric: another pass rate than budget.metric (a mixture's part or downstream set): its report goes to
    <sweep_dir>/report_<metric>.pdf (and .csv) unless output_pdf says otherwise, and MLflow keeps the fits of
    budget.metric (a part's fits are not the runs' fit/* results)."""
    sweep_dir = Path(sweep_dir)
    data = load_sweep(sweep_dir)
    if metric is not None and metric != data.budget.metric:
        data, log_mlflow = data.for_metric(metric), False
        if output_pdf is None:
            output_pdf = sweep_dir / f"report_{metric}.pdf"
    if output_pdf is None or Path(output_pdf).resolve() == (sweep_dir / schema.REPORT_FILE).resolve():
        pdf, csv, figures = (sweep_dir / schema.REPORT_FILE, sweep_dir / schema.LOO_TABLE_FILE,
                             sweep_dir / schema.FIGURES_DIR)
    else:
        pdf = Path(output_pdf)
        csv, figures = pdf.with_suffix(".csv"), pdf.with_name(f"{pdf.stem}_figures")
    return publish(data, pdf=pdf, csv=csv, figures_dir=figures, n_boot=n_boot,
                   mlflow_sweep_dir=sweep_dir if log_mlflow else None, power_law=power_law, echo=echo)
