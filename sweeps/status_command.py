"""`sweep status SPEC_OR_DIR`: the sweep's job table once (state, compute done, pass rate, ETA)."""

from __future__ import annotations

import argparse
from pathlib import Path


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("target", help="the sweep spec YAML, or a sweep directory (holding spec.yaml)")


def resolve_spec(target: str):
    """A spec file, or the spec.yaml a sweep directory keeps (with absolute paths)."""
    from sweeps.cli import UsageError
    from sweeps.spec import load_spec

    path = Path(target)
    if path.is_dir():
        if not (path / "spec.yaml").is_file():
            raise UsageError(f"{path}: not a sweep directory (no spec.yaml); pass the spec file instead")
        path = path / "spec.yaml"
    return load_spec(path)


def run(args: argparse.Namespace) -> int:
    from sweeps.planner import plan_sweep
    from sweeps.progress import collect_progress, format_progress
    from sweeps.spec import check_output_dir, output_dir

    spec = resolve_spec(args.target)
    check_output_dir(spec)
    jobs = plan_sweep(spec)
    if not output_dir(spec).exists():
        print(f"sweep {spec.name}: not started ({output_dir(spec)} does not exist); {len(jobs)} jobs planned")
        return 0
    rows = collect_progress(spec, output_dir(spec), jobs)
    print(format_progress(spec, rows), end="")
    if spec.executor.name == "slurm":
        from sweeps.slurm import slurm_states

        states = slurm_states([row.launcher_id for row in rows if row.launcher_id])
        for row in rows:
            if row.launcher_id:
                print(f"  slurm {row.launcher_id}: {states.get(row.launcher_id, 'not in squeue')}  "
                      f"({row.job.variant} seed {row.job.seed})")
    return 0
