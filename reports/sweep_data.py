"""A sweep as tidy tables (SweepData), read from its run directories; the MLflow reader builds the same frames.

    data = load_sweep("runs/scalerl-loo")
    data.evals        # one row per evaluation point: run_id, variant, axis, choice, seed, step, compute, pass_rate,
                      # pass_rate_se (the evaluation's sampling standard error; NaN for runs that predate it)
    data.diagnostics  # one row per metrics line with a diagnostic: run_id, variant, seed, step, <diagnostic keys>
    data.configs      # run_id -> flattened recipe {"loss.name": "cispo", ...}, values as strings

Values of flattened configs are str() of the YAML values, the same strings the driver logs as MLflow
params, so a config diff reads the same from either source.
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path

import pandas as pd

from fitting.extrapolation import DEFAULT_OBSERVED_HALFWIDTH
from fitting.seeds import MIN_A_SHIFT, MIN_COMPUTE_RATIO
from reports import schema

RUN_KEYS = ("run_id", "variant", "axis", "choice", "seed")
EVAL_COLUMNS = RUN_KEYS + ("step", "compute", "pass_rate", "pass_rate_se")  # se: NaN where a run did not log it


class SweepDataError(ValueError):
    """A sweep directory or tracking store that cannot be read as a sweep; the message says what is missing."""


@dataclass(frozen=True)
class Budget:
    """The compute budget of the sweep, in `unit`: fit on [burn_in, fit_at], predict and score at target;
    verdicts from the fits on [burn_in, verdict_until] (sweeps.spec.BudgetSpec.verdicts_from)."""

    unit: str
    burn_in: float
    fit_at: float
    target: float
    observed_window: float | None  # relative half-width of the observed window; None: fitting's default
    fit_method: str = "default"  # fitting.fit_sigmoid's method: "default" (continuous) or "paper" (grid)
    fit_weights: str = "compute"  # fitting.fit_sigmoid's weights: "compute" (fitting.point_weights) or "equal"
    min_compute_ratio: float = MIN_COMPUTE_RATIO  # the smallest effects a verdict is made on (fitting.seeds)
    min_a_shift: float = MIN_A_SHIFT
    verdicts_from: str = "window"  # "window": the fits on [burn_in, fit_at]; "run": on [burn_in, target]
    metric: str = schema.WHOLE  # the pass rate fitted: the whole, or a mixture's part / downstream set

    @property
    def verdict_until(self) -> float:
        """The compute the verdicts refer to: fit_at (the window), or the target (the whole run). The reach
        levels are fractions of the gain the base made by it; a ceiling claim needs it past 3x C_mid."""
        return self.target if self.verdicts_from == "run" else self.fit_at

    @property
    def verdict_until_key(self) -> str:
        """The budget key verdict_until is: where a ceiling claim's compute is set."""
        return "target" if self.verdicts_from == "run" else "fit_at"

    @property
    def verdict_fit_until(self) -> float:
        """Where the verdicts' fits end: fit_at, or (the whole run) the target's observed window's far end, so
        the point where each job stopped, the first at or past the target, is in."""
        if self.verdicts_from != "run":
            return self.fit_at
        halfwidth = DEFAULT_OBSERVED_HALFWIDTH if self.observed_window is None else self.observed_window
        return self.target * (1 + halfwidth)

    @property
    def compute_key(self) -> str:
        return schema.COMPUTE_PREFIX + self.unit


