"""The sandbox pool: a process of its own that starts one sandbox per sample, decides verdicts, and reaps everything.

The trainer never forks a sandbox: recipe.sandbox.Sandbox starts this module in a fresh interpreter with an
empty environment (so no ancestor a program could read holds a secret but the trainer itself), and sends it
batches over a pipe. Here each sample of a batch runs in a worker thread, up to `workers` at once:

    private directory (host, when the mount layer is off) -> bwrap/unshare/direct + runner (runner.py)
    -> request in (program, test inputs, limits; never an expected output) -> frames out, checked one by one
    (cases.py), stopping at the first failure -> kill the sandbox, reap, remove the directory

This process is a child subreaper: whatever escapes a sandbox (a double-fork setsid daemon where there is no
pid namespace, the namespace's own init once its bwrap is gone) is reparented here and killed before the
sample's outcome is returned, so a batch never leaves a process behind. A sample that runs past its backstop
(Limits.start_seconds + tests x (wall_seconds + 0.5)) is killed the same way.
"""

from __future__ import annotations

import dataclasses
import marshal
import os
import pickle
import queue
import select
import shutil
import signal
import struct
import subprocess
import sys
import tempfile
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass
from pathlib import Path

from recipe.sandbox import runner
from recipe.sandbox.cases import Job, Limits, Outcome, StdioTest
from recipe.sandbox.layers import (DEVICES, LAYERS, MAX_WORKERS, UID_BASE, Plan, namespace_prefix, plan_sandbox,
                                   private_home, readable_by_others, unreadable_interpreter)
from recipe.sandbox.seccomp import SeccompUnavailable, compile_filter

RUNNER_SOURCE = Path(runner.__file__).read_text()
HEADER = struct.Struct("!Q")
SYSTEM_PYTHONS = ("/usr/bin/python3", "/usr/local/bin/python3")
SELF_CHECK = Job("import json\nprint(sum(map(int, input().split())))\n", (StdioTest("2 3\n", "5"),))


@dataclass(frozen=True)
class Settings:
    disable: frozenset
    python: str | None  # None: this interpreter, or a system one the slot's uid can read (planned_with_python)
    tools: dict
    backend: str | None
    workers: int
    limits: Limits
    tag: str
    uid_base: int | None  # None: UID_BASE + this pool's pid x MAX_WORKERS, distinct from every live pool's
    warm: bool = True  # keep each slot's sandbox for the next sample (False: a fresh sandbox per sample)


@dataclass
class Worker:
    """One slot's sandbox: the process tree bwrap (or unshare, or the runner itself) heads."""
    process: subprocess.Popen
    uid: int | None
    private: str | None  # the host work directory, when the mount layer is off
    tmpfs_bytes: int


def planned_with_python(settings: Settings, landlock_abi: int, seccomp_error: str | None) -> Plan:
    """The plan with settings.python, or by default with this interpreter; when the slot's uid could not read that
    one (mount layer off, as without bubblewrap, and a python under a home closed to others, like pyenv's under
    /root), the first system python readable by all instead: the runner is stdlib-only, any Python 3 runs it."""
    def plan(python: str) -> Plan:
        return plan_sandbox(settings.disable, python, settings.tools, settings.backend, landlock_abi, seccomp_error)

    chosen = plan(settings.python or os.path.realpath(sys.executable))
    if settings.python is None and unreadable_interpreter(chosen):
        for candidate in map(os.path.realpath, SYSTEM_PYTHONS):
            if readable_by_others(candidate):  # False for a path that does not exist
                trial = plan(candidate)
                if not unreadable_interpreter(trial):
                    return trial
    return chosen


