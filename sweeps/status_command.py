"""`sweep status SPEC_OR_DIR`: the sweep's job table once (state, compute done, pass rate, ETA)."""

from __future__ import annotations

import argparse
from pathlib import Path


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("target", help="the sweep spec YAML, or a sweep directory (holding spec.yaml)")


def run(args: argparse.Namespace) -> int:
    from sweeps.cli import UsageError
    from sweeps.planner import plan_sweep
    from sweeps.progress import collect_progress, format_progress
    from sweeps.spec import load_spec, output_dir

    target = Path(args.target)
    if target.is_dir():
        if not (target / "spec.yaml").is_file():
            raise UsageError(f"{target}: not a sweep directory (no spec.yaml); pass the spec file instead")
        target = target / "spec.yaml"
    spec = load_spec(target)
    jobs = plan_sweep(spec)
    if not output_dir(spec).exists():
        print(f"sweep {spec.name}: not started ({output_dir(spec)} does not exist); {len(jobs)} jobs planned")
        return 0
    print(format_progress(spec, collect_progress(spec, output_dir(spec), jobs)), end="")
    return 0
