"""SLURM's view of a sweep's jobs (for `sweep status`) and cancelling them (for `sweep cancel`)."""

from __future__ import annotations

import shutil
import subprocess


def slurm_states(job_ids: list[str]) -> dict[str, str]:
    """job id -> "STATE" or "STATE (reason)" from squeue (finished jobs stay listed for MinJobAge)."""
    ids = [job_id for job_id in job_ids if job_id]
    if not ids or shutil.which("squeue") is None:
        return {}
    result = subprocess.run(
        ["squeue", "--states=all", "--array", "--noheader", "--format=%i|%T|%r", f"--jobs={','.join(ids)}"],
        capture_output=True, text=True, timeout=30,
    )
    states = {}
    for line in result.stdout.splitlines():
        job_id, state, reason = (line.split("|") + ["", ""])[:3]
        shown = state if reason in ("", "None") else f"{state} ({reason})"
        states[job_id.strip()] = shown
    return states


def cancel_slurm_jobs(job_ids: list[str]) -> None:
    """Stop the jobs now: SIGINT to their running steps, then scancel.

    Why SIGINT first: scancel alone sends SIGTERM, which submitit's job processes ignore (SLURM also
    sends it before a preemption), and SIGKILL only KillWait later (30 s by default), so a cancelled
    job went on training, or even finished, in between. SIGINT stops the training process at once, as
    `sweep cancel` does for local jobs; checkpoints are replaced atomically, so nothing is lost. A
    pending job has no step to signal (scancel says so and exits non-zero): the plain scancel ends it.
    """
    ids = [job_id for job_id in job_ids if job_id]
    if ids:
        subprocess.run(["scancel", "--signal=INT", *ids], capture_output=True, timeout=30)
        subprocess.run(["scancel", *ids], check=True, timeout=30)
