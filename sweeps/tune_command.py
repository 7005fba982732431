"""`sweep tune SPEC`: run an Optuna study over recipe parameters (idempotent: rerun the same command to resume)."""

from __future__ import annotations

import argparse


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("spec", help="tune spec YAML, e.g. sweeps/tune.yaml")
    parser.add_argument("--check", action="store_true",
                        help="only load and check the spec (every range end and choice composed into a recipe)")
    parser.add_argument("--allow-large", action="store_true",
                        help="start a study of more than 1,000 trials (refused without it)")


def run(args: argparse.Namespace) -> int:
    from sweeps.planner import check_size, size_warning
    from sweeps.tune_spec import load_tune_spec

    spec = load_tune_spec(args.spec)
    if args.check:
        print(f"{args.spec}: ok: {spec.trials} trials over {', '.join(spec.space)}")
        warning = size_warning(spec.trials, spec.budget, "trials")
        if warning:
            print(warning)
        return 0
    check_size(spec.trials, spec.budget, "trials", args.allow_large)
    from sweeps.tune import run_tune

    return run_tune(spec)
