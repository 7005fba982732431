"""`sweep plan SPEC`: print the jobs a sweep spec expands to, without importing torch or launching."""

from __future__ import annotations

import argparse


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("spec", help="sweep spec YAML, e.g. sweeps/loo.yaml")
    parser.add_argument("--verbose", action="store_true",
                        help="also print what each job runs on its node (the accelerate command of a multi-GPU trl job)")


def run(args: argparse.Namespace) -> int:
    from sweeps.planner import check_jobs_can_run, format_plan, plan_sweep
    from sweeps.spec import check_output_dir, load_spec

    spec = load_spec(args.spec)
    jobs = plan_sweep(spec)
    notes = check_jobs_can_run(spec, jobs)
    check_output_dir(spec)
    print(format_plan(spec, jobs, verbose=args.verbose, notes=notes), end="")
    return 0
