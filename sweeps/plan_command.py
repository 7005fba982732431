"""`sweep plan SPEC`: print the jobs a sweep spec expands to, without importing torch or launching.

    sweep plan sweeps/loo.yaml
    sweep plan sweeps/scan-batch.yaml --power --pilot runs/scalerl-loo-embedded   # what 2..8 seeds detect and cost

--power adds the seed planner (reports/power.py): from the noise a finished sweep measured (the pilot
named by --pilot, else the spec's own output directory once it has run), the MDE in A, in pass rate at
the target and in compute-to-reach ratio for 2, 3, 4, 6 and 8 seeds, the seeds an effect needs at 80%
power under the table's own Bonferroni level and margins, and what each option costs in budget.unit.
"""

from __future__ import annotations

import argparse
import dataclasses


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("spec", help="sweep spec YAML, e.g. sweeps/loo.yaml")
    parser.add_argument("--verbose", action="store_true",
                        help="also print what each job runs on its node "
                             "(the accelerate command of a multi-GPU trl job)")
    parser.add_argument("--power", action="store_true",
                        help="also print the seed planner: MDEs, seeds needed and cost per seed count, from the noise "
                             "a finished sweep measured (--pilot, else the spec's own output directory)")
    parser.add_argument("--pilot", metavar="SWEEP_DIR",
                        help="with --power: the finished sweep whose noise to plan from")
    parser.add_argument("--effect-a", default="0.02,0.05", metavar="DA,...",
                        help="with --power: shifts in A to find the seeds for (default 0.02,0.05)")
    parser.add_argument("--effect-ratio", default="1.10,1.25", metavar="R,...",
                        help="with --power: compute-to-reach ratios to find the seeds for (default 1.10,1.25)")


def parse_effects(text: str, flag: str, minimum: float) -> list[float]:
    from sweeps.cli import UsageError

    try:
        values = [float(part) for part in text.split(",") if part.strip()]
    except ValueError:
        raise UsageError(f"{flag}: expected numbers separated by commas, e.g. {flag} 0.02,0.05") from None
    if not values or not all(minimum < value < 1e6 for value in values):
        raise UsageError(f"{flag}: expected numbers > {minimum:g}, e.g. {flag} " +
                         ("0.02,0.05" if minimum == 0 else "1.10,1.25"))
    return values


def power_text(spec, jobs, args) -> str:
    """The planner's text for this spec's variants, from the pilot's (or the spec's own finished sweep's) noise."""
    from pathlib import Path

    from recipe.tracking import read_json_file
    from reports.power import format_power_plan, sweep_noise
    from reports.sweep_data import SweepDataError, load_sweep
    from reports.tables import fit_sweep
    from sweeps.cli import UsageError
    from sweeps.spec import output_dir

    effects_a = parse_effects(args.effect_a, "--effect-a", 0.0)
    effects_ratio = parse_effects(args.effect_ratio, "--effect-ratio", 1.0)
    pilot = Path(args.pilot) if args.pilot else output_dir(spec)
    if not (pilot / "plan.json").is_file():
        where = f"--pilot {pilot}" if args.pilot else f"the spec's output directory {pilot}"
        raise UsageError(f"--power: {where} holds no finished sweep to measure noise from; run the spec (or a pilot "
                         "of it) first, or name a finished sweep directory with --pilot SWEEP_DIR")
    try:
        data = load_sweep(pilot)
        # the pilot's noise under the planned spec's verdict fits (a window's extrapolated A is ~3x noisier)
        data.budget = dataclasses.replace(data.budget, verdicts_from=spec.budget.verdicts_from)
        fits = fit_sweep(data, n_boot=200)
    except SweepDataError as error:
        raise UsageError(f"--pilot: {error}") from None
    if fits.comparison is None:
        raise UsageError(f"--power: {pilot} has no fitted base run, so no paired noise to plan from")
    harness = pilot / "harness.json"
    wall = read_json_file(harness).get("wall_seconds") if harness.is_file() else None
    noise = sweep_noise(fits, wall_seconds=wall if isinstance(wall, (int, float)) else None)
    budget = spec.budget
    return format_power_plan(noise, variants=max(1, len({job.variant for job in jobs}) - 1), target=budget.target,
                             unit=budget.unit, pilot=str(pilot), min_a_shift=budget.min_a_shift,
                             min_compute_ratio=budget.min_compute_ratio, effects_a=effects_a,
                             effects_ratio=effects_ratio)


def run(args: argparse.Namespace) -> int:
    from sweeps.cli import UsageError
    from sweeps.planner import check_jobs_can_run, format_plan, plan_sweep, size_warning
    from sweeps.spec import check_output_dir, load_spec

    if args.pilot and not args.power:
        raise UsageError("--pilot names the sweep the seed planner measures noise from: add --power")
    spec = load_spec(args.spec)
    jobs = plan_sweep(spec)
    notes = check_jobs_can_run(spec, jobs)
    check_output_dir(spec)
    power = power_text(spec, jobs, args) if args.power else None  # its errors before anything is printed
    warning = size_warning(len(jobs), spec.budget, "jobs")
    print(format_plan(spec, jobs, verbose=args.verbose, notes=notes + ([warning] if warning else [])), end="")

    if power:
        print("\n" + power)
    return 0
