"""Where a run's pass rate stands, problem class by problem class (the embedded task; issue 52).

    .venv/bin/python benchmarks/bench_pass_by_class.py SWEEP_DIR [SWEEP_DIR ...] [--variant base] [--warm-start]

A problem's class is its column count (the thinking trace's length / 2) and how many columns carry into the
next (the carries the warm start's wrong method forgets; every validation problem has at least one). Each run
of --variant in each sweep answers all its validation prompts --samples times from its last checkpoint, under
its own length control (the base's interruption included) and temperature, on one fixed set of evaluation
draws; per class: its share of the prompts, the pass rate and the share of samples interrupted, seed means.
--warm-start adds the same reading of the warm start (no checkpoint: step 0). Nothing is trained.

    .venv/bin/python benchmarks/bench_pass_by_class.py --along RUN_DIR --steps 32 64 96 128 192 288 448

--along: each class's own learning curve. RUN_DIR's config trains afresh in this process (under --override, by
default PPO-off-policy-8: one process, so it stops and resumes at each of --steps without new role processes),
its checkpoint at each step is read as above, and each class's curve is fitted (fitting.fit_sigmoid, compute
axis = steps, R0 the warm start's): A, C_mid, B and the share of its gain made by the last step.
Output: a table on stdout and JSON in benchmarks/out/bench_pass_by_class.json.
"""

from __future__ import annotations

import argparse
import json
import math
import shutil
import sys
import tempfile
from collections import defaultdict
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
OUT = REPO / "benchmarks" / "out"


def problem_class(reference_thinking: str) -> str:
    """"<columns> col, <carries> carry": the trace holds two digits a column, the first of each its carry out."""
    sums = [reference_thinking[i:i + 2] for i in range(0, len(reference_thinking), 2)]
    carries = sum(1 for column in sums[:-1] if column[0] == "1")  # the last column's carry is the answer's lead
    return f"{len(sums)} col, {carries} carry"