@dataclass
class SweepData:
    """Everything a report needs from one sweep, independent of where it was read from."""

    name: str
    meta: dict  # sweep.json as read (title page: base, seeds, machine, created, executor)
    budget: Budget
    runs: pd.DataFrame  # one row per job: RUN_KEYS
    evals: pd.DataFrame  # EVAL_COLUMNS, sorted by run and step
    diagnostics: pd.DataFrame  # RUN_KEYS + step + the diagnostic keys found (NaN where a line lacks one)
    configs: dict[str, dict[str, str]]  # run_id -> flattened recipe
    source: str  # where it was read from, for the title page
    notes: list[str] = field(default_factory=list)  # what was skipped and why
    # EVAL_COLUMNS + metric: every pass rate the runs logged (the whole, and a mixture's sets by name)
    curves: pd.DataFrame = field(default_factory=lambda: pd.DataFrame(columns=[*EVAL_COLUMNS, "metric"]))

    def metric_names(self) -> list[str]:
        """The pass rates the runs logged: the whole first, then a mixture's sets in the order logged."""
        return list(dict.fromkeys([schema.WHOLE, *self.curves["metric"]]))

    def downstream_names(self) -> list[str]:
        """A mixture's downstream sets (task.downstream.<name> in the runs' configs), in metric order."""
        keys = {key.split(".")[2] for config in self.configs.values() for key in config
                if key.startswith("task.downstream.")}
        return [name for name in self.metric_names() if name in keys]

    def for_metric(self, metric: str) -> SweepData:
        """The same sweep with `metric`'s pass rate as its curves (budget.metric set): a part's table and fits."""
        if metric not in self.metric_names():
            raise SweepDataError(f"metric {metric!r}: the runs logged no {schema.pass_rate_keys(metric)[0]}; they "
                                 f"logged {', '.join(self.metric_names())} (a mixture's parts: task.parts)")
        evals = self.evals if metric == self.budget.metric else \
            self.curves[self.curves["metric"] == metric].drop(columns="metric").reset_index(drop=True)
        return replace(self, budget=replace(self.budget, metric=metric), evals=evals)

    def variants(self) -> list[str]:
        """Variant names in report order: base first, then by axis (schema.AXES order), then choice (a scan's
        numeric values in numeric order: 16 before 128)."""
        first = self.runs.drop_duplicates("variant")
        axis_rank = {axis: i for i, axis in enumerate((schema.BASE,) + schema.AXES)}
        ordered = sorted(first.itertuples(), key=lambda r: (axis_rank.get(r.axis, len(axis_rank)), r.axis,
                                                            *choice_order(r.choice)))
        return [r.variant for r in ordered]


def choice_order(choice: str) -> tuple[int, float, str]:
    """A sort key for choices: numbers first, by value, then names."""
    try:
        return 0, float(choice), choice
    except ValueError:
        return 1, 0.0, choice


def budget_from_meta(meta: Mapping) -> tuple[Budget, list[str]]:
    """The Budget of sweep.json; fit_at defaults to half the target (the paper's protocol), with a note."""
    budget = meta.get(schema.SWEEP_BUDGET) or {}
    notes = []
    unit = budget.get(schema.BUDGET_UNIT)
    target = budget.get(schema.BUDGET_TARGET)
    if not unit or target is None:
        raise SweepDataError(
            f"{schema.SWEEP_FILE}: budget needs '{schema.BUDGET_UNIT}' and '{schema.BUDGET_TARGET}'; got {budget!r}"
        )
    fit_at = budget.get(schema.BUDGET_FIT_AT)
    if fit_at is None:
        fit_at = float(target) / 2
        notes.append(f"budget.fit_at not set: fitting up to half the target ({fit_at:g})")
    window = budget.get(schema.BUDGET_OBSERVED_WINDOW)
    verdicts_from = str(budget.get(schema.BUDGET_VERDICTS_FROM) or "window")
    if verdicts_from not in schema.VERDICT_FITS:
        raise SweepDataError(f"{schema.SWEEP_FILE}: budget.{schema.BUDGET_VERDICTS_FROM} is {verdicts_from!r}; "
                             f"expected one of {', '.join(schema.VERDICT_FITS)}")
    return Budget(unit=str(unit), burn_in=float(budget.get(schema.BUDGET_BURN_IN) or 0.0), fit_at=float(fit_at),
                  target=float(target), observed_window=None if window is None else float(window),
                  fit_method=str(budget.get(schema.BUDGET_FIT_METHOD) or "default"),
                  fit_weights=str(budget.get(schema.BUDGET_FIT_WEIGHTS) or "compute"),
                  min_compute_ratio=float(budget.get(schema.BUDGET_MIN_COMPUTE_RATIO, MIN_COMPUTE_RATIO)),
                  min_a_shift=float(budget.get(schema.BUDGET_MIN_A_SHIFT, MIN_A_SHIFT)),
                  verdicts_from=verdicts_from, metric=str(budget.get(schema.BUDGET_METRIC) or schema.WHOLE)), notes


