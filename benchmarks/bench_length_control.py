"""The response length over training under each length control, read from a finished LOO sweep (issue 52).

    .venv/bin/python benchmarks/bench_length_control.py SWEEP_DIR [--at 0 1e12 2.5e12 5e12 1e13]

Per variant (seed mean), at each compute point of --at (in the sweep's budget.unit; the metrics line nearest
to it): the mean length of the responses trained on (rollout/len_mean: every step since the previous line),
the share of them the length control acted on (rollout/interrupted_frac: cut at the thinking budget and
given the interruption phrase; rollout/length_penalized_frac: a correct answer penalized for its length),
and the held-out evaluation's mean length and pass rate under the run's own control. Nothing is trained.
--styles (the embedded task): each run's last checkpoint answers the first 256 validation prompts 4 times with no
length control, and each answer's thinking is classed by its length against the problem's column count: long
(two digits a column, the warm start's correct method), terse (one digit a column, warm_start.terse_frac) or
other; per variant (seed mean) each style's share and the share of it that is correct.
Output: a table on stdout and JSON in benchmarks/out/bench_length_control.json.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
OUT = REPO / "benchmarks" / "out"

KEYS = {"len": "rollout/len_mean", "interrupted": "rollout/interrupted_frac",
        "penalized": "rollout/length_penalized_frac", "eval_len": "eval/len_mean", "pass": "eval/pass_rate"}


def nearest(records: list[dict], compute_key: str, at: float) -> dict:
    """The metrics line whose compute is nearest to `at` (the step-0 line for 0)."""
    return min(records, key=lambda r: abs(r.get(compute_key, math.inf) - at))


def length_table(sweep_dir: Path, points: list[float]) -> dict:
    """{variant: {at: {key: seed mean}}} from every run's metrics.jsonl."""
    from reports import schema
    from reports.sweep_data import load_sweep, read_metrics_file

    data = load_sweep(sweep_dir)
    compute_key = data.budget.compute_key
    plan = json.loads((sweep_dir / schema.PLAN_FILE).read_text())
    by_variant: dict[str, list[list[dict]]] = {}
    for entry in plan:
        records = [r for r in read_metrics_file(sweep_dir / entry[schema.PLAN_RUN_DIR] / schema.METRICS_FILE)
                   if compute_key in r]
        if records:
            by_variant.setdefault(entry["variant"], []).append(records)
    table = {}
    for variant in data.variants():
        runs = by_variant.get(variant, [])
        table[variant] = {}
        for at in points:
            lines = [nearest(records, compute_key, at) for records in runs]
            table[variant][at] = {name: _mean([line.get(key) for line in lines]) for name, key in KEYS.items()}
            table[variant][at]["seeds"] = len(lines)
    return {"unit": data.budget.unit, "points": points, "variants": table}


def _mean(values) -> float:
    values = [float(v) for v in values if v is not None and math.isfinite(float(v))]
    return sum(values) / len(values) if values else math.nan


def print_table(result: dict) -> None:
    points = result["points"]
    print(f"response length (rollout/len_mean, seed mean) at {result['unit']} " + " / ".join(f"{p:g}" for p in points))
    print("training responses (the step-0 line has none), then held-out responses under the run's control")
    for variant, rows in result["variants"].items():
        trained = " -> ".join(f"{rows[p]['len']:.2f}" for p in points)
        held_out = " -> ".join(f"{rows[p]['eval_len']:.2f}" for p in points)
        end = rows[points[-1]]
        print(f"  {variant}\n    trained {trained}\n    held-out {held_out}\n    at the end: interrupted "
              f"{end['interrupted']:.3f}, penalized {end['penalized']:.3f}, pass rate {end['pass']:.3f}")


def thinking_styles(sweep_dir: Path, prompts: int = 256, samples: int = 4) -> dict:
    """{variant: {style: (share, share correct)}}, seed means, from every run's last checkpoint (see --styles)."""
    import re
    import shutil
    import tempfile

    import torch

    from components.length_control import NoLengthControl
    from recipe.config import load_recipe
    from recipe.evaluation import evaluation_streams
    from recipe.generator import decode_responses
    from recipe.run import Run
    from recipe.tasks import THINK_CLOSE
    from reports import schema

    torch.set_num_threads(1)
    plan = json.loads((sweep_dir / schema.PLAN_FILE).read_text())
    by_variant: dict[str, list[dict]] = {}
    for entry in plan:
        run_dir = sweep_dir / entry[schema.PLAN_RUN_DIR]
        if not (run_dir / "checkpoint.pt").exists():
            continue
        with tempfile.TemporaryDirectory() as scratch:  # the run loads its checkpoint; nothing is written beside it
            shutil.copy(run_dir / "checkpoint.pt", Path(scratch) / "checkpoint.pt")
            run = Run(load_recipe(run_dir / "config.yaml"), Path(scratch), "cpu", devices=1)
            problems = run.task.validation[:prompts]
            torch_rng, numpy_rng = evaluation_streams(0, "per_point", 1, "cpu")
            rollout = run.generator.generate([p.prompt for p in problems for _ in range(samples)],
                                             precision=run.c.precision, length_control=NoLengthControl(),
                                             max_new_tokens=run.cfg.rollout.max_new_tokens,
                                             temperature=run.cfg.rollout.temperature, torch_rng=torch_rng,
                                             numpy_rng=numpy_rng)
            counts = {style: [0, 0] for style in ("long", "terse", "other")}
            for index, text in enumerate(decode_responses(run.generator.tokenizer, rollout)):
                problem = problems[index // samples]
                columns = len(problem.reference_thinking) // 2
                thinking = text.split(THINK_CLOSE)[0]
                style = {2 * columns: "long", columns: "terse"}.get(len(thinking), "other")
                if re.fullmatch(r"\d*", thinking) is None:
                    style = "other"
                counts[style][0] += 1
                counts[style][1] += run.task.check(text, problem.answer)
            total = len(problems) * samples
            by_variant.setdefault(entry["variant"], []).append(
                {style: (n / total, right / n if n else math.nan) for style, (n, right) in counts.items()})
    return {variant: {style: tuple(_mean([run[style][i] for run in runs]) for i in (0, 1))
                      for style in ("long", "terse", "other")} for variant, runs in by_variant.items()}


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("sweep_dir", type=Path)
    parser.add_argument("--at", type=float, nargs="+", default=[0.0, 1e12, 2.5e12, 5e12, 1e13],
                        help="compute points, in the sweep's budget.unit")
    parser.add_argument("--out", type=Path, default=OUT / "bench_length_control.json")
    parser.add_argument("--styles", action="store_true", help="the thinking style of each run's last checkpoint")
    args = parser.parse_args(argv)
    result = length_table(args.sweep_dir, args.at)
    if args.styles:
        result["styles"] = thinking_styles(args.sweep_dir)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=1, default=str))
    print_table(result)
    for variant, styles in result.get("styles", {}).items():
        print(f"  {variant}: " + ", ".join(f"{style} {share:.1%} (right {right:.2f})"
                                          for style, (share, right) in styles.items()))


if __name__ == "__main__":
    main()
