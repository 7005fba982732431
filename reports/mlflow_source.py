"""Reading a sweep back from an MLflow tracking store alone (no run directories) into the same SweepData.

    data = load_sweep_from_mlflow("http://mlflow.cluster:5000", "scalerl-loo")

The sweep's parent run carries tag scalerl.sweep; its children carry the job tags (scalerl.run_id,
axis, choice, variant, seed), the flattened recipe as params and the metrics.jsonl keys as metrics
logged at the training step. The budget comes from the parent run's sweep.json artifact (uploaded by
`sweep report`) or else from its params (the flattened sweep.json: budget.unit, budget.fit_at, ...).
"""

from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path

from reports import schema
from reports.sweep_data import SweepData, SweepDataError, budget_from_meta, build_frames, runs_frame

PROGRESS_BAR = "MLFLOW_ENABLE_ARTIFACTS_PROGRESS_BAR"


def _client(tracking_uri: str):
    from mlflow.tracking import MlflowClient

    return MlflowClient(tracking_uri=tracking_uri)


def find_experiment(client, experiment: str):
    """The experiment named `experiment`, or with that id; SweepDataError listing the names otherwise."""
    found = client.get_experiment_by_name(experiment)
    if found is None and experiment.isdigit():
        from mlflow.exceptions import MlflowException

        try:
            found = client.get_experiment(experiment)
        except MlflowException:
            found = None
    if found is None:
        names = [e.name for e in client.search_experiments()]
        raise SweepDataError(f"no MLflow experiment {experiment!r}; experiments in this store: {', '.join(names)}")
    return found


def _all_runs(client, experiment_id: str) -> list:
    runs, token = [], None
    while True:
        page = client.search_runs([experiment_id], max_results=1000, page_token=token)
        runs.extend(page)
        token = page.token
        if not token:
            return runs


def _parse_param(value: str):
    """A param logged as str(value): numbers, lists and JSON come back typed, anything else stays a string."""
    try:
        return json.loads(value)
    except (TypeError, ValueError):
        import ast

        try:
            return ast.literal_eval(value)
        except (ValueError, SyntaxError):
            return value


def _unflatten(params: dict[str, str]) -> dict:
    nested: dict = {}
    for key, value in params.items():
        node = nested
        *parents, leaf = key.split(".")
        for part in parents:
            node = node.setdefault(part, {})
        node[leaf] = _parse_param(value)
    return nested


def _sweep_meta(client, parent) -> dict:
    """sweep.json of the parent run: its artifact when present, else its params unflattened."""
    artifacts = {f.path for f in client.list_artifacts(parent.info.run_id)}
    if schema.PARENT_SWEEP_ARTIFACT in artifacts:
        previous = os.environ.get(PROGRESS_BAR)
        os.environ[PROGRESS_BAR] = "false"  # one small file: a progress bar on stderr is noise
        try:
            with tempfile.TemporaryDirectory() as folder:
                path = client.download_artifacts(parent.info.run_id, schema.PARENT_SWEEP_ARTIFACT, folder)
                return json.loads(Path(path).read_text())
        finally:
            if previous is None:
                os.environ.pop(PROGRESS_BAR, None)
            else:
                os.environ[PROGRESS_BAR] = previous
    meta = _unflatten(dict(parent.data.params))
    meta.setdefault(schema.SWEEP_NAME, parent.data.tags[schema.TAG_SWEEP])
    if schema.SWEEP_BUDGET not in meta:
        raise SweepDataError(
            f"parent run {parent.info.run_id} has neither a {schema.PARENT_SWEEP_ARTIFACT} artifact nor budget.* "
            "params: the store does not say the sweep's budget (unit, fit_at, target)"
        )
    return meta