def flatten_config(data: Mapping, prefix: str = "") -> dict[str, str]:
    """{"loss": {"name": "cispo"}} -> {"loss.name": "cispo"}; leaves as str(), like the driver's MLflow params."""
    from recipe.config import flatten_config as flatten_fields

    return {key: str(value) for key, value in flatten_fields(data, prefix).items()}


def _finite(value) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def build_frames(runs: pd.DataFrame, records: Mapping[str, Iterable[dict]], budget: Budget,
                 notes: list[str]) -> tuple[pd.DataFrame, pd.DataFrame]:
    """(evals, diagnostics, curves) frames from metrics records per run_id; the one place both sources meet.

    A record is one metrics.jsonl line (or one MLflow step with every metric logged at it). A record with
    eval/pass_rate is an evaluation point; its x is compute/<unit> (the step itself for unit "steps"). curves holds
    every pass rate of each point (curve_points), evals the one budget.metric names.
    Evaluation points without that compute value are left out with a note; a step seen twice keeps the
    last record (a resumed run may repeat steps).
    """
    curve_rows, diag_rows = [], []
    for run in runs.itertuples(index=False):
        by_step: dict[int, dict] = {}
        for record in records.get(run.run_id, ()):
            if schema.STEP in record:
                by_step.setdefault(int(record[schema.STEP]), {}).update(record)
        run_keys = {key: getattr(run, key) for key in RUN_KEYS}
        missing_compute = 0
        for step in sorted(by_step):
            record = by_step[step]
            if _finite(record.get(schema.PASS_RATE)):
                compute = step if budget.unit == schema.STEPS_UNIT else record.get(budget.compute_key)
                if _finite(compute):
                    curve_rows += curve_points(record, {**run_keys, "step": step, "compute": float(compute)})
                else:
                    missing_compute += 1
            diagnostics = {key: float(record[key]) for key in schema.DIAGNOSTIC_KEYS if _finite(record.get(key))}
            if diagnostics:
                diag_rows.append({**run_keys, "step": step, **diagnostics})
        if missing_compute:
            notes.append(f"{run.variant} seed {run.seed}: {missing_compute} evaluation point(s) without "
                         f"{budget.compute_key} left out")
        if not by_step:
            notes.append(f"{run.variant} seed {run.seed} ({run.run_id}): no metrics recorded; left out of the fits")
    curves = pd.DataFrame(curve_rows, columns=[*EVAL_COLUMNS, "metric"])
    curves = curves.astype({"step": "int64", "seed": "int64", "compute": "float64", "pass_rate": "float64",
                            "pass_rate_se": "float64"})
    evals = curves[curves["metric"] == budget.metric].drop(columns="metric")
    if evals.empty and not curves.empty:
        raise SweepDataError(f"budget.{schema.BUDGET_METRIC}: {budget.metric!r} names no pass rate the runs logged; "
                             f"they logged {', '.join(dict.fromkeys(curves['metric']))} (a mixture's parts: "
                             "task.parts)")
    diag_columns = list(RUN_KEYS) + ["step"] + [k for k in schema.DIAGNOSTIC_KEYS if any(k in r for r in diag_rows)]
    diagnostics = pd.DataFrame(diag_rows, columns=diag_columns)
    return evals.reset_index(drop=True), diagnostics.reset_index(drop=True), curves.reset_index(drop=True)


