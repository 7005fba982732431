"""Speed benchmark: the RL step of an old commit, of this tree and of TRL's GRPOTrainer, side by side.

    .venv/bin/python -m benchmarks.bench_speed [--rounds 3] [--steps 20] [--warmup 3] [--no-trl]
        [--old-commit 97cb25d] [--out benchmarks/out/bench_speed.json] [key=value ...]

One invocation runs R rounds; round r runs (a) old, (b) new, (c) TRL, each in a fresh process, so
machine noise hits all three alike:
 (a) old: the commit --old-commit (default: main before the speed work) checked out with `git worktree
     add --detach` into a temporary directory (removed at the end, also on error); benchmarks/speed_child.py
     runs there by .venv/bin/python with PYTHONPATH and cwd at that tree, and checks that `recipe` and
     `components` are imported from the worktree (it fails loudly otherwise).
 (b) new: this working tree (uncommitted changes included), run the same way.
 (c) TRL: `.venv-trl/bin/python ../shared/peers/trl_grpo_bench.py --threads 2 --warmup W --steps N`
     (see ../shared/peers/README.md; skipped with --no-trl).
(a) and (b) run the ScaleRL recipe with off_policy=ppo_off_policy (synchronous; default k=8), 32
prompts x 8 samples, seed 0, 2 torch threads (OMP_NUM_THREADS=2), this machine's cached warm start
(both trees must resolve the same warm-start directory; the child refuses to build one), MLflow off,
a temporary run dir. The child replays recipe.engines.native's loop body without evaluation or
checkpoints, with the tree's own APIs (Run, sample_groups, assemble_minibatch, train_on): per round
of k minibatches, k x (curriculum.sample + sample_groups + assemble_minibatch) = generation, or, in
a tree that samples a round together (recipe.run.sample_round), k x curriculum.sample + sample_round
+ k x assemble_minibatch timed as one and charged a k-th to each step; then k x train_on =
training, each timed with time.perf_counter. A step = one minibatch's generation + its training.
W warm-up steps, then N measured steps; the figures pool the measured steps of all rounds.

Counted per step: completions (P x G rows); generated tokens = rollout.lengths summed (every
generated token, forced interruption-phrase tokens included) and sampled tokens = rollout.loss_mask
summed (tokens the policy sampled); trained tokens = the kept rows' real tokens (attention_mask
summed over prompt + response of the batch left after the zero-variance filter) and trained response
tokens = the kept batch's loss_mask summed. tokens/s = (generated + trained tokens) / s, the measure
compared with TRL, whose JSON gives generated_tokens_per_step (completion tokens up to and including
EOS) and train_tokens_per_step (non-pad prompt + completion tokens through forward/backward).
FLOPs use recipe.compute's estimate as the compute meter does (generation: ModelShape.forward_flops
over all rows' prompt + response; training: 3x forward over the kept rows); they are nominal work,
so a faster implementation of the same work shows a higher achieved GFLOP/s. The machine's limit is
the best 2-thread fp32 torch.matmul GFLOP/s over a few square sizes, measured before and after the
rounds (--matmul-sizes). Output: the JSON summary on stdout, then a table; --out gets the same JSON
plus every run's per-step records ("runs"). The machine, CPU model, date and the load averages before
and after every contender's run are recorded. Extra key=value arguments are recipe overrides for
both trees (they must be valid in both, e.g. off_policy.k=1). Progress goes to stderr.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import platform
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from datetime import datetime, timezone
from pathlib import Path

from benchmarks.common import REPO, cpu_model, git, loadavg
from benchmarks.speed_child import BASE_OVERRIDES

CHILD = Path(__file__).resolve().with_name("speed_child.py")  # run by path inside the tree under test
DEFAULT_OLD_COMMIT = "97cb25d"
PEER_SCRIPT = REPO.parent / "shared" / "peers" / "trl_grpo_bench.py"
PEER_README = REPO.parent / "shared" / "peers" / "README.md"
TRL_PYTHON = REPO / ".venv-trl" / "bin" / "python"


# ---------------------------------------------------------------- parent: machine, rounds, summary


def matmul_peak(threads: int, sizes: list[int], repeats: int = 3) -> dict:
    """Best fp32 torch.matmul GFLOP/s on `threads` threads over square sizes (best of `repeats` each)."""
    import torch

    torch.set_num_threads(threads)
    per_size = {}
    for n in sizes:
        a, b = torch.randn(n, n), torch.randn(n, n)
        torch.matmul(a, b)  # warm-up
        best = float("inf")
        for _ in range(repeats):
            t0 = time.perf_counter()
            torch.matmul(a, b)
            best = min(best, time.perf_counter() - t0)
        per_size[str(n)] = round(2.0 * n**3 / best / 1e9, 2)
    return {"gflops_per_s": max(per_size.values()), "by_size": per_size, "threads": threads, "load": loadavg()}


def run_tree(label: str, tree: Path, args, python: Path, tmp: Path) -> dict:
    env = dict(os.environ, PYTHONPATH=str(tree), OMP_NUM_THREADS=str(args.threads),
               MKL_NUM_THREADS=str(args.threads), TOKENIZERS_PARALLELISM="false")
    result_path = tmp / f"{label}_result.json"  # the child's run dir goes beside it: tmp is removed at the end
    command = [str(python), str(CHILD), "--tree", str(tree), "--result", str(result_path),
               "--steps", str(args.steps), "--warmup", str(args.warmup), "--threads", str(args.threads),
               *args.overrides]
    try:
        proc = subprocess.run(command, cwd=tree, env=env, capture_output=True, text=True)
        if proc.returncode != 0:
            raise RuntimeError(f"{label} child failed (exit {proc.returncode}): {' '.join(command)}\n"
                               f"{proc.stderr[-4000:]}")
        return json.loads(result_path.read_text())
    finally:
        result_path.unlink(missing_ok=True)


def run_trl(args) -> dict:
    command = [str(TRL_PYTHON), str(PEER_SCRIPT), "--threads", str(args.threads), "--warmup", str(args.warmup),
               "--steps", str(args.steps)]
    env = dict(os.environ, OMP_NUM_THREADS=str(args.threads), MKL_NUM_THREADS=str(args.threads))
    env.pop("PYTHONPATH", None)
    proc = subprocess.run(command, cwd=REPO, env=env, capture_output=True, text=True)
    lines = [line for line in proc.stdout.splitlines() if line.startswith("{")]
    if proc.returncode != 0 or not lines:
        raise RuntimeError(f"TRL peer failed (exit {proc.returncode}): {' '.join(command)}\n{proc.stderr[-4000:]}")
    return json.loads(lines[-1])


def summarize_tree(runs: list[dict], peak: float) -> dict:
    """Pool the measured steps of every round."""
    steps = [s for r in runs for s in r["child"]["steps"] if not s["warmup"]]
    total = lambda key: sum(s[key] for s in steps)  # noqa: E731
    seconds, gen_s, train_s = total("step_s"), total("generation_s"), total("training_s")
    n = len(steps)
    gen_gflops = total("generation_flops") / gen_s / 1e9
    train_gflops = total("training_flops") / train_s / 1e9 if train_s > 0 else None
    return {
        "measured_steps": n,
        "s_per_step_mean": seconds / n, "s_per_step_median": statistics.median(s["step_s"] for s in steps),
        "generation_s_per_step": gen_s / n, "training_s_per_step": train_s / n,
        "generation_s_per_step_median": statistics.median(s["generation_s"] for s in steps),
        "training_s_per_step_median": statistics.median(s["training_s"] for s in steps),
        "completions_per_step": total("completions") / n,
        "generated_tokens_per_step": total("generated_tokens") / n,
        "sampled_tokens_per_step": total("sampled_tokens") / n,
        "trained_tokens_per_step": total("trained_tokens") / n,
        "trained_response_tokens_per_step": total("trained_response_tokens") / n,
        "kept_rows_per_step": total("kept_rows") / n,
        "completions_per_s": total("completions") / seconds,
        "generated_tokens_per_s": total("generated_tokens") / seconds,
        "sampled_tokens_per_s": total("sampled_tokens") / seconds,
        "trained_tokens_per_s": total("trained_tokens") / seconds,
        "trained_response_tokens_per_s": total("trained_response_tokens") / seconds,
        "tokens_per_s": (total("generated_tokens") + total("trained_tokens")) / seconds,
        "generation_gflops_per_s": gen_gflops, "training_gflops_per_s": train_gflops,
        "generation_fraction_of_matmul_peak": gen_gflops / peak,
        "training_fraction_of_matmul_peak": None if train_gflops is None else train_gflops / peak,
        "pass_rate_mean": total("pass_rate") / n,
        "per_round_s_per_step_mean": [statistics.mean(s["step_s"] for s in r["child"]["steps"] if not s["warmup"])
                                      for r in runs],
        "per_round_s_per_step_median": [statistics.median(s["step_s"] for s in r["child"]["steps"] if not s["warmup"])
                                        for r in runs],
        "load_before_after": [[r["load_before"], r["load_after"]] for r in runs],
    }


def summarize_trl(runs: list[dict], warmup: int) -> dict:
    results = [r["trl"] for r in runs]
    n = sum(t["measured_steps"] for t in results)
    seconds = sum(t["s_per_step"] * t["measured_steps"] for t in results)
    weighted = lambda key: sum(t[key] * t["measured_steps"] for t in results)  # noqa: E731
    step_s = [x for t in results for x in t["step_s_all"][warmup:]]
    gen, trained = weighted("generated_tokens_per_step"), weighted("train_tokens_per_step")
    return {
        "measured_steps": n, "s_per_step_mean": seconds / n, "s_per_step_median": statistics.median(step_s),
        "generation_s_per_step": weighted("gen_phase_s_per_step") / n,
        "training_s_per_step": weighted("train_phase_s_per_step") / n,
        "completions_per_step": results[0]["completions_per_step"],
        "generated_tokens_per_step": gen / n, "trained_tokens_per_step": trained / n,
        "completions_per_s": results[0]["completions_per_step"] * n / seconds,
        "generated_tokens_per_s": gen / seconds, "trained_tokens_per_s": trained / seconds,
        "tokens_per_s": (gen + trained) / seconds,
        "per_round_s_per_step_mean": [t["s_per_step"] for t in results],
        "per_round_s_per_step_median": [t["median_s_per_step"] for t in results],
        "load_before_after": [[r["load_before"], r["load_after"]] for r in runs],
        "versions": {key: results[0].get(key) for key in ("trl", "transformers", "torch")},
        "loss_type": results[0].get("loss_type"), "model_params": results[0].get("model_params"),
    }


def ratios(summary: dict) -> dict:
    old, new, trl = summary.get("old"), summary.get("new"), summary.get("trl")
    out = {}
    if old and new:
        for key in ("s_per_step_mean", "s_per_step_median", "generation_s_per_step", "training_s_per_step"):
            out[f"new_over_old_{key}"] = new[key] / old[key]
        out["speedup_old_over_new_s_per_step_mean"] = old["s_per_step_mean"] / new["s_per_step_mean"]
        out["new_over_old_tokens_per_s"] = new["tokens_per_s"] / old["tokens_per_s"]
    if new and trl:
        out["new_over_trl_tokens_per_s"] = new["tokens_per_s"] / trl["tokens_per_s"]
        out["new_over_trl_completions_per_s"] = new["completions_per_s"] / trl["completions_per_s"]
        out["new_over_trl_s_per_step_mean"] = new["s_per_step_mean"] / trl["s_per_step_mean"]
    if old and trl:
        out["old_over_trl_tokens_per_s"] = old["tokens_per_s"] / trl["tokens_per_s"]
    return out


def table(results: dict) -> str:
    rows = [("", "old", "new", "trl")]
    fields = [
        ("s/step mean", "s_per_step_mean", "{:.3f}"), ("s/step median", "s_per_step_median", "{:.3f}"),
        ("generation s/step", "generation_s_per_step", "{:.3f}"), ("training s/step", "training_s_per_step", "{:.3f}"),
        ("completions/s", "completions_per_s", "{:.1f}"),
        ("generated tok/step", "generated_tokens_per_step", "{:.0f}"),
        ("trained tok/step", "trained_tokens_per_step", "{:.0f}"),
        ("generated tok/s", "generated_tokens_per_s", "{:.0f}"), ("trained tok/s", "trained_tokens_per_s", "{:.0f}"),
        ("gen+trained tok/s", "tokens_per_s", "{:.0f}"),
        ("generation GFLOP/s", "generation_gflops_per_s", "{:.2f}"),
        ("training GFLOP/s", "training_gflops_per_s", "{:.2f}"),
        ("gen / matmul peak", "generation_fraction_of_matmul_peak", "{:.1%}"),
        ("train / matmul peak", "training_fraction_of_matmul_peak", "{:.1%}"),
        ("pass rate (rollouts)", "pass_rate_mean", "{:.3f}"),
    ]
    summary = results["summary"]
    for name, key, fmt in fields:
        cells = []
        for who in ("old", "new", "trl"):
            value = (summary.get(who) or {}).get(key)
            cells.append("-" if value is None else fmt.format(value))
        rows.append((name, *cells))
    width = [max(len(r[i]) for r in rows) for i in range(4)]
    lines = ["  ".join(cell.ljust(width[i]) if i == 0 else cell.rjust(width[i]) for i, cell in enumerate(row))
             for row in rows]
    machine = results["machine"]
    lines.insert(0, f"{machine['cpu_model']} x{machine['cpu_count']}, {machine['date']}, "
                    f"matmul peak {results['matmul_peak_gflops_per_s']:.1f} GFLOP/s on {results['threads']} threads; "
                    f"{results['rounds']} round(s) x {results['measured_steps']} measured steps "
                    f"(+{results['warmup_steps']} warm-up)")
    lines.append("")
    lines += [f"{key}: {value:.3f}" for key, value in results["ratios"].items()]
    return "\n".join(lines)


def install_trl_hint() -> str:
    return ("the TRL peer needs its own virtualenv (.venv-trl); create it per " + str(PEER_README) + ":\n"
            "    python3 -m venv .venv-trl\n"
            "    .venv-trl/bin/pip install torch==2.13.0\n"
            "    .venv-trl/bin/pip install -r ../shared/peers/requirements-trl.txt\n"
            "or skip the peer with --no-trl")


def weights_sha(model_dir: str) -> str:
    """SHA-256 of a model directory's weights file (two warm-start keys can name the same weights)."""
    return hashlib.sha256((Path(model_dir) / "model.safetensors").read_bytes()).hexdigest()


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--steps", type=int, default=20, help="measured steps per contender per round")
    parser.add_argument("--warmup", type=int, default=3, help="unmeasured steps first (each round is a fresh process)")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--no-trl", action="store_true", help="skip the TRL peer")
    parser.add_argument("--old-commit", default=DEFAULT_OLD_COMMIT)
    parser.add_argument("--matmul-sizes", type=int, nargs="+", default=[1024, 2048, 4096])
    parser.add_argument("--out", default=str(REPO / "benchmarks" / "out" / "bench_speed.json"))
    parser.add_argument("overrides", nargs="*", help="extra recipe overrides for old and new, e.g. off_policy.k=1")
    args = parser.parse_args(argv)
    if args.steps < 1 or args.warmup < 0 or args.rounds < 1:
        parser.error("need --steps >= 1, --warmup >= 0, --rounds >= 1")

    if not args.no_trl and not (TRL_PYTHON.is_file() and PEER_SCRIPT.is_file()):
        missing = TRL_PYTHON if not TRL_PYTHON.is_file() else PEER_SCRIPT
        print(f"bench_speed: {missing} is missing; {install_trl_hint()}", file=sys.stderr)
        return 2
    os.environ["OMP_NUM_THREADS"] = str(args.threads)
    python = REPO / ".venv" / "bin" / "python"
    python = python if python.is_file() else Path(sys.executable)
    try:
        old_sha = git("rev-parse", "--verify", f"{args.old_commit}^{{commit}}")
    except subprocess.CalledProcessError:
        print(f"bench_speed: --old-commit {args.old_commit!r} is not a commit of {REPO}", file=sys.stderr)
        return 2
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))  # run the cleanup below on kill
    results = {
        "bench": "bench_speed",
        "machine": {"node": platform.node(), "cpu_model": cpu_model(), "cpu_count": os.cpu_count(),
                    "platform": platform.platform(), "python": platform.python_version(),
                    "date": datetime.now(timezone.utc).isoformat(timespec="seconds"), "load_at_start": loadavg()},
        "command": " ".join(["python -m benchmarks.bench_speed", *(sys.argv[1:] if argv is None else argv)]),
        "threads": args.threads, "rounds": args.rounds, "measured_steps": args.steps, "warmup_steps": args.warmup,
        "recipe_overrides": [*BASE_OVERRIDES, *args.overrides, "tracking.mlflow=false"],
        "old": {"commit": old_sha, "requested": args.old_commit},
        "new": {"tree": str(REPO), "head": git("rev-parse", "HEAD"),
                "uncommitted_files": len(git("status", "--porcelain", "--untracked-files=no").splitlines())},
        "order": ["old", "new"] + ([] if args.no_trl else ["trl"]),
    }
    tmp = Path(tempfile.mkdtemp(prefix="bench_speed_"))
    worktree = tmp / "old"
    runs: dict[str, list[dict]] = {who: [] for who in results["order"]}
    try:
        git("worktree", "add", "--detach", str(worktree), old_sha)
        peaks = [matmul_peak(args.threads, args.matmul_sizes)]
        print(f"matmul peak {peaks[0]['gflops_per_s']:.1f} GFLOP/s {peaks[0]['by_size']}", file=sys.stderr, flush=True)
        for r in range(args.rounds):
            for who in results["order"]:
                before, t0 = loadavg(), time.perf_counter()
                if who == "trl":
                    entry = {"trl": run_trl(args)}
                    quick = entry["trl"]["s_per_step"]
                else:
                    entry = {"child": run_tree(who, worktree if who == "old" else REPO, args, python, tmp)}
                    quick = statistics.mean(s["step_s"] for s in entry["child"]["steps"] if not s["warmup"])
                entry.update(round=r, load_before=before, load_after=loadavg(), wall_s=time.perf_counter() - t0)
                runs[who].append(entry)
                print(f"round {r + 1}/{args.rounds} {who}: {quick:.3f} s/step (load {before[0]} -> "
                      f"{entry['load_after'][0]}, {entry['wall_s']:.0f} s)", file=sys.stderr, flush=True)
        peaks.append(matmul_peak(args.threads, args.matmul_sizes))
    finally:
        subprocess.run(["git", "worktree", "remove", "--force", str(worktree)], cwd=REPO, capture_output=True)
        shutil.rmtree(tmp, ignore_errors=True)
        subprocess.run(["git", "worktree", "prune"], cwd=REPO, capture_output=True)

    for who in ("old", "new"):
        child = runs[who][0]["child"]
        if not Path(child["recipe_file"]).resolve().is_relative_to(Path(worktree if who == "old" else REPO).resolve()):
            raise SystemExit(f"bench_speed: {who} imported recipe from {child['recipe_file']}")
        results[who].update({key: child[key] for key in ("recipe_file", "components_file", "python", "torch",
                                                         "torch_threads", "model_dir", "shape", "k", "prompts_per_step",
                                                         "samples_per_prompt", "max_new_tokens", "seed", "first_step")})
    old_dir, new_dir = runs["old"][0]["child"]["model_dir"], runs["new"][0]["child"]["model_dir"]
    if old_dir != new_dir and weights_sha(old_dir) != weights_sha(new_dir):  # a re-keyed warm start is the same
        raise SystemExit(f"bench_speed: old and new code started from different models: {old_dir} vs {new_dir}")
    first_old, first_new = results["old"]["first_step"], results["new"]["first_step"]
    results["same_first_prompts"] = first_old["prompts_sha"] == first_new["prompts_sha"]
    results["same_first_rollout"] = first_old["rollout_sha"] == first_new["rollout_sha"]
    # Same seed and warm start: the old and new code should sample the same rollouts (the speed work keeps values).
    counts = {who: [[step["generated_tokens"] for step in run["child"]["steps"]] for run in runs[who]]
              for who in ("old", "new")}
    results["same_generated_tokens_every_step"] = counts["old"] == counts["new"]
    peak = max(p["gflops_per_s"] for p in peaks)
    results["matmul"] = peaks
    results["matmul_peak_gflops_per_s"] = peak
    results["summary"] = {who: summarize_tree(runs[who], peak) for who in ("old", "new")}
    if "trl" in runs:
        results["summary"]["trl"] = summarize_trl(runs["trl"], args.warmup)
    results["ratios"] = ratios(results["summary"])
    results["machine"]["load_at_end"] = loadavg()
    results["runs"] = runs
    results["notes"] = (
        "s/step = generation (curriculum.sample + sample_groups + assemble_minibatch, or a k-th of a round's "
        "sample_round where the tree has it) + training (train_on) of one "
        "minibatch; means pool the measured steps of all rounds. tokens/s = (generated + trained tokens) / s; "
        "generated = rollout.lengths (forced phrase tokens included; sampled_tokens = loss_mask sum excludes them), "
        "trained = attention_mask sum of the rows kept by the filter (prompt + response; trained_response = their "
        "loss_mask sum). TRL: generated = completion tokens up to EOS, trained = non-pad prompt + completion tokens; "
        "its model, tokenizer and task differ, so compare it in tokens/s only. GFLOP/s use recipe.compute's nominal "
        "FLOP estimate (training 3x forward) against the best 2-thread fp32 matmul. "
        "Compare only rounds with similar load.")
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(results, indent=1) + "\n")
    # stdout: everything but the raw per-step records of every run (those are in --out)
    print(json.dumps({key: value for key, value in results.items() if key != "runs"}, indent=1))
    print("\n" + table(results))
    print(f"\nwritten: {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
