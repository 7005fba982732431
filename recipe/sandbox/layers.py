"""Which isolation layers this machine offers (a quick probe at start), and the command that starts one sandbox.

Layers (each can be switched off; the always-on base is in recipe/sandbox/pool.py and runner.py):

    uid       programs run under an unprivileged uid: as root, one of their own per worker slot
              (uid_base + slot), so RLIMIT_NPROC counts only that sandbox and root's files and processes are
              out of reach; not root: the caller's own uid already is one (always on)
    user      the namespaces are made inside a user namespace: how a user who is not root gets them (bwrap
              unprivileged); as root with the uid layer, root makes them and the program is never root at all
    pid       a pid namespace: no other process visible or signalable; its end kills every process in it
    net       a network namespace with only a loopback of its own: no network, no host port
    mount     a root file system of the interpreter's files only, read-only, and a private tmpfs as /tmp
              (bubblewrap only); off: the host's file system, and a private host directory as the work dir
    landlock  a Landlock domain per test: read/execute the interpreter's files, write the private directory,
              nothing else; no TCP bind/connect (ABI >= 4); no signals to processes outside (ABI >= 6)
    seccomp   a syscall filter (recipe/sandbox/seccomp.py): no non-Unix sockets, namespaces, ptrace, ...

Namespaces come from bubblewrap (`bwrap`, Debian's bubblewrap) when it is installed and works here, else from
util-linux `unshare` (pid and net only; no minimal file system), else none (Landlock then guards the files).
"""

from __future__ import annotations

import json
import os
import subprocess
from dataclasses import dataclass, field
from pathlib import Path

LAYERS = ("uid", "user", "pid", "net", "mount", "landlock", "seccomp")
NAMESPACE_LAYERS = ("pid", "net", "mount")
UID_BASE = 1_000_000_000  # far from any distribution's user ranges: a slot's uid owns nothing else
MAX_WORKERS = 256  # slots of one pool; pool k's uids are UID_BASE + pid_k * MAX_WORKERS + slot (< 2**32 - 1)
RUNNER_CAPABILITIES = ("CAP_SETUID", "CAP_SETGID", "CAP_KILL", "CAP_DAC_OVERRIDE", "CAP_FOWNER")
DEVICES = ("/dev/null", "/dev/zero", "/dev/urandom", "/dev/random")

# Run by the sandbox's interpreter itself: where its files are (the directories of everything it maps once its
# common extension modules are loaded, its stdlib, and the executable file; not the executable's whole directory,
# which for /usr/bin/python3 would bring every host binary along).
DESCRIBE = """
import json, os, sys, sysconfig
for name in ("math", "select", "resource", "_ctypes", "_socket", "_struct", "_json", "_datetime", "_decimal",
             "_random", "_heapq", "_bisect", "array", "binascii", "zlib", "_hashlib", "_pickle", "unicodedata"):
    try:
        __import__(name)
    except ImportError:
        pass
executable = os.path.realpath(sys.executable)
directories = {sysconfig.get_paths()["stdlib"], sysconfig.get_paths()["platstdlib"]}
for line in open("/proc/self/maps"):
    parts = line.split()
    if len(parts) >= 6 and parts[5].startswith("/"):
        directories.add(os.path.dirname(os.path.realpath(parts[5])))
directories.discard(os.path.dirname(executable))
print(json.dumps({"executable": executable, "directories": sorted(directories), "version": sys.version.split()[0]}))
"""


@dataclass(frozen=True)
class Interpreter:
    executable: str  # real path of the interpreter that runs the programs
    read_paths: tuple[str, ...]  # everything it needs, read-only (directories outermost first, then files)
    version: str


@dataclass(frozen=True)
class Plan:
    """How every sandbox of this pool is made: the backend, each layer's state and the interpreter."""
    backend: str  # "bwrap", "unshare" or "direct"
    tool: str | None  # path of bwrap / unshare
    tool_version: str
    root: bool
    interpreter: Interpreter
    landlock_abi: int
    layers: dict[str, str] = field(default_factory=dict)  # layer -> "on" or why it is off

    def on(self, layer: str) -> bool:
        return self.layers.get(layer) == "on"

    @property
    def drops_uid(self) -> bool:
        return self.root and self.on("uid")

    @property
    def userns(self) -> bool:
        return self.backend != "direct" and self.on("user")


