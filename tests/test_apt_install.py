"""scripts/apt-install.sh and apt-ensure.sh: one apt-get at a time, and a lock that nothing outlives.

A fake apt-get on PATH stands in for Debian's (these tests install nothing): it logs its arguments and, on
`install`, starts a background process the way a package's post-install script starts a daemon. The lock
must be free as soon as the script exits, with that process still running: CI once waited 600 s for a lock
that munged had inherited.
"""

from __future__ import annotations

import fcntl
import os
import signal
import subprocess
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
SCRIPTS = REPO / "scripts"

FAKE_APT_GET = """#!/bin/sh
echo "$*" >> "{log}"
case " $* " in
    *" install "*) sleep 60 >/dev/null 2>&1 &
                   echo $! > "{daemon_pid}" ;;
esac
"""


def fake_environment(tmp_path: Path) -> dict[str, str]:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    apt_get = bin_dir / "apt-get"
    apt_get.write_text(FAKE_APT_GET.format(log=tmp_path / "apt.log", daemon_pid=tmp_path / "daemon.pid"))
    apt_get.chmod(0o755)
    sudo = bin_dir / "sudo"  # when the tests run as a user, the script prefixes sudo: pass it through
    sudo.write_text('#!/bin/sh\nexec "$@"\n')
    sudo.chmod(0o755)
    return {**os.environ, "PATH": f"{bin_dir}:{os.environ['PATH']}", "SCALERL_APT_LOCK": str(tmp_path / "apt.lock")}


def lock_is_free(path: Path) -> bool:
    with open(path, "a") as handle:
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            return False
        fcntl.flock(handle, fcntl.LOCK_UN)
        return True


def test_installs_and_leaves_the_lock_free_while_a_started_daemon_runs(tmp_path):
    env = fake_environment(tmp_path)
    result = subprocess.run(["sh", str(SCRIPTS / "apt-install.sh"), "poppler-utils", "fonts-liberation"],
                            env=env, capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stderr
    assert (tmp_path / "apt.log").read_text().splitlines() == [  # both wait for dpkg's own lock, not fail on it
        "-o DPkg::Lock::Timeout=600 update -qq",
        "-o DPkg::Lock::Timeout=600 install -y -qq --no-install-recommends poppler-utils fonts-liberation"]
    daemon = int((tmp_path / "daemon.pid").read_text())
    try:
        os.kill(daemon, 0)  # the "daemon" apt-get started is still alive ...
        assert lock_is_free(tmp_path / "apt.lock")  # ... and holds no copy of the lock's descriptor
    finally:
        os.kill(daemon, signal.SIGKILL)


def test_gives_up_after_the_wait_naming_the_lock(tmp_path):
    env = {**fake_environment(tmp_path), "SCALERL_APT_WAIT": "1"}
    with open(tmp_path / "apt.lock", "a") as held:
        fcntl.flock(held, fcntl.LOCK_EX)
        result = subprocess.run(["sh", str(SCRIPTS / "apt-install.sh"), "chromium"], env=env,
                                capture_output=True, text=True, timeout=60)
    assert result.returncode == 1
    assert str(tmp_path / "apt.lock") in result.stderr and "chromium" in result.stderr
    assert not (tmp_path / "apt.log").exists()  # apt-get never ran


def test_ensure_installs_nothing_when_the_command_is_there(tmp_path):
    env = fake_environment(tmp_path)
    result = subprocess.run(["sh", str(SCRIPTS / "apt-ensure.sh"), "sh", "dash"], env=env,
                            capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stderr
    assert not (tmp_path / "apt.log").exists()


def test_ensure_fails_when_the_install_does_not_bring_the_command(tmp_path):
    env = fake_environment(tmp_path)
    result = subprocess.run(["sh", str(SCRIPTS / "apt-ensure.sh"), "no-such-tool-here", "no-such-package"],
                            env=env, capture_output=True, text=True, timeout=60)
    try:
        assert result.returncode == 1
        assert "no-such-tool-here is still not on PATH" in result.stderr
    finally:
        if (tmp_path / "daemon.pid").exists():
            os.kill(int((tmp_path / "daemon.pid").read_text()), signal.SIGKILL)


def test_an_install_that_waited_skips_what_another_install_brought_meanwhile(tmp_path):
    """Two tests needing poppler, on two workers: the second waits for the lock, then finds pdftoppm there and
    runs no apt-get (SCALERL_APT_CHECK, set by apt-ensure.sh)."""
    env = {**fake_environment(tmp_path), "SCALERL_APT_CHECK": "sh"}
    result = subprocess.run(["sh", str(SCRIPTS / "apt-install.sh"), "dash"], env=env, capture_output=True,
                            text=True, timeout=60)
    assert result.returncode == 0, result.stderr
    assert not (tmp_path / "apt.log").exists()
    env["SCALERL_APT_CHECK"] = "no-such-tool-here"
    result = subprocess.run(["sh", str(SCRIPTS / "apt-install.sh"), "dash"], env=env, capture_output=True,
                            text=True, timeout=60)
    try:
        assert result.returncode == 0, result.stderr
        assert len((tmp_path / "apt.log").read_text().splitlines()) == 2  # update and install ran
    finally:
        if (tmp_path / "daemon.pid").exists():
            os.kill(int((tmp_path / "daemon.pid").read_text()), signal.SIGKILL)
