"""How long a process takes to end, with and without recipe.process_exit (gc.freeze at exit).

    .venv/bin/python -m benchmarks.bench_exit --rounds 3

Two measurements, each alternating without / with, `--rounds` times:
- a Python process's exit, by what it imported: the seconds from its last line (it prints time.time()) to the
  moment its parent sees it end;
- a 16-step PipelineRL run of the embedded testbed (`train` in this process, two role processes): the seconds from
  the later role's return from its body to train()'s return, i.e. what the supervisor waits for the roles' exit.
  Without: recipe.process_exit.skip_final_collections is replaced by a no-op in the roles (they import this
  script as their __main__, where the replacement is made from BENCH_EXIT_SKIP).
Output: text on stdout.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from benchmarks.common import REPO

IMPORTS = {
    "torch": "import torch",
    "a transformers model class": "import torch; from transformers import LlamaForCausalLM",
    "the sweep driver's modules": "import mlflow, pandas, reports.pdf, reports.tables, sweeps.runner",
}
SKIP = os.environ.get("BENCH_EXIT_SKIP", "1") == "1"
STAMPS_ENV = "BENCH_EXIT_STAMPS"


def stamped_role_main(role, body, channels, *args) -> None:
    """A role as the pipeline runs it, then a line with the time it returned (the roles' processes import this
    script as their __main__, so the spawned target resolves here)."""
    try:
        ORIGINAL_ROLE_MAIN(role, body, channels, *args)
    finally:
        with open(os.environ[STAMPS_ENV], "a") as stamps:
            stamps.write(f"{time.time()}\n")


if STAMPS_ENV in os.environ:  # a --pipeline-run process and its roles
    import recipe.engines.pipeline as pipeline

    ORIGINAL_ROLE_MAIN = pipeline.role_main
    pipeline.role_main = stamped_role_main
    if not SKIP:
        pipeline.skip_final_collections = lambda: None


def exit_seconds(imports: str, freeze: bool) -> float:
    code = (imports + ("; import atexit, gc; atexit.register(gc.freeze)" if freeze else "")
            + "; import sys, time; sys.stdout.write(repr(time.time())); sys.stdout.flush()")
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=REPO, check=True)
    return time.time() - float(result.stdout)


def pipeline_exit_wait(skip: bool, work: Path) -> tuple[float, float]:
    """(seconds train() took, seconds from the later role's return to train()'s return) in a child process."""
    stamps = work / f"stamps-{time.time()}"
    env = {**os.environ, STAMPS_ENV: str(stamps), "BENCH_EXIT_SKIP": "1" if skip else "0"}
    command = [sys.executable, "-m", "benchmarks.bench_exit", "--pipeline-run", str(work / f"run-{time.time()}")]
    result = subprocess.run(command, capture_output=True, text=True, env=env, check=True, cwd=REPO)
    started, ended = (float(x) for x in result.stdout.split()[-2:])
    last_role = max(float(line) for line in stamps.read_text().split())
    return ended - started, ended - last_role


def pipeline_run(run_dir: str) -> None:
    from recipe.config import load_recipe
    from recipe.engines import train

    cfg = load_recipe(None, ["off_policy=pipeline_rl", "off_policy.k=2", "max_steps=16", "eval.every_steps=8",
                             "eval.points_per_doubling=0", "eval.at_compute=[]", "checkpoint.every_steps=8",
                             "tracking.mlflow=false"])
    started = time.time()
    train(cfg, run_dir)
    print(started, time.time())


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--pipeline-run", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.pipeline_run:
        pipeline_run(args.pipeline_run)
        return 0
    print(f"load average at the start: {os.getloadavg()[0]:.2f}")
    for name, imports in IMPORTS.items():
        for freeze in (False, True):
            seconds = [exit_seconds(imports, freeze) for _ in range(args.rounds)]
            print(f"exit after importing {name}, {'with' if freeze else 'without'} gc.freeze at exit: "
                  f"{min(seconds):.2f}-{max(seconds):.2f} s")
    with tempfile.TemporaryDirectory() as work:
        runs = {False: [], True: []}
        for _ in range(args.rounds):
            for skip in (False, True):
                runs[skip].append(pipeline_exit_wait(skip, Path(work)))
        for skip, measured in runs.items():
            print(f"PipelineRL run of 16 steps, {'with' if skip else 'without'} skip_final_collections in its roles: "
                  f"train() {', '.join(f'{t:.1f}' for t, _ in measured)} s; waiting for the roles' exit "
                  f"{', '.join(f'{w:.2f}' for _, w in measured)} s")
    print(f"load average at the end: {os.getloadavg()[0]:.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
