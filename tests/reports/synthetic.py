"""A synthetic sweep directory and its MLflow store, laid out exactly as the sweep driver writes them.

Curves are the paper's sigmoid plus Gaussian noise, so the fits are real: a base, a ceiling mover
(fp32 head off: lower A), an efficiency shaper (DAPO: same A, higher B: faster to 90% of the gain)
and an unchanged variant (sample-mean aggregation: same truth, other noise). Three seeds by default
(verdicts need >= 2); each seed's run moves A by a run-to-run offset (sd RUN_SD), and runs of one seed
share part of their offset and evaluation noise, as paired runs do. Compute is device-seconds at ~1 per step with
per-variant speed, evaluated every 5 steps up to ~250 s; fit at 120, target 240.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import yaml

from fitting import sigmoid_curve
from reports import schema

BUDGET = {"unit": "device_seconds", "burn_in": 0.0, "fit_at": 120.0, "target": 240.0, "observed_window": 0.05}
R0 = 0.30
# variant -> (axis, choice, config change, (A, B, C_mid), seconds per step)
VARIANTS = {
    "base": ("base", "base", {}, (0.62, 2.0, 60.0), 1.00),
    "loss=dapo": ("loss", "dapo", {"loss": {"name": "dapo", "eps_low": 0.2, "eps_high": 0.26}},
                  (0.62, 3.2, 60.0), 0.97),
    "aggregation=sample_mean": ("aggregation", "sample_mean", {"aggregation": {"name": "sample_mean"}},
                                (0.62, 2.0, 60.0), 1.02),
    "precision=fp32_head=false": ("precision", "fp32_head=false",
                                  {"precision": {"name": "lm_head", "fp32_head": False}}, (0.52, 2.0, 60.0), 0.95),
}
EXPECTED_VERDICTS = {  # with DEFAULT_SEEDS
    "base": "base",
    "loss=dapo": "efficiency shaper",
    "aggregation=sample_mean": "no detectable effect",
    "precision=fp32_head=false": "ceiling mover",
}
BASE_CONFIG = {
    "loss": {"name": "cispo", "eps_max": 4.0, "eps_min": 0.0},
    "aggregation": {"name": "prompt_mean"},
    "advantage_norm": {"name": "batch"},
    "batch_filter": {"name": "zero_variance"},
    "curriculum": {"name": "no_positive_resampling", "threshold": 0.9},
    "length_control": {"name": "interruption", "min_thinking": 24, "max_thinking": 32, "answer_budget": 8,
                       "phrase": "Okay, time is up. Let me stop thinking and formulate a final answer</think>"},
    "off_policy": {"name": "ppo_off_policy", "k": 8},
    "precision": {"name": "lm_head", "fp32_head": True},
    "model": {"path": "embedded", "dtype": "float32"},
    "rollout": {"prompts_per_batch": 32, "samples_per_prompt": 8, "temperature": 1.0, "max_new_tokens": 64},
    "optimizer": {"lr": 0.0001, "warmup_steps": 10, "eps": 1.0e-15, "betas": [0.9, 0.999]},
    "tracking": {"mlflow_uri": None, "experiment": "synthetic-loo"},
    "seed": 0,
    "max_steps": 260,
}
EVAL_EVERY = 5
RUN_SD = 0.004  # run-to-run sd of A between seeds
EVAL_SE = math.hypot(0.003, 0.003)  # the evaluation noise below (shared + own), logged as each point's se


def _config(change: dict, seed: int) -> dict:
    config = json.loads(json.dumps(BASE_CONFIG))
    config.update(json.loads(json.dumps(change)))
    config["seed"] = seed
    return config


def _metrics(variant: str, seed: int, truth, seconds_per_step: float, with_interrupted: bool) -> list[dict]:
    """Training lines at every step and an evaluation line every EVAL_EVERY steps (step 0 at compute 0)."""
    rng = np.random.default_rng([list(VARIANTS).index(variant), seed])
    shared = np.random.default_rng([99, seed])  # what runs of one seed share (warm start, prompt order)
    a, b, c_mid = truth
    a += shared.normal(0, RUN_SD) + rng.normal(0, RUN_SD / 2)
    lines, compute = [], 0.0
    for step in range(0, 261):
        if step:
            compute += seconds_per_step * (1 + rng.normal(0, 0.02))
            cut = float(np.clip(0.02 + rng.normal(0, 0.01), 0, 1))
            line = {"step": step, "train/loss": float(rng.normal(0, 0.1)), "rollout/truncated_frac": cut,
                    "rollout/len_mean": float(40 + 10 * step / 260 + rng.normal(0, 1)),
                    "train/entropy": float(1.5 * np.exp(-step / 200) + rng.normal(0, 0.02)),
                    "train/staleness": float(3.5 + rng.normal(0, 0.3))}
            loss_key = "loss/clip_frac" if variant == "loss=dapo" else "loss/truncated_frac"  # DAPO clips, CISPO caps
            line[loss_key] = float(abs(rng.normal(0.02, 0.005)))
            forced = cut
            if with_interrupted:  # the run without fp32 head interrupts often: truncation rate above 10%
                interrupted = 0.12 if variant == "precision=fp32_head=false" else 0.02
                line["rollout/interrupted_frac"] = float(np.clip(interrupted + rng.normal(0, 0.01), 0, 1))
                forced = min(1.0, cut + line["rollout/interrupted_frac"])  # disjoint here: no sample is both
            line[schema.TRUNCATION_RATE] = forced
            line[schema.LOW_TRUNCATION_STEPS] = float(forced < schema.LOW_TRUNCATION_RATE)
            lines.append(line)
        if step % EVAL_EVERY == 0:
            noise = 0.003 * shared.normal() + 0.003 * rng.normal()  # paired runs share part of their noise
            pass_rate = float(sigmoid_curve(compute, a, b, c_mid, R0)) + (noise if step else 0.0)
            lines.append({"step": step, "eval/pass_rate": float(np.clip(pass_rate, 0, 1)), schema.PASS_RATE_SE: EVAL_SE,
                          "compute/device_seconds": compute, "compute/flops": compute * 1e12,
                          "compute/samples": step * 256.0, "compute/tokens": step * 256.0 * 48})
    return lines


# Verdicts are statistical: a variant without effect gets one about 5% of the time. Over 15 seed triples
# of this generator (10k .. 10k + 2, k = 1..15) the null variant (sample_mean) got none in 14 (k = 1 did) and DAPO was
# "mixed" in all 15; seeds 0-2 are another unlucky draw, so the default is a typical one, 20-22.
# tests/fitting/test_seeds.py checks the false-positive rate itself.
DEFAULT_SEEDS = (20, 21, 22)


def make_sweep(root: Path, seeds=DEFAULT_SEEDS, variants=tuple(VARIANTS)) -> Path:
    """Write sweep.json, plan.json and runs/<run_id>/{config.yaml, metrics.jsonl} under root/sweep."""
    sweep_dir = root / "sweep"
    plan = []
    for variant in variants:
        axis, choice, change, truth, speed = VARIANTS[variant]
        for seed in seeds:
            run_id = f"{variant.split('=')[0][:4]}{len(plan):02d}s{seed}"
            run_dir = sweep_dir / "runs" / run_id
            run_dir.mkdir(parents=True)
            (run_dir / schema.CONFIG_FILE).write_text(yaml.safe_dump(_config(change, seed), sort_keys=False))
            lines = _metrics(variant, seed, truth, speed, with_interrupted=variant != "loss=dapo")
            (run_dir / schema.METRICS_FILE).write_text("".join(json.dumps(line) + "\n" for line in lines))
            plan.append({"run_id": run_id, "axis": axis, "choice": choice, "variant": variant, "seed": seed,
                         "run_dir": f"runs/{run_id}"})
    (sweep_dir / schema.PLAN_FILE).write_text(json.dumps(plan, indent=1))
    meta = {"name": "synthetic-loo", "base": "scalerl", "seeds": list(seeds), "budget": BUDGET,
            "executor": "local", "created": "2026-11-21T10:00:00+00:00", "machine": "test machine (2 cores)"}
    (sweep_dir / schema.SWEEP_FILE).write_text(json.dumps(meta, indent=1))
    return sweep_dir


def log_to_mlflow(sweep_dir: Path) -> str:
    """Emulate the driver's MLflow part: experiment, parent run, one child per job, mlflow.json. Returns the URI."""
    from mlflow.entities import Metric, Param
    from mlflow.tracking import MlflowClient

    from reports.sweep_data import flatten_config, read_metrics_file

    uri = f"sqlite:///{sweep_dir.resolve() / schema.DEFAULT_STORE}"
    client = MlflowClient(tracking_uri=uri)
    meta = json.loads((sweep_dir / schema.SWEEP_FILE).read_text())
    artifacts = (sweep_dir / "mlartifacts").resolve().as_uri()
    experiment_id = client.create_experiment(meta["name"], artifact_location=artifacts)
    parent = client.create_run(experiment_id, run_name=meta["name"], tags={schema.TAG_SWEEP: meta["name"]})
    client.log_batch(parent.info.run_id, params=[Param(k, v) for k, v in flatten_config(meta).items()])
    children = {}
    for job in json.loads((sweep_dir / schema.PLAN_FILE).read_text()):
        tags = {schema.TAG_PARENT: parent.info.run_id, schema.TAG_RUN_ID: job["run_id"], schema.TAG_AXIS: job["axis"],
                schema.TAG_CHOICE: job["choice"], schema.TAG_VARIANT: job["variant"], schema.TAG_SEED: str(job["seed"])}
        run = client.create_run(experiment_id, run_name=f"{job['variant']} s{job['seed']}", tags=tags)
        run_dir = sweep_dir / job["run_dir"]
        config = yaml.safe_load((run_dir / schema.CONFIG_FILE).read_text())
        metrics = [Metric(k, float(v), 0, line["step"]) for line in read_metrics_file(run_dir / schema.METRICS_FILE)
                   for k, v in line.items() if k != "step"]
        client.log_batch(run.info.run_id, params=[Param(k, v) for k, v in flatten_config(config).items()])
        for start in range(0, len(metrics), 1000):  # log_batch takes at most 1000 metrics per call
            client.log_batch(run.info.run_id, metrics=metrics[start:start + 1000])
        client.set_terminated(run.info.run_id)
        children[job["run_id"]] = run.info.run_id
    client.set_terminated(parent.info.run_id)
    (sweep_dir / schema.MLFLOW_FILE).write_text(json.dumps({
        "tracking_uri": uri, "experiment_id": experiment_id, "parent_run_id": parent.info.run_id,
        "child_runs": children}))
    return uri
