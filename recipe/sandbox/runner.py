"""The program runner inside a sandbox: a warm interpreter that forks one confined child per test.

Started by recipe.sandbox.pool as `python -I -S -B -c <this file's source> <tag>` (stdlib only, no package
import: the sandbox shows the interpreter nothing else). Its stdin carries frames from the trusted pool
(4-byte length + marshal): first the setup (slot uid, Landlock paths, seccomp filter, work directory, how
strays are killed), then one job after another (program, test inputs, limits). For each job:

    compile once -> for each test: fork -> child: own process group, the slot's uid, rlimits, stdin/stdout/
    value memfds, Landlock, seccomp -> exec the program (and, for a call test, eval its expression)
    parent: wait (wall clock) -> kill the test's processes and every stray -> one frame out -> the pool's
    answer: next test or stop -> after the job, the work directory is emptied

It never sees an expected output: a frame carries what the program printed (and an expression's value as a
repr of plain data), and the pool outside decides the verdict (recipe/sandbox/cases.py). So a program that
takes over this process, forges frames or patches anything in here can still only produce outputs, never a pass.

Frames out: b"<index> <status> <stdout bytes> <value bytes>\\n" + stdout + value after each test (status: ok |
exit:N | signal:N | timeout | output | spawn), b"compile\\n" for a program that does not compile, b"end\\n"
after each job; the pool answers each test frame with b"n" (next) or b"s" (stop).
"""

import ctypes
import gc
import marshal
import os
import resource
import select
import signal
import struct
import sys
import time

PR_SET_DUMPABLE, PR_SET_CHILD_SUBREAPER, PR_SET_NO_NEW_PRIVS, PR_SET_SECCOMP = 4, 36, 38, 22
SECCOMP_MODE_FILTER = 2
# Landlock (linux/landlock.h): syscall numbers (x86_64 and the generic table agree), access rights by ABI.
LANDLOCK_CREATE_RULESET, LANDLOCK_ADD_RULE, LANDLOCK_RESTRICT_SELF = 444, 445, 446
LANDLOCK_CREATE_RULESET_VERSION, LANDLOCK_RULE_PATH_BENEATH = 1, 1
FS_EXECUTE, FS_WRITE_FILE, FS_READ_FILE, FS_READ_DIR = 1 << 0, 1 << 1, 1 << 2, 1 << 3
FS_RIGHTS_BY_ABI = {1: (1 << 13) - 1, 2: (1 << 14) - 1, 3: (1 << 15) - 1, 4: (1 << 15) - 1, 5: (1 << 16) - 1}
FILE_RIGHTS = FS_EXECUTE | FS_WRITE_FILE | FS_READ_FILE | (1 << 14) | (1 << 15)  # + truncate, ioctl_dev
NET_BIND_TCP, NET_CONNECT_TCP = 1, 2  # ABI >= 4
SCOPE_ABSTRACT_UNIX_SOCKET, SCOPE_SIGNAL = 1, 2  # ABI >= 6


class RulesetAttr(ctypes.Structure):
    _fields_ = [("handled_access_fs", ctypes.c_uint64), ("handled_access_net", ctypes.c_uint64),
                ("scoped", ctypes.c_uint64)]


class PathBeneathAttr(ctypes.Structure):
    _pack_ = 1
    _fields_ = [("allowed_access", ctypes.c_uint64), ("parent_fd", ctypes.c_int32)]


class SockFprog(ctypes.Structure):
    _fields_ = [("len", ctypes.c_ushort), ("filter", ctypes.c_void_p)]


def libc():
    library = ctypes.CDLL(None, use_errno=True)
    library.syscall.restype = ctypes.c_long
    return library


def landlock_abi():
    """The kernel's Landlock ABI version, 0 where Landlock is absent or disabled."""
    version = libc().syscall(LANDLOCK_CREATE_RULESET, None, ctypes.c_size_t(0),
                             ctypes.c_uint32(LANDLOCK_CREATE_RULESET_VERSION))
    return max(int(version), 0)