def _pick_parent(runs: list, parent_run_id: str | None, notes: list[str]):
    parents = [r for r in runs if schema.TAG_SWEEP in r.data.tags]
    if parent_run_id is not None:
        parents = [r for r in parents if r.info.run_id == parent_run_id]
        if not parents:
            raise SweepDataError(f"run {parent_run_id} is not a sweep parent run (tag {schema.TAG_SWEEP}) here")
    if not parents:
        raise SweepDataError(f"no sweep parent run (tag {schema.TAG_SWEEP}) in this experiment")
    parents.sort(key=lambda r: r.info.start_time or 0)
    if len(parents) > 1:
        notes.append(f"{len(parents)} sweep parent runs in the experiment; read the latest, "
                     f"{parents[-1].info.run_id} (pass parent_run_id to pick another)")
    return parents[-1]


def _records(client, run, keys: list[str]) -> list[dict]:
    """One record per training step, merging the metric histories of `keys` (the last value at a step wins)."""
    by_step: dict[int, dict] = {}
    for key in keys:
        history = sorted(client.get_metric_history(run.info.run_id, key), key=lambda m: (m.step, m.timestamp))
        for metric in history:
            by_step.setdefault(metric.step, {schema.STEP: metric.step})[key] = metric.value
    return [by_step[step] for step in sorted(by_step)]


def _one_run_per_job(children: list, notes: list[str]) -> list:
    """The newest child run of each job: a driver killed after creating a job's run and before recording it in
    mlflow.json leaves an older run of that job, which the next driver does not use."""
    newest: dict[str, object] = {}
    for run in sorted(children, key=lambda r: r.info.start_time or 0):
        newest[run.data.tags[schema.TAG_RUN_ID]] = run
    if len(newest) < len(children):
        notes.append(f"{len(children) - len(newest)} older job run(s) left by a killed driver were not read "
                     "(the newest run of each job was)")
    return list(newest.values())


def load_sweep_from_mlflow(tracking_uri: str, experiment: str, *, parent_run_id: str | None = None) -> SweepData:
    """Read the sweep logged in `experiment` (name or id) of the store at `tracking_uri` into SweepData."""
    client = _client(tracking_uri)
    found = find_experiment(client, experiment)
    notes: list[str] = []
    runs = _all_runs(client, found.experiment_id)
    parent = _pick_parent(runs, parent_run_id, notes)
    meta = _sweep_meta(client, parent)
    budget, budget_notes = budget_from_meta(meta)
    notes += budget_notes
    children = [r for r in runs if r.data.tags.get(schema.TAG_PARENT) == parent.info.run_id
                and schema.TAG_RUN_ID in r.data.tags]
    if not children:
        raise SweepDataError(f"parent run {parent.info.run_id} has no job runs (tag {schema.TAG_RUN_ID})")
    children = _one_run_per_job(children, notes)
    tags = {schema.PLAN_RUN_ID: schema.TAG_RUN_ID, schema.PLAN_AXIS: schema.TAG_AXIS,
            schema.PLAN_CHOICE: schema.TAG_CHOICE, schema.PLAN_VARIANT: schema.TAG_VARIANT,
            schema.PLAN_SEED: schema.TAG_SEED}
    try:
        jobs = runs_frame({field: r.data.tags[tag] for field, tag in tags.items()} for r in children)
    except KeyError as error:
        raise SweepDataError(f"a job run lacks the tag {error}") from None
    wanted = [schema.PASS_RATE, schema.PASS_RATE_SE, budget.compute_key, *schema.DIAGNOSTIC_KEYS]
    records, configs = {}, {}
    for run in children:
        run_id = run.data.tags[schema.TAG_RUN_ID]
        parts = [k for k in run.data.metrics if k.startswith((schema.PART_PASS_RATE_PREFIX,
                                                              schema.PART_PASS_RATE_SE_PREFIX))]
        records[run_id] = _records(client, run, [k for k in wanted if k in run.data.metrics] + parts)
        configs[run_id] = dict(run.data.params)
    evals, diagnostics, curves = build_frames(jobs, records, budget, notes)
    return SweepData(name=str(meta.get(schema.SWEEP_NAME, found.name)), meta=meta, budget=budget, runs=jobs,
                     evals=evals, diagnostics=diagnostics, configs=configs,
                     source=f"MLflow {tracking_uri}, experiment {found.name!r}", notes=notes, curves=curves)