class Pool:
    def __init__(self, settings: Settings):
        if settings.uid_base is None:
            settings = dataclasses.replace(settings, uid_base=UID_BASE + os.getpid() * MAX_WORKERS)
        self.settings = settings
        try:
            self.seccomp, seccomp_error = compile_filter(), None
        except SeccompUnavailable as error:
            self.seccomp, seccomp_error = None, f"off: {error}"
        abi = runner.landlock_abi()
        self.plan = planned_with_python(settings, abi, seccomp_error)
        self.lock = threading.Lock()  # guards spawning against the orphan scan (a new root is not an orphan)
        self.roots: set[int] = set()
        self.slots: queue.Queue[int] = queue.Queue()
        for slot in range(settings.workers):
            self.slots.put(slot)
        problem = unreadable_interpreter(self.plan)
        if problem:
            raise RuntimeError(problem)
        self.executor = ThreadPoolExecutor(settings.workers)
        self.workers: dict[int, Worker] = {}  # slot -> its warm sandbox (only the slot's thread touches it)
        check = self.run([SELF_CHECK])[0]
        if not check.all_passed:
            raise RuntimeError(f"the sandbox could not run a two-line program with layers "
                               f"{', '.join(self.active()) or 'none'} ({check.verdicts[0]}{check.detail}); "
                               "switch the failing layer off (Sandbox(disable=...)) or give another python")

    def active(self) -> list[str]:
        return [layer for layer in LAYERS if self.plan.on(layer)]

    def record(self) -> dict:
        plan = self.plan
        return {"active": self.active(), "layers": dict(plan.layers), "root": plan.root,
                "backend": f"{plan.backend} ({plan.tool_version})" if plan.tool else plan.backend,
                "python": f"{plan.interpreter.executable} ({plan.interpreter.version})",
                "uid": f"{self.settings.uid_base}+slot" if plan.drops_uid else os.geteuid(),
                "landlock_abi": plan.landlock_abi, "kernel": os.uname().release, "workers": self.settings.workers,
                "limits": asdict(self.settings.limits)}

    def run(self, jobs: list[Job]) -> list[Outcome]:
        return list(self.executor.map(self.run_in_slot, jobs))

    def run_in_slot(self, job: Job) -> Outcome:
        slot = self.slots.get()
        try:
            return self.run_job(job, slot)
        finally:
            self.slots.put(slot)

    def setup(self, uid: int | None, workdir: str) -> dict:
        plan = self.plan
        kill = "all" if plan.on("pid") else "uid" if plan.drops_uid else "scan"  # see runner.kill_strays
        # Emptied after every job: the work directory, and bwrap's private /dev/shm (no sample reads another's).
        scratch = [workdir] + (["/dev/shm"] if plan.backend == "bwrap" else [])
        return {"uid": uid, "kill": kill, "workdir": workdir, "scratch": scratch,
                "landlock": plan.landlock_abi if plan.on("landlock") else 0,
                "read": list(plan.interpreter.read_paths) + [path for path in DEVICES[1:] if os.path.exists(path)],
                "write": [workdir, DEVICES[0]], "seccomp": self.seccomp if plan.on("seccomp") else None}

    def job_frame(self, job: Job, limits: Limits) -> dict:
        plan = self.plan
        processes = limits.processes if (plan.drops_uid or not plan.root) else None  # root: RLIMIT_NPROC ignored
        if processes is not None and not plan.drops_uid:
            # Counted over the uid in its user namespace (the runner is one), or with no user namespace over
            # every process of this user on the machine: allow this many more.
            processes += 1 if plan.userns else count_own_tasks()
        return {"source": job.program, "tests": [test.sandbox_input() for test in job.tests],
                "cpu": limits.cpu_seconds, "wall": limits.wall_seconds, "memory": limits.memory_bytes,
                "file": limits.file_bytes, "files": limits.open_files, "processes": processes,
                "output": limits.output_bytes}

    def start_worker(self, slot: int, limits: Limits) -> Worker:
        uid = self.settings.uid_base + slot if self.plan.drops_uid else None
        private = None if self.plan.on("mount") else make_private_dir(self.settings.tag, uid)
        home = private_home(self.plan, private)
        argv = [*namespace_prefix(self.plan, private, limits.tmpfs_bytes), self.plan.interpreter.executable,
                "-I", "-S", "-B", "-c", RUNNER_SOURCE, self.settings.tag]
        with self.lock:
            process = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                       stderr=subprocess.DEVNULL, env={"HOME": home, "TMPDIR": home},
                                       cwd=private or "/", start_new_session=True)
            self.roots.add(process.pid)
        worker = Worker(process, uid, private, limits.tmpfs_bytes)
        try:
            write_before(process.stdin.fileno(), frame(self.setup(uid, home)), time.monotonic() + limits.start_seconds)
        except (OSError, TimeoutError):
            pass  # the job's first read then reports the sandbox's end
        return worker

    def run_job(self, job: Job, slot: int) -> Outcome:
        started = time.monotonic()
        limits = job.limits or self.settings.limits
        worker = self.workers.pop(slot, None)
        if worker is not None and (worker.tmpfs_bytes != limits.tmpfs_bytes or worker.process.poll() is not None):
            self.stop_worker(worker)
            worker = None
        fresh = worker is None
        worker = worker or self.start_worker(slot, limits)
        deadline = started + (limits.start_seconds if fresh else 1.0) + len(job.tests) * (limits.wall_seconds + 0.5)
        try:
            verdicts, detail, clean = converse(worker.process, frame(self.job_frame(job, limits)), job, deadline,
                                               limits)
        except BaseException:
            self.stop_worker(worker)
            raise
        if clean and self.settings.warm:
            self.workers[slot] = worker
        else:
            self.stop_worker(worker)
        return Outcome(tuple(verdicts), time.monotonic() - started, detail)

    def stop_worker(self, worker: Worker) -> None:
        """Kill the sandbox's root and session, then everything reparented here; a slot uid is swept too."""
        process = worker.process
        for kill in (lambda: os.killpg(process.pid, signal.SIGKILL), process.kill):
            try:
                kill()
            except OSError:
                pass
        process.wait()
        for stream in (process.stdin, process.stdout):
            try:
                stream.close()
            except OSError:
                pass
        with self.lock:
            self.roots.discard(process.pid)
        self.reap_orphans()
        if worker.uid is not None and not self.plan.on("pid"):
            kill_uid(worker.uid)
        if worker.private:
            remove_tree(worker.private)

    def reap_orphans(self) -> None:
        """Kill and reap every child of this process that is not a running sandbox's root (pidfds: no pid reuse
        race between the scan and the kill)."""
        for _ in range(10_000):
            handles = []
            with self.lock:
                for pid in children_of_self():
                    if pid in self.roots:
                        continue
                    try:
                        handles.append(os.pidfd_open(pid))
                    except OSError:
                        continue
            if not handles:
                return
            for handle in handles:
                try:
                    signal.pidfd_send_signal(handle, signal.SIGKILL)
                    os.waitid(os.P_PIDFD, handle, os.WEXITED)
                except (OSError, ChildProcessError):
                    pass
                os.close(handle)

    def close(self) -> None:
        self.executor.shutdown(wait=True)
        for slot in list(self.workers):
            self.stop_worker(self.workers.pop(slot))
        self.reap_orphans()


