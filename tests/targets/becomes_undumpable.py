"""Target: readable by a monitor without CAP_SYS_PTRACE at first, then not, while it keeps running.

It drops every capability at start (capset), so a monitor running as the same user (root) without
CAP_SYS_PTRACE may read its memory: the kernel lets a tracer of the same uid in when the tracer holds every
capability the target holds. On SIGUSR1 it makes itself non-dumpable (prctl PR_SET_DUMPABLE 0, as
programs that handle secrets do): from then on only a tracer with CAP_SYS_PTRACE may read it. Prints "ready"
once started, "undumpable" once the flag is set. Linux only; needs to start as root.
"""

import ctypes
import signal

PR_SET_DUMPABLE = 4
_LINUX_CAPABILITY_VERSION_3 = 0x20080522

libc = ctypes.CDLL(None, use_errno=True)


class _CapHeader(ctypes.Structure):
    _fields_ = [("version", ctypes.c_uint32), ("pid", ctypes.c_int)]


class _CapData(ctypes.Structure):
    _fields_ = [("effective", ctypes.c_uint32), ("permitted", ctypes.c_uint32), ("inheritable", ctypes.c_uint32)]


def drop_every_capability() -> None:
    header = _CapHeader(_LINUX_CAPABILITY_VERSION_3, 0)
    empty = (_CapData * 2)()  # version 3 takes two 32-bit halves
    if libc.capset(ctypes.byref(header), empty) != 0:
        raise OSError(ctypes.get_errno(), "capset failed")


asked = []


def spin_until_undumpable_for_gputop() -> None:
    while True:
        sum(range(10_000))
        if asked:
            asked.clear()
            if libc.prctl(PR_SET_DUMPABLE, 0, 0, 0, 0) != 0:
                raise OSError(ctypes.get_errno(), "prctl failed")
            print("undumpable", flush=True)


if __name__ == "__main__":
    drop_every_capability()
    signal.signal(signal.SIGUSR1, lambda *_: asked.append(True))
    print("ready", flush=True)
    spin_until_undumpable_for_gputop()
