"""Run tracking: metrics.jsonl (the source of truth) mirrored to MLflow.

metrics.jsonl holds one JSON record per evaluation point, appended and fsynced as it is made. On
resume the file is rewritten to the records at or before the checkpoint's step (a kill can leave
records past the checkpoint, or half a line): the resumed run recomputes them, so the file never
has a duplicate or a missing evaluation step. MLflow gets the same records as metrics at their step,
compute included, so its UI can chart eval/pass_rate against compute/device_hours; a resumed run
logs into the same MLflow run and skips the steps it already holds (recomputed identically on CPU; off
CPU the run keeps the first values of those steps and the file the recomputed ones).
"""

from __future__ import annotations

import json
import os
import time
from contextlib import contextmanager
from pathlib import Path

from components.registry import ConfigError
from recipe.config import flatten_config

METRICS_NAME = "metrics.jsonl"
MLFLOW_RUN_NAME = "mlflow_run_id"
# What a job is doing before its first evaluation point (e.g. building the warm start), for `sweep status`.
PHASE_NAME = "phase.json"


@contextmanager
def atomic_destination(path: Path):
    """The hidden sibling to write `path`'s new content into: once the block ends it is flushed to disk and
    renamed over `path`, so a reader never sees half a file (and a machine or file server that crashes right
    after never leaves the name on an empty one: a done.json that reads as done with nothing in it); if the
    block raises, the sibling is removed and `path` is left as it was."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    temporary = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    try:
        yield temporary
        with open(temporary, "rb+") as handle:
            os.fsync(handle.fileno())
        os.replace(temporary, path)
    finally:
        temporary.unlink(missing_ok=True)


def sync_tree(folder: Path) -> None:
    """Flush every file under `folder`, and the folders, to disk: before a built directory (a warm start, a
    converted model) is renamed into place, so a machine that crashes after the rename never leaves the
    name on files the crash truncated."""
    for root, _, files in os.walk(folder):
        for name in files:
            with open(Path(root) / name, "rb") as handle:
                os.fsync(handle.fileno())
        descriptor = os.open(root, os.O_RDONLY)
        try:
            os.fsync(descriptor)
        finally:
            os.close(descriptor)


def write_text_atomic(path: Path, text: str) -> None:
    """Write a file so that a reader never sees half of it (atomic_destination)."""
    with atomic_destination(path) as temporary:
        temporary.write_text(text, encoding="utf-8")


def write_json_atomic(path: Path, data) -> None:
    write_text_atomic(path, json.dumps(data, indent=2, sort_keys=True) + "\n")


REBUILD = "remove it and rerun `sweep run` on the spec to rebuild it"


class DamagedFileError(ConfigError):
    """A file the harness wrote is unreadable (truncated, hand-edited): one line naming it and what to do."""


def read_json_file(path: Path, expected: type = dict, fix: str = REBUILD):
    """The JSON value of a file the harness wrote, of type `expected`; a DamagedFileError naming the file and
    `fix` when it is not (nothing is repaired or removed here: the user decides)."""
    try:
        value = json.loads(Path(path).read_bytes().decode("utf-8"))
    except (ValueError, RecursionError):  # JSONDecodeError and UnicodeDecodeError are ValueErrors
        raise DamagedFileError(f"{path}: damaged (not valid JSON); {fix}") from None
    if not isinstance(value, expected):
        raise DamagedFileError(f"{path}: damaged (holds a {type(value).__name__}, not a JSON "
                               f"{'object' if expected is dict else expected.__name__}); {fix}")
    return value


def write_phase(run_dir: Path, phase: str | None, done: int | None = None, total: int | None = None) -> None:
    """Record the run's current phase with its progress (done of total); None clears it."""
    path = Path(run_dir) / PHASE_NAME
    if phase is None:
        path.unlink(missing_ok=True)
    else:
        write_json_atomic(path, {"phase": phase, "done": done, "total": total, "time": time.time()})


def read_phase(run_dir: Path) -> dict | None:
    """The phase a run last recorded ({"phase", "done", "total", "time"}), or None."""
    try:
        return json.loads((Path(run_dir) / PHASE_NAME).read_text())
    except (OSError, ValueError):
        return None


def read_metrics(run_dir: Path) -> list[dict]:
    """Complete records of metrics.jsonl (a torn last line from a kill is skipped)."""
    path = Path(run_dir) / METRICS_NAME
    records = []
    if path.is_file():
        for line in path.read_text().splitlines():
            try:
                records.append(json.loads(line))
            except json.JSONDecodeError:
                continue
    return records


