"""Evaluation noise (issue 17): how much does the evaluation's own sampling move a point, and what does
that noise cost the predictions at the target?

    .venv/bin/python benchmarks/bench_eval_noise.py SWEEP_DIR [--runs 3] [--eval-seeds 12]
        [--settings 128x4 256x8 256x12 256x16] [--reps 8] [--out benchmarks/out/bench_eval_noise.json]

SWEEP_DIR: a finished sweep of the embedded testbed (e.g. the validation study's runs/scalerl-loo-validity).

(1) Measured: the final checkpoints of the first --runs runs are evaluated under --eval-seeds evaluation
    seeds for each PROMPTSxSAMPLES setting, on 1 thread (as the PipelineRL trainer evaluates). Per
    setting: the sd of the pass rate over the seeds (the same policy, other draws), the mean logged
    eval/pass_rate_se (recipe.evaluation.sampling_standard_error: does the formula predict that sd?)
    and the seconds one evaluation takes.
(2) Simulated on the sweep's own curves: each run is replaced by its sigmoid fitted over the whole run
    (a curve whose truth is known) plus noise of sd sigma, correlated from point to point as the
    runs' residuals about those fits are (AR(1) with their mean lag-1 autocorrelation; the shared
    evaluation stream makes a point's sampling error persist). Each noisy run is fitted on the sweep's
    window and its prediction at the target scored against its own noisy point there, as (a) of the
    validation study scores real runs; --reps noise draws per run. The share within the 0.02 margin per
    sigma is what fitting.noise.SE_LIMIT is set from.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import math
import platform
import sys
import time
from datetime import datetime, timezone
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from benchmarks.bench_speed import cpu_model, git, loadavg  # noqa: E402
from fitting.extrapolation import DEFAULT_MARGIN as MARGIN  # noqa: E402 (the 0.02 that (a) scores at)

SIGMAS = (0.018, 0.012, 0.008, 0.006, 0.005, 0.003)


def parse_setting(text: str) -> tuple[int, int]:
    try:
        prompts, samples = (int(part) for part in text.lower().split("x"))
    except ValueError:
        raise SystemExit(f"--settings: {text!r} is not PROMPTSxSAMPLES, e.g. 256x12") from None
    return prompts, samples


def measure(sweep_dir: Path, runs: int, eval_seeds: int, settings: list[str]) -> list[dict]:
    """(1): sd over evaluation seeds, mean logged se and seconds per evaluation, per setting and run."""
    import numpy as np
    import torch

    from recipe.checkpoint import load_checkpoint
    from recipe.config import load_recipe
    from recipe.evaluation import evaluate
    from recipe.generator import TorchGenerator
    from recipe.model import load_model_dir
    from recipe.run import build_components, evaluation_kwargs, model_directory
    from recipe.tasks import build_task

    torch.set_num_threads(1)
    rows = []
    run_dirs = sorted(d for d in (sweep_dir / "runs").iterdir() if (d / "done.json").is_file())[:runs]
    if not run_dirs:
        raise SystemExit(f"{sweep_dir}/runs holds no finished run (done.json)")
    for run_dir in run_dirs:
        cfg = load_recipe(run_dir / "config.yaml")
        model, tokenizer = load_model_dir(model_directory(cfg), cfg.model.dtype, "cpu")
        checkpoint = load_checkpoint(run_dir)
        model.load_state_dict(checkpoint["model"])
        model.eval()
        task = build_task(cfg.task, tokenizer)
        kwargs = evaluation_kwargs(cfg, build_components(cfg))
        for text in settings:
            prompts, samples = parse_setting(text)
            if prompts > len(task.validation):
                raise SystemExit(f"--settings {text}: the task has {len(task.validation)} validation prompts")
            eval_cfg = dataclasses.replace(cfg.eval, num_prompts=prompts, samples_per_prompt=samples,
                                           batch_size=prompts * (samples + 1))
            rates, ses, seconds = [], [], []
            for seed in range(eval_seeds):
                started = time.perf_counter()
                metrics = evaluate(TorchGenerator(model, tokenizer), task, **{**kwargs, "eval_cfg": eval_cfg,
                                                                          "seed": seed})
                seconds.append(time.perf_counter() - started)
                rates.append(metrics["eval/pass_rate"])
                ses.append(metrics["eval/pass_rate_se"])
            row = {"run_id": run_dir.name, "step": int(checkpoint["step"]), "setting": text,
                   "mean_pass_rate": float(np.mean(rates)), "sd_over_seeds": float(np.std(rates, ddof=1)),
                   "mean_logged_se": float(np.mean(ses)), "seconds_per_eval": float(np.median(seconds))}
            rows.append(row)
            print(f"  {row['run_id']} step {row['step']} {text:>7}: pass rate {row['mean_pass_rate']:.3f}, sd over "
                  f"{eval_seeds} seeds {row['sd_over_seeds']:.4f}, logged se {row['mean_logged_se']:.4f}, "
                  f"{row['seconds_per_eval']:.2f} s", flush=True)
    return rows


def simulate(sweep_dir: Path, reps: int, seed: int = 0) -> dict:
    """(2): the share of predictions within the margin when each run's truth is its whole-run fit plus noise."""
    import numpy as np

    from fitting import FitInputError, fit_sigmoid
    from fitting.fit import window_method_options
    from reports.sweep_data import load_sweep

    data = load_sweep(sweep_dir)
    budget = data.budget
    method = window_method_options(budget.fit_method)
    truths, autocorrelations = [], []
    for _, run in data.evals.groupby("run_id", sort=False):
        compute, rate = run["compute"].to_numpy(float), run["pass_rate"].to_numpy(float)
        if compute[0] != 0 or compute[-1] < budget.target:
            continue
        whole = fit_sigmoid(compute, rate, r0=rate[0], fit_until=compute[-1], **method)
        truth = np.r_[rate[0], whole.predict(compute[1:])]
        residuals = rate[1:] - truth[1:]
        autocorrelations.append(float(np.corrcoef(residuals[:-1], residuals[1:])[0, 1]))
        at_target = int(np.argmin(np.abs(compute - budget.target)))  # the point (a) scores against
        truths.append((compute, truth, at_target))
    rho = float(np.mean(autocorrelations))
    rng = np.random.default_rng(seed)
    shares = {}
    for sigma in SIGMAS:
        errors = []
        for compute, truth, at_target in truths:
            for _ in range(reps):
                noise = np.empty(truth.size)
                noise[0] = rng.normal()
                for i in range(1, truth.size):  # AR(1) with unit variance
                    noise[i] = rho * noise[i - 1] + math.sqrt(1 - rho ** 2) * rng.normal()
                noisy = truth + sigma * noise
                noisy[0] = truth[0]  # R0: the step-0 point, as the sweep fits
                try:
                    fit = fit_sigmoid(compute, noisy, r0=noisy[0], burn_in=budget.burn_in, fit_until=budget.fit_at,
                                      **method)
                except FitInputError:
                    continue
                errors.append(float(fit.predict(compute[at_target])) - noisy[at_target])
        errors = np.array(errors)
        shares[f"{sigma:g}"] = {"within_margin": float(np.mean(np.abs(errors) <= MARGIN)),
                                "error_sd": float(errors.std()), "predictions": int(errors.size)}
        print(f"  sigma {sigma:.3f}: {100 * shares[f'{sigma:g}']['within_margin']:.0f}% within {MARGIN} "
              f"(error sd {errors.std():.4f}, {errors.size} predictions)", flush=True)
    return {"runs": len(truths), "lag1_autocorrelation": rho, "reps": reps, "by_sigma": shares}


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("sweep_dir", type=Path)
    parser.add_argument("--runs", type=int, default=3, help="runs whose final checkpoint (1) evaluates")
    parser.add_argument("--eval-seeds", type=int, default=12)
    parser.add_argument("--settings", nargs="+", default=["128x4", "256x8", "256x12", "256x16"])
    parser.add_argument("--reps", type=int, default=8, help="noise draws per run in (2)")
    parser.add_argument("--skip-measure", action="store_true", help="only (2), the simulation")
    parser.add_argument("--out", type=Path, default=REPO / "benchmarks" / "out" / "bench_eval_noise.json")
    args = parser.parse_args(argv)
    if not (args.sweep_dir / "runs").is_dir():
        raise SystemExit(f"{args.sweep_dir}: not a sweep directory (no runs/)")
    started = datetime.now(timezone.utc)
    result = {"started": started.isoformat(timespec="seconds"), "machine": cpu_model(),
              "python": platform.python_version(), "commit": git("rev-parse", "--short", "HEAD"),
              "load_at_start": loadavg(), "sweep_dir": str(args.sweep_dir)}
    if not args.skip_measure:
        print("(1) the same policy under other evaluation seeds:")
        result["measured"] = measure(args.sweep_dir, args.runs, args.eval_seeds, args.settings)
    print("(2) predictions within the margin when each run is its whole-run fit plus correlated noise:")
    result["simulated"] = simulate(args.sweep_dir, args.reps)
    result["load_at_end"] = loadavg()
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=1))
    print(f"written {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
