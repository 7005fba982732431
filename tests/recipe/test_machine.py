"""recipe/machine.py: the CPU model read from /proc/cpuinfo's text, with its fallbacks."""

import subprocess

from recipe.machine import cpu_model


def test_the_model_name_line_is_read(tmp_path):
    cpuinfo = tmp_path / "cpuinfo"
    cpuinfo.write_text("processor\t: 0\nvendor_id\t: GenuineIntel\nmodel name\t: Intel(R) Xeon(R) CPU @ 2.20GHz\n")
    assert cpu_model(cpuinfo) == "Intel(R) Xeon(R) CPU @ 2.20GHz"


def test_without_the_line_lscpu_then_the_platform_string_stand_in(tmp_path, monkeypatch):
    def lscpu(command, **_):
        return subprocess.CompletedProcess(command, 0, stdout="Architecture: aarch64\nModel name: Neoverse-V2\n")

    monkeypatch.setattr(subprocess, "run", lscpu)
    assert cpu_model(tmp_path / "absent") == "Neoverse-V2"

    def no_lscpu(command, **_):
        raise FileNotFoundError(command[0])

    monkeypatch.setattr(subprocess, "run", no_lscpu)
    monkeypatch.setattr("platform.processor", lambda: "x86_64")
    assert cpu_model(tmp_path / "absent") == "x86_64"
