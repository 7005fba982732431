"""The sweep driver's settle step (sweeps.runner.settle): what a finished launch leaves its job's state in."""

import pytest

from sweeps.runner import INPUT_ERROR_PREFIX, Outcome, settle
from sweeps.state import DONE, FAILED, RUNNING, JobState

RUNNING_STATE = JobState(status=RUNNING, attempts=2, failures=1, log_path="logs/7_0_log.err", launcher_id="7")


def test_a_launch_that_reached_the_target_is_done_and_closes_its_run_finished():
    settled = settle(Outcome(reached_target=True), RUNNING_STATE, max_attempts=3)
    assert settled.state.status == DONE and settled.mlflow_status == "FINISHED" and not settled.watch
    assert (settled.state.attempts, settled.state.failures) == (2, 1)  # a success counts no failure
    assert RUNNING_STATE.status == RUNNING, "the state it was given is not changed in place"


def test_a_launch_that_ended_short_of_the_target_is_one_more_failure():
    settled = settle(Outcome(), RUNNING_STATE, max_attempts=3)
    assert settled.state.status == FAILED and settled.mlflow_status == "FAILED"
    assert settled.state.failures == 2 and settled.state.last_error == "job ended without reaching its target"


def test_a_launch_that_raised_keeps_its_error_even_if_the_run_reached_the_target_before():
    settled = settle(Outcome(error="RuntimeError: boom", reached_target=True), RUNNING_STATE, max_attempts=3)
    assert (settled.state.status, settled.state.last_error, settled.state.failures) == (FAILED, "RuntimeError: boom", 2)


@pytest.mark.parametrize("failures", [0, 1, 5])
def test_an_input_error_fails_for_good(failures):
    state = JobState(status=RUNNING, attempts=1, failures=failures)
    settled = settle(Outcome(input_error="model.path: no such directory"), state, max_attempts=3)
    assert settled.state.status == FAILED and settled.mlflow_status == "FAILED"
    assert settled.state.last_error == f"{INPUT_ERROR_PREFIX}model.path: no such directory"
    assert settled.state.failures == max(failures + 1, 3)  # never retried: failures reach max_attempts


def test_a_second_launch_that_found_the_run_held_is_watched_not_failed():
    settled = settle(Outcome(trained_elsewhere=True), RUNNING_STATE, max_attempts=3)
    assert settled.watch and settled.mlflow_status is None and settled.state == RUNNING_STATE


def test_a_second_launch_that_raised_is_a_failure_not_a_watch():
    settled = settle(Outcome(error="OSError: disk full", trained_elsewhere=True), RUNNING_STATE, max_attempts=3)
    assert not settled.watch and settled.state.status == FAILED
