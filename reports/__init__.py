"""Reports of a sweep: the LOO table, the PDF ablation report, fit results in MLflow and the MLflow UI.

    data = load_sweep(sweep_dir)                        # or load_sweep_from_mlflow(uri, experiment)
    fits = fit_sweep(data)                              # every fit once; fits.table is the LOO table
    print(format_loo_table(fits.table))
    write_report(fits, "report.pdf")                    # or build_report(sweep_dir, "report.pdf")
    write_report(fits, "report.pdf", power_law=True)    # plus the power-law baseline against each sigmoid
    outputs = report_sweep(sweep_dir)                   # all of it: CSV, PDF, figures, MLflow (end of `sweep run`)
    url, stop = start_ui(tracking_uri, experiment_id="1")

Key names of files, metrics and MLflow live in reports.schema. mlflow itself is imported only inside the
functions that talk to a tracking store, so importing reports stays cheap.
"""

from reports.mlflow_source import load_sweep_from_mlflow
from reports.mlflow_sync import log_fit_results
from reports.pdf import build_report, write_report
from reports.publish import ReportOutputs, report_sweep
from reports.sweep_data import Budget, SweepData, SweepDataError, load_sweep
from reports.tables import SweepFits, fit_sweep, loo_table
from reports.table_text import format_loo_table
from reports.ui import start_ui

__all__ = [
    "Budget", "ReportOutputs", "SweepData", "SweepDataError", "SweepFits", "build_report", "fit_sweep",
    "format_loo_table", "load_sweep", "load_sweep_from_mlflow", "log_fit_results", "loo_table", "report_sweep",
    "start_ui", "write_report",
]
