"""`sweep train RECIPE.yaml [key=value ...]`: run one RL training job, resuming if its run directory exists.

The run directory defaults to RUNS/<run id>, the id being a hash of the resolved config, so
rerunning the same command finds the checkpoint and resumes. A progress bar shows step, compute,
the last validation pass rate and ETA (one line per evaluation when stderr is not a terminal).
"""

from __future__ import annotations

import os
import sys
import time

from sweeps.arguments import integer
from sweeps.cli import UsageError


def add_arguments(parser) -> None:
    parser.add_argument("recipe", nargs="?", default=None,
                        help="recipe YAML merged over the ScaleRL base (omit for the base recipe)")
    parser.add_argument("overrides", nargs="*", help="key=value overrides, e.g. loss=dapo optimizer.lr=3e-4")
    parser.add_argument("--runs-dir", default="runs", help="parent of run directories (default: runs)")
    parser.add_argument("--run-dir", default=None, help="explicit run directory (default: RUNS_DIR/<run id>)")
    parser.add_argument("--threads", type=integer(1, 4096, also=(0,)), default=0,
                        help="torch CPU threads (default: $OMP_NUM_THREADS, else min(2, cores)); "
                             "set cores / parallel jobs when jobs share a machine")
    parser.add_argument("--device", default="auto", help="auto (cuda if available, else cpu), cpu or cuda[:N]")


def resolve_threads(requested: int) -> int:
    if requested:
        return requested
    if os.environ.get("OMP_NUM_THREADS", "").isdigit():
        return max(1, int(os.environ["OMP_NUM_THREADS"]))
    return max(1, min(2, os.cpu_count() or 1))


class Progress:
    """tqdm bar on a terminal; otherwise one plain line per evaluation point."""

    def __init__(self, total: int, stream=None) -> None:
        self.total = total
        self.stream = stream = stream or sys.stderr
        self.interactive = stream.isatty()
        self.started = time.perf_counter()
        self.pass_rate = float("nan")
        self.bar = None
        if self.interactive:
            from tqdm import tqdm

            self.bar = tqdm(total=total, file=stream, unit="step", dynamic_ncols=True)

    def step(self, step: int, meter) -> None:
        if self.bar is not None:
            self.bar.n = step
            self.bar.set_postfix_str(f"compute {meter.device_seconds:.0f} dev-s, pass {self.pass_rate:.3f}")

    def evaluated(self, record: dict) -> None:
        self.pass_rate = record["eval/pass_rate"]
        if self.bar is None:
            step = record["step"]
            elapsed = time.perf_counter() - self.started
            eta = f"{elapsed / step * (self.total - step):.0f}s" if step else "?"
            print(f"step {step}/{self.total}  compute {record['compute/device_seconds']:.0f} dev-s  "
                  f"pass_rate {self.pass_rate:.3f}  greedy {record.get('eval/greedy_pass_rate', float('nan')):.3f}  "
                  f"eta {eta}", file=self.stream, flush=True)

    def close(self) -> None:
        if self.bar is not None:
            self.bar.close()


def run(args) -> int:
    from recipe.config import check_output_path, load_recipe, run_id

    if args.recipe is not None and "=" in args.recipe and not args.recipe.endswith((".yaml", ".yml")):
        args.overrides, args.recipe = [args.recipe, *args.overrides], None  # only overrides were given
    cfg = load_recipe(args.recipe, args.overrides)
    from recipe.preflight import check_can_run

    check_can_run(cfg)  # files and memory: refused before torch is imported or a run directory exists
    run_dir = args.run_dir or os.path.join(args.runs_dir, run_id(cfg))
    check_output_path("--run-dir" if args.run_dir else "--runs-dir", run_dir)
    threads = resolve_threads(args.threads)
    os.environ.setdefault("OMP_NUM_THREADS", str(threads))
    import torch

    torch.set_num_threads(threads)
    device = args.device
    if device == "auto":
        device = "cuda" if torch.cuda.is_available() else "cpu"
    elif device.startswith("cuda") and not torch.cuda.is_available():
        raise UsageError(f"--device {device}: CUDA is not available on this machine")
    from recipe.engines import train

    print(f"run {run_id(cfg)} -> {run_dir} ({device}, {threads} threads)", file=sys.stderr, flush=True)
    progress = Progress(cfg.max_steps)
    try:
        records = train(cfg, run_dir, device=device, on_eval=progress.evaluated, on_step=progress.step)
    except ValueError as error:  # a run directory of another config, a bad task path...
        raise UsageError(str(error)) from None
    finally:
        progress.close()
    last = records[-1] if records else {}
    print(f"done: step {last.get('step')}, pass_rate {last.get('eval/pass_rate', float('nan')):.3f}, "
          f"{run_dir}/metrics.jsonl", file=sys.stderr)
    return 0