def converse(process: subprocess.Popen, request: bytes, job: Job, deadline: float,
             limits: Limits) -> tuple[list[str], str, bool]:
    """Send a job, then read and check one frame per test, answering each with next or stop:
    (verdicts, what went wrong in the sandbox, whether the sandbox can take the next job)."""
    count = len(job.tests)
    verdicts: list[str] = []
    try:
        write_before(process.stdin.fileno(), request, deadline)
        reader = FrameReader(process.stdout.fileno(), deadline, limits.output_bytes)
        for index, test in enumerate(job.tests):
            header = reader.line()
            if header == b"compile":
                verdicts = ["compile_error"] * count
                break
            fields = header.split(b" ")
            if len(fields) != 4 or fields[0] != str(index).encode():
                raise EOFError("a malformed frame")
            printed, returned = reader.take(int(fields[2])), reader.take(int(fields[3]))
            verdicts.append(verdict(fields[1].decode("ascii", "replace"), test, printed, returned))
            stop = verdicts[-1] != "pass" and job.stop_at_first_failure
            write_before(process.stdin.fileno(), b"s" if stop else b"n", deadline)
            if stop:
                verdicts += ["not_run"] * (count - index - 1)
                break
        if reader.line() != b"end":
            raise EOFError("a malformed frame")
    except TimeoutError:
        return (verdicts + ["time_limit"] + ["not_run"] * count)[:count], "", False
    except (EOFError, ValueError, OSError) as error:
        detail = f": {error}" if isinstance(error, EOFError) and str(error) else ": the sandbox ended early"
        return (verdicts + ["sandbox_error"] * count)[:count], detail, False
    return verdicts, "", True


def verdict(status: str, test, printed: bytes, returned: bytes) -> str:
    if status == "ok":
        return "pass" if test.check(printed, returned) else "wrong"
    if status == "output":
        return "output_limit"
    if status == "timeout":
        return "time_limit"
    if status.startswith("signal:"):
        number = int(status.split(":")[1]) if status.split(":")[1].isdigit() else 0
        return {signal.SIGXCPU: "time_limit", signal.SIGKILL: "time_limit",
                signal.SIGXFSZ: "file_limit"}.get(number, "crashed")
    return "error"


