"""PipelineRL-k vs PPO-off-policy-k on the embedded testbed: same recipe, seeds and cores.

    .venv/bin/python benchmarks/bench_pipeline.py --seeds 0 1 --out runs/bench_pipeline

Both modes get the same 2 cores: pipeline_rl k=8 as a 1-core generator process + a 1-core trainer
process, ppo_off_policy k=8 as one process with 2 torch threads. Both are charged device-seconds =
generation + training wall-clock x 2 (evaluation excluded). `ppo_off_policy_split` is PPO-off-policy
deployed as in the paper, one device per role taking turns (a 1-thread run; compare wall-clock). For
each run it reports the device-seconds (and wall seconds) to the first evaluation at or above
--pass-rate, the sigmoid fitted
against device-seconds (A, B, C_mid, R^2), and for PipelineRL the mean idle fraction of each role and
its staleness; for PPO the busy seconds per step of generation and training, which give the
steady-state step time of an overlapped pipeline on n generator devices: max(gen / n, train).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks.bench_rl_learning import curve_summary  # noqa: E402

# mode -> (recipe overrides, torch threads of the training process)
MODES = {
    "pipeline_rl": (["off_policy=pipeline_rl", "off_policy.k=8", "off_policy.generator_devices=1",
                     "off_policy.trainer_devices=1"], 2),
    "ppo_off_policy": (["off_policy=ppo_off_policy", "off_policy.k=8"], 2),
    # The paper's deployment of PPO-off-policy: generator devices cannot train and trainer devices
    # cannot generate, so the two roles take turns on one device each: a step costs gen + train
    # on one core, exactly this 1-thread run, while 2 devices are held (device-seconds = 2 x wall).
    "ppo_off_policy_split": (["off_policy=ppo_off_policy", "off_policy.k=8"], 1),
}


def first_reaching(records: list[dict], pass_rate: float) -> dict | None:
    for record in records:
        if record["eval/pass_rate"] >= pass_rate:
            return {"step": record["step"], "device_seconds": record["compute/device_seconds"],
                    "wall_seconds": record["compute/wall_seconds"]}
    return None


def mean_of(records: list[dict], key: str) -> float | None:
    values = [r[key] for r in records if key in r]
    return sum(values) / len(values) if values else None


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1])
    parser.add_argument("--modes", nargs="+", default=["pipeline_rl", "ppo_off_policy"], choices=list(MODES))
    parser.add_argument("--pass-rate", type=float, default=0.75, help="the fixed pass rate both must reach")
    parser.add_argument("--out", default="runs/bench_pipeline")
    parser.add_argument("overrides", nargs="*", help="recipe overrides for both modes, e.g. max_steps=250")
    args = parser.parse_args(argv)
    os.environ.setdefault("OMP_NUM_THREADS", "2")
    import torch

    from recipe.config import load_recipe
    from recipe.engines import train
    from recipe.run import model_directory

    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    results_path = out / "pipeline.json"
    results = json.loads(results_path.read_text()) if results_path.is_file() else {}
    for seed in args.seeds:
        for mode in args.modes:
            overrides, threads = MODES[mode]
            torch.set_num_threads(threads)  # the PPO process's cores; the pipeline roles set their own
            cfg = load_recipe(None, [*args.overrides, *overrides, f"seed={seed}", "tracking.mlflow=false"])
            model_directory(cfg, log_every=100)
            load = os.getloadavg()[0]
            started = time.perf_counter()
            records = train(cfg, out / f"{mode}-seed{seed}",
                            on_eval=lambda r: print(f"{mode} seed {seed} step {r['step']} "
                                                    f"pass {r['eval/pass_rate']:.3f} "
                                                    f"dev-s {r['compute/device_seconds']:.0f}", flush=True))
            summary = curve_summary(records)
            last = records[-1]
            summary.update(
                mode=mode, seed=seed, wall_seconds=time.perf_counter() - started, load_before=load,
                load_after=os.getloadavg()[0], reach=first_reaching(records, args.pass_rate), pass_rate=args.pass_rate,
                run_wall_seconds=last["compute/wall_seconds"],
                generation_seconds_per_step=last["compute/generation_seconds"] / last["step"],
                training_seconds_per_step=last["compute/training_seconds"] / last["step"],
                generator_idle_frac=mean_of(records, "pipeline/generator_idle_frac"),
                trainer_idle_frac=mean_of(records, "pipeline/trainer_idle_frac"),
                staleness_mean=mean_of(records, "train/staleness"),
                staleness_max=max((r.get("train/staleness_max", 0.0) for r in records), default=None),
                queue_depth=mean_of(records, "pipeline/queue_depth"),
                publish_latency_s=mean_of(records, "pipeline/publish_latency_s"),
                generator_tokens_per_s=mean_of(records, "pipeline/generator_tokens_per_s"),
                trainer_tokens_per_s=mean_of(records, "pipeline/trainer_tokens_per_s"),
                curve=[(r["step"], round(r["compute/device_seconds"], 2), round(r["eval/pass_rate"], 4))
                       for r in records])
            results[f"{mode}-seed{seed}"] = summary
            results_path.write_text(json.dumps(results, indent=1) + "\n")
            print(json.dumps({k: v for k, v in summary.items() if k != "curve"}, indent=1), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
