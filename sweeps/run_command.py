"""`sweep run SPEC`: run a sweep to the end (idempotent: rerun the same command to resume)."""

from __future__ import annotations

import argparse


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("spec", help="sweep spec YAML, e.g. sweeps/loo.yaml")
    parser.add_argument("--allow-large", action="store_true",
                        help="start a sweep of more than 1,000 jobs (refused without it: `sweep plan` shows the size)")
    parser.add_argument("--wait", action="store_true",
                        help="when another driver runs this sweep, wait for it to end and then go on (without it: "
                             "name that driver's pid and exit 2)")


def run(args: argparse.Namespace) -> int:
    from sweeps.runner import run_sweep
    from sweeps.spec import load_spec

    return run_sweep(load_spec(args.spec), allow_large=args.allow_large, wait=args.wait)
