"""MLflow for a sweep: one experiment, a parent run, a child run per job; the driver is the only writer.

Jobs write metrics.jsonl (the source of truth) and never touch the tracking store during a sweep:
SQLite locks up under many writers, and compute nodes often cannot reach a tracking server. The
driver mirrors each job's new metric lines into its child run every time it polls. Exactly once, by
each line's identity: line i of a job's metrics.jsonl is logged with the marker metric
sweep/lines_mirrored = i + 1 in the same atomic log_batch, so the store itself says which lines a run
holds. A driver reads those markers once at start (whatever an earlier driver did before it died) and
logs only the lines whose number the store lacks; the driver lock (sweeps.state.DriverLock) keeps a
second driver from logging beside it. A resumed job truncates metrics.jsonl to its checkpoint and
recomputes the lines after it: their numbers are in the store already, so they are not logged again.
(Recomputed lines can differ from the lost ones: a PipelineRL job resumed after kill -9 was seen to leave its
uninterrupted twin's curve from there on, 2026-12-02; not yet explained.) `repair_duplicates` rebuilds a
child run that holds a line twice (a sweep mirrored by two drivers at once before the lock existed).
"""

from __future__ import annotations

import dataclasses
import json
import math
import os
import time
from pathlib import Path
from typing import Any

from recipe.config import flatten_config, to_dict
from recipe.tracking import log_params
from sweeps.planner import Job
from sweeps.spec import SweepSpec
from sweeps.state import write_json_atomic

MLFLOW_FILE = "mlflow.json"
# MLflow rejects longer parameter values; a longer one is cut and marked.
PARAM_VALUE_LIMIT = 6000
# MLflow takes at most 1000 metrics in one log_batch.
BATCH_METRIC_LIMIT = 1000
# Logged with each batch of mirrored lines: how many lines of the job's metrics.jsonl the run holds after it.
LINES_MIRRORED_KEY = "sweep/lines_mirrored"
SQLITE_PREFIX = "sqlite:///"


def tracking_uri(spec: SweepSpec, sweep_dir: Path) -> str:
    """The spec's URI, else MLFLOW_TRACKING_URI, else a SQLite store inside the sweep directory."""
    if spec.tracking.mlflow_uri:
        return spec.tracking.mlflow_uri
    if os.environ.get("MLFLOW_TRACKING_URI"):
        return os.environ["MLFLOW_TRACKING_URI"]
    return f"{SQLITE_PREFIX}{sweep_dir.resolve()}/mlflow.db"


def open_client(uri: str):
    """An MlflowClient on uri. A SQLite store that does not exist yet is created whole or not at all, and one that a
    killed driver left half-created is named with its fix (components.registry.ConfigError), not a traceback.

    MLflow creates a SQLite store by running its schema migrations in place, seconds on a busy 2-core machine; a
    driver killed meanwhile left a file at a middle version that every later driver refused (the driver soak,
    BENCHMARKS.md "One driver per sweep"). So a new store is migrated under a temporary name, then renamed.
    """
    from mlflow.exceptions import MlflowException
    from mlflow.tracking import MlflowClient

    if uri.startswith(SQLITE_PREFIX):
        create_sqlite_store(Path(uri[len(SQLITE_PREFIX):]))
    try:
        client = MlflowClient(tracking_uri=uri)  # opens the store and checks its schema
    except MlflowException as error:
        if "out-of-date database schema" not in str(error):
            raise
        from components.registry import ConfigError

        raise ConfigError(f"tracking: {uri} holds an MLflow store at an older schema (a driver killed while "
                          f"creating it, or an older mlflow); run `mlflow db upgrade {uri}` after a copy, or delete "
                          "it: the driver mirrors every job's metrics.jsonl into a new one") from None
    return client


def create_sqlite_store(path: Path) -> None:
    """Create the SQLite store at path, if it is missing, under a temporary name renamed into place when whole."""
    if path.exists():
        return
    from mlflow.store.tracking.sqlalchemy_store import SqlAlchemyStore

    path.parent.mkdir(parents=True, exist_ok=True)
    for stale in path.parent.glob(f".{path.name}.creating-*"):  # earlier drivers' halves (the driver lock is ours)
        stale.unlink(missing_ok=True)
    partial = path.with_name(f".{path.name}.creating-{os.getpid()}")
    store = SqlAlchemyStore(f"{SQLITE_PREFIX}{partial}", (path.parent / "mlartifacts").resolve().as_uri())
    store.engine.dispose()
    os.replace(partial, path)


