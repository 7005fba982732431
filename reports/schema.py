"""Every name the reports read or write: sweep files, metric keys, MLflow tags and fit metrics, table columns.

The sweep driver and the training loop own these names; they are collected here so that a rename is
one edit. Nothing else in reports/ spells a key of a file or of MLflow.
"""

from __future__ import annotations

# --- the sweep directory -------------------------------------------------------------------------
SWEEP_FILE = "sweep.json"
PLAN_FILE = "plan.json"
MLFLOW_FILE = "mlflow.json"
CONFIG_FILE = "config.yaml"
METRICS_FILE = "metrics.jsonl"
LOO_TABLE_FILE = "loo_table.csv"  # written beside sweep.json by the driver and by `sweep report`
REPORT_FILE = "report.pdf"  # default report path inside the sweep directory
FIGURES_DIR = "report_figures"  # PNG copies of the report's figures (MLflow artifacts)
DEFAULT_STORE = "mlflow.db"  # default tracking URI: sqlite:///<abs sweep_dir>/mlflow.db

# sweep.json
SWEEP_NAME, SWEEP_BASE, SWEEP_SEEDS, SWEEP_BUDGET = "name", "base", "seeds", "budget"
SWEEP_EXECUTOR, SWEEP_CREATED, SWEEP_MACHINE = "executor", "created", "machine"
BUDGET_UNIT, BUDGET_BURN_IN, BUDGET_FIT_AT = "unit", "burn_in", "fit_at"
BUDGET_TARGET, BUDGET_OBSERVED_WINDOW, BUDGET_FIT_METHOD = "target", "observed_window", "fit_method"
BUDGET_FIT_WEIGHTS = "fit_weights"
BUDGET_MIN_COMPUTE_RATIO, BUDGET_MIN_A_SHIFT = "min_compute_ratio", "min_a_shift"
BUDGET_VERDICTS_FROM = "verdicts_from"
BUDGET_METRIC = "metric"  # which pass rate the fits and verdicts read: WHOLE or a mixture's part / downstream set
WHOLE = "whole"  # eval/pass_rate itself: a single task's pass rate, a mixture's weighted whole
VERDICT_FITS = ("window", "run")  # budget.verdicts_from (sweeps.spec.VERDICT_FITS)

# plan.json: one entry per job
PLAN_RUN_ID, PLAN_AXIS, PLAN_CHOICE, PLAN_VARIANT = "run_id", "axis", "choice", "variant"
PLAN_SEED, PLAN_RUN_DIR = "seed", "run_dir"
BASE = "base"  # the axis and the variant name of the base recipe's jobs

# mlflow.json
MLFLOW_TRACKING_URI, MLFLOW_EXPERIMENT_ID = "tracking_uri", "experiment_id"
MLFLOW_PARENT_RUN_ID, MLFLOW_CHILD_RUNS = "parent_run_id", "child_runs"

# config.yaml: the ablation axes (top-level keys, each {name: ..., params...}), in report order
AXES = ("loss", "aggregation", "advantage_norm", "batch_filter", "curriculum", "length_control",
        "off_policy", "precision", "kl_penalty")
# Flattened config keys left out of config diffs: they differ between jobs without changing the recipe.
CONFIG_DIFF_IGNORED_PREFIXES = ("seed", "tracking.", "checkpoint.dir", "run_dir")

# --- metrics.jsonl (and the MLflow metric keys, identical) ----------------------------------------
STEP = "step"
PASS_RATE = "eval/pass_rate"  # a line is an evaluation line iff it carries this key
PASS_RATE_SE = "eval/pass_rate_se"  # its sampling standard error (recipe.evaluation.sampling_standard_error)
# A mixture's sets (recipe/mixture.py) log eval/pass_rate/<name> and eval/pass_rate_se/<name> beside the whole.
PART_PASS_RATE_PREFIX, PART_PASS_RATE_SE_PREFIX = PASS_RATE + "/", PASS_RATE_SE + "/"
COMPUTE_PREFIX = "compute/"  # the curve's x is COMPUTE_PREFIX + budget.unit
STEPS_UNIT = "steps"  # budget.unit "steps": the training step itself is the compute axis


def pass_rate_keys(metric: str) -> tuple[str, str]:
    """The metrics.jsonl keys of a pass rate and its standard error: WHOLE's, or a mixture set's."""
    return (PASS_RATE, PASS_RATE_SE) if metric == WHOLE else (PASS_RATE + "/" + metric, PASS_RATE_SE + "/" + metric)

# The paper's truncation rate (arXiv 2510.13786): the share of generations forcibly stopped, i.e. interrupted
# by the length control or cut at the length limit (a sample can be both: it is counted once). Rates above
# 10-15% signal instability; ScaleRL kept it below 5% on more than 90% of its steps.
TRUNCATION_RATE = "rollout/forced_stop_frac"
TRUNCATION_INSTABILITY = 0.10  # the lower end of the paper's 10-15%
# 1 or 0 per training step, averaged between evaluations: the share of those steps with TRUNCATION_RATE < 5%.
LOW_TRUNCATION_STEPS = "rollout/forced_stop_below_5pct"
LOW_TRUNCATION_RATE, LOW_TRUNCATION_STEPS_PAPER = 0.05, 0.90  # the paper: < 5% truncation on > 90% of steps

