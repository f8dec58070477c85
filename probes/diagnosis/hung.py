"""The hung verdict's body: nothing has moved for the hang threshold, so say which signals stayed silent, where
the main thread is stuck, what else waits (threads, a silent peer, dead children, disk waits), and name the
bottleneck by the activity it is stuck in (HUNG_BOTTLENECK_BY_ACTIVITY, from the rules' facts). Also the sleeping
verdict's body: as silent, but only asleep in the kernel with no Python stack to be stuck in, which is not a hang."""

from __future__ import annotations

from probes.diagnosis.bottlenecks import HUNG_BOTTLENECK_BY_ACTIVITY
from probes.diagnosis.evidence import Evidence
from probes.diagnosis.rules.rule import Candidate
from probes.diagnosis.stacks import (
    COMMS,
    DATA_WAIT,
    IO,
    QUEUE_WAIT,
    WAIT,
    Activity,
    classify_stack,
    describe,
    format_place_first,
    is_library,
)
from probes.frame import StackFrame


def hung_bottleneck(ev: Evidence, hang_after_s: float) -> Candidate:
    """The verdict's body when nothing has moved for `hang_after_s`: where it is stuck, and why."""
    silent = f"no progress for {ev.stuck_for_s:.0f} s" if ev.progress_seen else \
        f"no progress in the {ev.stuck_for_s:.0f} s watched so far"
    if ev.log_still is not None:
        # Only what was measured: the log's age, and the frames watched, in which nothing moved.
        log_s, watched_s = ev.log_still
        silent = f"no log line for {duration_words(log_s)} (the log's last write), no CPU used in the " \
                 f"{watched_s:.0f} s watched"
    lines = [f"{silent} (hang threshold {hang_after_s:g} s): {_quiet_signals(ev)}"]
    advice = []
    activity: Activity | None = None
    if ev.stuck_stack:
        stuck = classify_stack(ev.stuck_stack, idle=True, peer_wait=ev.peer_wait)
        activity = stuck.activity
        same = f"; same stack for {ev.unchanged_for_s:.0f} s" if ev.unchanged_for_s >= 1.0 else ""
        # Where first: the line is cut to a row on a small screen, and file:line is what a person looks up.
        lines.append(f"main thread stuck {format_place_first(stuck.responsible, stuck.user_frame)}; "
                     f"thread {ev.stuck_thread}, PID {ev.main_pid}{same}")
    else:
        lines.append("no stack of the main thread was sampled")
    waiting_peers = _other_waiting_threads(ev)
    for name, frame in waiting_peers[:2]:
        lines.append(f"thread {name} also waiting in {describe(frame)}")
    main = ev.latest.process(ev.main_pid)
    if activity == IO and main is not None and main.tcp_peers:
        since = (f"; nothing received for {main.tcp_last_data_recv_s:.0f} s"
                 if main.tcp_last_data_recv_s is not None else "")
        lines.append(f"connected to {', '.join(main.tcp_peers)}{since}: the peer has gone silent")
        advice.append(f"The peer ({main.tcp_peers[0]}) stopped sending: check that server; give reads a timeout "
                      "(socket.settimeout, requests' timeout=) so a dead peer raises instead of hanging.")
    for child in ev.dead_children[:2]:
        feeds = " — the queue it fed will never fill" if activity in (QUEUE_WAIT, DATA_WAIT) else ""
        state = "is a zombie (exited, not reaped)" if child.how == "zombie" else "exited"
        how = f": {child.ended}" if child.ended else ""
        lines.append(f"child PID {child.pid} ({child.name}, {child.role}) {state}{how}{feeds}")
    if ev.disk_wait_threads:
        lines.append(f"{ev.disk_wait_threads} threads in uninterruptible disk wait (D state)")
    if ev.dead_children and activity in (QUEUE_WAIT, DATA_WAIT):
        advice.append("Its producer died: check that process's exit (its log; dmesg for the OOM killer). Use "
                      "get(timeout=...) and check producer.is_alive() so the loop fails instead of hanging.")
    if waiting_peers and activity in (WAIT, QUEUE_WAIT, None):
        advice.append("Threads wait on each other: take locks in one global order, or acquire(timeout=...) to "
                      "surface the cycle.")
    if activity == COMMS:
        advice.append("A collective waits for a rank that never arrives: look at the other ranks; "
                      "TORCH_NCCL_ASYNC_ERROR_HANDLING=1 and a process-group timeout turn the hang into an error.")
    if ev.disk_wait_threads:
        advice.append("Threads are stuck in the kernel on I/O: check the filesystem (NFS/FUSE mounts, dmesg).")
    advice.append(f"py-spy dump --native --pid {ev.main_pid} shows the native frames (locks, CUDA, NCCL) "
                  "under the Python line.")
    bottleneck = HUNG_BOTTLENECK_BY_ACTIVITY.get(activity, "unknown") if activity else "unknown"
    return Candidate(bottleneck, 1.0, lines, advice)