def job_tags(job: Job, parent_run_id: str) -> dict[str, str]:
    """A job's tags; a scan's job also carries the scanned key and its value (compare runs by value in the UI)."""
    tags = {
        "mlflow.parentRunId": parent_run_id,
        "scalerl.run_id": job.run_id,
        "scalerl.axis": job.axis,
        "scalerl.choice": job.choice,
        "scalerl.variant": job.variant,
        "scalerl.seed": str(job.seed),
    }
    if job.scan_key is not None:
        tags.update({"scalerl.scan_key": job.scan_key, "scalerl.scan_value": str(job.scan_value)})
    if job.recipe_name is not None:  # a recipes sweep: compare runs by recipe in the UI
        tags["scalerl.recipe"] = job.recipe_name
    return tags


def recipe_params(job: Job) -> dict[str, str]:
    params = {}
    for key, value in flatten_config(to_dict(job.recipe)).items():
        text = str(value)
        params[key] = text if len(text) <= PARAM_VALUE_LIMIT else text[: PARAM_VALUE_LIMIT - 3] + "..."
    return params


class SweepTracker:
    """Creates (or finds again) the sweep's experiment and runs, and mirrors metrics into them."""

    def __init__(self, spec: SweepSpec, sweep_dir: Path, jobs: list[Job]) -> None:
        from mlflow.entities import Param

        self.path = sweep_dir / MLFLOW_FILE
        self.uri = tracking_uri(spec, sweep_dir)
        self.client = open_client(self.uri)
        state = read_mlflow_state(self.path) if self.path.exists() else {}
        if state.get("tracking_uri") not in (None, self.uri):
            state = {}  # the store moved: start a fresh record there
        experiment_name = spec.tracking.experiment or spec.name
        experiment = self.client.get_experiment_by_name(experiment_name)
        # Artifacts (the report) live beside the sweep, not in ./mlruns of whatever directory we run from.
        artifacts = (sweep_dir / "mlartifacts").resolve().as_uri()
        experiment_id = (experiment.experiment_id if experiment
                         else self.client.create_experiment(experiment_name, artifact_location=artifacts))
        if state.get("experiment_id") != experiment_id:
            state = {}
        if "parent_run_id" not in state:
            parent = self.client.create_run(experiment_id, run_name=spec.name, tags={"scalerl.sweep": spec.name})
            # The budget on the parent, so a report can be rebuilt from the store alone.
            budget = {f"budget.{key}": str(value) for key, value in dataclasses.asdict(spec.budget).items()}
            self.client.log_batch(parent.info.run_id, params=[Param(key, value) for key, value in budget.items()])
            state = {"tracking_uri": self.uri, "experiment_id": experiment_id,
                     "parent_run_id": parent.info.run_id, "child_runs": {}}
        state.pop("mirrored_lines", None)  # a count kept before lines were mirrored by identity: the store decides
        self.state = state
        self.save()  # before any child run: a kill after creating the parent leaves no parent a rerun cannot find
        # Per job: the line numbers (1-based) its child run holds, read from the store's markers.
        self.mirrored: dict[str, set[int]] = {run_id: self.lines_in_store(child)
                                              for run_id, child in self.state["child_runs"].items()}
        self.add_jobs(jobs)

    def lines_in_store(self, child_run: str) -> set[int]:
        """The numbers of the metrics.jsonl lines a child run holds: its marker values (one query, at start)."""
        return {int(m.value) for m in self.client.get_metric_history(child_run, LINES_MIRRORED_KEY)}

    def add_jobs(self, jobs: list[Job], run_names: dict[str, str] | None = None) -> None:
        """A child run per job not tracked yet, holding its flattened recipe as params."""
        from mlflow.entities import Param

        for job in jobs:
            if job.run_id in self.state["child_runs"]:
                continue
            name = (run_names or {}).get(job.run_id, f"{job.variant} seed {job.seed}")
            child = self.client.create_run(self.experiment_id, run_name=name,
                                           tags=job_tags(job, self.state["parent_run_id"]))
            log_params(self.client, child.info.run_id, [Param(key, value) for key, value in recipe_params(job).items()])
            self.state["child_runs"][job.run_id] = child.info.run_id
            self.mirrored[job.run_id] = set()
            self.save()  # run by run: a kill mid-loop must not leave runs a rerun creates again

    def log_summary(self, run_id: str | None, metrics: dict[str, float], tags: dict[str, str],
                    params: dict[str, str] | None = None) -> None:
        """Final metrics, tags and params on a job's child run (run_id) or on the parent (None)."""
        from mlflow.entities import Metric, Param, RunTag

        target = self.state["parent_run_id"] if run_id is None else self.state["child_runs"][run_id]
        stamp = int(time.time() * 1000)
        self.client.log_batch(
            target, metrics=[Metric(key, float(value), stamp, 0) for key, value in metrics.items()
                             if value is not None and math.isfinite(value)],
            params=[Param(key, str(value)[:PARAM_VALUE_LIMIT]) for key, value in (params or {}).items()],
            tags=[RunTag(key, str(value)) for key, value in tags.items()])

    def save(self) -> None:
        write_json_atomic(self.path, self.state)

    @property
    def experiment_id(self) -> str:
        return self.state["experiment_id"]

    def mirror(self, job: Job) -> int:
        """Log the job's complete metric lines its child run does not hold yet; returns how many were new.

        Lines go in batches of whole lines, each line with its marker LINES_MIRRORED_KEY = its number, so a
        line and its marker land together or not at all (one SQL transaction per log_batch)."""
        path = job.run_dir / "metrics.jsonl"
        if not path.exists():
            return 0
        held = self.mirrored[job.run_id]
        run_id = self.state["child_runs"][job.run_id]
        batch: list = []
        numbers: list[int] = []  # the lines in `batch`
        logged = 0
        with open(path) as handle:
            for index, line in enumerate(handle):
                if not line.endswith("\n"):
                    break  # a line still being written
                if index + 1 in held:
                    continue
                metrics = line_metrics(json.loads(line), index + 1)
                if batch and len(batch) + len(metrics) > BATCH_METRIC_LIMIT:
                    logged += self.log_lines(run_id, batch, numbers, held)
                    batch, numbers = [], []
                batch.extend(metrics)
                numbers.append(index + 1)
        return logged + self.log_lines(run_id, batch, numbers, held)

    def log_lines(self, run_id: str, metrics: list, numbers: list[int], held: set[int]) -> int:
        """Log one batch of whole lines and remember their numbers as held; returns how many lines."""
        if metrics:
            self.log_metrics(run_id, metrics)
        held.update(numbers)
        return len(numbers)

    def log_metrics(self, run_id: str, metrics: list) -> None:
        """One log_batch, or several of BATCH_METRIC_LIMIT when a single line carries more metrics than that."""
        for start in range(0, len(metrics), BATCH_METRIC_LIMIT):
            self.client.log_batch(run_id, metrics=metrics[start:start + BATCH_METRIC_LIMIT])

    def finish(self, job: Job, status: str) -> None:
        """Close the job's child run: FINISHED or FAILED."""
        self.finish_run(job.run_id, status)

    def finish_run(self, run_id: str, status: str) -> None:
        """Close the child run of the job with this run id (FINISHED, FAILED or KILLED)."""
        self.client.set_terminated(self.state["child_runs"][run_id], status=status)

    def close_finished(self, job: Job) -> None:
        """A job that finished while no driver watched it (the driver was killed, its jobs ran on): mirror the
        lines it wrote since and close its child run FINISHED, if an earlier driver did not."""
        self.mirror(job)
        run_id = self.state["child_runs"][job.run_id]
        if self.client.get_run(run_id).info.status != "FINISHED":
            self.client.set_terminated(run_id, status="FINISHED")

    def finish_sweep(self, status: str) -> None:
        self.client.set_terminated(self.state["parent_run_id"], status=status)


