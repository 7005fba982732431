"""The `sweep tune` driver: an Optuna study in ask-and-tell form whose trials are sweep jobs.

Only this driver talks to the study's storage. It asks Optuna for a parameter set, composes the
trial's recipe (base <- overrides <- parameters <- seed), and launches it like a sweep job: a
`TrainingJob` in a run directory named by the recipe's hash, trained until `budget.fit_at`. When the
job ends, the sigmoid fit of its curve gives the objective (the predicted pass rate at
`budget.target`, or A, or B) and the driver tells the study.

At every poll, a running trial's curve so far is fitted and bootstrapped; the pruner component
compares its interval at the target with the best finished trial's and may stop it (the job is
cancelled and the trial told PRUNED). Early pass rates alone never prune: a slow starter with a
higher ceiling keeps running.

Nothing is lost when the driver dies: the study storage holds every trial and its parameters,
each trial's record is in <tune_dir>/trials/<number>.json, and each run directory holds its
checkpoints. A rerun of the same command tells the study what finished meanwhile, relaunches the
trials still RUNNING in the storage with their own parameters (same parameters, same run directory,
so they resume from their checkpoints), and asks only for the trials still missing.

    <tune_dir>/optuna.db            the study (default storage)
    <tune_dir>/tune.json            name, objective, budget, space, machine (the report's title page)
    <tune_dir>/trials/<n>.json      trial n: params, run_id, state, objective with its interval, pruning
    <tune_dir>/runs/<run_id>/       the trial's run directory (pruned.json once pruned)
    <tune_dir>/trials.csv, tune_report.pdf   written when the study is complete
"""

from __future__ import annotations

import dataclasses
import json
import math
import sys
import time
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Optional, TextIO

from omegaconf import OmegaConf

from components.registry import ConfigError
from recipe.config import run_id as recipe_run_id
from sweeps.job import TRAINED_ELSEWHERE, TrainingJob
from sweeps.planner import Job, check_cores
from sweeps.progress import format_duration
from sweeps.pruning import PRUNERS, CurveEstimate, Pruner
from sweeps.runner import Display, job_result_field, machine_description, sweep_job_recipe
from sweeps.spec import base_source, output_dir
from sweeps.state import RUNNING as JOB_RUNNING
from sweeps.state import DriverLock, is_done, is_locked, read_state, stop_run, write_json_atomic, write_state
from sweeps.trials import (COMPLETE, FAILED, PRUNED, RUNNING, TrialRecord, best_record, compute_summary, curve_points,
                           fit_trial_curve, read_records, write_record)
from sweeps.tune_spec import VERDICT_ONLY_BUDGET_KEYS, TuneSpec, coupled_params, trial_recipe

PRUNED_FILE = "pruned.json"
TUNE_FILE = "tune.json"
# The interval of an objective when the pruner does not set one (the `none` pruner).
DEFAULT_LEVEL, DEFAULT_N_BOOT = 0.9, 200


def params_label(params: dict[str, Any]) -> str:
    """Parameters as one line: {"optimizer.lr": 1.2345e-4, "rollout.samples_per_prompt": 8} ->
    "optimizer.lr=0.0001235, rollout.samples_per_prompt=8"."""
    return ", ".join(f"{path}={value:.4g}" if isinstance(value, float) else f"{path}={value}"
                     for path, value in params.items())


def interval_settings(pruner: Pruner) -> tuple[float, int, float]:
    """(level, bootstrap draws, run-to-run sd of the objective) of the pruner's intervals."""
    return (getattr(pruner, "level", DEFAULT_LEVEL), getattr(pruner, "n_boot", DEFAULT_N_BOOT),
            getattr(pruner, "run_sd", 0.0))


# A fit with one of these flags has no ceiling the data determine: its prediction far out is not bounded.
# too_few_points (< 9 points for 3 parameters): a near-exact fit whose bootstrap interval is too narrow (simulated,
# 4 points: 14 of 40 upper bounds below the true value at a 90% level, so a trial was pruned that would have won).
UNBOUNDED_FLAGS = ("a_at_bound", "window_ends_before_c_mid", "c_mid_ci_beyond_window", "not_increasing", "flat_curve",
                   "too_few_points")