def sleeping_bottleneck(ev: Evidence) -> Candidate:
    """The verdict's body when nothing moved but the process only sleeps in the kernel, with no Python stack of its
    main thread to be stuck in: idle, in words that do not alarm, and where the work is when it is not here."""
    main = ev.latest.process(ev.main_pid)
    name = f" ({main.name})" if main is not None and main.name else ""
    if ev.stuck_stack is not None:  # a DataLoader worker (the only Python process called sleeping)
        lines = [f"PID {ev.main_pid}{name} is a DataLoader worker asleep in the kernel (state S), waiting for its "
                 f"next index, for {ev.stuck_for_s:.0f} s: {_quiet_signals(ev)}",
                 f"main thread waits in {describe(ev.stuck_stack[0])}"]
        parent = f" (PID {main.ppid})" if main is not None and main.ppid else ""
        advice = [f"A worker waits while its training process has enough batches: watch that process{parent} "
                  "to see whether the training moves."]
        return Candidate("idle", 1.0, lines, advice)
    lines = [f"PID {ev.main_pid}{name} sleeps in the kernel (state S) and has done nothing for "
             f"{ev.stuck_for_s:.0f} s: {_quiet_signals(ev)}"]
    reason = ev.latest.stacks.reason
    lines.append(f"no Python stack to be stuck in: {reason}" if reason else "no Python stack of its main thread "
                 "was sampled")
    advice = ["A sleeping process is waiting, not hung: if the training runs elsewhere, point gputop at its "
              "Python process (its PID, or the launcher above it)."]
    return Candidate("idle", 1.0, lines, advice)


def duration_words(seconds: float) -> str:
    """'2 min 3 s', '1 h 5 min', '7 s'."""
    whole = round(seconds)
    if whole >= 3600:
        return f"{whole // 3600} h {whole % 3600 // 60} min"
    if whole >= 60:
        return f"{whole // 60} min {whole % 60} s"
    return f"{whole} s"


def _quiet_signals(ev: Evidence) -> str:
    """What was watched and stayed silent, in the words of the finest signal each frame carried."""
    processes = [p for p in ev.latest.processes if p.alive]
    main = ev.latest.process(ev.main_pid)
    if main is not None and main.main_thread_cpu_pct is not None:
        quiet = [f"main thread {main.main_thread_cpu_pct:.2f}% CPU",
                 f"{main.main_thread_wakeups_per_s or 0:.0f} wake-ups/s", "no reads or writes"]
        busy_others = (main.cpu_pct or 0.0) - main.main_thread_cpu_pct
        if busy_others >= 2.0:  # say it, so nobody reads the process's CPU% as progress
            quiet.append(f"while its other threads use {busy_others:.0f}% CPU")
        others = len(processes) - 1
        if others:
            other_cpu = sum(p.cpu_pct or 0.0 for p in processes if p.pid != ev.main_pid)
            quiet.append(f"{other_cpu:.0f}% CPU across {others} other process{'es' if others != 1 else ''}")
    else:
        cpu = "0% CPU" if (ev.tree_cpu_pct or 0.0) < 1.0 else f"{ev.tree_cpu_pct:.1f}% CPU"
        quiet = [cpu, f"no file I/O across {len(processes)} process{'es' if len(processes) != 1 else ''}"]
    if ev.gpu.in_use:
        quiet.append("GPU idle")
    return ", ".join(quiet)


def _other_waiting_threads(ev: Evidence) -> list[tuple[str, StackFrame]]:
    """Other threads of the main process that wait inside the user's own code (lock-order suspects)."""
    found: list[tuple[str, StackFrame]] = []
    for thread in ev.latest.stacks.threads:
        if thread.pid != ev.main_pid or not thread.idle or thread.frames == ev.stuck_stack:
            continue
        if thread.name == (ev.stuck_thread or "MainThread") or thread.tid == ev.main_pid:
            continue
        user = next((f for f in thread.frames if not is_library(f)), None)
        if user is not None:
            found.append((thread.name or f"tid {thread.tid}", user))
    return found
