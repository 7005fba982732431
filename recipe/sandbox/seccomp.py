"""The seccomp filter of the sandbox, compiled to BPF by libseccomp (through ctypes) in the trusted pool.

libseccomp (Debian's libseccomp2, on every systemd machine) knows each architecture's syscall numbers, the
x32 and 32-bit entry points (a syscall from another ABI kills the process) and how to compile argument checks;
a hand-written BPF program would have to get all of that right itself. The filter allows everything except:

- socket() for any family but AF_UNIX (no network without a network namespace; multiprocessing's pipes stay),
- clone() with a namespace flag, and unshare / setns / mount and friends (no new namespaces to escape into),
- ptrace, process_vm_readv/writev, pidfd_getfd (no reading or steering another process),
- kernel attack surface a program never needs: bpf, perf_event_open, userfaultfd, io_uring (which would also
  bypass the socket rule), keyctl, module and kexec calls;
- clone3 answers ENOSYS, so the C library falls back to clone(), whose flags the filter can read.

Each refused call fails with EPERM (ENOSYS for clone3): the program sees an error, the kernel nothing else.
"""

from __future__ import annotations

import ctypes
import errno
import os

ACT_ALLOW = 0x7FFF0000
ACT_ERRNO = 0x00050000
CMP_NE, CMP_MASKED_EQ = 1, 7
AF_UNIX = 1
NAMESPACE_FLAGS = (0x00020000, 0x02000000, 0x04000000, 0x08000000, 0x10000000, 0x20000000, 0x40000000, 0x00000080)
DENIED = (
    "ptrace", "process_vm_readv", "process_vm_writev", "pidfd_getfd",
    "unshare", "setns", "mount", "umount2", "pivot_root", "chroot", "move_mount", "open_tree", "fsopen",
    "fsconfig", "fsmount", "fspick", "mount_setattr",
    "bpf", "perf_event_open", "userfaultfd", "io_uring_setup", "io_uring_enter", "io_uring_register",
    "keyctl", "add_key", "request_key", "init_module", "finit_module", "delete_module", "kexec_load",
    "kexec_file_load", "open_by_handle_at", "name_to_handle_at", "fanotify_init", "swapon", "swapoff", "reboot",
    "syslog", "acct", "quotactl", "iopl", "ioperm", "lookup_dcookie",
)


class ArgCompare(ctypes.Structure):
    _fields_ = [("arg", ctypes.c_uint), ("op", ctypes.c_int), ("datum_a", ctypes.c_uint64),
                ("datum_b", ctypes.c_uint64)]


class SeccompUnavailable(RuntimeError):
    """libseccomp is not installed, or refused to build the filter."""


def load_libseccomp():
    try:
        library = ctypes.CDLL("libseccomp.so.2", use_errno=True)
    except OSError:
        raise SeccompUnavailable("libseccomp.so.2 not found (Debian: apt-get install libseccomp2)") from None
    library.seccomp_init.restype = ctypes.c_void_p
    library.seccomp_init.argtypes = [ctypes.c_uint32]
    library.seccomp_rule_add_array.argtypes = [ctypes.c_void_p, ctypes.c_uint32, ctypes.c_int, ctypes.c_uint,
                                               ctypes.POINTER(ArgCompare)]
    library.seccomp_syscall_resolve_name.argtypes = [ctypes.c_char_p]
    library.seccomp_export_bpf.argtypes = [ctypes.c_void_p, ctypes.c_int]
    library.seccomp_release.argtypes = [ctypes.c_void_p]
    return library


def compile_filter() -> bytes:
    """The sandbox's filter as BPF bytes (struct sock_filter[], 8 bytes an instruction) for this machine."""
    library = load_libseccomp()
    context = library.seccomp_init(ACT_ALLOW)
    if not context:
        raise SeccompUnavailable("seccomp_init failed")
    try:
        def rule(action: int, name: str, *compares: tuple[int, int, int, int]) -> None:
            number = library.seccomp_syscall_resolve_name(name.encode())
            if number < 0:  # not a syscall of this architecture (iopl on arm64): nothing to refuse
                return
            array = (ArgCompare * max(len(compares), 1))(*(ArgCompare(*compare) for compare in compares))
            if library.seccomp_rule_add_array(context, action, number, len(compares), array) < 0:
                raise SeccompUnavailable(f"libseccomp refused the rule for {name}")

        eperm = ACT_ERRNO | errno.EPERM
        for name in DENIED:
            rule(eperm, name)
        rule(ACT_ERRNO | errno.ENOSYS, "clone3")
        for flag in NAMESPACE_FLAGS:
            rule(eperm, "clone", (0, CMP_MASKED_EQ, flag, flag))
        rule(eperm, "socket", (0, CMP_NE, AF_UNIX, 0))
        output = os.memfd_create("seccomp-bpf")
        try:
            if library.seccomp_export_bpf(context, output) < 0:
                raise SeccompUnavailable("seccomp_export_bpf failed")
            program = os.pread(output, 1 << 20, 0)
        finally:
            os.close(output)
    finally:
        library.seccomp_release(context)
    if not program or len(program) % 8:
        raise SeccompUnavailable("libseccomp exported no filter")
    return program