def describe_interpreter(python: str) -> Interpreter:
    result = subprocess.run([python, "-I", "-S", "-c", DESCRIBE], capture_output=True, text=True, timeout=60, env={})
    if result.returncode != 0:
        raise RuntimeError(f"sandbox python {python}: could not describe itself (exit {result.returncode}); "
                           "give an interpreter of Python >= 3.9 on Linux")
    facts = json.loads(result.stdout)
    directories = []
    for directory in sorted(facts["directories"], key=len):  # outermost first: nested ones come along
        if not any(directory == kept or directory.startswith(kept + "/") for kept in directories):
            directories.append(directory)
    ld_cache = ["/etc/ld.so.cache"] if os.path.exists("/etc/ld.so.cache") else []
    loaders = [path for path in ("/lib64", "/usr/lib64") if os.path.isdir(path) and not os.path.islink(path)]
    paths = tuple(dict.fromkeys([*loaders, *directories, facts["executable"], *ld_cache]))
    return Interpreter(facts["executable"], paths, facts["version"])


def tool_version(tool: str) -> str:
    try:
        result = subprocess.run([tool, "--version"], capture_output=True, text=True, timeout=10, env={})
    except OSError:
        return "?"
    return (result.stdout or result.stderr).strip().splitlines()[0] if result.returncode == 0 else "?"


def private_home(plan: Plan, private_dir: str | None) -> str:
    return "/tmp" if plan.on("mount") else str(private_dir)


def namespace_prefix(plan: Plan, private_dir: str | None, tmpfs_bytes: int = 64 << 20) -> list[str]:
    """The bwrap / unshare arguments before the interpreter's own; [] for the direct backend."""
    if plan.backend == "unshare":
        prefix = [plan.tool]
        if plan.userns:
            prefix += ["--user", "--map-current-user"]
        if plan.on("net"):
            prefix += ["--net"]
        if plan.on("pid"):  # a fresh /proc: the host's would still list every process
            prefix += ["--pid", "--fork", "--kill-child", "--mount-proc"]
        return prefix + ["--"]
    if plan.backend != "bwrap":
        return []
    prefix = [plan.tool, "--die-with-parent", "--new-session", "--unshare-ipc", "--unshare-uts",
              "--unshare-cgroup-try", "--cap-drop", "ALL"]
    if plan.userns:
        prefix += ["--unshare-user", "--disable-userns"]
    if plan.drops_uid:  # the runner stays root to drop each test's child to the slot uid, kill its strays and
        for capability in RUNNER_CAPABILITIES:  # empty the work directory; the child keeps none of these
            prefix += ["--cap-add", capability]
    prefix += ["--unshare-pid"] if plan.on("pid") else []
    prefix += ["--unshare-net"] if plan.on("net") else []
    if plan.on("mount"):
        for name in ("lib", "lib64", "lib32", "libx32", "bin"):  # merged-/usr links, as on the host
            if os.path.islink("/" + name):
                prefix += ["--symlink", os.readlink("/" + name), "/" + name]
        ancestors = dict.fromkeys(str(parent) for path in plan.interpreter.read_paths
                                  for parent in reversed(Path(path).parents) if str(parent) != "/")
        for directory in ancestors:  # made 0755: bwrap would make /root 0700, unreadable after the uid drop
            prefix += ["--perms", "0755", "--dir", directory]
        for path in plan.interpreter.read_paths:
            prefix += ["--ro-bind", path, path]
        prefix += ["--dev", "/dev"] + (["--proc", "/proc"] if plan.on("pid") else [])  # no host /proc
        prefix += ["--perms", "1777", "--size", str(tmpfs_bytes), "--tmpfs", "/tmp", "--chdir", "/tmp"]
    else:
        prefix += ["--bind", "/", "/", "--dev", "/dev"] + (["--proc", "/proc"] if plan.on("pid") else [])
        prefix += ["--chdir", str(private_dir)]
    return prefix + ["--"]