def open_rule_paths(read_paths, write_paths):
    """O_PATH descriptors of the Landlock rule paths, opened once before the tests fork: [(fd, is_dir, write)].
    A path this uid cannot reach is left out (nothing under it is readable anyway)."""
    opened = []
    for paths, write in ((read_paths, False), (write_paths, True)):
        for path in paths:
            try:
                fd = os.open(path, os.O_PATH | os.O_CLOEXEC)
            except OSError:
                continue
            opened.append((fd, os.path.isdir(path), write))
    return opened


def make_ruleset(library, abi, rules):
    """The Landlock ruleset every test's child enters (built once: a child only calls restrict_self): read and
    execute under the interpreter's paths, everything under the work directory, nothing else; no TCP bind or
    connect (ABI >= 4); no signals to, or abstract sockets of, processes outside (ABI >= 6)."""
    handled = FS_RIGHTS_BY_ABI.get(abi, (1 << 16) - 1)
    attr = RulesetAttr(handled, NET_BIND_TCP | NET_CONNECT_TCP if abi >= 4 else 0,
                       SCOPE_ABSTRACT_UNIX_SOCKET | SCOPE_SIGNAL if abi >= 6 else 0)
    size = 8 if abi < 4 else 16 if abi < 6 else 24
    ruleset = library.syscall(LANDLOCK_CREATE_RULESET, ctypes.byref(attr), ctypes.c_size_t(size), ctypes.c_uint32(0))
    if ruleset < 0:
        raise OSError(ctypes.get_errno(), "landlock_create_ruleset")
    read_rights = FS_EXECUTE | FS_READ_FILE | FS_READ_DIR
    for fd, is_dir, write in rules:
        allowed = handled if write else read_rights
        if not is_dir:
            allowed &= FILE_RIGHTS & handled
        rule = PathBeneathAttr(allowed, fd)
        if library.syscall(LANDLOCK_ADD_RULE, ctypes.c_int(ruleset), ctypes.c_int(LANDLOCK_RULE_PATH_BENEATH),
                           ctypes.byref(rule), ctypes.c_uint32(0)) < 0:
            raise OSError(ctypes.get_errno(), "landlock_add_rule")
        os.close(fd)
    return ruleset


def prepare_seccomp(program):
    """The sock_fprog of a compiled BPF filter (recipe/sandbox/seccomp.py built it outside), and its buffer."""
    buffer = ctypes.create_string_buffer(program, len(program))
    return SockFprog(len(program) // 8, ctypes.addressof(buffer)), buffer


class CapHeader(ctypes.Structure):
    _fields_ = [("version", ctypes.c_uint32), ("pid", ctypes.c_int)]


class CapData(ctypes.Structure):
    _fields_ = [("effective", ctypes.c_uint32), ("permitted", ctypes.c_uint32), ("inheritable", ctypes.c_uint32)]


def confine(library, setup):
    """In a test's child: no capabilities (a program left running as root keeps none), no new privileges,
    then the Landlock domain and the seccomp filter; all of it holds for every descendant."""
    if os.geteuid() == 0 and library.capset(ctypes.byref(CapHeader(0x20080522, 0)), (CapData * 2)()) != 0:
        raise OSError(ctypes.get_errno(), "capset")
    library.prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0)
    if setup["ruleset"] is not None and library.syscall(LANDLOCK_RESTRICT_SELF, ctypes.c_int(setup["ruleset"]),
                                                        ctypes.c_uint32(0)) < 0:
        raise OSError(ctypes.get_errno(), "landlock_restrict_self")
    if setup["fprog"] is not None and library.prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER,
                                                    ctypes.byref(setup["fprog"][0]), 0, 0) != 0:
        raise OSError(ctypes.get_errno(), "seccomp")


def plain(value, depth=0):
    """The value as plain data (exact builtin types only, so an object with a forged __eq__ is refused)."""
    kind = type(value)
    if depth > 100:
        raise ValueError("nested too deep")
    if kind in (int, float, str, bool, bytes, complex) or value is None:
        return value
    if kind in (list, tuple, set, frozenset):
        return kind(plain(item, depth + 1) for item in value)
    if kind is dict:
        return {plain(key, depth + 1): plain(item, depth + 1) for key, item in value.items()}
    raise TypeError("not plain data")


