"""Writing fit results back to the sweep's MLflow runs, so the compare view sorts and charts the variants.

    log_fit_results(sweep_dir, fits.table, run_table=fits.run_table, artifacts=[pdf, *pngs])

Each job's run gets the fit/* metrics of its own curve (schema.FIT_METRICS; the variant's deltas) and
the tags scalerl.verdict, scalerl.fit_flags and scalerl.regime (why its prediction is not yet trusted);
the sweep's parent run gets the report files under report/ and sweep.json, so a report can be rebuilt
from the store alone. The SQLite store has one writer at a time: call this after the sweep's jobs have finished.
"""

from __future__ import annotations

import json
import math
import time
from collections.abc import Iterable
from pathlib import Path

import pandas as pd

from reports import schema
from reports.table_text import verdict_text


def _finite(value) -> bool:
    return value is not None and not pd.isna(value) and math.isfinite(float(value))


def read_mlflow_file(sweep_dir: Path) -> dict | None:
    """The sweep's mlflow.json, or None; a damaged one (bad JSON, keys of the wrong type) is a DamagedFileError."""
    from recipe.tracking import DamagedFileError, read_json_file

    path = Path(sweep_dir) / schema.MLFLOW_FILE
    if not path.is_file():
        return None
    fix = "remove it and rerun `sweep run` on the spec to record the sweep's MLflow runs again"
    info = read_json_file(path, dict, fix)
    for key, kind in ((schema.MLFLOW_TRACKING_URI, str), (schema.MLFLOW_EXPERIMENT_ID, str),
                      (schema.MLFLOW_PARENT_RUN_ID, str), (schema.MLFLOW_CHILD_RUNS, dict)):
        if key not in info:
            raise DamagedFileError(f"{path}: damaged (it lacks {key}); {fix}")
        if not isinstance(info[key], kind):
            raise DamagedFileError(f"{path}: damaged ({key} is not a {kind.__name__}); {fix}")
    return info


def log_fit_results(sweep_dir: str | Path, table: pd.DataFrame, *, run_table: pd.DataFrame | None = None,
                    artifacts: Iterable[str | Path] = (), echo=print) -> bool:
    """Log fit metrics and tags on every job's run and `artifacts` on the parent run; False when no mlflow.json.

    table: the LOO table (one row per variant). run_table: one row per job with that seed's own fit;
    without it, each job gets its variant's row (the same thing with one seed). Metrics a fit could not
    give (an unobserved target) are left out rather than logged as NaN.
    """
    from mlflow.entities import Metric, RunTag
    from mlflow.tracking import MlflowClient

    sweep_dir = Path(sweep_dir)
    info = read_mlflow_file(sweep_dir)
    if info is None:
        echo(f"no {schema.MLFLOW_FILE} in {sweep_dir}: fit results not logged to MLflow")
        return False
    client = MlflowClient(tracking_uri=info[schema.MLFLOW_TRACKING_URI])
    by_variant = table.set_index("variant")
    by_run = run_table.set_index("run_id") if run_table is not None else None
    plan = {e[schema.PLAN_RUN_ID]: e for e in json.loads((sweep_dir / schema.PLAN_FILE).read_text())}
    now = int(time.time() * 1000)
    missing = []
    for run_id, mlflow_run_id in info[schema.MLFLOW_CHILD_RUNS].items():
        job = plan.get(run_id)
        if job is None or job[schema.PLAN_VARIANT] not in by_variant.index:
            missing.append(run_id)
            continue
        variant_row = by_variant.loc[job[schema.PLAN_VARIANT]]
        own = by_run.loc[run_id] if by_run is not None and run_id in by_run.index else variant_row
        values = {key: own[column] for key, column in schema.FIT_METRICS.items()}
        values.update({key: variant_row[column] for key, column in schema.FIT_VARIANT_METRICS.items()})
        metrics = [Metric(key, float(value), now, 0) for key, value in values.items() if _finite(value)]
        tags = [RunTag(schema.TAG_VERDICT, verdict_text(variant_row)),
                RunTag(schema.TAG_FIT_FLAGS, str(own["flags"]) or "none"),
                RunTag(schema.TAG_REGIME, "not fitted" if own["flags"] == "not fitted"
                       else str(own["regime"]) or "predictable")]
        client.log_batch(mlflow_run_id, metrics=metrics, tags=tags)
    if missing:
        echo(f"MLflow: no fit results for {len(missing)} job run(s) not in the table: {', '.join(missing)}")
    parent = info[schema.MLFLOW_PARENT_RUN_ID]
    client.log_artifact(parent, str(sweep_dir / schema.SWEEP_FILE))
    for path in artifacts:
        path = Path(path)
        folder = schema.REPORT_ARTIFACT_DIR + ("/figures" if path.suffix == ".png" else "")
        client.log_artifact(parent, str(path), artifact_path=folder)
    return True
