"""`make test` runs in two pytest-xdist workers with `--dist loadgroup` (setup.cfg): the tests of one
xdist_group (the SLURM cluster's, SmolLM2's) must share a worker, or each worker brings up its own cluster (the
second fails on the first's munged lock) and converts its own model. pytest-xdist 3.8 under pytest 9.2 split
every group silently (pyproject.toml pins pytest below 9.2): this runs a grouped module in two workers.
"""

from __future__ import annotations

import os
import subprocess
import sys

GROUPED = """\
import os
from pathlib import Path

import pytest

pytestmark = pytest.mark.xdist_group("one-worker")


@pytest.mark.parametrize("index", range(8))
def test_grouped(index):
    Path(os.environ["WORKERS_DIR"], str(index)).write_text(os.environ["PYTEST_XDIST_WORKER"])
"""


def test_the_tests_of_an_xdist_group_run_in_one_worker(tmp_path):
    (tmp_path / "test_grouped.py").write_text(GROUPED)
    (tmp_path / "pytest.ini").write_text("[pytest]\n")  # not the suite's options
    workers = tmp_path / "workers"
    workers.mkdir()
    result = subprocess.run([sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-q", "-n", "2", "--dist",
                             "loadgroup", "test_grouped.py"], cwd=tmp_path, capture_output=True, text=True,
                            timeout=120, env={**os.environ, "WORKERS_DIR": str(workers)})
    assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-2000:]
    ran_in = {path.name: path.read_text() for path in workers.iterdir()}
    assert len(ran_in) == 8 and len(set(ran_in.values())) == 1, ran_in
