"""`sweep run SPEC`: run a sweep to the end (idempotent: rerun the same command to resume)."""

from __future__ import annotations

import argparse


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("spec", help="sweep spec YAML, e.g. sweeps/loo.yaml")


def run(args: argparse.Namespace) -> int:
    from sweeps.runner import run_sweep
    from sweeps.spec import load_spec

    return run_sweep(load_spec(args.spec))