def run_child(setup, job, test, fds, library):
    """In the forked child: confine, run the program on one test, and exit. Never returns."""
    status = 1
    try:
        os.setpgid(0, 0)
        if setup["uid"] is not None:  # the runner stays root (outside its reach); the program never is
            os.setgroups([])
            os.setresgid(setup["uid"], setup["uid"], setup["uid"])
            os.setresuid(setup["uid"], setup["uid"], setup["uid"])
        for limit, value in ((resource.RLIMIT_AS, job["memory"]), (resource.RLIMIT_NOFILE, job["files"]),
                             (resource.RLIMIT_CORE, 0), (resource.RLIMIT_NPROC, job["processes"]),
                             (resource.RLIMIT_CPU, job["cpu"]), (resource.RLIMIT_FSIZE, job["file"])):
            if value is not None:  # CPU: SIGXCPU at the soft limit, SIGKILL a second later
                resource.setrlimit(limit, (value, value + 1 if limit == resource.RLIMIT_CPU else value))
        os.chdir(setup["workdir"])
        confine(library, setup)  # before the dup2s below, which may reuse the ruleset's descriptor number
        for source, target in zip(fds, (0, 1, 2, 3)):
            os.dup2(source, target)
        os.closerange(4, 1 << 16)  # the pool's pipes, the ruleset: nothing of the runner's stays open
        namespace = {"__name__": "__main__", "__builtins__": __builtins__}
        exec(job["code"], namespace)
        if test[0] == "call":
            if test[2]:
                exec(compile(test[2], "<test setup>", "exec"), namespace)
            value = eval(compile(test[1], "<test>", "eval"), namespace)
            os.write(3, repr(plain(value)).encode("utf-8", "backslashreplace"))
        status = 0
    except SystemExit as stop:
        status = stop.code if isinstance(stop.code, int) else (0 if stop.code is None else 1)
    except BaseException:
        status = 1
    try:
        threading = sys.modules.get("threading")
        if threading is not None:
            threading._shutdown()  # the interpreter waits for non-daemon threads at exit; so do we
        sys.stdout.flush()
    except BaseException:
        status = status or 1
    os._exit(status & 0xFF)


def wait_child(pid, wall):
    """The child's wait status, or None when it ran past `wall` seconds (it is left to be killed)."""
    handle = os.pidfd_open(pid)
    try:
        poller = select.poll()
        poller.register(handle, select.POLLIN)
        if not poller.poll(int(wall * 1000)):
            return None
    finally:
        os.close(handle)
    return os.waitpid(pid, 0)[1]


def kill_strays(setup, pgid):
    """Kill the test's process group and whatever it left (a setsid daemon included), and reap them all.

    Every stray is a child of this runner (a subreaper: orphans reparent here), so none is left once waitpid
    says there are no children. Strays are signalled by the setup's means: "all", kill(-1) (this runner has a
    pid namespace of its own, so that reaches the sandbox and nothing else); "uid", kill(-1) from a helper
    running as the slot's uid (no pid namespace, but a uid of its own); "scan", each child /proc lists."""
    if pgid > 0:
        try:
            os.killpg(pgid, signal.SIGKILL)
        except OSError:
            pass
    for _ in range(5000):
        try:
            pid, _ = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid:
            continue
        if setup["kill"] == "all":
            signal_all()
        elif setup["kill"] == "uid":
            helper = os.fork()
            if helper == 0:
                os.setresuid(setup["uid"], setup["uid"], setup["uid"])
                signal_all()
                os._exit(0)
        else:
            for stray in children():
                try:
                    os.kill(stray, signal.SIGKILL)
                except OSError:
                    pass
        time.sleep(0.001)


def signal_all():
    try:
        os.kill(-1, signal.SIGKILL)
    except OSError:
        pass


