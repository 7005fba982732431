"""One round of the driver soak (tests/sweeps/driver_soak.py): a second driver is refused naming the first, drivers
are killed at random points and resumed, and every MLflow history ends equal to its metrics.jsonl."""

import random

import pytest


@pytest.fixture(autouse=True)
def shared_cache(tmp_path_factory, monkeypatch):
    monkeypatch.setenv("SCALERL_CACHE", str(tmp_path_factory.getbasetemp() / "warm-start-cache"))


def test_drivers_killed_at_random_points_leave_every_mlflow_history_equal_to_its_metrics(tmp_path):
    from tests.sweeps.driver_soak import soak_round

    result = soak_round(tmp_path, random.Random(20261201))
    assert result["runs"] == 6
    assert result["events"], "no driver was killed: the jobs finished before the first kill"