def line_metrics(record: dict[str, Any], number: int) -> list:
    """The MLflow metrics of metrics.jsonl line `number` (1-based): its finite numbers at its step, then the
    marker LINES_MIRRORED_KEY = number that says the store holds this line."""
    from mlflow.entities import Metric

    step = int(record.get("step", 0))
    stamp = int(record.get("time", time.time()) * 1000)
    metrics = [Metric(key, float(value), stamp, step) for key, value in record.items()
               if key not in ("step", "time") and isinstance(value, (int, float))
               and not isinstance(value, bool) and math.isfinite(value)]
    metrics.append(Metric(LINES_MIRRORED_KEY, float(number), stamp, step))
    return metrics


def mlflow_record(sweep_dir: Path) -> dict[str, Any] | None:
    path = sweep_dir / MLFLOW_FILE
    return read_mlflow_state(path) if path.exists() else None


def read_mlflow_state(path: Path) -> dict[str, Any]:
    """mlflow.json (reports.mlflow_sync.read_mlflow_file checks it)."""
    from reports.mlflow_sync import read_mlflow_file

    return read_mlflow_file(path.parent)


def duplicated_lines(client: Any, child_run: str) -> int:
    """How many metrics.jsonl lines a child run holds more than once (markers logged twice)."""
    values = [int(m.value) for m in client.get_metric_history(child_run, LINES_MIRRORED_KEY)]
    return len(values) - len(set(values))