def honest_interval(value: float, lower: float, upper: float, run_sd: float, level: float) -> tuple[float, float]:
    """The bootstrap interval widened by run-to-run noise: each side sqrt(side^2 + (z run_sd)^2).

    The bootstrap of one curve sees only its evaluation noise; another run of the same recipe lands
    elsewhere by about run_sd (measured across seeds), z = the normal quantile of `level`.
    """
    from scipy.stats import norm

    spread = norm.ppf((1 + level) / 2) * run_sd
    return (value - math.hypot(value - lower, spread), value + math.hypot(upper - value, spread))


def estimate_objective(spec: TuneSpec, points: tuple[list[int], list[float], list[float]], level: float,
                       n_boot: int, run_sd: float = 0.0) -> CurveEstimate:
    """The objective a trial's curve (`curve_points`) predicts, with an interval that admits what it can't know.

    pred_at_target = R(target) of the fit_trial_curve fit, A and B, each with the `level` interval of
    the bootstrap's draws. For pred_at_target and A the interval is then widened by the run-to-run sd
    (honest_interval), and a fit whose ceiling the data do not determine (UNBOUNDED_FLAGS: A at its
    bound, the window not yet past C_mid...) gets the whole range [0, 1]: half a curve that has not
    bent yet does not bound where it ends (a trial pruned at an upper bound of 0.569 from such a fit
    ended at 0.782). Raises fitting.FitInputError when the curve cannot be fitted yet.
    """
    from fitting import bootstrap_fit

    fit = fit_trial_curve(points, spec.budget.burn_in, spec.budget.fit_method, spec.budget.fit_weights)
    compute = points[1]
    boot = bootstrap_fit(fit, n_boot=n_boot, target=spec.budget.target, level=level, seed=0)
    metric = spec.objective.metric
    if metric == "pred_at_target":
        value, (lower, upper) = float(fit.predict(spec.budget.target)), boot.prediction_ci
    elif metric == "A":
        value, (lower, upper) = fit.a, boot.a_ci
    else:
        value, (lower, upper) = fit.b, boot.b_ci
    if metric in ("pred_at_target", "A"):
        if set(UNBOUNDED_FLAGS) & set(boot.flags):
            lower, upper = 0.0, 1.0
        else:
            lower, upper = honest_interval(value, lower, upper, run_sd, level)
            lower, upper = max(lower, 0.0), min(upper, 1.0)
    return CurveEstimate(value=float(value), lower=float(lower), upper=float(upper), compute=compute[-1])


def as_estimate(record: TrialRecord) -> CurveEstimate:
    return CurveEstimate(record.value, record.lower, record.upper, record.compute)


def storage_url(spec: TuneSpec, tune_dir: Path) -> str:
    """The spec's Optuna storage (any RDB URL), else a SQLite file in the tune directory."""
    return spec.storage or f"sqlite:///{tune_dir.resolve()}/optuna.db"


def open_study(spec: TuneSpec, storage: str):
    """Create the study in its storage, or load it when this command ran before; start_with trials not in it yet
    are enqueued (skip_if_exists: one a driver enqueued, ran or is running is not asked again)."""
    import optuna

    optuna.logging.set_verbosity(optuna.logging.WARNING)

    def sampler(trials_so_far: int):
        # Offset by the trials already in the study: a resumed driver with the spec's own seed would
        # draw the first driver's parameters again.
        seed = spec.sampler.seed + trials_so_far
        return (optuna.samplers.TPESampler(seed=seed) if spec.sampler.name == "tpe"
                else optuna.samplers.RandomSampler(seed=seed))

    try:
        existing = optuna.load_study(study_name=spec.name, storage=storage)
        study = optuna.load_study(study_name=spec.name, storage=storage, sampler=sampler(len(existing.trials)))
    except KeyError:  # no such study yet
        study = optuna.create_study(study_name=spec.name, storage=storage, sampler=sampler(0),
                                    direction=spec.objective.direction)
    # On a loaded study too: a driver killed between creating the study and enqueuing left some out.
    for params in spec.start_with:
        study.enqueue_trial(dict(params), skip_if_exists=True)
    return study


