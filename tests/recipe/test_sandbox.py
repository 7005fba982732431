"""recipe/sandbox: the trusted checks, the pool's protocol and limits, and the hostile battery layer by layer.

The battery (recipe/sandbox/battery.py) runs once per configuration (every layer on, each off, no namespaces,
the base alone, the unshare backend; each layer alone under -m slow) in one worker (xdist_group): each attack
must be stopped exactly where a layer that stops it is active, get through where none is (so each layer's
share is known), stay within its bound, and leave no process and no file behind. It runs again as an
unprivileged user (uid 65534).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from recipe.sandbox import CallTest, Job, Limits, Sandbox, SandboxError, StdioTest
from recipe.sandbox.battery import ATTACKS, CONFIGURATIONS, Battery, run_battery
from recipe.sandbox.layers import readable_by_others, unreadable_interpreter
from recipe.sandbox.pool import SYSTEM_PYTHONS, Settings, planned_with_python
from recipe.sandbox.seccomp import compile_filter
from tests.services import could_not_provide, may_install_system_packages

pytestmark = pytest.mark.xdist_group("sandbox")  # the battery's fixtures run once, in one worker
ROOT = Path(__file__).resolve().parents[2]
FAST = Limits(cpu_seconds=1, wall_seconds=2.0)


def ensure_bwrap() -> None:
    """bubblewrap where the run may install packages (CI); elsewhere the sandbox falls back to unshare, and the
    battery's expectations follow the layers it reports."""
    if shutil.which("bwrap") is None and may_install_system_packages():
        result = subprocess.run(["sh", str(ROOT / "scripts" / "install-bubblewrap.sh")], capture_output=True,
                                text=True, timeout=850)
        if result.returncode != 0 or shutil.which("bwrap") is None:
            could_not_provide("bwrap", f"scripts/install-bubblewrap.sh failed: {(result.stderr or '')[-300:]}")


@pytest.fixture(scope="module")
def sandbox():
    ensure_bwrap()
    with Sandbox(workers=2, limits=FAST) as pool:
        yield pool


# ---------------------------------------------------------------------------------------------------
# The trusted checks (no sandbox)


def test_stdio_check_ignores_trailing_whitespace_and_compares_numbers_within_tolerance():
    test = StdioTest("", "1 2\n3\n")
    assert test.check(b"1 2   \n3\n\n\n", b"") and test.check(b"1 2\r\n3", b"")
    assert not test.check(b"1 2 3\n", b"") and not test.check(b"\xff\xfe", b"")
    close = StdioTest("", "0.333333 2", tolerance=1e-5)
    assert close.check(b"0.3333331 2.0", b"") and not close.check(b"0.34 2", b"") and not close.check(b"nan 2", b"")


def test_call_check_compares_plain_data_outside_and_refuses_what_is_not_a_literal():
    assert CallTest("f()", [1, (2, 3)]).check(b"", b"[1, (2, 3)]")
    assert not CallTest("f()", [1, (2, 3)]).check(b"", b"[1, [2, 3]]")
    assert CallTest("f()", [1, [2, 3]], lists_equal_tuples=True).check(b"", b"(1, (2, 3))")
    assert CallTest("f()", 0.3, tolerance=1e-9).check(b"", b"0.30000000000000004")
    assert CallTest("f()", compare="falsy").check(b"", b"[]") and not CallTest("f()", compare="truthy").check(b"", b"0")
    assert CallTest("f()", None, compare="is").check(b"", b"None") and not CallTest("f()", None, compare="is").check(
        b"", b"0")
    for hostile in (b"__import__('os')", b"[" * 100_000, b"Anything()", b"", b"\xff"):
        assert not CallTest("f()", 1).check(b"", hostile)
    with pytest.raises(ValueError, match="compare"):
        CallTest("f()", compare="gt")


def test_the_seccomp_filter_compiles_to_bpf():
    program = compile_filter()
    assert len(program) % 8 == 0 and len(program) // 8 > 20  # sock_filter instructions


def test_unknown_layers_and_bad_limits_are_refused_with_the_key():
    with pytest.raises(ValueError, match="disable: unknown layer 'netns'"):
        Sandbox(disable=("netns",))
    with pytest.raises(ValueError, match="limits.cpu_seconds"):
        Limits(cpu_seconds=0)
    with pytest.raises(ValueError, match="workers"):
        Sandbox(workers=1000)


