"""`sweep plan SPEC`: print the jobs a sweep spec expands to, without importing torch or launching."""

from __future__ import annotations

import argparse


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("spec", help="sweep spec YAML, e.g. sweeps/loo.yaml")


def run(args: argparse.Namespace) -> int:
    from sweeps.planner import format_plan, plan_sweep
    from sweeps.spec import load_spec

    spec = load_spec(args.spec)
    print(format_plan(spec, plan_sweep(spec)), end="")
    return 0
