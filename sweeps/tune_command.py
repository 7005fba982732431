"""`sweep tune SPEC`: run an Optuna study over recipe parameters (idempotent: rerun the same command to resume)."""

from __future__ import annotations

import argparse


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("spec", help="tune spec YAML, e.g. sweeps/tune.yaml")
    parser.add_argument("--check", action="store_true",
                        help="only load and check the spec (every range end and choice composed into a recipe)")


def run(args: argparse.Namespace) -> int:
    from sweeps.tune_spec import load_tune_spec

    spec = load_tune_spec(args.spec)
    if args.check:
        print(f"{args.spec}: ok: {spec.trials} trials over {', '.join(spec.space)}")
        return 0
    from sweeps.tune import run_tune

    return run_tune(spec)