def distributions(spec: TuneSpec) -> dict[str, Any]:
    from optuna.distributions import CategoricalDistribution, FloatDistribution, IntDistribution

    result: dict[str, Any] = {}
    for param in spec.params:
        if param.type == "categorical":
            result[param.path] = CategoricalDistribution(list(param.choices))
        elif param.type == "int":
            result[param.path] = IntDistribution(int(param.low), int(param.high), log=param.log,
                                                 step=int(param.step or 1))
        else:
            result[param.path] = FloatDistribution(param.low, param.high, log=param.log, step=param.step)
    return result


# What must not change between runs of one study: a trial's meaning depends on all of it.
STUDY_IDENTITY = ("base", "overrides", "seed", "space", "objective", "budget", "total_batch")


def write_tune_files(spec: TuneSpec, tune_dir: Path, storage: str) -> None:
    """tune.json (identity and title page) and spec.yaml; refuses a changed study in the same directory."""
    from components.registry import ConfigError

    tune_dir.mkdir(parents=True, exist_ok=True)
    frozen = dataclasses.asdict(spec)
    del frozen["root"]
    source = base_source(spec)
    frozen["base"] = "scalerl" if source is None else str(source.resolve())
    identity = {key: frozen[key] for key in STUDY_IDENTITY}
    # Left out, so a study begun before these keys existed still resumes (tune allows only their defaults).
    identity["budget"] = {key: value for key, value in identity["budget"].items()
                          if key not in VERDICT_ONLY_BUDGET_KEYS}
    path = tune_dir / TUNE_FILE
    if path.exists():
        previous = json.loads(path.read_text())
        changed = [key for key in STUDY_IDENTITY if json.dumps(previous["identity"].get(key), sort_keys=True)
                   != json.dumps(json.loads(json.dumps(identity[key])), sort_keys=True)]
        if changed:
            raise ConfigError(
                f"{', '.join(changed)}: differ from the study already in {tune_dir}; its trials would not be "
                "comparable. Restore the spec, or give the new study another name or output_dir")
        created = previous["created"]
    else:
        created = datetime.now(timezone.utc).isoformat(timespec="seconds")
    write_json_atomic(path, {"name": spec.name, "identity": identity, "trials": spec.trials,
                             "pruner": spec.pruner, "sampler": dataclasses.asdict(spec.sampler),
                             "storage": storage, "created": created, "machine": machine_description()})
    frozen["output_dir"] = str(tune_dir.resolve())
    (tune_dir / "spec.yaml").write_text(OmegaConf.to_yaml(OmegaConf.create(json.loads(json.dumps(frozen)))))


@dataclasses.dataclass
class ActiveRun:
    """A run directory some trials are waiting on (several when Optuna repeats a parameter set)."""

    job: Job
    numbers: list[int]
    handle: Any = None  # None: started by an earlier driver and still holding its lock (watched)
    points: tuple = ([], [], [])  # (steps, compute, pass rates) as last read, once per poll
    points_fitted: int = 0  # evaluations the last estimate saw: refit only when new ones arrive
    estimate: Optional[CurveEstimate] = None


