"""`sweep report`: the PDF ablation report and LOO table of a sweep directory, or of a sweep in an MLflow store.

    sweep report runs/scalerl-loo                       # report.pdf, loo_table.csv, figures, MLflow fit results
    sweep report runs/scalerl-loo -o paper/loo.pdf
    sweep report runs/scalerl-loo --power-law           # plus the power-law baseline against each sigmoid
    sweep report runs/mixture --metric short            # a mixture's part: report_short.pdf, report_short.csv
    sweep report --tracking-uri http://mlflow:5000 --experiment scalerl-loo -o loo.pdf   # no run directories
"""

from __future__ import annotations

import argparse
from pathlib import Path

from sweeps.arguments import integer

MAX_BOOT = 100_000


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("sweep_dir", nargs="?", metavar="SWEEP_DIR",
                        help="sweep directory (sweep.json, plan.json, runs/); omit with --tracking-uri")
    parser.add_argument("-o", "--output", metavar="REPORT.pdf",
                        help="PDF path (default SWEEP_DIR/report.pdf; its table and figures go beside it as X.csv, "
                             "X_figures/; required with --tracking-uri)")
    parser.add_argument("--tracking-uri", help="read the sweep from this MLflow store instead of run directories")
    parser.add_argument("--experiment", help="with --tracking-uri: the sweep's experiment (name or id)")
    parser.add_argument("--parent-run-id", help="with --tracking-uri: the sweep's parent run when there are several")
    parser.add_argument("--n-boot", type=integer(2, MAX_BOOT), default=500,
                        help="bootstrap draws per interval (default 500)")
    parser.add_argument("--no-mlflow", action="store_true", help="do not log fit results to the sweep's MLflow runs")
    parser.add_argument("--metric", metavar="NAME",
                        help="fit and judge this pass rate instead of budget.metric: a mixture's part or downstream "
                             "set (eval/pass_rate/NAME), or whole; written to SWEEP_DIR/report_NAME.pdf and .csv")
    parser.add_argument("--power-law", action="store_true",
                        help="add pages comparing each variant's sigmoid with a power-law fit R = A - D / C^B on the "
                             "same window: ceilings and predictions at the target (the paper's point: a power law "
                             "misjudges the ceiling)")


def run(args) -> int:
    from sweeps.cli import UsageError

    from reports import schema
    from reports.publish import publish, report_sweep
    from reports.sweep_data import SweepDataError

    try:
        if args.tracking_uri:
            if args.sweep_dir or not args.experiment or not args.output:
                raise UsageError("--tracking-uri reads the sweep from MLflow: give --experiment and -o REPORT.pdf, "
                                 "and no SWEEP_DIR")
            from reports.mlflow_source import load_sweep_from_mlflow

            data = load_sweep_from_mlflow(args.tracking_uri, args.experiment, parent_run_id=args.parent_run_id)
            data = data if args.metric is None else data.for_metric(args.metric)
            pdf = Path(args.output)
            outputs = publish(data, pdf=pdf, csv=pdf.with_suffix(".csv"), figures_dir=None, n_boot=args.n_boot,
                              power_law=args.power_law)
        else:
            if not args.sweep_dir:
                raise UsageError("give a SWEEP_DIR, or --tracking-uri with --experiment")
            if not args.no_mlflow:  # child runs that hold a metrics line twice are rebuilt from metrics.jsonl
                from sweeps.tracking import repair_duplicates

                repair_duplicates(Path(args.sweep_dir))
            outputs = report_sweep(args.sweep_dir, args.output, n_boot=args.n_boot, log_mlflow=not args.no_mlflow,
                                   power_law=args.power_law, metric=args.metric)
    except SweepDataError as error:
        raise UsageError(str(error)) from None
    print(outputs.text)
    print(f"\nLOO table: {outputs.csv}\nreport:    {outputs.pdf}")
    if outputs.mlflow_logged:
        print(f"MLflow:    fit/* metrics and {schema.TAG_VERDICT} on every job run; report files on the parent run")
    return 0
