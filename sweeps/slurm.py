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


# squeue's states of a job that is still to run or running (the rest are over: nothing to cancel or watch).
LIVE_SLURM_STATES = ("PENDING", "CONFIGURING", "RUNNING", "COMPLETING", "REQUEUED", "REQUEUE_HOLD", "REQUEUE_FED",
                     "RESIZING", "SUSPENDED", "SIGNALING", "STAGE_OUT")


def live_slurm_jobs(job_ids: list[str]) -> list[str]:
    """The ids among job_ids that squeue lists in a LIVE_SLURM_STATES state."""
    return [job_id for job_id, state in slurm_states(job_ids).items() if state.split(" ")[0] in LIVE_SLURM_STATES]


def cancel_slurm_jobs(job_ids: list[str]) -> str:
    """Stop the jobs now: SIGINT to their running steps, then scancel.

    Why SIGINT first: scancel alone sends SIGTERM, which submitit's job processes ignore (SLURM also
    sends it before a preemption), and SIGKILL only KillWait later (30 s by default), so a cancelled
    job went on training, or even finished, in between. SIGINT stops the training process at once, as
    `sweep cancel` does for local jobs; checkpoints are replaced atomically, so nothing is lost. A
    pending job has no step to signal (scancel says so and exits non-zero): the plain scancel ends it.
    Returns what the plain scancel complained of ("" when nothing: a job that ended between the caller's
    squeue and this call is such a complaint, not a failure of the cancel).
    """
    ids = [job_id for job_id in job_ids if job_id]
    if not ids:
        return ""
    subprocess.run(["scancel", "--signal=INT", *ids], capture_output=True, timeout=30)
    result = subprocess.run(["scancel", *ids], capture_output=True, text=True, timeout=30)
    return " ".join(result.stderr.split()) if result.returncode else ""