class TuneDriver:
    """One run of `sweep tune`: resumes what is on disk, runs the missing trials, tells the study."""

    def __init__(self, spec: TuneSpec, stream: TextIO) -> None:
        from sweeps.launcher import Launcher
        from sweeps.tracking import SweepTracker

        self.spec, self.stream = spec, stream
        self.tune_dir = output_dir(spec)
        self.tune_dir.mkdir(parents=True, exist_ok=True)
        self.storage = storage_url(spec, self.tune_dir)
        write_tune_files(spec, self.tune_dir, self.storage)  # refuses a changed study before touching it
        self.study = open_study(spec, self.storage)
        self.pruner = PRUNERS.build(spec.pruner)
        self.level, self.n_boot, self.run_sd = interval_settings(self.pruner)
        self.distributions = distributions(spec)
        self.launcher = Launcher(spec, self.tune_dir / "logs")
        self.tracker = SweepTracker(spec, self.tune_dir, [])
        self.active: dict[str, ActiveRun] = {}
        self.records = {record.number: record for record in read_records(self.tune_dir)}

    # --- trials -> run directories -------------------------------------------------------------
    def job_for(self, number: int, params: dict[str, Any]) -> Job:
        recipe = trial_recipe(self.spec, params, label=f"trial {number}")
        run_id = recipe_run_id(recipe)
        label = params_label(coupled_params(self.spec, params))  # with total_batch: the prompts it derives too
        return Job(run_id, "trial", label, self.spec.seed, recipe, self.tune_dir / "runs" / run_id)

    def record_for(self, number: int, params: dict[str, Any], job: Job) -> TrialRecord:
        record = self.records.get(number) or TrialRecord(number, dict(params), job.run_id)
        self.records[number] = record
        write_record(self.tune_dir, record)
        return record

    def attach(self, number: int, params: dict[str, Any]) -> None:
        """Run (or resume, or reuse) the run directory of trial `number`."""
        try:
            job = self.job_for(number, params)
            check_cores(self.spec, job)
        except ConfigError as error:  # this combination of values makes no recipe, though each alone did
            self.refuse(number, params, error)
            return
        self.record_for(number, params, job)
        if job.run_id in self.active:  # the same parameters as a running trial: wait for its run
            self.active[job.run_id].numbers.append(number)
            return
        self.tracker.add_jobs([job], {job.run_id: f"trial {number}"})
        run = ActiveRun(job, [number])
        self.active[job.run_id] = run
        if (job.run_dir / PRUNED_FILE).exists() or is_done(job.run_dir):
            return  # settled at the next poll, with no compute spent
        if is_locked(job.run_dir):
            return  # an earlier driver's job still trains it: watch
        state = read_state(self.tune_dir, job.run_id)
        live = self.launcher.live_jobs([state.launcher_id]) if state.status == JOB_RUNNING else {}
        if state.launcher_id in live:  # queued on SLURM by an earlier driver (no lock yet): watch, not resubmit
            run.handle = live[state.launcher_id]
            return
        self.launch(run)

    def refuse(self, number: int, params: dict[str, Any], error: ConfigError) -> None:
        """A trial whose parameters make no valid recipe (tune --check tries each range end alone, not every
        combination: min_thinking 10 with max_thinking 8): recorded FAILED with the reason and told to the study,
        which goes on. Left RUNNING, every rerun re-attached it and stopped on the same error."""
        record = self.records.get(number) or TrialRecord(number, dict(params), "")
        record.state, record.error = FAILED, " ".join(str(error).split())
        self.records[number] = record
        print(f"trial {number}: {params_label(params)} makes no valid recipe: {record.error}; told FAIL, the study "
              "goes on", file=self.stream)
        self.tell(record)

    def launch(self, run: ActiveRun) -> None:
        check_cores(self.spec, run.job)
        spec = self.spec
        function = TrainingJob(sweep_job_recipe(run.job), str(run.job.run_dir), spec.budget.unit, spec.budget.fit_at,
                               self.launcher.threads)
        run.handle = self.launcher.submit([function])[0]
        from sweeps.launcher import job_log

        state = read_state(self.tune_dir, run.job.run_id)
        state.status, state.attempts, state.last_error = RUNNING, state.attempts + 1, None
        state.launcher_id, state.log_path = str(run.handle.job_id), job_log(run.handle)
        write_state(self.tune_dir, run.job.run_id, state)

    def ask(self) -> None:
        """A new trial from the sampler (enqueued start_with trials first)."""
        trial = self.study.ask(self.distributions)
        self.attach(trial.number, dict(trial.params))

    # --- settling -------------------------------------------------------------------------------
    def tell(self, record: TrialRecord) -> None:
        """Write the record, then tell the study (a crash between the two is repaired on the next run)."""
        write_record(self.tune_dir, record)
        self.tell_study(record)

    def tell_study(self, record: TrialRecord) -> None:
        """The study hears a settled record's outcome (the record is on disk already)."""
        from optuna.trial import TrialState

        if record.state == COMPLETE:
            self.study.tell(record.number, record.value, skip_if_finished=True)
        elif record.state == PRUNED:
            self.study.tell(record.number, state=TrialState.PRUNED, skip_if_finished=True)
        else:
            self.study.tell(record.number, state=TrialState.FAIL, skip_if_finished=True)

    def finished(self, run: ActiveRun) -> bool:
        from sweeps.launcher import job_finished

        if run.handle is None:
            return not is_locked(run.job.run_dir)
        return job_finished(run.handle)

    def settle(self, run: ActiveRun) -> None:
        """The run's process ended: its trials are complete, pruned, failed, or it is relaunched."""
        from fitting import FitInputError
        from sweeps.launcher import job_error

        job = run.job
        self.tracker.mirror(job)
        points = curve_points(job.run_dir, self.spec.budget.unit)
        _, compute, pass_rate = points
        last = {"compute": compute[-1] if compute else 0.0, "pass_rate": pass_rate[-1] if pass_rate else None}
        pruned_path = job.run_dir / PRUNED_FILE
        outcome: dict[str, Any]
        if pruned_path.exists():
            outcome = {"state": PRUNED, "pruned": json.loads(pruned_path.read_text())}
        elif is_done(job.run_dir):
            try:
                estimate = estimate_objective(self.spec, points, self.level, self.n_boot, self.run_sd)
                outcome = {"state": COMPLETE, "value": estimate.value, "lower": estimate.lower, "upper": estimate.upper}
            except FitInputError as error:
                outcome = {"state": FAILED, "error": f"curve not fitted: {error}"}
        elif run.handle is not None and job_result_field(run.handle, TRAINED_ELSEWHERE) is not None:
            run.handle = None  # a second launch found the run trained by the first: watch that one's lock
            return
        else:
            error = job_error(run.handle) if run.handle is not None else None
            error = error or "job ended before reaching budget.fit_at"
            state = read_state(self.tune_dir, job.run_id)
            state.status, state.last_error = "failed", error
            state.failures += 1
            write_state(self.tune_dir, job.run_id, state)
            if state.failures < self.spec.executor.max_attempts:
                print(f"trial {run.numbers[0]}: {error}; relaunching (failure {state.failures} of at most "
                      f"{self.spec.executor.max_attempts}, resumes from its checkpoint)", file=self.stream)
                self.launch(run)
                return
            outcome = {"state": FAILED, "error": f"{error} (failed {state.failures} times; log: {state.log_path})"}
        del self.active[job.run_id]
        for number in run.numbers:
            record = self.records[number]
            record.compute, record.pass_rate = last["compute"], last["pass_rate"]
            for key, value in outcome.items():
                setattr(record, key, value)
            if number != run.numbers[0]:
                record.note = f"same parameters as trial {run.numbers[0]}: shares its run"
        # On disk, then MLflow, then the study: a driver killed before the study hears finds the trials settled
        # on disk and RUNNING in the study, and resume() closes their MLflow run (again: idempotent) and tells.
        for number in run.numbers:
            write_record(self.tune_dir, self.records[number])
        self.close_mlflow_run(self.records[run.numbers[0]])
        for number in run.numbers:
            self.tell_study(self.records[number])

    def close_mlflow_run(self, record: TrialRecord) -> None:
        """The trial's summary metrics and tags on its job's MLflow run, then the run closed with its outcome."""
        if record.run_id not in self.tracker.state["child_runs"]:
            return  # a trial refused before it had a run
        numbers = sorted(n for n, other in self.records.items() if other.run_id == record.run_id)
        status = {COMPLETE: "FINISHED", PRUNED: "KILLED", FAILED: "FAILED"}[record.state]
        self.tracker.log_summary(record.run_id, {
            "tune/objective": record.value, "tune/objective_lower": record.lower, "tune/objective_upper": record.upper,
            "tune/compute": record.compute,
            "tune/pruned_at_compute": (record.pruned or {}).get("compute")},
            {"scalerl.tune.state": record.state, "scalerl.tune.trials": ",".join(map(str, numbers))})
        self.tracker.finish_run(record.run_id, status)

    # --- pruning --------------------------------------------------------------------------------
    def consider_pruning(self, run: ActiveRun) -> None:
        """Refit the run's curve when it has new evaluations; stop it if the pruner says so."""
        from fitting import FitInputError

        if (run.job.run_dir / PRUNED_FILE).exists():
            self.cancel(run)  # decided by an earlier driver that died before stopping the job
            return
        steps, compute, _ = run.points
        if len(steps) == run.points_fitted or not compute:
            return
        run.points_fitted = len(steps)
        fit_at = self.spec.budget.fit_at
        if not self.pruner.min_compute_frac * fit_at <= compute[-1] < fit_at:
            return  # too early to judge, or already complete (the job is writing done.json)
        try:
            run.estimate = estimate_objective(self.spec, run.points, self.level, self.n_boot, self.run_sd)
        except FitInputError:
            return  # too few points in the window yet
        best = best_record(list(self.records.values()), self.spec.maximize)
        best_estimate = as_estimate(best) if best else None
        if not self.pruner.should_prune(run.estimate, best_estimate, self.spec.budget.fit_at, self.spec.maximize):
            return
        decision = {"compute": compute[-1], "step": steps[-1], "estimate": dataclasses.asdict(run.estimate),
                    "best_trial": best.number, "best": dataclasses.asdict(best_estimate),
                    "time": time.time()}
        write_json_atomic(run.job.run_dir / PRUNED_FILE, decision)
        print(f"trial {run.numbers[0]} pruned at {compute[-1]:,.0f} {self.spec.budget.unit}: "
              f"its {self.spec.objective.metric} interval [{run.estimate.lower:.3f}, {run.estimate.upper:.3f}] "
              f"lies beyond trial {best.number}'s [{best.lower:.3f}, {best.upper:.3f}]", file=self.stream)
        self.cancel(run)

    def cancel(self, run: ActiveRun) -> None:
        """Stop a pruned trial's job now (nothing of it is needed any more)."""
        if self.spec.executor.name != "slurm":
            stop_run(run.job.run_dir, grace_seconds=0.0)
        elif run.handle is not None:
            run.handle.cancel(check=False)  # scancel
        else:  # an earlier driver's job, running on a node: its lock's pid is not this host's to signal
            from sweeps.slurm import cancel_slurm_jobs

            cancel_slurm_jobs([read_state(self.tune_dir, run.job.run_id).launcher_id or ""])

    # --- the loop -------------------------------------------------------------------------------
    def started_trials(self) -> int:
        from optuna.trial import TrialState

        return sum(trial.state != TrialState.WAITING for trial in self.study.get_trials(deepcopy=False))

    def resume(self) -> None:
        """Re-attach every trial the storage still has RUNNING (its driver died)."""
        from optuna.trial import TrialState

        for trial in self.study.get_trials(deepcopy=False, states=(TrialState.RUNNING,)):
            record = self.records.get(trial.number)
            if record is not None and record.state != RUNNING:  # settled on disk, not yet told
                self.close_mlflow_run(record)
                self.tell_study(record)
            else:
                self.attach(trial.number, dict(trial.params))

    def run(self) -> int:
        spec, stream = self.spec, self.stream
        started = time.time()
        print(f"tune {spec.name}: {spec.trials} trials over {', '.join(spec.space)}; objective "
              f"{spec.objective.direction} {spec.objective.metric}; pruner {self.pruner_name()}; "
              f"study {self.storage}; MLflow {self.tracker.uri}", file=stream)
        display = Display(stream)
        previous: list = []
        self.resume()
        try:
            while True:
                polled = False
                for run in list(self.active.values()):
                    self.tracker.mirror(run.job)
                    if self.finished(run):
                        self.settle(run)
                        polled = True
                    else:
                        run.points = curve_points(run.job.run_dir, spec.budget.unit)
                        self.consider_pruning(run)
                while len(self.active) < spec.parallelism and self.started_trials() < spec.trials:
                    self.ask()
                states = [(number, record.state) for number, record in sorted(self.records.items())]
                display.show(self.progress_text(started), changed=states != previous)
                previous = states
                if not self.active:
                    break
                if not polled:
                    time.sleep(spec.executor.poll_seconds)
        except KeyboardInterrupt:
            stopped = ("; the local trials it started stopped with it and resume from their last checkpoints"
                       if spec.executor.name == "local" and self.active else "")
            print(f"\ninterrupted{stopped}: rerun `sweep tune` on the same spec to resume ({self.tune_dir})",
                  file=stream)
            return 130
        return self.finish()

    def pruner_name(self) -> str:
        return self.spec.pruner if isinstance(self.spec.pruner, str) else str(self.spec.pruner.get("name"))

    def progress_text(self, started: float) -> str:
        fit_at, unit = self.spec.budget.fit_at, self.spec.budget.unit
        header = ("trial", "state", f"{unit} done", "pass rate", self.spec.objective.metric, "params")
        running = {number: run for run in self.active.values() for number in run.numbers}
        lines = []
        for number, record in sorted(self.records.items()):
            compute, pass_rate, estimate = record.compute, record.pass_rate, None
            if number in running:
                run = running[number]
                _, points, rates = run.points
                compute, pass_rate = (points[-1], rates[-1]) if points else (0.0, None)
                estimate = run.estimate
            elif record.value is not None:
                estimate = as_estimate(record)
            objective = ("-" if estimate is None
                         else f"{estimate.value:.3f} [{estimate.lower:.3f}, {estimate.upper:.3f}]")
            lines.append((str(number), record.state, f"{compute:,.0f} / {fit_at:,.0f}",
                          "-" if pass_rate is None else f"{pass_rate:.3f}", objective, params_label(record.params)))
        widths = [max(len(line[i]) for line in [header, *lines]) for i in range(len(header))]
        text = ["  ".join(cell.ljust(width) for cell, width in zip(line, widths)).rstrip() for line in [header, *lines]]
        counts = {state: sum(record.state == state for record in self.records.values())
                  for state in (COMPLETE, PRUNED, FAILED, RUNNING)}
        best = best_record(list(self.records.values()), self.spec.maximize)
        text.append(f"tune {self.spec.name}: {len(self.records)} of {self.spec.trials} trials started; "
                    + ", ".join(f"{n} {state}" for state, n in counts.items())
                    + (f"; best trial {best.number} ({best.value:.3f})" if best else "")
                    + f"; {format_duration(time.time() - started)} elapsed")
        return "\n".join(text) + "\n"

    def finish(self) -> int:
        """The study is complete: trials.csv, the PDF study report, the parent MLflow run; print the best."""
        from reports.study import write_study_report, write_trials_csv

        records = sorted(self.records.values(), key=lambda record: record.number)
        best = best_record(records, self.spec.maximize)
        csv_path = write_trials_csv(self.tune_dir, records)
        pdf_path = write_study_report(self.tune_dir)
        spent, saved = compute_summary(records, self.spec.budget.fit_at)
        summary = {"tune/trials_complete": sum(r.state == COMPLETE for r in records),
                   "tune/trials_pruned": len(saved), "tune/trials_failed": sum(r.state == FAILED for r in records),
                   "tune/compute_spent": spent}
        # The best setting as tags, not params: extending the study (more trials) may change it.
        tags = {"scalerl.tune.objective": self.spec.objective.metric}
        if best is not None:
            summary |= {"tune/best_objective": best.value, "tune/best_trial": best.number}
            tags |= {f"best.{path}": str(value) for path, value in best.params.items()}
        self.tracker.log_summary(None, summary, tags)
        self.tracker.client.log_artifact(self.tracker.state["parent_run_id"], str(pdf_path))
        self.tracker.finish_sweep("FINISHED" if best is not None else "FAILED")
        print(f"\ntrials: {csv_path}\nreport: {pdf_path}\nMLflow UI: sweep ui {self.tune_dir}", file=self.stream)
        print(f"compute spent: {spent:,.0f} {self.spec.budget.unit}; pruning stopped {len(saved)} trial(s) early, "
              f"saving {sum(saved.values()):,.0f} {self.spec.budget.unit}", file=self.stream)
        if best is None:
            print("no trial completed: see the failures above and the logs in " f"{self.tune_dir / 'logs'}",
                  file=self.stream)
            return 1
        print(f"best: trial {best.number}, {self.spec.objective.metric} = {best.value:.4f} "
              f"[{best.lower:.4f}, {best.upper:.4f}] ({self.level:.0%} interval)\n  {params_label(best.params)}",
              file=self.stream)
        return 0


def run_tune(spec: TuneSpec, stream: TextIO | None = None) -> int:
    """Run the study to `spec.trials` trials (resuming whatever an earlier run left); 0 when a best exists."""
    tune_dir = output_dir(spec)
    tune_dir.mkdir(parents=True, exist_ok=True)
    # One driver per study: two would ask the study for trials and mirror the same lines into MLflow.
    with DriverLock(tune_dir, "sweep tune").take():
        return TuneDriver(spec, stream or sys.stdout).run()
