"""`sweep ui`: the MLflow UI on a sweep's tracking store, on localhost; prints the runs table's URL.

    sweep ui runs/scalerl-loo              # until Ctrl-C
    sweep ui runs/scalerl-loo --port 5000 --detach

The store is the one in SWEEP_DIR/mlflow.json (the driver writes it), else SWEEP_DIR/mlflow.db.
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

from sweeps.arguments import integer


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("sweep_dir", metavar="SWEEP_DIR", help="sweep directory")
    parser.add_argument("--port", type=integer(1, 65535), help="port on 127.0.0.1 (default: a free one)")
    parser.add_argument("--detach", action="store_true",
                        help="leave the UI running and return (stop it with the printed kill command)")


def _store(sweep_dir: Path) -> tuple[str, str | None]:
    """(tracking URI, experiment id) of the sweep: mlflow.json, else the default SQLite store and the sweep's name."""
    from reports import schema
    from reports.mlflow_sync import read_mlflow_file
    from sweeps.cli import UsageError

    info = read_mlflow_file(sweep_dir)
    if info is not None:
        uri = info[schema.MLFLOW_TRACKING_URI]
        if uri.startswith("sqlite:///") and not Path(uri[len("sqlite:///"):]).is_file():
            # mlflow ui would create an empty store there and show nothing (a moved or copied sweep directory
            # keeps its old absolute URI)
            own = f"sqlite:///{(sweep_dir / schema.DEFAULT_STORE).resolve()}"
            raise UsageError(f"{sweep_dir / schema.MLFLOW_FILE} names the store {uri}, which does not exist; fix its "
                             f"{schema.MLFLOW_TRACKING_URI} (e.g. {own} for this directory's own store)")
        return uri, str(info[schema.MLFLOW_EXPERIMENT_ID])
    store = sweep_dir / schema.DEFAULT_STORE
    if not store.is_file():
        raise UsageError(f"{sweep_dir} has neither {schema.MLFLOW_FILE} nor {schema.DEFAULT_STORE}: no MLflow store")
    uri = f"sqlite:///{store.resolve()}"
    from mlflow.tracking import MlflowClient

    from recipe.tracking import read_json_file

    info_path = sweep_dir / schema.SWEEP_FILE
    name = read_json_file(info_path).get(schema.SWEEP_NAME) if info_path.is_file() else None
    name = name if isinstance(name, str) else None
    experiment = MlflowClient(tracking_uri=uri).get_experiment_by_name(name) if name else None
    return uri, experiment.experiment_id if experiment else None


def run(args) -> int:
    from sweeps.cli import UsageError

    sweep_dir = Path(args.sweep_dir)
    if not sweep_dir.is_dir():
        raise UsageError(f"{sweep_dir}: no such sweep directory")
    from reports.ui import UiError, jobs_url, port_is_free, start_ui

    uri, experiment_id = _store(sweep_dir)
    if args.port is not None and not port_is_free(args.port):
        raise UsageError(f"port {args.port} on 127.0.0.1 is in use (another server, perhaps another `sweep ui`); "
                         "pick another --port, or leave --port out for a free one")
    try:
        url, stop = start_ui(uri, port=args.port, experiment_id=experiment_id)
    except UiError as error:
        print(f"sweep ui: {error}")
        return 1
    print(f"MLflow UI on {uri}\nexperiment runs: {url}", flush=True)
    if experiment_id is not None:
        print(f"jobs by fit/A:   {jobs_url(url)}", flush=True)
    if args.detach:
        print(f"stop it with: kill -- -{stop.pid}")
        return 0
    print("Ctrl-C stops it.", flush=True)
    try:
        while stop.process.poll() is None:
            time.sleep(1)
        print(f"sweep ui: the MLflow UI exited with status {stop.process.returncode}")
        return 1
    except KeyboardInterrupt:
        return 0
    finally:
        stop()