def rebuild_child_run(client: Any, child_run: str, metrics_path: Path) -> str:
    """A copy of a child run (name, tags, params, status) holding each metrics.jsonl line exactly once; the old
    run is deleted once the copy is complete. Returns the copy's id."""
    from mlflow.entities import Param, RunTag

    old = client.get_run(child_run)
    tags = {key: value for key, value in old.data.tags.items() if not key.startswith("mlflow.")
            or key in ("mlflow.parentRunId", "mlflow.runName")}
    new = client.create_run(old.info.experiment_id, run_name=old.info.run_name, tags=tags)
    new_id = new.info.run_id
    log_params(client, new_id, [Param(key, value) for key, value in old.data.params.items()])
    lines = metrics_path.read_text().splitlines() if metrics_path.is_file() else []
    batch: list = []
    for number, line in enumerate(lines, start=1):
        batch.extend(line_metrics(json.loads(line), number))
        if len(batch) >= BATCH_METRIC_LIMIT // 2:
            client.log_batch(new_id, metrics=batch)
            batch = []
    if batch:
        client.log_batch(new_id, metrics=batch)
    client.log_batch(new_id, tags=[RunTag("scalerl.rebuilt_from", child_run)])
    if old.info.status != "RUNNING":
        client.set_terminated(new_id, status=old.info.status)
    return new_id


def repair_duplicates(sweep_dir: Path, echo=print) -> int:
    """Rebuild every child run of the sweep that holds a metrics line twice (two drivers mirrored it at once,
    before the driver lock existed); returns how many were rebuilt. Needs the driver lock: refused, naming the
    driver, while a `sweep run` holds the directory."""
    from mlflow.tracking import MlflowClient

    from sweeps.state import DriverLock

    record = mlflow_record(sweep_dir)
    if record is None:
        return 0
    client = MlflowClient(tracking_uri=record["tracking_uri"])
    damaged = {run_id: child for run_id, child in record["child_runs"].items() if duplicated_lines(client, child)}
    for run_id in [run_id for run_id in damaged if not (sweep_dir / "runs" / run_id / "metrics.jsonl").is_file()]:
        echo(f"MLflow: run {damaged.pop(run_id)} of job {run_id} holds metrics lines twice, and its metrics.jsonl "
             f"is not in {sweep_dir / 'runs' / run_id} to rebuild it from; report in the sweep's own directory")
    if not damaged:
        return 0
    with DriverLock(sweep_dir, "sweep report (MLflow repair)").take():
        for run_id, child in damaged.items():
            count = duplicated_lines(client, child)
            new_id = rebuild_child_run(client, child, sweep_dir / "runs" / run_id / "metrics.jsonl")
            record["child_runs"][run_id] = new_id
            write_json_atomic(sweep_dir / MLFLOW_FILE, record)  # the copy is the job's run from here on
            client.delete_run(child)
            echo(f"MLflow: run {child} of job {run_id} held {count} metrics line(s) twice; rebuilt as run {new_id} "
                 "from its metrics.jsonl (each line once), the old run deleted")
    return len(damaged)