class MetricsFile:
    def __init__(self, run_dir: Path, resume_step: int | None) -> None:
        """resume_step None: a fresh run (file emptied); else keep records with step <= resume_step."""
        self.path = Path(run_dir) / METRICS_NAME
        kept = [] if resume_step is None else [r for r in read_metrics(run_dir) if r["step"] <= resume_step]
        write_text_atomic(self.path, "".join(json.dumps(r) + "\n" for r in kept))
        self.records = kept

    def append(self, record: dict) -> None:
        with open(self.path, "a") as handle:
            handle.write(json.dumps(record) + "\n")
            handle.flush()
            os.fsync(handle.fileno())
        self.records.append(record)


def default_tracking_uri(run_dir: Path) -> str:
    """MLFLOW_TRACKING_URI if set, else a SQLite store beside the run directory."""
    return os.environ.get("MLFLOW_TRACKING_URI") or f"sqlite:///{Path(run_dir).resolve().parent / 'mlflow.db'}"


def log_params(client, run_id: str, params: list) -> None:
    """Log MLflow Params on a run in batches of 100 (the most one log_batch takes)."""
    for start in range(0, len(params), 100):
        client.log_batch(run_id, params=params[start:start + 100])


class MlflowRun:
    """One MLflow run per run directory (its id kept in the directory, so resume logs into it)."""

    def __init__(self, run_dir: Path, tracking_cfg, params: dict, run_name: str) -> None:
        from mlflow.tracking import MlflowClient

        run_dir = Path(run_dir)
        self.client = MlflowClient(tracking_uri=tracking_cfg.mlflow_uri or default_tracking_uri(run_dir))
        experiment = self.client.get_experiment_by_name(tracking_cfg.experiment)
        if experiment is None:
            artifacts = (run_dir.resolve().parent / "mlartifacts").as_uri()
            experiment_id = self.client.create_experiment(tracking_cfg.experiment, artifact_location=artifacts)
        else:
            experiment_id = experiment.experiment_id
        id_file = run_dir / MLFLOW_RUN_NAME
        # Steps the run already holds: a resumed run recomputes the records after its checkpoint, which the
        # killed process may have logged already; those are not logged twice.
        self.logged_steps: set[int] | None = set()
        recorded = id_file.read_text().strip() if id_file.is_file() else ""
        if recorded:
            self.run_id = recorded
            self.client.update_run(self.run_id, status="RUNNING")
            self.logged_steps = None  # read from the store at the first record (its keys name a history)
        else:
            from mlflow.entities import Param

            run = self.client.create_run(experiment_id, run_name=run_name, tags={"run_dir": str(run_dir.resolve())})
            self.run_id = run.info.run_id
            log_params(self.client, self.run_id, [Param(k, str(v)[:6000]) for k, v in flatten_config(params).items()])
            # Recorded once its params are in: a kill before leaves a run this directory never names (not one
            # without params that a resume would reuse).
            write_text_atomic(id_file, self.run_id + "\n")

    def log(self, record: dict) -> None:
        from mlflow.entities import Metric

        now = int(time.time() * 1000)
        step = int(record["step"])
        metrics = [Metric(k, float(v), now, step) for k, v in record.items()
                   if k != "step" and isinstance(v, (int, float))]
        if not metrics:
            return
        if self.logged_steps is None:
            self.logged_steps = {m.step for m in self.client.get_metric_history(self.run_id, metrics[0].key)}
        if step in self.logged_steps:
            return
        self.client.log_batch(self.run_id, metrics=metrics)
        self.logged_steps.add(step)

    def finish(self, status: str = "FINISHED") -> None:
        self.client.set_terminated(self.run_id, status=status)


class Tracker:
    """metrics.jsonl + (optionally) MLflow; `log(record)` writes an evaluation point to both."""

    def __init__(self, run_dir: Path, tracking_cfg, params: dict, run_name: str, resume_step: int | None) -> None:
        self.file = MetricsFile(run_dir, resume_step)
        self.mlflow = MlflowRun(run_dir, tracking_cfg, params, run_name) if tracking_cfg.mlflow else None

    @property
    def records(self) -> list[dict]:
        return self.file.records

    def log(self, record: dict) -> None:
        self.file.append(record)
        if self.mlflow is not None:
            self.mlflow.log(record)

    def finish(self, status: str = "FINISHED") -> None:
        if self.mlflow is not None:
            self.mlflow.finish(status)
