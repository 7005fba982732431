"""Shared fixtures of the report tests: the synthetic sweep (tests/reports/synthetic.py) and its fits."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.reports.synthetic import make_sweep


@pytest.fixture(scope="session")
def sweep_dir(tmp_path_factory) -> Path:
    """The synthetic sweep (one seed), shared read-only by the tests of a session."""
    return make_sweep(tmp_path_factory.mktemp("synthetic"))


@pytest.fixture(scope="session")
def sweep_fits(sweep_dir):
    from reports.sweep_data import load_sweep
    from reports.tables import fit_sweep

    return fit_sweep(load_sweep(sweep_dir), n_boot=200)
