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


def test_what_the_machine_recorded_survives_a_recording_and_replays_the_same_verdict(tmp_path):
    """Exits, the kernel's records, the memory cgroup and NCCL's answer ride in the recording, and replay says what
    the live run said."""
    import dataclasses

    from support.frames import FORWARD, main_count, make_frame

    from probes.machine_records import KernelEvent, MemoryReading, NcclRasReading
    from probes.monitoring.monitor import fold
    from probes.outputs.recording import Recorder, read_recording

    live = [make_frame(i, counts=[main_count(FORWARD, n=10)]) for i in range(3)]
    last = live[-1]
    gone = dataclasses.replace(last.target, alive=False, exited_at=last.time, exit_reason="process ended")
    live.append(dataclasses.replace(
        make_frame(3), target=gone,
        exits=(ProcessExit(pid=gone.pid, role="main", name="python", seen_at=last.time + 1, signal=9,
                           read_from="its zombie's /proc stat"),),
        kernel_events=(KernelEvent(kind="oom_kill", wall_time=last.time, pid=gone.pid, process_name="python",
                                   pci_bus_id=None, code=None, detail="", raw="Killed process", memcg=True,
                                   memcg_path="/train", anon_rss_kb=4_000_000),),
        memory=MemoryReading(cgroup_version="v1", limit_bytes=4 << 30, oom_kills_total=1, oom_kills_new=1),
        nccl_ras=NcclRasReading(read_at=last.time, address="localhost:28028", answered=False, raw="",
                                reason="connection refused")))
    path = tmp_path / "run.jsonl"
    recorder = Recorder(str(path), {"pid": gone.pid})
    for frame in live:
        recorder.append(frame)
    recorder.close()
    replayed = list(read_recording(str(path)))
    assert replayed == live
    said = fold(replayed).view.verdict
    assert said == fold(live).view.verdict
    assert said.evidence[0] == (f"PID {gone.pid} has exited: killed by the OOM killer at its memory cgroup's limit "
                                "/train, holding 3906 MB (the kernel log).")