# Stability diagnostics (provisional names): key -> (panel title, y label, instability threshold or None).
# A run that lacks a key gets a note in the report instead of a panel line.
DIAGNOSTICS: dict[str, tuple[str, str, float | None]] = {
    TRUNCATION_RATE: ("Truncation rate (interrupted or cut)", "fraction of samples", TRUNCATION_INSTABILITY),
    "rollout/interrupted_frac": ("Interrupted (forced answer)", "fraction of samples", None),
    "rollout/truncated_frac": ("Cut at the length limit", "fraction of samples", None),
    "rollout/length_penalized_frac": ("Length-penalized (reward lowered)", "fraction of samples", None),
    "rollout/len_mean": ("Response length", "tokens (mean)", None),
    "loss/clip_frac": ("Clipped tokens (PPO-style losses)", "fraction of tokens", None),
    "loss/truncated_frac": ("Truncated IS weights (CISPO)", "fraction of tokens", None),
    "train/staleness": ("Staleness (off-policy)", "trainer steps (mean)", None),
    "train/entropy": ("Policy entropy", "nats per token", None),
}
# Every per-step metric the reports read from metrics records: the diagnostics, plus the step shares.
DIAGNOSTIC_KEYS = tuple(DIAGNOSTICS) + (LOW_TRUNCATION_STEPS,)

# --- MLflow (the driver's tags and the fit results written back) ----------------------------------
TAG_PARENT = "mlflow.parentRunId"
TAG_SWEEP = "scalerl.sweep"  # on the sweep's parent run: the sweep name
TAG_RUN_ID, TAG_AXIS, TAG_CHOICE = "scalerl.run_id", "scalerl.axis", "scalerl.choice"
TAG_VARIANT, TAG_SEED = "scalerl.variant", "scalerl.seed"
TAG_SCAN_KEY, TAG_SCAN_VALUE = "scalerl.scan_key", "scalerl.scan_value"  # a scan's jobs: the key and its value
SWEEP_RECIPES = "recipes"  # sweep.json: {reference, compare (names, the reference first)} of a recipes sweep; null else
SWEEP_SCAN = "scan"  # sweep.json: {key, values (the reference first), reference} of a scan; null for a LOO
TAG_VERDICT = "scalerl.verdict"  # written by reports: the variant's LOO verdict
TAG_FIT_FLAGS = "scalerl.fit_flags"  # written by reports: trust flags of the run's fit, comma-separated
TAG_REGIME = "scalerl.regime"  # written by reports: fitting.forecast's reasons, or "predictable"
PARENT_SWEEP_ARTIFACT = "sweep.json"  # sweep.json copied onto the parent run, so a store alone suffices
REPORT_ARTIFACT_DIR = "report"  # parent-run artifact folder of the PDF and the figure PNGs

# fit metrics on each job's run: metric key -> column of the run table (that seed's own fit) ...
FIT_METRICS = {
    "fit/A": "A",
    "fit/B": "B",
    "fit/C_mid": "C_mid",
    "fit/R0": "R0",
    "fit/pred_at_target": "pred_at_target",
    "fit/pred_lo": "pred_lo",
    "fit/pred_hi": "pred_hi",
    "fit/observed_at_target": "observed_at_target",
    "fit/error": "error",
}
# ... and -> column of the LOO table (the variant's comparison with the base, the same on all its seeds)
FIT_VARIANT_METRICS = {"fit/delta_A": "delta_A", "fit/delta_B": "delta_B", "fit/B_fixed_A": "B_fixed_A"}

# --- the LOO table (one row per variant; loo_table.csv has these columns in this order) -----------
LOO_COLUMNS = (
    "variant", "axis", "choice", "changed", "n_seeds", "n_points", "R0",
    "A", "A_lo", "A_hi", "A_seed_sd", "B", "B_fixed_A", "B_fixed_A_lo", "B_fixed_A_hi", "C_mid",
    "pred_at_target", "pred_lo", "pred_hi", "observed_at_target", "error", "within_margin",
    "delta_A", "delta_B", "verdict", "direction", "flags", "truncation_rate", "low_truncation_steps",
    # seed evidence (fitting.seeds): paired effects against the base with intervals that include
    # run-to-run variance, minimum detectable effects, the verdict's reason; pred_interval says which
    # interval pred_lo/pred_hi are ("back-test 90%": reports.forecasts); regime: why the prediction is not yet
    # trusted (fitting.forecast.REGIME_MEANINGS), empty when no reason holds
    "pred_interval", "regime", "d_A", "d_A_lo", "d_A_hi", "MDE_A", "d_pred", "d_pred_lo", "d_pred_hi", "MDE_pred",
    "MDE_is_lower_bound", "log_reach_50", "log_reach_50_lo", "log_reach_50_hi", "log_reach_90",
    "log_reach_90_lo", "log_reach_90_hi", "MDE_reach_50", "MDE_reach_90", "ceiling_identifiable", "ceiling_budget",
    "reason",
)
# MDE_reach_50/90: the smallest |ln(C_variant / C_base)| the table detects (as MDE_A), margin included.
# the run table (one row per job: that seed's own fit, what goes onto its MLflow run)
RUN_COLUMNS = ("run_id", "variant", "axis", "choice", "seed", "n_points", "R0", "A", "B", "C_mid",
               "pred_at_target", "pred_lo", "pred_hi", "regime", "observed_at_target", "error", "within_margin",
               "flags", "truncation_rate", "low_truncation_steps")
# truncation_rate: the step-weighted mean of TRUNCATION_RATE over the run(s); low_truncation_steps: the share
# of training steps with TRUNCATION_RATE < LOW_TRUNCATION_RATE (NaN where the runs did not log them).
