"""`sweep plan SPEC`: print the jobs a sweep spec expands to, without importing torch or launching."""

from __future__ import annotations

import argparse


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("spec", help="sweep spec YAML, e.g. sweeps/loo.yaml")
    parser.add_argument("--verbose", action="store_true",
                        help="also print what each job runs on its node (the accelerate command of a multi-GPU trl job)")


def run(args: argparse.Namespace) -> int:
    from sweeps.planner import format_plan, plan_sweep
    from sweeps.spec import load_spec

    spec = load_spec(args.spec)
    print(format_plan(spec, plan_sweep(spec), verbose=args.verbose), end="")
    return 0