def read_run(run_dir: Path, from_checkpoint: bool, samples: int) -> dict[str, dict[str, float]]:
    """{class: {"prompts", "pass", "interrupted"}} for one run's last checkpoint (or its warm start)."""
    import torch

    from recipe.config import load_recipe
    from recipe.evaluation import evaluation_streams
    from recipe.generator import decode_responses
    from recipe.run import Run

    with tempfile.TemporaryDirectory() as scratch:  # the run loads its checkpoint; nothing is written beside it
        if from_checkpoint:
            shutil.copy(run_dir / "checkpoint.pt", Path(scratch) / "checkpoint.pt")
        run = Run(load_recipe(run_dir / "config.yaml"), Path(scratch), "cpu", devices=1)
        problems = run.task.validation
        torch_rng, numpy_rng = evaluation_streams(0, "per_point", 1, "cpu")
        with torch.no_grad():
            rollout = run.generator.generate([p.prompt for p in problems for _ in range(samples)],
                                             precision=run.c.precision, length_control=run.c.length_control,
                                             max_new_tokens=run.cfg.rollout.max_new_tokens,
                                             temperature=run.cfg.rollout.temperature, torch_rng=torch_rng,
                                             numpy_rng=numpy_rng)
        counts = defaultdict(lambda: [0, 0, 0])  # samples, correct, interrupted
        for index, text in enumerate(decode_responses(run.generator.tokenizer, rollout)):
            problem = problems[index // samples]
            for name in (problem_class(problem.reference_thinking), "all"):
                counts[name][0] += 1
                counts[name][1] += run.task.check(text, problem.answer)
                counts[name][2] += bool(rollout.interrupted[index])
        total = counts["all"][0]
        return {name: {"prompts": n / total, "pass": right / n, "interrupted": cut / n}
                for name, (n, right, cut) in counts.items()}


def seed_means(readings: list[dict]) -> dict[str, dict[str, float]]:
    names = sorted({name for reading in readings for name in reading})
    keys = ("prompts", "pass", "interrupted")
    return {name: {key: sum(r[name][key] for r in readings) / len(readings) for key in keys} for name in names}


def along(run_dir: Path, steps: list[int], overrides: list[str], samples: int, scratch: Path) -> dict:
    """{"steps": [0, *checkpoint steps], "classes": {class: [pass rate at each]}, "fits": {class: {a, c_mid, b}}}."""
    import torch

    from fitting import fit_sigmoid
    from recipe.config import load_recipe
    from recipe.engines import train

    every = math.gcd(*steps)  # a checkpoint at each stop
    cfg = load_recipe(run_dir / "config.yaml", [*overrides, f"checkpoint.every_steps={every}"])
    train_dir = scratch / "run"
    readings, at = [read_run(run_dir, False, samples)], [0]
    for stop in steps:
        train(cfg, train_dir, device="cpu", stop_at_step=stop)
        at.append(int(torch.load(train_dir / "checkpoint.pt", map_location="cpu", weights_only=False)["step"]))
        readings.append(read_run(train_dir, True, samples))
    classes = {name: [reading[name]["pass"] for reading in readings] for name in readings[0]}
    fits = {}
    for name, curve in classes.items():
        fit = fit_sigmoid(at, curve)
        fits[name] = {"a": fit.a, "c_mid": fit.c_mid, "b": fit.b, "gain_made": (curve[-1] - fit.r0) / (fit.a - fit.r0),
                      "flags": list(fit.flags)}
    return {"steps": at, "classes": classes, "fits": fits}


def main(argv=None) -> None:
    import torch

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("sweep_dirs", type=Path, nargs="*")
    parser.add_argument("--along", type=Path, help="a run directory whose config trains afresh (see above)")
    parser.add_argument("--steps", type=int, nargs="+", default=[32, 64, 96, 128, 192, 288, 448])
    parser.add_argument("--override", nargs="*", default=["off_policy=ppo_off_policy", "off_policy.k=8"])
    parser.add_argument("--variant", default="base")
    parser.add_argument("--samples", type=int, default=4)
    parser.add_argument("--warm-start", action="store_true", help="also read the warm start (step 0)")
    parser.add_argument("--out", type=Path, default=OUT / "bench_pass_by_class.json")
    args = parser.parse_args(argv)
    torch.set_num_threads(2)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    if args.along is not None:
        with tempfile.TemporaryDirectory() as scratch:
            result = along(args.along, args.steps, args.override, args.samples, Path(scratch))
        args.out.write_text(json.dumps(result, indent=1))
        steps = " | ".join(f"step {step}" for step in result["steps"])
        print(f"class | {steps} | A | C_mid (steps) | B | gain made")
        for name, curve in sorted(result["classes"].items(), key=lambda item: (item[0] == "all", item[0])):
            fit = result["fits"][name]
            print(f"{name} | " + " | ".join(f"{value:.3f}" for value in curve)
                  + f" | {fit['a']:.3f} | {fit['c_mid']:.0f} | {fit['b']:.2f} | {fit['gain_made']:.0%}")
        return
    if not args.sweep_dirs:
        parser.error("give one or more sweep directories, or --along RUN_DIR")
    from reports import schema

    columns: dict[str, dict] = {}
    for sweep_dir in args.sweep_dirs:
        run_dirs = [sweep_dir / entry[schema.PLAN_RUN_DIR]
                    for entry in json.loads((sweep_dir / schema.PLAN_FILE).read_text())
                    if entry["variant"] == args.variant
                    and (sweep_dir / entry[schema.PLAN_RUN_DIR] / "checkpoint.pt").exists()]
        if not run_dirs:
            parser.error(f"{sweep_dir}: no run of variant {args.variant!r} has a checkpoint (--variant names one of "
                         f"its plan's variants)")
        if args.warm_start and "warm start" not in columns:
            columns["warm start"] = seed_means([read_run(run_dirs[0], False, args.samples)])
        readings = [read_run(run_dir, True, args.samples) for run_dir in run_dirs]
        last = json.loads((run_dirs[0] / "metrics.jsonl").read_text().splitlines()[-1])
        columns[f"{sweep_dir.name} ({len(run_dirs)} seeds, {last['compute/flops']:.2g} flops)"] = seed_means(readings)
    args.out.write_text(json.dumps(columns, indent=1))
    names = sorted(next(iter(columns.values())), key=lambda name: (name == "all", name))
    print("class | share | " + " | ".join(f"{column}: pass (interrupted)" for column in columns))
    for name in names:
        share = next(iter(columns.values()))[name]["prompts"]
        print(f"{name} | {share:.1%} | " + " | ".join(f"{c[name]['pass']:.3f} ({c[name]['interrupted']:.0%})"
                                                    for c in columns.values()))


if __name__ == "__main__":
    main()