def children():
    """This process's children (all threads), from /proc; empty where /proc is not mounted."""
    found = []
    try:
        tasks = os.listdir("/proc/self/task")
    except OSError:
        return found
    for task in tasks:
        try:
            with open("/proc/self/task/%s/children" % task) as handle:
                found += [int(pid) for pid in handle.read().split()]
        except OSError:
            pass
    return found


def empty_directory(path):
    """Remove everything under path (a job's files), whatever modes the program set."""
    for entry in os.scandir(path):
        full = os.path.join(path, entry.name)
        try:
            if entry.is_dir(follow_symlinks=False):
                os.chmod(full, 0o700)
                empty_directory(full)
                os.rmdir(full)
            else:
                os.unlink(full)
        except OSError:
            pass


def memfd(name, data=b""):
    fd = os.memfd_create(name, 0)
    if data:
        os.write(fd, data)
        os.lseek(fd, 0, os.SEEK_SET)
    return fd


def status_of(wait_status, output_size, limit):
    if wait_status is None:
        return "timeout"
    if os.WIFSIGNALED(wait_status):
        return "signal:%d" % os.WTERMSIG(wait_status)
    code = os.WEXITSTATUS(wait_status)
    if code != 0:
        return "exit:%d" % code
    return "output" if output_size > limit else "ok"


def run_test(setup, job, index, test, library, devnull):
    """Run one test in a forked child; returns the frame to send."""
    stdin = memfd("stdin", test[1].encode("utf-8") if test[0] == "stdio" else b"")
    stdout, value = memfd("stdout"), memfd("value")
    try:
        pid = os.fork()
    except OSError:  # the process limit, reached by the program's own processes
        pid = -1
    if pid == 0:
        run_child(setup, job, test, (stdin, stdout, devnull, value), library)
    wait_status = wait_child(pid, job["wall"]) if pid > 0 else None
    kill_strays(setup, max(pid, 0))
    cap = job["output"]
    printed = os.pread(stdout, cap + 1, 0)
    returned = os.pread(value, cap + 1, 0) if test[0] == "call" else b""
    for fd in (stdin, stdout, value):
        os.close(fd)
    status = "spawn" if pid < 0 else status_of(wait_status, max(len(printed), len(returned)), cap)
    printed, returned = printed[:cap], returned[:cap]
    return b"%d %s %d %d\n" % (index, status.encode(), len(printed), len(returned)) + printed + returned


def read_exact(size):
    data = b""
    while len(data) < size:
        chunk = os.read(0, size - len(data))
        if not chunk:
            return None
        data += chunk
    return data


def read_frame():
    header = read_exact(4)
    return None if header is None else marshal.loads(read_exact(struct.unpack("!I", header)[0]))


def write_all(data):
    while data:
        data = data[os.write(1, data):]


def run_job(setup, job, library, devnull):
    try:
        job["code"] = compile(job["source"], "<program>", "exec")
    except BaseException:
        write_all(b"compile\n")
        return True
    for index, test in enumerate(job["tests"]):
        write_all(run_test(setup, job, index, test, library, devnull))
        answer = read_exact(1)
        if answer != b"n":
            return answer is not None
    return True


def main():
    library = libc()
    library.prctl(PR_SET_DUMPABLE, 0, 0, 0, 0)  # no /proc/<runner>/mem, fd or environ for the program
    library.prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)
    setup = read_frame()
    rules = open_rule_paths(setup["read"], setup["write"]) if setup["landlock"] else []
    setup["ruleset"] = make_ruleset(library, setup["landlock"], rules) if setup["landlock"] else None
    setup["fprog"] = prepare_seccomp(setup["seccomp"]) if setup["seccomp"] else None
    _ = (library.prctl, library.syscall, library.capset)  # looked up (and cached) once here, not in every child
    gc.freeze()  # the runner's objects stay out of the children's collections (fewer copy-on-write pages)
    devnull = os.open(os.devnull, os.O_RDWR)
    while True:
        job = read_frame()
        if job is None or not run_job(setup, job, library, devnull):
            return
        for directory in setup["scratch"]:
            empty_directory(directory)
        write_all(b"end\n")


if __name__ == "__main__":
    main()