# ---------------------------------------------------------------------------------------------------
# The pool


def test_a_batch_runs_stdio_and_call_tests_and_stops_at_the_first_failure(sandbox):
    double = "print(int(input()) * 2)\n"
    jobs = [Job(double, tuple(StdioTest(f"{i}\n", str(2 * i)) for i in range(5))),
            Job(double, (StdioTest("1\n", "2"), StdioTest("2\n", "5"), StdioTest("3\n", "6"))),
            Job(double, (StdioTest("1\n", "2"), StdioTest("2\n", "5"), StdioTest("3\n", "6")),
                stop_at_first_failure=False),
            Job("def f(x):\n    return {x: [x]}\n", (CallTest("f(2)", {2: [2]}),)),
            Job("print(", (StdioTest("", ""),)),
            Job(None, (StdioTest("", ""),))]
    outcomes = sandbox.run(jobs)
    assert outcomes[0].all_passed and outcomes[0].verdicts == ("pass",) * 5
    assert outcomes[1].verdicts == ("pass", "wrong", "not_run")
    assert outcomes[2].verdicts == ("pass", "wrong", "pass") and outcomes[2].fraction == pytest.approx(2 / 3)
    assert outcomes[3].all_passed
    assert outcomes[4].verdicts == ("compile_error",) and outcomes[5].verdicts == ("no_program",)


def test_limits_end_a_test_with_its_verdict_and_the_worker_serves_the_next_job(sandbox):
    jobs = [Job("while True:\n    pass\n", (StdioTest("", "x"),)),
            Job("import time\ntime.sleep(30)\n", (StdioTest("", "x"),)),
            Job("raise ValueError\n", (StdioTest("", "x"),)),
            Job("print('x' * (2 << 20))\n", (StdioTest("", "x"),)),
            Job("print(7)\n", (StdioTest("", "7"),))]
    verdicts = [outcome.verdicts[0] for outcome in sandbox.run(jobs)]
    assert verdicts == ["time_limit", "time_limit", "error", "output_limit", "pass"]


def test_samples_share_nothing_through_a_warm_worker(sandbox):
    """A file or a module-level change left by one sample is gone for the next one in the same slot."""
    writer = Job("open('left', 'w').write('x')\nimport sys\nsys.modules['json'] = 1\nprint('ok')\n",
                 (StdioTest("", "ok"),))
    reader = Job("import os, json\nprint(os.path.exists('left'), type(json).__name__)\n",
                 (StdioTest("", "False module"),))
    assert all(outcome.all_passed for outcome in sandbox.run([writer, writer, reader, reader, reader, reader]))


def test_the_layers_record_says_what_is_active_and_why_the_rest_is_not(sandbox, tmp_path):
    record = sandbox.layers_record()
    assert set(record["layers"]) == {"uid", "user", "pid", "net", "mount", "landlock", "seccomp"}
    assert set(record["active"]) == {layer for layer, state in record["layers"].items() if state == "on"}
    assert all(state == "on" or state.startswith("off: ") for state in record["layers"].values())
    assert json.loads(sandbox.write_layers_record(tmp_path).read_text()) == record


def test_a_required_layer_that_is_switched_off_is_an_error():
    with pytest.raises(SandboxError, match="require: net is off: switched off"):
        Sandbox(disable=("net",), require=("net",))


def test_a_fresh_sandbox_per_sample_gives_the_same_verdicts():
    ensure_bwrap()
    jobs = [Job("print(int(input()) + 1)\n", (StdioTest("1\n", "2"), StdioTest("2\n", "4")))] * 3
    with Sandbox(workers=2, warm=False, limits=FAST) as fresh:
        assert [outcome.verdicts for outcome in fresh.run(jobs)] == [("pass", "wrong")] * 3


# ---------------------------------------------------------------------------------------------------
# The hostile battery, layer by layer

# "only X" (the base and one layer) shows each layer's share alone; slow: the default run keeps every layer on,
# each off, the namespaces off, the base alone and the unshare backend (~35 s on 2 busy cores).
BATTERY_CONFIGURATIONS = [pytest.param(name, marks=pytest.mark.slow) if name.startswith("only ") else name
                          for name in [*CONFIGURATIONS, "unshare backend"]]


@pytest.fixture(scope="module")
def targets():
    with Battery() as owned:
        yield owned


