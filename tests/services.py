"""The system services and packages the suite may bring up, and its promise to leave none running.

Installing Debian packages (slurm-wlm, munge, poppler-utils, chromium) from a test run happens only when
the user asked for it: CI (CI=true) or SCALERL_INSTALL_SYSTEM_PACKAGES=1 (docs/testbed.md); otherwise the
tests that need a missing package skip with one line saying so. When installing was allowed and fails, the
tests fail (could_not_provide): the run asked for them. Every daemon a test starts is recorded
here with its pid; the tests that start one stop it, and tests/conftest.py checks at the end of the
session that none of them is still alive.
"""

from __future__ import annotations

import os

INSTALL_VARIABLE = "SCALERL_INSTALL_SYSTEM_PACKAGES"
STARTED: dict[str, int] = {}  # service name -> pid, for everything the suite started


def may_install_system_packages() -> bool:
    return os.environ.get("CI", "").lower() == "true" or os.environ.get(INSTALL_VARIABLE) == "1"


def no_install_reason(what: str) -> str:
    return f"{what} is not installed; set {INSTALL_VARIABLE}=1 (or CI=true) to let the tests install it"


def could_not_provide(what: str, why: str) -> None:
    """A test's outside tool or service is missing though the run allowed installing it: fail, not skip.

    A run that may install (CI) asked for these tests to run; a skip there would hide a broken install
    script (CI, 2026-11-28: the apt lock held by munged made poppler's and chromium's installs time out).
    """
    import pytest

    pytest.fail(f"{what} could not be provided: {why}", pytrace=False)


def record_started(name: str, pid: int) -> None:
    STARTED[name] = pid


def still_running() -> list[str]:
    """The services the suite started that are still alive ("name (pid N)")."""
    alive = []
    for name, pid in STARTED.items():
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            continue
        except PermissionError:
            pass
        alive.append(f"{name} (pid {pid})")
    return alive
