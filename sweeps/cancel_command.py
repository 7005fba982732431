"""`sweep cancel SPEC_OR_DIR`: stop a sweep's running jobs; `sweep run` later resumes them."""

from __future__ import annotations

import argparse


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("target", help="the sweep spec YAML, or a sweep directory (holding spec.yaml)")


def run(args: argparse.Namespace) -> int:
    from sweeps.planner import plan_sweep
    from sweeps.slurm import cancel_slurm_jobs, live_slurm_jobs
    from sweeps.spec import check_output_dir, output_dir
    from sweeps.state import is_done, read_state, stop_runs
    from sweeps.status_command import resolve_spec

    spec = resolve_spec(args.target)
    check_output_dir(spec)
    sweep_dir = output_dir(spec)
    launched = []
    for job in plan_sweep(spec):
        state = read_state(sweep_dir, job.run_id)
        if state.launcher_id and not is_done(job.run_dir):
            launched.append((job, state.launcher_id))
    if spec.executor.name == "slurm":
        # Only what the scheduler still holds: a job long gone (finished, failed, purged) would make scancel fail.
        live = set(live_slurm_jobs([launcher_id for _, launcher_id in launched]))
        launched = [(job, launcher_id) for job, launcher_id in launched if launcher_id in live]
        complaint = cancel_slurm_jobs([launcher_id for _, launcher_id in launched])
        if complaint:
            print(f"scancel: {complaint}")
    else:
        # Local: stop the training processes themselves (submitit's job processes ignore SIGTERM), all at once.
        running = stop_runs([job.run_dir for job, _ in launched], grace_seconds=10.0)
        launched = [entry for entry, was_running in zip(launched, running) if was_running]
    print(f"sweep {spec.name}: cancelled {len(launched)} job(s); `sweep run` resumes them from their checkpoints")
    return 0