def a_python_the_slot_uid_reads() -> bool:
    candidates = (os.path.realpath(sys.executable), *SYSTEM_PYTHONS)
    return os.geteuid() != 0 or any(os.path.exists(python) and readable_by_others(os.path.realpath(python))
                                    for python in candidates)


def test_the_default_python_is_one_the_slot_uid_can_read_and_a_given_one_is_kept():
    unshare_only = {"bwrap": None, "unshare": shutil.which("unshare")}  # no mount layer: the host's files as they are
    default = planned_with_python(Settings(frozenset(), None, unshare_only, None, 1, FAST, "t", None), 0, None)
    if a_python_the_slot_uid_reads():
        assert unreadable_interpreter(default) is None, default.interpreter
    own = os.path.realpath(sys.executable)
    given = planned_with_python(Settings(frozenset(), own, unshare_only, None, 1, FAST, "t", None), 0, None)
    assert given.interpreter.executable == own
    if default.interpreter.executable != own:  # the fallback was taken: the trainer's python is closed to the uid
        assert unreadable_interpreter(given) and default.interpreter.executable in map(os.path.realpath, SYSTEM_PYTHONS)


@pytest.fixture(scope="module", params=BATTERY_CONFIGURATIONS)
def report(request, targets):
    ensure_bwrap()
    name = request.param
    disable = CONFIGURATIONS.get(name, ())
    backend = "unshare" if name == "unshare backend" else None  # no mount layer: unshare makes no file system
    if backend and shutil.which("unshare") is None:
        pytest.skip("util-linux unshare is not installed")
    if (backend or "mount" in disable) and not a_python_the_slot_uid_reads():
        pytest.skip("no interpreter readable by the slot uid with the mount layer off")
    return run_battery(targets, disable=disable, backend=backend, workers=2)


@pytest.mark.parametrize("attack", list(ATTACKS))
def test_attack(report, attack):
    result = report["results"][attack]
    if "skipped" in result:
        pytest.skip(result["skipped"])
    assert result["seconds"] <= result["bound"] + 2.0, result
    if ATTACKS[attack].harmless:
        return
    layers = ", ".join(report["record"]["active"]) or "none"
    assert result["breached"] == (not result["expected_stopped"]), (
        f"{attack} {'got through' if result['breached'] else 'was stopped'} with layers {layers}: {result}")


def test_the_battery_leaves_nothing_behind(report):
    assert report["left_processes"] == [] and report["stray_slot_processes"] == []
    assert report["left_directories"] == [] and report["work_directories_empty"]


def test_the_battery_holds_as_an_unprivileged_user():
    """The pool itself run by uid 65534 (no root: bwrap in a user namespace, or no namespaces at all)."""
    if os.geteuid() != 0:
        pytest.skip("the suite already runs unprivileged: the battery above is that run")
    python = next((path for path in ("/usr/bin/python3", os.path.realpath(sys.executable)) if readable_by_others(path)),
                  None)
    if python is None or not readable_by_others(str(ROOT / "recipe" / "sandbox" / "pool.py")):
        pytest.skip("no interpreter or checkout readable by uid 65534 here")
    ensure_bwrap()
    driver = (f"import json, sys; sys.path.insert(0, {str(ROOT)!r})\n"
              "from recipe.sandbox.battery import Battery, run_battery\n"
              "with Battery() as targets:\n"
              "    reports = {name: run_battery(targets, disable=disable, python=sys.executable, workers=2)\n"
              "               for name, disable in (('all', ()), ('no namespaces', ('pid', 'net', 'mount')))}\n"
              "print(json.dumps(reports))\n")
    result = subprocess.run([python, "-c", driver], user=65534, group=65534, extra_groups=[], cwd="/",
                            env={"PATH": "/usr/local/bin:/usr/bin:/bin"}, capture_output=True, text=True,
                            timeout=300)
    assert result.returncode == 0, result.stderr[-3000:]
    for name, unprivileged in json.loads(result.stdout).items():
        assert unprivileged["record"]["uid"] == 65534, name
        assert unprivileged["left_processes"] == [] and unprivileged["left_directories"] == [], name
        for attack, outcome in unprivileged["results"].items():
            if "skipped" in outcome or ATTACKS[attack].harmless:
                continue
            assert outcome["breached"] == (not outcome["expected_stopped"]), (name, attack, outcome)
            assert outcome["seconds"] <= outcome["bound"] + 2.0, (name, attack, outcome)
