"""How an ended process is said (probes/diagnosis/exit_causes.py), and the waitpid status /proc keeps for a zombie
decoded (probes/sensors/proc_readers.py); a real zombie and the real deaths are tests/e2e/test_exit_causes_e2e.py."""

from __future__ import annotations

import signal

from probes.diagnosis.exit_causes import account
from probes.frame import ProcessExit
from probes.sensors.proc_readers import decode_wait_status


def _exit(**kw) -> ProcessExit:
    return ProcessExit(pid=42, role="main", name="python", seen_at=0.0, **kw)


def test_each_way_of_ending_is_said_with_what_it_usually_means():
    assert account(_exit(signal=signal.SIGSEGV, core_dumped=True)).how.startswith(
        "killed by SIGSEGV, core dumped: a crash in native code")
    assert "faulthandler" in account(_exit(signal=signal.SIGSEGV)).advice
    # a SIGKILL names its usual senders and claims none: the kernel log or the cgroup says which
    sigkill = account(_exit(signal=signal.SIGKILL))
    assert sigkill.how.startswith("killed by SIGKILL: sent by the kernel's OOM killer, a scheduler's limit or")
    assert "dmesg" in sigkill.advice
    assert "/dev/shm" in account(_exit(signal=signal.SIGBUS)).how
    assert account(_exit(exit_code=1)).how == "exited with status 1, as Python does on an uncaught exception"
    assert account(_exit(exit_code=0)).how == "finished (exit status 0)"
    assert account(_exit(exit_code=137)).how.startswith(
        "exited with status 137, a shell's word for a child killed by SIGKILL")
    assert account(_exit(exit_code=3)).how == "exited with status 3"
    assert account(_exit(signal=64)).how == "killed by SIGRTMAX"
    unknown = account(_exit(read_from="reaped by its parent before gputop read how it ended"))
    assert unknown.how == "how it ended is not known (reaped by its parent before gputop read how it ended)"


def test_a_waitpid_status_is_decoded():
    assert decode_wait_status(3 << 8) == (3, None, False)
    assert decode_wait_status(signal.SIGKILL) == (None, signal.SIGKILL, False)
    assert decode_wait_status(signal.SIGSEGV | 0x80) == (None, signal.SIGSEGV, True)
