"""The demo's job, old code against new (issue 16's per-job line): wall-clock of the same number of steps.

    .venv/bin/python benchmarks/bench_demo_job.py [--rounds 2] [--steps 200] [--old-commit 97cb25d]
        [--out benchmarks/out/bench_demo_job.json] [key=value ...]

bench_speed.py times the synchronous 2-thread PPO-off-policy step. A `make demo` job runs something
else: the base recipe's PipelineRL-8 (a 1-thread generator process beside a 1-thread trainer process),
with evaluation points and checkpoints, for a budget of compute. This benchmark runs that job whole,
with the job's own entry point (`recipe.engines.train`, or `recipe.loop.train` in trees from before the
engine split, as sweeps/job.py calls it), in the old tree (the commit before the speed work, checked
out with `git worktree add --detach` into a temporary directory) and in this working tree, alternating
round by round so machine noise hits both alike. Same steps (max_steps=--steps: a budget in steps, so
"steps per job rise by the per-job factor" reads as "the job's wall-clock falls by it"), same seed, 2
torch threads, the same cached warm start (the child refuses to build one), MLflow off, each tree's own
shipped evaluation schedule and checkpoint interval (what its demo job does). Extra key=value arguments
are recipe overrides for both trees; pass the testbed's interruption window, which the old tree's
defaults predate: `length_control.min_thinking=6 length_control.max_thinking=12`.

Per job, from the run's own metrics.jsonl (last record) and the child process: the job's wall-clock
(model load to return), gen+train wall-clock (compute/wall_seconds: the roles overlap, counted once),
evaluation seconds, process CPU-seconds (the child and its role processes, getrusage), steps, evaluation
points and the pass rate at the end. Ratios old/new: job wall-clock, gen+train wall-clock per step
(the demo's per-step gain) and CPU-seconds per step. Output: JSON on stdout and in --out, then a table.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import platform
import resource
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from datetime import datetime, timezone
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
TREE = Path(sys.argv[sys.argv.index("--tree") + 1]).resolve() if "--child" in sys.argv else REPO
sys.path.insert(0, str(TREE))  # a child imports recipe from the tree it measures, the parent from this tree
sys.path.insert(1, str(REPO / "benchmarks"))
from bench_speed import DEFAULT_OLD_COMMIT, cpu_model, git, loadavg  # noqa: E402 (the machine and git helpers)


def run_child(args) -> int:
    """Run the job in the tree args.tree; write what it measured to args.result."""
    import torch

    torch.set_num_threads(args.threads)
    import components
    import recipe

    for module in (recipe, components):
        if not Path(module.__file__).resolve().is_relative_to(TREE):
            raise SystemExit(f"bench_demo_job child: {module.__name__} came from {module.__file__}, not {TREE}")
    from recipe.config import load_recipe
    from recipe.run_config import WarmStartConfig
    from recipe.warm_start import cache_root, warm_start_key
    # Chosen by the tree's files, not by trying the import: the editable install's finder would serve a
    # module the old tree lacks from this tree.
    if (TREE / "recipe" / "engines" / "__init__.py").is_file():
        from recipe.engines import train
    else:  # trees from before the engine split
        from recipe.loop import train
    if not Path(sys.modules[train.__module__].__file__).resolve().is_relative_to(TREE):
        raise SystemExit(f"bench_demo_job child: train came from {sys.modules[train.__module__].__file__}, not {TREE}")

    # A tree that ships a warm start would use it, an older one this machine's cached build: both use the
    # cached build, so old and new start from the same weights.
    own_build = (["warm_start.use_shipped=false"]
                 if "use_shipped" in {f.name for f in dataclasses.fields(WarmStartConfig)} else [])
    cfg = load_recipe(None, [*args.overrides, *own_build, f"max_steps={args.steps}", "tracking.mlflow=false"])
    warm = cache_root(cfg.warm_start) / "warm_start" / warm_start_key(cfg.model, cfg.warm_start, cfg.task)
    if cfg.model.path == "embedded" and not (warm / "warm_start.json").is_file():
        raise SystemExit(f"bench_demo_job child: the warm start {warm} is not built; build it first (bench_speed.py "
                         "says how); a timing run never builds one")
    run_dir = Path(tempfile.mkdtemp(prefix="job_", dir=Path(args.result).parent))
    try:
        started = time.perf_counter()
        train(cfg, run_dir, device="cpu")
        wall = time.perf_counter() - started
        usage = [resource.getrusage(who) for who in (resource.RUSAGE_SELF, resource.RUSAGE_CHILDREN)]
        records = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines() if line.strip()]
    finally:
        shutil.rmtree(run_dir, ignore_errors=True)
    last = records[-1]
    if last["step"] != args.steps:  # both trees evaluate at max_steps; anything else is a run that stopped early
        raise SystemExit(f"bench_demo_job child: the run's last record is step {last['step']}, not {args.steps}")
    off_policy = cfg.off_policy["name"] if isinstance(cfg.off_policy, dict) else cfg.off_policy.name  # old: a dict
    result = {
        "recipe_file": recipe.__file__, "model_dir": str(warm), "off_policy": off_policy,
        "steps": int(last["step"]), "job_wall_s": wall,
        "process_cpu_s": sum(u.ru_utime + u.ru_stime for u in usage),
        "gen_train_wall_s": last["compute/wall_seconds"], "evaluation_s": last["compute/evaluation_seconds"],
        "generation_s": last["compute/generation_seconds"], "training_s": last["compute/training_seconds"],
        "eval_points": sum("eval/pass_rate" in r for r in records), "end_pass_rate": last.get("eval/pass_rate"),
    }
    Path(args.result).write_text(json.dumps(result) + "\n")
    return 0


def run_job(tree: Path, args, tmp: Path) -> dict:
    env = dict(os.environ, PYTHONPATH=str(tree), OMP_NUM_THREADS=str(args.threads), MKL_NUM_THREADS=str(args.threads),
               TOKENIZERS_PARALLELISM="false")
    result = tmp / "result.json"
    python = REPO / ".venv" / "bin" / "python"
    command = [str(python if python.is_file() else sys.executable), str(Path(__file__).resolve()), "--child",
               "--tree", str(tree), "--result", str(result), "--steps", str(args.steps),
               "--threads", str(args.threads), *args.overrides]
    proc = subprocess.run(command, cwd=tree, env=env, capture_output=True, text=True)
    if proc.returncode != 0:
        raise RuntimeError(f"job in {tree} failed (exit {proc.returncode}):\n{proc.stderr[-4000:]}")
    try:
        return json.loads(result.read_text())
    finally:
        result.unlink(missing_ok=True)


def summarize(jobs: list[dict]) -> dict:
    def mean(key: str, per_step: bool = False) -> float:
        return statistics.mean(j[key] / j["steps"] if per_step else j[key] for j in jobs)

    return {"jobs": len(jobs), "steps": jobs[0]["steps"], "job_wall_s": mean("job_wall_s"),
            "gen_train_s_per_step": mean("gen_train_wall_s", True), "cpu_s_per_step": mean("process_cpu_s", True),
            "evaluation_s": mean("evaluation_s"), "evaluation_share": mean("evaluation_s") / mean("job_wall_s"),
            "eval_points": mean("eval_points"), "end_pass_rate": mean("end_pass_rate")}


def table(results: dict) -> str:
    rows = [("job wall-clock (s)", "job_wall_s", "{:.1f}"), ("gen+train s/step", "gen_train_s_per_step", "{:.3f}"),
            ("process CPU-s/step", "cpu_s_per_step", "{:.3f}"), ("evaluation (s)", "evaluation_s", "{:.1f}"),
            ("evaluation share", "evaluation_share", "{:.1%}"), ("evaluation points", "eval_points", "{:.0f}"),
            ("end pass rate", "end_pass_rate", "{:.3f}")]
    old, new = results["summary"]["old"], results["summary"]["new"]
    lines = [f"{'':<22}{'old':>10}{'new':>10}{'old/new':>10}"]
    for label, key, fmt in rows:
        ratio = f"{old[key] / new[key]:.2f}x" if key in results["ratios"] else ""
        lines.append(f"{label:<22}{fmt.format(old[key]):>10}{fmt.format(new[key]):>10}{ratio:>10}")
    return "\n".join(lines)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--steps", type=int, default=200, help="RL steps per job (the budget, in steps)")
    parser.add_argument("--threads", type=int, default=2, help="torch threads of the job (the demo's cores_per_job)")
    parser.add_argument("--old-commit", default=DEFAULT_OLD_COMMIT)
    parser.add_argument("--out", default=str(REPO / "benchmarks" / "out" / "bench_demo_job.json"))
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--tree", help=argparse.SUPPRESS)
    parser.add_argument("--result", help=argparse.SUPPRESS)
    parser.add_argument("overrides", nargs="*", help="recipe overrides for both trees")
    args = parser.parse_args(argv)
    if args.steps < 1 or args.rounds < 1:
        parser.error("need --steps >= 1 and --rounds >= 1")
    if args.child:
        return run_child(args)
    try:
        old_sha = git("rev-parse", "--verify", f"{args.old_commit}^{{commit}}")
    except subprocess.CalledProcessError:
        parser.error(f"--old-commit {args.old_commit!r} is not a commit of {REPO}")
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))  # run the clean-up below on kill
    results = {
        "bench": "bench_demo_job",
        "machine": {"cpu_model": cpu_model(), "cpu_count": os.cpu_count(), "python": platform.python_version(),
                    "date": datetime.now(timezone.utc).isoformat(timespec="seconds"), "load_at_start": loadavg()},
        "command": " ".join([Path(__file__).name, *(sys.argv[1:] if argv is None else argv)]),
        "steps": args.steps, "threads": args.threads, "overrides": args.overrides,
        "old": {"commit": old_sha}, "new": {"head": git("rev-parse", "HEAD"),
                                            "uncommitted_files": len(git("status", "--porcelain").splitlines())},
    }
    tmp = Path(tempfile.mkdtemp(prefix="bench_demo_job_"))
    worktree = tmp / "old"
    jobs: dict[str, list[dict]] = {"old": [], "new": []}
    try:
        git("worktree", "add", "--detach", str(worktree), old_sha)
        for r in range(args.rounds):
            for who, tree in (("old", worktree), ("new", REPO)):
                before = loadavg()
                job = run_job(tree, args, tmp)
                job.update(round=r, load_before=before, load_after=loadavg())
                if not Path(job["recipe_file"]).resolve().is_relative_to(tree.resolve()):
                    raise SystemExit(f"bench_demo_job: {who} imported recipe from {job['recipe_file']}")
                jobs[who].append(job)
                print(f"round {r + 1}/{args.rounds} {who}: {job['steps']} steps in {job['job_wall_s']:.1f} s "
                      f"({job['gen_train_wall_s'] / job['steps']:.3f} s/step gen+train; load {before[0]} -> "
                      f"{job['load_after'][0]})", file=sys.stderr, flush=True)
    finally:
        subprocess.run(["git", "worktree", "remove", "--force", str(worktree)], cwd=REPO, capture_output=True)
        shutil.rmtree(tmp, ignore_errors=True)
        subprocess.run(["git", "worktree", "prune"], cwd=REPO, capture_output=True)
    if jobs["old"][0]["model_dir"] != jobs["new"][0]["model_dir"]:
        raise SystemExit("bench_demo_job: old and new started from different warm starts")
    summary = {who: summarize(jobs[who]) for who in ("old", "new")}
    ratios = {key: summary["old"][key] / summary["new"][key]
              for key in ("job_wall_s", "gen_train_s_per_step", "cpu_s_per_step")}
    results.update(summary=summary, jobs=jobs, ratios=ratios)
    results["machine"]["load_at_end"] = loadavg()
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(results, indent=1) + "\n")
    print(json.dumps({k: v for k, v in results.items() if k != "jobs"}, indent=1))
    print("\n" + table(results) + f"\n\nwritten: {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