def curve_points(record: Mapping, keys: dict) -> list[dict]:
    """One evaluation record's pass rates (the whole, and each eval/pass_rate/<set> of a mixture) as curve rows."""
    names = [schema.WHOLE] + [key[len(schema.PART_PASS_RATE_PREFIX):] for key in record
                              if key.startswith(schema.PART_PASS_RATE_PREFIX)]
    rows = []
    for name in names:
        key, se_key = schema.pass_rate_keys(name)
        if _finite(record.get(key)):
            se = record.get(se_key)
            rows.append({**keys, "pass_rate": float(record[key]),
                         "pass_rate_se": float(se) if _finite(se) else math.nan, "metric": name})
    return rows


def runs_frame(entries: Iterable[Mapping]) -> pd.DataFrame:
    """The jobs frame (RUN_KEYS) from plan.json entries or from MLflow tags (same key names)."""
    rows = [{"run_id": str(e[schema.PLAN_RUN_ID]), "variant": str(e[schema.PLAN_VARIANT]),
             "axis": str(e[schema.PLAN_AXIS]), "choice": str(e[schema.PLAN_CHOICE]), "seed": int(e[schema.PLAN_SEED])}
            for e in entries]
    return pd.DataFrame(rows, columns=list(RUN_KEYS)).astype({"seed": "int64"})


def _read_json(path: Path, expected: type):
    from recipe.tracking import read_json_file

    if not path.is_file():
        raise SweepDataError(f"{path} not found: is {path.parent} a sweep directory?")
    return read_json_file(path, expected)


def read_run_config(path: Path) -> dict:
    """A run's config.yaml as a dict; a damaged one names itself (the run's curve is still its metrics)."""
    import yaml

    from recipe.tracking import DamagedFileError

    try:
        value = yaml.safe_load(path.read_bytes().decode("utf-8"))
    except (yaml.YAMLError, ValueError, RecursionError):
        value = None
    if not isinstance(value, dict):
        raise DamagedFileError(f"{path}: damaged (not the run's resolved config); restore it, or remove the run "
                               "directory to train that job again from the start")
    return value


def read_metrics_file(path: Path) -> list[dict]:
    """The complete JSON lines of a metrics.jsonl (a half-written last line from a kill is skipped)."""
    records = []
    if path.is_file():
        for line in path.read_text().splitlines():
            try:
                record = json.loads(line)
            except json.JSONDecodeError:
                continue
            if isinstance(record, dict):
                records.append(record)
    return records


def load_sweep(sweep_dir: str | Path) -> SweepData:
    """Read a sweep directory (sweep.json, plan.json, runs/*/config.yaml and metrics.jsonl) into SweepData."""
    sweep_dir = Path(sweep_dir)
    if not sweep_dir.is_dir():
        raise SweepDataError(f"{sweep_dir}: no such sweep directory")
    meta = _read_json(sweep_dir / schema.SWEEP_FILE, dict)
    plan = _read_json(sweep_dir / schema.PLAN_FILE, list)
    budget, notes = budget_from_meta(meta)
    try:
        runs = runs_frame(plan)
    except (KeyError, TypeError, ValueError) as error:
        raise SweepDataError(f"{sweep_dir / schema.PLAN_FILE}: damaged (an entry lacks or mistypes {error}); "
                             "remove it and rerun `sweep run` on the spec to rebuild it") from None
    run_dirs = {str(e[schema.PLAN_RUN_ID]): sweep_dir / e[schema.PLAN_RUN_DIR] for e in plan}
    records, configs = {}, {}
    for run_id, run_dir in run_dirs.items():
        records[run_id] = read_metrics_file(run_dir / schema.METRICS_FILE)
        config_path = run_dir / schema.CONFIG_FILE
        if config_path.is_file():
            configs[run_id] = flatten_config(read_run_config(config_path))
        else:
            notes.append(f"{run_id}: no {schema.CONFIG_FILE}; its config diff is not shown")
    evals, diagnostics, curves = build_frames(runs, records, budget, notes)
    return SweepData(name=str(meta.get(schema.SWEEP_NAME, sweep_dir.name)), meta=meta, budget=budget, runs=runs,
                     evals=evals, diagnostics=diagnostics, configs=configs,
                     source=f"run directories of {sweep_dir.resolve()}", notes=notes, curves=curves)