class FrameReader:
    """Bounded reads of the runner's frames: nothing waits past the deadline or holds more than the caps."""

    def __init__(self, fd: int, deadline: float, cap: int):
        self.fd, self.deadline, self.cap = fd, deadline, cap
        self.buffer = bytearray()

    def fill(self, size: int) -> None:
        while len(self.buffer) < size:
            remaining = self.deadline - time.monotonic()
            if remaining <= 0 or not select.select([self.fd], [], [], remaining)[0]:
                raise TimeoutError
            chunk = os.read(self.fd, 1 << 16)
            if not chunk:
                raise EOFError
            self.buffer += chunk

    def line(self) -> bytes:
        while b"\n" not in self.buffer[:64]:
            if len(self.buffer) >= 64:
                raise EOFError("a malformed frame")
            self.fill(len(self.buffer) + 1)
        end = self.buffer.index(b"\n")
        line = bytes(self.buffer[:end])
        del self.buffer[:end + 1]
        return line

    def take(self, size: int) -> bytes:
        if not 0 <= size <= self.cap:
            raise EOFError("a frame over the output cap")
        self.fill(size)
        data = bytes(self.buffer[:size])
        del self.buffer[:size]
        return data


def write_before(fd: int, data: bytes, deadline: float) -> None:
    view = memoryview(data)
    while view:
        remaining = deadline - time.monotonic()
        if remaining <= 0 or not select.select([], [fd], [], remaining)[1]:
            raise TimeoutError
        view = view[os.write(fd, view[:1 << 16]):]


def children_of_self() -> list[int]:
    found = []
    for task in os.listdir("/proc/self/task"):
        try:
            found += [int(pid) for pid in Path(f"/proc/self/task/{task}/children").read_text().split()]
        except OSError:
            pass
    return found


def processes_of(uid: int) -> list[int]:
    found = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                status = Path(f"/proc/{entry}/status").read_text()
            except OSError:
                continue
            line = next((line for line in status.splitlines() if line.startswith("Uid:")), "")
            if line.split()[1:2] == [str(uid)]:
                found.append(int(entry))
    return found


def kill_uid(uid: int) -> None:
    for _ in range(1000):
        pids = processes_of(uid)
        if not pids:
            return
        for pid in pids:
            try:
                os.kill(pid, signal.SIGKILL)
            except OSError:
                pass
        time.sleep(0.001)


def count_own_tasks() -> int:
    """Tasks (threads) of this uid on the machine: what RLIMIT_NPROC counts for a user without a user namespace."""
    uid, count = str(os.getuid()), 0
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                count += len(os.listdir(f"/proc/{entry}/task")) if str(os.stat(f"/proc/{entry}").st_uid) == uid else 0
            except OSError:
                pass
    return count


def make_private_dir(tag: str, uid: int | None) -> str:
    path = tempfile.mkdtemp(prefix=f"{tag}-")
    if uid is not None:
        os.chown(path, uid, uid)
    return path


def remove_tree(path: str) -> None:
    """Remove a private directory whatever the program did to its modes (a directory made unreadable)."""
    def unlock(function, failed, _):
        os.chmod(os.path.dirname(failed), 0o700)
        if os.path.isdir(failed) and not os.path.islink(failed):
            os.chmod(failed, 0o700)
        function(failed)

    if sys.version_info >= (3, 12):  # onerror is deprecated there
        shutil.rmtree(path, onexc=unlock)
    else:
        shutil.rmtree(path, onerror=unlock)


def frame(message: dict) -> bytes:
    data = marshal.dumps(message)
    return struct.pack("!I", len(data)) + data


def send(channel, message) -> None:
    data = pickle.dumps(message)
    channel.write(HEADER.pack(len(data)) + data)
    channel.flush()


def receive(channel):
    header = channel.read(HEADER.size)
    if len(header) < HEADER.size:
        return None
    return pickle.loads(channel.read(HEADER.unpack(header)[0]))


def main() -> None:
    """Serve one Sandbox client on stdin/stdout until it says stop or goes away."""
    library = runner.libc()
    library.prctl(runner.PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)
    inbox, outbox = sys.stdin.buffer, os.fdopen(os.dup(1), "wb")
    os.dup2(2, 1)  # nothing else may write into the protocol channel
    try:
        pool = Pool(receive(inbox))
    except Exception as error:  # a probe or self-check failure: the client raises it as one line
        send(outbox, ("error", str(error)))
        return
    send(outbox, ("ok", pool.record()))
    while (message := receive(inbox)) is not None and message[0] == "run":
        try:
            send(outbox, ("ok", pool.run(message[1])))
        except Exception as error:
            send(outbox, ("error", f"{type(error).__name__}: {error}"))
    pool.close()