def namespace_probe(plan: Plan) -> str | None:
    """None when a sandbox of this plan starts the interpreter here, else the tool's complaint (one line)."""
    prefix = namespace_prefix(plan, "/")
    try:
        result = subprocess.run([*prefix, plan.interpreter.executable, "-I", "-S", "-c", "pass"], env={},
                                cwd="/", capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired) as error:
        return str(error).splitlines()[0]
    if result.returncode == 0:
        return None
    return (result.stderr.strip().splitlines() or [f"exit {result.returncode}"])[-1][:200]


def plan_sandbox(disable: frozenset[str], python: str, tools: dict[str, str | None], backend: str | None,
                 landlock_abi: int, seccomp_error: str | None) -> Plan:
    """The quick probe: each layer on where asked for and working here, else the reason it is off.

    tools: paths of bwrap and unshare (None: not installed); backend forces one ("bwrap", "unshare", "direct")."""
    root = os.geteuid() == 0
    interpreter = describe_interpreter(python)
    layers = {}

    def asked(layer: str) -> bool:
        return layer not in disable

    layers["uid"] = "on" if asked("uid") or not root else "off: switched off"
    layers["landlock"] = ("off: switched off" if not asked("landlock") else "on" if landlock_abi
                          else "off: the kernel has no Landlock (or it is disabled)")
    layers["seccomp"] = "off: switched off" if not asked("seccomp") else seccomp_error or "on"
    namespaces = [layer for layer in NAMESPACE_LAYERS if asked(layer)]
    for layer in NAMESPACE_LAYERS:
        layers[layer] = "off: switched off"
    if root and layers["uid"] == "on":
        layers["user"] = "off: not needed (root makes the namespaces, the program runs under an unprivileged uid)"
    else:
        layers["user"] = "on" if asked("user") else "off: switched off"
    if not namespaces:
        if layers["user"] == "on":
            layers["user"] = "off: no namespace asked for"
        return Plan("direct", None, "", root, interpreter, landlock_abi, layers)
    if not root and layers["user"] != "on":
        for layer in namespaces:
            layers[layer] = "off: a user who is not root gets namespaces only inside a user namespace"
        return Plan("direct", None, "", root, interpreter, landlock_abi, layers)
    complaints = []
    for name in (backend,) if backend else ("bwrap", "unshare"):
        tool = tools.get(name)
        if name == "direct" or not tool:
            complaints.append(f"{name} is not installed" if name != "direct" else "the direct backend was asked for")
            continue
        working = [layer for layer in namespaces if name == "bwrap" or layer != "mount"]
        trial = Plan(name, tool, tool_version(tool), root, interpreter, landlock_abi,
                     {**layers, **{layer: "on" for layer in working}})
        complaint = namespace_probe(trial)
        if complaint is None:
            if name == "unshare" and "mount" in namespaces:
                trial.layers["mount"] = "off: needs bubblewrap (unshare gives no minimal file system)"
            return trial
        complaints.append(f"{name}: {complaint}")
    for layer in namespaces:
        layers[layer] = "off: " + ("; ".join(complaints) or "no namespace tool works here")
    if layers["user"] == "on":
        layers["user"] = layers[namespaces[0]]
    return Plan("direct", None, "", root, interpreter, landlock_abi, layers)


def readable_by_others(path: str) -> bool:
    """Whether a uid that owns nothing here can reach and read path (every directory above it searchable)."""
    current = Path(path)
    if not os.path.exists(current) or not os.stat(current).st_mode & 0o004:
        return False
    return all(os.stat(parent).st_mode & 0o001 for parent in current.parents)


def unreadable_interpreter(plan: Plan) -> str | None:
    """Why the slot uid cannot load the interpreter when the host's file system is its view, else None."""
    if not plan.drops_uid or plan.on("mount"):
        return None
    closed = [path for path in plan.interpreter.read_paths if not readable_by_others(path)]
    if not closed:
        return None
    return (f"the interpreter's files under {closed[0]} are closed to other users, and with the mount layer off "
            "the slot's uid sees the host's file system as it is; keep the mount layer, or give a python "
            "readable by all (e.g. /usr/bin/python3)")
