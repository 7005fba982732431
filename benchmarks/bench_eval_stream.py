"""Evaluation streams (issue 17): which evaluation draws make single-run predictions better?

    .venv/bin/python benchmarks/bench_eval_stream.py [--seeds 0 1 2 3] [--fit-at 100] [--target 200]
        [--threads 2] [--compare own|per_point] [--out benchmarks/out/bench_eval_stream.json] [key=value ...]

Each seed trains the ScaleRL recipe with off_policy=ppo_off_policy (synchronous, deterministic) on
the embedded testbed until `target` CPU-seconds, and at every evaluation point scores the same
policy twice: with the shipped stream ("shared": eval.seed 0, the same draws at every point) and
with the one compared: --compare own (the run's own seed, the same draws at every point: what
runs used before eval.seed existed) or per_point (eval.seed 0, fresh draws at every point keyed by
the step: eval.draws per_point). Training is identical for both (evaluation never touches the
training streams), so any difference between the two curves of a run is the evaluation's draw alone.

For each stream and seed: the sigmoid fitted on the points up to fit_at (the sweep's default fit
method, R0 the step-0 point), its prediction at the target against the observed pass rate there
(fitting.extrapolation), the fitted A and whether it sits at a bound; across seeds the sd of the
errors, of the observed values and of A. Prints a table and writes the JSON.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import platform
import sys
import tempfile
import time
from datetime import datetime, timezone
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

FIXED_EVAL_SEED = 0
MARGIN = 0.02


class TargetReached(Exception):
    pass


def train_one(seed: int, target: float, compare: str, overrides: list[str], out_dir: Path) -> list[dict]:
    """Train one seed to `target` CPU-seconds; every record carries both streams' pass rates."""
    from recipe.config import load_recipe
    from recipe.engines.native import train_native
    from recipe.evaluation import evaluate
    from recipe.run import Run

    # The run's own evaluation is the compared stream; the shipped one rides along as "eval_shared/".
    compared = ["eval.seed=null"] if compare == "own" else [f"eval.seed={FIXED_EVAL_SEED}", "eval.draws=per_point"]
    cfg = load_recipe(None, ["off_policy=ppo_off_policy", f"seed={seed}", "max_steps=5000",
                             "tracking.mlflow=false", *overrides, *compared])
    shipped_eval = dataclasses.replace(cfg.eval, draws="common")
    run_evaluate = Run.evaluate

    def evaluate_on_both_streams(run: Run) -> dict:
        # The shared stream's pass rate rides in the record through the metrics averager (one value: its mean).
        shared = evaluate(run.generator, run.task, step=run.step, policy_version=run.step,
                          **{**run.eval_kwargs, "eval_cfg": shipped_eval, "seed": FIXED_EVAL_SEED})
        run.pending.add({"eval_shared/pass_rate": shared["eval/pass_rate"],
                         "eval_shared/interrupted_frac": shared["eval/interrupted_frac"]})
        return run_evaluate(run)

    def stop_at_target(record: dict) -> None:
        if record["compute/device_seconds"] >= target * 1.05:
            raise TargetReached

    Run.evaluate = evaluate_on_both_streams
    try:
        train_native(cfg, out_dir / f"seed{seed}", device="cpu", on_eval=stop_at_target)
    except TargetReached:
        pass
    finally:
        Run.evaluate = run_evaluate
    from recipe.tracking import read_metrics

    return read_metrics(out_dir / f"seed{seed}")


