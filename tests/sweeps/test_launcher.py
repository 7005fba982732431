"""The launcher's wait between polls: a local job's end is seen within a check, not a poll interval later."""

import functools
import time

from sweeps.launcher import FINISH_CHECK_SECONDS, Launcher
from sweeps.spec import spec_from_dict


def launcher(tmp_path, executor: str) -> Launcher:
    spec = spec_from_dict({"name": "wait", "axes": {"loss": "dapo"}, "seeds": [0],
                           "budget": {"unit": "samples", "fit_at": 8, "target": 16},
                           "executor": {"name": executor, "local": {"max_parallel": 1, "cores_per_job": 1}},
                           "output_dir": str(tmp_path / "out")}, "test")
    return Launcher(spec, tmp_path / "logs")


def test_a_local_wait_ends_when_a_job_ends_not_at_the_poll_interval(tmp_path):
    local = launcher(tmp_path, "local")
    [handle] = local.submit([functools.partial(time.sleep, 0.5)])
    started = time.monotonic()
    local.wait([handle], seconds=120.0)
    waited = time.monotonic() - started
    assert handle.done()
    # The job sleeps 0.5 s after a process start of a few seconds; a wait that ran out would take 120 s.
    assert waited < 60.0, waited


def test_a_wait_with_nothing_running_sleeps_the_whole_interval(tmp_path):
    local = launcher(tmp_path, "local")
    started = time.monotonic()
    local.wait([], seconds=10 * FINISH_CHECK_SECONDS)
    assert time.monotonic() - started >= 10 * FINISH_CHECK_SECONDS


def test_a_finished_local_job_ends_the_wait_at_once(tmp_path):
    local = launcher(tmp_path, "local")
    [handle] = local.submit([functools.partial(time.sleep, 0.0)])
    handle.result()  # finished before the wait starts
    started = time.monotonic()
    local.wait([handle], seconds=120.0)
    assert time.monotonic() - started < 60.0


def test_an_sbatch_refusal_is_one_line_and_a_controller_that_does_not_answer_is_tried_again(tmp_path, monkeypatch):
    # submitit raises FailedJobError with sbatch's stderr; the scheduler is stood in for by an executor whose
    # submissions fail as sbatch's do (tests/sweeps/test_slurm.py refuses a real one on a one-node cluster).
    import pytest
    from submitit.core.utils import FailedJobError

    from sweeps import launcher as launcher_module
    from sweeps.launcher import SubmissionRefused

    class Scheduler:
        def __init__(self, errors):
            self.errors, self.calls = list(errors), 0

        def submit(self, function):
            self.calls += 1
            if self.errors:
                raise FailedJobError(self.errors.pop(0))
            return "job"

    monkeypatch.setattr(launcher_module, "SUBMIT_RETRY_SECONDS", (0.0, 0.0))
    slurm = launcher(tmp_path, "local")
    slurm.name = "slurm"
    slurm.executor = Scheduler(["sbatch: error: Batch job submission failed: Socket timed out on send/recv"])
    assert slurm.submit([print]) == ["job"] and slurm.executor.calls == 2
    slurm.executor = Scheduler(["sbatch: error: Batch job submission failed: Invalid partition name specified"])
    with pytest.raises(SubmissionRefused, match="refused the sweep's jobs: sbatch: error: Batch job submission "
                                                "failed: Invalid partition name specified; check "
                                                "executor.slurm.partition"):
        slurm.submit([print])
    assert slurm.executor.calls == 1
    slurm.executor = Scheduler(["Socket timed out"] * 3)
    with pytest.raises(SubmissionRefused, match="Socket timed out"):
        slurm.submit([print])
    assert slurm.executor.calls == 3
