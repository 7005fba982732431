"""Learning benchmark: the ScaleRL recipe on the embedded testbed, several seeds, one curve each.

    .venv/bin/python benchmarks/bench_rl_learning.py --seeds 0 1 2 --threads 2 --out runs/bench_rl

For each seed it runs (or resumes) `sweep train`'s code path and reports: pass rate at step 0 and at
the end, the evaluation points between the start and the first point reaching 90% of the gain, the
R^2 of the paper's sigmoid fitted against compute (device-seconds, FLOPs and steps) and wall-clock.
Acceptance (issue 4): start <= 0.25, end >= 0.70, >= 20 points before 90% of the gain, R^2 >= 0.95,
within 10 minutes on the 2-core CPU.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

AXES = {"device_seconds": "compute/device_seconds", "flops": "compute/flops", "steps": "step"}


def curve_summary(records: list[dict]) -> dict:
    import numpy as np

    from fitting.fit import fit_sigmoid

    steps = [r["step"] for r in records]
    pass_rate = np.array([r["eval/pass_rate"] for r in records])
    start, top = pass_rate[0], pass_rate.max()
    threshold = start + 0.9 * (top - start)
    reach = int(np.argmax(pass_rate >= threshold))
    summary = {
        "start": float(start), "end": float(pass_rate[-1]), "max": float(top),
        "greedy_end": records[-1].get("eval/greedy_pass_rate"),
        "eval_points": len(records), "points_to_90pct_gain": reach, "step_at_90pct_gain": steps[reach],
        "steps": steps[-1], "device_seconds": records[-1]["compute/device_seconds"],
        "eval_seconds": records[-1]["compute/evaluation_seconds"],
    }
    for name, key in AXES.items():
        compute = np.array([r[key] for r in records], dtype=float)
        fit = fit_sigmoid(compute, pass_rate)
        residual = pass_rate[1:] - fit.predict(compute[1:])
        total = ((pass_rate[1:] - pass_rate[1:].mean()) ** 2).sum()
        summary[f"r2_{name}"] = float(1 - (residual**2).sum() / total)
        summary[f"fit_{name}"] = {"A": fit.a, "B": fit.b, "C_mid": fit.c_mid, "R0": fit.r0}
    return summary


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--out", default="runs/bench_rl")
    parser.add_argument("overrides", nargs="*", help="recipe overrides, e.g. model.path=DIR")
    args = parser.parse_args(argv)
    os.environ.setdefault("OMP_NUM_THREADS", str(args.threads))
    import torch

    torch.set_num_threads(args.threads)
    from recipe.config import load_recipe
    from recipe.engines import train
    from recipe.run import model_directory

    results = {}
    for seed in args.seeds:
        cfg = load_recipe(None, [*args.overrides, f"seed={seed}", "tracking.mlflow=false"])
        model_directory(cfg, log_every=100)  # build the cached warm start outside the timed run
        load = os.getloadavg()[0]
        started = time.perf_counter()
        records = train(cfg, Path(args.out) / f"seed{seed}",
                        on_eval=lambda r: print(f"seed {seed} step {r['step']} pass {r['eval/pass_rate']:.3f}",
                                                flush=True))
        summary = curve_summary(records)
        summary.update(wall_seconds=time.perf_counter() - started, load_before=load, load_after=os.getloadavg()[0],
                       curve=[(r["step"], round(r["eval/pass_rate"], 4)) for r in records])
        results[seed] = summary
        print(json.dumps({k: v for k, v in summary.items() if k != "curve"}, indent=1), flush=True)
    Path(args.out).mkdir(parents=True, exist_ok=True)
    (Path(args.out) / "learning.json").write_text(json.dumps(results, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