def score_stream(records: list[dict], key: str, fit_at: float, target: float) -> dict:
    import numpy as np

    from fitting.extrapolation import score_extrapolation
    from fitting.fit import fit_sigmoid
    from fitting.seeds import ceiling_identifiable

    compute = np.array([r["compute/device_seconds"] for r in records])
    rate = np.array([r[key] for r in records])
    fit = fit_sigmoid(compute, rate, fit_until=fit_at)
    score = score_extrapolation(fit, compute, rate, target=target, observed_halfwidth=0.05)  # as sweeps score
    # How the points scatter about the run's own whole-run sigmoid: their sd and lag-1 autocorrelation
    # (errors that persist from point to point are what a window fit follows and extrapolates).
    whole = fit_sigmoid(compute, rate, fit_until=target * 1.05)
    residual = rate[1:] - whole.predict(compute[1:])  # the step-0 point is R0 itself
    lag1 = float(np.corrcoef(residual[:-1], residual[1:])[0, 1])
    return {"whole_run_error": float(whole.predict(np.array([target]))[0] - score.observed),
            "residual_sd": float(residual.std(ddof=1)), "residual_lag1": lag1,
            "predicted": float(score.predicted), "observed": float(score.observed),
            "error": float(score.predicted - score.observed), "A": float(fit.a), "B": float(fit.b),
            "c_mid": float(fit.c_mid), "identifiable": bool(ceiling_identifiable(fit)),
            "start": float(rate[0]), "points_in_window": int((compute <= fit_at).sum())}


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2, 3])
    parser.add_argument("--fit-at", type=float, default=100.0)
    parser.add_argument("--target", type=float, default=200.0)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--compare", choices=["own", "per_point"], default="own")
    parser.add_argument("--out", default="benchmarks/out/bench_eval_stream.json")
    parser.add_argument("overrides", nargs="*")
    args = parser.parse_args(argv)
    os.environ.setdefault("OMP_NUM_THREADS", str(args.threads))
    import numpy as np
    import torch

    torch.set_num_threads(args.threads)
    started = time.time()
    load = [list(os.getloadavg())]
    results = {args.compare: {}, "shared": {}}
    with tempfile.TemporaryDirectory(prefix="eval_stream_") as tmp:
        for seed in args.seeds:
            records = train_one(seed, args.target, args.compare, args.overrides, Path(tmp))
            results[args.compare][seed] = score_stream(records, "eval/pass_rate", args.fit_at, args.target)
            results["shared"][seed] = score_stream(records, "eval_shared/pass_rate", args.fit_at, args.target)
            results[args.compare][seed]["interrupted_frac"] = records[0]["eval/interrupted_frac"]
            results["shared"][seed]["interrupted_frac"] = records[0]["eval_shared/interrupted_frac"]
            print(f"seed {seed}: steps {records[-1]['step']}, {args.compare} {results[args.compare][seed]}, "
                  f"shared {results['shared'][seed]}", file=sys.stderr, flush=True)
    load.append(list(os.getloadavg()))
    summary = {}
    for stream, by_seed in results.items():
        errors = [r["error"] for r in by_seed.values()]
        summary[stream] = {
            "within_margin": float(np.mean([abs(e) <= MARGIN for e in errors])),
            "error_mean": float(np.mean(errors)), "error_sd": float(np.std(errors, ddof=1)),
            "observed_sd": float(np.std([r["observed"] for r in by_seed.values()], ddof=1)),
            "A_sd": float(np.std([r["A"] for r in by_seed.values()], ddof=1)),
            "residual_lag1_mean": float(np.mean([r["residual_lag1"] for r in by_seed.values()])),
            "whole_run_error_sd": float(np.std([r["whole_run_error"] for r in by_seed.values()], ddof=1)),
            "identifiable": sum(r["identifiable"] for r in by_seed.values()),
        }
    from bench_speed import cpu_model  # the benchmarks' one CPU-model reader (benchmarks/ is on sys.path)

    output = {"date": datetime.now(timezone.utc).isoformat(timespec="seconds"), "machine": platform.node(),
              "cpu": cpu_model(), "load_before_after": load, "minutes": (time.time() - started) / 60,
              "args": vars(args), "runs": results, "summary": summary}
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(output, indent=1) + "\n")
    print(f"{'stream':8} {'seed':>4} {'pred':>6} {'obs':>6} {'error':>7} {'A':>6} {'ident':>5} {'interr':>6}")
    for stream, by_seed in results.items():
        for seed, r in by_seed.items():
            print(f"{stream:8} {seed:>4} {r['predicted']:6.3f} {r['observed']:6.3f} {r['error']:+7.3f} {r['A']:6.3f} "
                  f"{str(r['identifiable']):>5} {r['interrupted_frac']:6.3f}")
    for stream, s in summary.items():
        print(f"{stream}: within 0.02 {s['within_margin']:.0%}, error mean {s['error_mean']:+.3f} sd "
              f"{s['error_sd']:.3f}, observed sd {s['observed_sd']:.3f}, A sd {s['A_sd']:.3f}, "
              f"A identifiable {s['identifiable']} of {len(args.seeds)}, residual lag-1 autocorrelation "
              f"{s['residual_lag1_mean']:+.2f}, whole-run fit's error sd {s['whole_run_error_sd']:.3f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
