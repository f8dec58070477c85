"""One sampled process's py-spy runs, back to back on three threads: record windows, dumps and GIL windows.

:class:`ProcessSampler` owns the loops that decide, for one process, when each py-spy run starts (asking its
probes/sampling/sampling_policy.SamplingPolicy for the window's length and rate, and the tree's
probes/sampling/tree_sampling.TreeSamplingPolicy whether it may sample now), how long it may run, what a run that
failed or was killed means for the next one (backoff, restart), and a record window a wake ended early (its
samples come in on a thread of their own, so the next window need not wait). py-spy itself is started through
probes/sampling/pyspy_binary.py; what the runs gather goes into the sampler's probes/sampling/sampler_results.py.
Everything shared with the other processes' samplers is read and changed under the stack sampler's one lock.
See probes/sampling/pyspy.py for what each kind of window is for and what it costs.
"""

from __future__ import annotations

import dataclasses
import os
import signal
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass

from probes.frame import GilSamples, StackCount, ThreadStack
from probes.sampling.pyspy_binary import (
    DUMP_TIMEOUT_S,
    FAILURE_EXITED,
    FAILURE_OTHER,
    MAX_BACKOFF_S,
    PyspyChildren,
    PyspyRun,
    RecordPair,
    backoff,
    dump_argv,
    explain_failure,
    gil_argv,
    process_gone,
    read_output,
    record_argv,
    remove_output,
)
from probes.sampling.pyspy_output import (
    dominant_position,
    idle_at_known_waits,
    is_worker_stack,
    main_thread_position,
    main_thread_positions,
    other_thread_working,
    parse_dump,
    parse_raw,
    samples_in,
    split_by_activity,
)
from probes.sampling.sampler_results import STATUS_OK, ProcessState, SamplerResults, Window
from probes.sampling.sampling_policy import (
    SamplingPolicy,
    WindowPlan,
    main_thread_spine,
    main_thread_stack,
    stack_check_interval_s,
)
from probes.sampling.sleep_lines import asleep_at_sleep_lines
from probes.sampling.stacks import merge_counts
from probes.sampling.tree_sampling import TreeSamplingPolicy

CUT_EXIT_WAIT_S = 10.0  # a window ended early that has not written its samples by then is killed
# GIL windows: the first is short so that a contended GIL is named soon after a helper thread starts working;
# later ones are longer because each py-spy start costs as much as tens of looks. Between windows, while no
# thread other than the main one works, the loop checks the latest dump this often.
GIL_FIRST_WINDOW_S = 5
GIL_WINDOW_S = 10
GIL_GATE_POLL_S = 1.0


@dataclass(frozen=True)
class SamplerSettings:
    """How the stack sampler was asked to run py-spy, the same for every process."""

    pyspy_path: str | None
    rate_hz: float
    settled_rate_hz: float | None  # the rate while the picture holds still (None: always rate_hz)
    native: bool
    nonblocking: bool  # never together with native: py-spy cannot combine them
    dump_every_s: float
    first_window_s: float
    max_window_s: float
    stack_check_every_s: float | None  # dump at most this often to check the main thread's stack (None: never)
    workdir: str  # where py-spy writes its windows and logs


@dataclass(frozen=True)
class _WindowFiles:
    """Where a record window's two halves write: each its raw stacks and its log."""

    out: str
    log: str
    active_out: str
    active_log: str

    def remove(self) -> None:
        for path in (self.out, self.log, self.active_out, self.active_log):
            remove_output(path)


class ProcessSampler:
    """The three loops of one process; ``start`` starts them, setting ``stop`` ends them.

    ``peers`` is the stack sampler's {pid: sampler} (this one while it is current): the stack checks share one CPU
    budget, and a sampler that is no longer there was retired (its process dropped, or dropped and added again),
    so what it gathers goes nowhere.
    """

    def __init__(self, pid: int, policy: SamplingPolicy, *, settings: SamplerSettings, lock: threading.Lock,
                 tree: TreeSamplingPolicy, results: SamplerResults, children: PyspyChildren,
                 peers: Mapping[int, ProcessSampler], wake: Callable[..., None]) -> None:
        self.pid = pid
        self.policy = policy  # rates, window lengths, dump cadence; read and changed under the sampler's lock
        self.stop = threading.Event()
        self.threads: list[threading.Thread] = []
        self.window_epoch: int | None = None  # the running record window's epoch; None between windows
        self.record_child: RecordPair | None = None  # the running record window's py-spys, to end it early
        # A wake writes a byte here so that the record loop stops waiting for the window it ended: py-spy only
        # notices SIGINT at its next sample (a second or two at 1 Hz), and the next window should not wait for it.
        self.wake_pipe: tuple[int, int] = os.pipe2(os.O_NONBLOCK | os.O_CLOEXEC)
        # CPU seconds a dump of this process costs (smoothed): how often its stacks can be checked within budget.
        self.dump_cpu_s: float | None = None
        self._settings = settings
        self._lock = lock
        self._tree = tree
        self._results = results
        self._children = children
        self._peers = peers
        self._wake = wake

    def start(self) -> None:
        pid = self.pid
        self.threads = [
            threading.Thread(target=self._record_loop, name=f"gputop-pyspy-record-{pid}", daemon=True),
            threading.Thread(target=self._dump_loop, name=f"gputop-pyspy-dump-{pid}", daemon=True),
            threading.Thread(target=self._gil_loop, name=f"gputop-pyspy-gil-{pid}", daemon=True),
        ]
        for thread in self.threads:
            thread.start()

    def end_window_early(self) -> RecordPair | None:
        """Under the lock, on a wake: mark the running record window as ended early and stop the record loop's
        waiting for it; its py-spys, for the caller to send SIGINT outside the lock (None: it is still starting,
        and _drive ends it as soon as it runs)."""
        child = self.record_child
        if child is None:
            return None
        child.cut = True
        try:
            os.write(self.wake_pipe[1], b"w")  # the loop stops waiting for this window
        except OSError:  # full: a wake is already waiting to be read
            pass
        return child

    # --- one run ----------------------------------------------------------------------------------

    def _run(self, argv: list[str], stdout_path: str, stderr_path: str | None, timeout: float,
             dump: bool = False) -> tuple[int | None, str | None, str | None]:
        """Run one child to its end (or kill it after ``timeout``); (returncode, spawn error, the signal that killed
        it when not gputop). ``dump``: a dump, whose CPU time is remembered (how often stacks can be checked)."""
        child = self._children.spawn(self.pid, argv, stdout_path, stderr_path)
        if isinstance(child, str):
            return None, child, None
        returncode, killed_by, _ = self._drive(child, timeout, dump=dump)
        return returncode, None, killed_by

    def _drive(self, child: PyspyRun | RecordPair, timeout: float, record: bool = False,
               dump: bool = False) -> tuple[int | None, str | None, bool]:
        """Wait for a started child (or pair) to end, or end it after ``timeout``; (returncode, the signal that
        killed it when not gputop, whether a wake ended it early). ``record``: the record window's pair, which a
        wake may end early; it is then left running for _finish_cut to wait for, so that the next window need not."""
        cut_now = False
        if record:
            assert isinstance(child, RecordPair)
            _drain(self.wake_pipe[0])  # wakes between windows concern no running child
            with self._lock:
                self.record_child = child
                # A wake came between planning this window and starting it: it would straddle the change.
                cut_now = self.window_epoch is not None and self.window_epoch != self.policy.epoch
                child.cut = cut_now
        if cut_now:
            child.signal(signal.SIGINT)
        handed_off = False
        try:
            deadline = time.monotonic() + timeout
            while not child.wait(max(0.0, deadline - time.monotonic()), self.wake_pipe[0] if record else None):
                if child.cut:
                    handed_off = True
                    return None, None, True
                if time.monotonic() >= deadline:
                    child.signal(signal.SIGINT)  # record writes what it has on SIGINT
                    if not child.wait(2.0):
                        child.kill_and_reap()
                    break
                _drain(self.wake_pipe[0])  # a wake for a window that has since ended
        finally:
            if record:
                with self._lock:
                    self.record_child = None
            if not handed_off:
                if child.running:
                    child.kill_and_reap()
                self._children.finish(child)
                if dump and child.cpu_seconds > 0:  # what a stack check costs (stack_check_interval_s)
                    before = self.dump_cpu_s
                    self.dump_cpu_s = child.cpu_seconds if before is None else 0.7 * before + 0.3 * child.cpu_seconds
        return child.returncode, child.killed_by, False

    def _wait_turn(self, dump: bool = False) -> bool:
        """Wait until the tree's policy lets this process start a record window (or, ``dump``, a dump); False
        when this sampler was stopped meanwhile."""
        while not self.stop.is_set():
            with self._lock:
                wait_s = self._tree.wait_s(self.pid, time.monotonic(), dump=dump)
            if wait_s <= 0:
                return True
            self.stop.wait(wait_s)
        return False

    def _path(self, name: str) -> str:
        return os.path.join(self._settings.workdir, name)

    # --- record windows ---------------------------------------------------------------------------

    def _record_loop(self) -> None:
        try:
            self._record_windows()
        finally:
            with self._lock:  # under the lock: a wake writes to the pipe only while it is open
                read_fd, write_fd = self.wake_pipe
                self.wake_pipe = (-1, -1)
            os.close(read_fd)
            os.close(write_fd)

    def _finish_cut(self, pair: RecordPair, files: _WindowFiles, plan: WindowPlan, started: float) -> None:
        """Wait for a window a wake ended (py-spy writes at its next sample) and deliver what it took."""
        try:
            if not pair.wait(CUT_EXIT_WAIT_S):
                pair.kill_and_reap()
        finally:
            if pair.running:
                pair.kill_and_reap()
            self._children.finish(pair)
        samples, counts, problem = read_pair(self.pid, pair, files, pair.every.returncode == 0,
                                               self._settings.native)
        files.remove()
        if counts and not self.stop.is_set():
            self._deliver_window(_window(self.pid, counts, samples, pair, plan, started), problem)
        else:
            self._window_gone(plan.epoch)

    def _hand_off_cut(self, pair: RecordPair, files: _WindowFiles, plan: WindowPlan, started: float) -> None:
        """A wake ended the window and its py-spys are still writing: a thread of its own waits for them."""
        finisher = threading.Thread(target=self._finish_cut, name=f"gputop-pyspy-cut-{self.pid}", daemon=True,
                                    args=(pair, files, plan, started))
        with self._lock:
            # Finished finishers go: a process woken often would otherwise keep one Thread per wake
            # for the whole run (an hour's tracemalloc soak found them among what grew).
            self.threads = [t for t in self.threads if t.is_alive() or t.ident is None]
            self.threads.append(finisher)
        finisher.start()

    def _record_windows(self) -> None:
        pid = self.pid
        settings = self._settings
        failures = 0
        window_number = 0
        while not self.stop.is_set():
            # Each window its own files: one a wake ended may still be writing while the next one runs.
            window_number += 1
            name = self._path(f"record-{pid}-{window_number}")
            files = _WindowFiles(f"{name}.txt", f"{name}.log", f"{name}-active.txt", f"{name}-active.log")
            if not self._wait_turn():
                return
            with self._lock:
                plan = self.policy.next_window()
                turn_s = self._tree.turn_length_s(pid)
                if turn_s is not None:  # a worker's turn: its siblings showed what it runs, so no close look
                    plan = dataclasses.replace(plan, seconds=turn_s,
                                               rate_hz=min(plan.rate_hz, settings.settled_rate_hz or plan.rate_hz))
                self.window_epoch = plan.epoch
                self._tree.window_started(pid, time.monotonic())
            started = time.monotonic()
            argvs = [record_argv(settings.pyspy_path, pid, plan.seconds, out, plan.rate_hz, native=settings.native,
                                 nonblocking=settings.nonblocking, idle=idle)
                     for out, idle in ((files.out, True), (files.active_out, False))]
            pair = self._children.spawn_pair(pid, (argvs[0], files.log), (argvs[1], files.active_log))
            if isinstance(pair, str):
                returncode, spawn_error, killed_by, handed_off = None, pair, None, False
            else:
                spawn_error = None
                returncode, killed_by, handed_off = self._drive(pair, timeout=3 * plan.seconds + 10, record=True)
            with self._lock:
                self.window_epoch = None
                self._tree.window_dropped(pid)  # a window with samples says what it showed below
            if handed_off and isinstance(pair, RecordPair):  # maybe still running
                if self.stop.is_set():
                    pair.kill_and_reap()
                    self._children.finish(pair)
                    return
                self._hand_off_cut(pair, files, plan, started)
                continue
            cut = isinstance(pair, RecordPair) and pair.cut
            if self.stop.is_set():
                files.remove()
                return
            if killed_by is not None:  # its window is lost (record writes only at its end): start again
                files.remove()
                failures += 1
                self._note_killed("record", killed_by, backoff(failures))
                self.stop.wait(backoff(failures))
                continue
            log = read_output(files.log)
            samples, counts, problem = (read_pair(pid, pair, files, returncode == 0 or cut, settings.native)
                                        if isinstance(pair, RecordPair) else (0, [], None))
            files.remove()
            if counts and isinstance(pair, RecordPair):
                self._deliver_window(_window(pid, counts, samples, pair, plan, started), problem)
            else:
                self._window_gone(plan.epoch)
            if returncode == 0 and "process exited" in log:
                if process_gone(pid):
                    self._note_failure(FAILURE_EXITED, f"PID {pid} exited")
                    return
                # py-spy says "exited" also when a live process turned unreadable (non-dumpable) or ran a
                # new program mid-window: the next window says why, after a pause in case it repeats.
                failures += 1
                self.stop.wait(backoff(failures))
                continue
            if counts:
                failures = 0
                self._window_finished(counts, samples, plan, behind="behind in sampling" in log)
                continue
            if cut:  # ended before its first sample: nothing failed, start the next window
                continue
            kind, reason = (FAILURE_OTHER, spawn_error) if spawn_error else explain_failure(pid, log)
            if returncode == 0 and kind == FAILURE_OTHER:
                reason = f"py-spy recorded no samples of PID {pid}"
            self._note_failure(kind, reason)
            if kind == FAILURE_EXITED:
                return
            failures += 1
            self.stop.wait(backoff(failures))

    def _window_finished(self, counts: list[StackCount], samples: int, plan: WindowPlan, behind: bool) -> None:
        """A window with samples: the process samples fine, and the policies learn what it showed."""
        pid = self.pid
        with self._lock:
            self._results.note_success(pid, self._current_state(), behind, self._settings.rate_hz)
        picture = dominant_position(counts)
        with self._lock:
            # A rank whose picture moved to one another rank shows: the job's step caught at another
            # moment, not a change of its own (on a node's job, a quarter of the ranks' windows were
            # such close looks, 1 to 5 s at 5 Hz).
            self.policy.window_finished(picture, samples, plan.epoch, main_thread_positions(counts, pid),
                                        moved_with_peers=self._tree.another_rank_shows(pid, picture),
                                        main_spine=main_thread_spine(counts, pid))
            self._tree.window_finished(pid, picture, self.policy.settled, time.monotonic())

    # --- GIL windows ------------------------------------------------------------------------------

    def _gil_loop(self) -> None:
        """GIL windows back to back while another thread than the main one works (see probes/sampling/pyspy.py).

        Failures are not reported here: the record and dump loops of the same process say why py-spy
        cannot read it; a GIL window that did not run to its end is dropped (its looks are unknown)."""
        pid = self.pid
        out_path = self._path(f"gil-{pid}.txt")
        log_path = self._path(f"gil-{pid}.log")
        windows = failures = 0
        while not self.stop.is_set():
            with self._lock:
                state = self._current_state()
                wanted = state is not None and state.status == STATUS_OK and other_thread_working(pid, state.threads)
            if not wanted:
                self.stop.wait(GIL_GATE_POLL_S)
                continue
            seconds = GIL_FIRST_WINDOW_S if windows == 0 else GIL_WINDOW_S
            rate_hz = max(1, round(self._settings.rate_hz))  # py-spy takes whole looks per second
            windows += 1
            returncode, _, _ = self._run(gil_argv(self._settings.pyspy_path, pid, seconds, rate_hz, out_path),
                                            log_path, None, timeout=3 * seconds + 10)
            if self.stop.is_set():
                return
            log = read_output(log_path)
            raw = read_output(out_path)
            remove_output(out_path)
            remove_output(log_path)
            if returncode != 0 or "Stopped sampling" in log:
                failures += 1
                self.stop.wait(backoff(failures))
                continue
            failures = 0
            looks = seconds * rate_hz - 1
            holders = tuple(merge_counts(parse_raw(raw, pid)))
            with self._lock:
                self._results.add_gil(self._current_state(), GilSamples(pid=pid, samples=looks, holders=holders))

    # --- dumps ------------------------------------------------------------------------------------

    def _dump_loop(self) -> None:
        pid = self.pid
        settings = self._settings
        out_path = self._path(f"dump-{pid}.json")
        err_path = self._path(f"dump-{pid}.err")
        failures = 0
        while not self.stop.is_set():
            if not self._wait_turn(dump=True):
                return
            started = time.monotonic()
            argv = dump_argv(settings.pyspy_path, pid, native=settings.native, nonblocking=settings.nonblocking)
            returncode, spawn_error, killed_by = self._run(argv, out_path, err_path, timeout=DUMP_TIMEOUT_S,
                                                           dump=True)
            if self.stop.is_set():
                return
            if killed_by is not None:
                failures += 1
                self._note_killed("dump", killed_by, backoff(failures))
                self.stop.wait(backoff(failures))
                continue
            threads = None
            if returncode == 0:
                try:
                    threads = parse_dump(read_output(out_path), pid)
                except (ValueError, TypeError, AttributeError):
                    threads = None
            if threads is not None:
                failures = 0
                wait_s = self._dump_read(threads)
                # From this dump's start: on a crowded machine a dump can take a good part of a second.
                self.stop.wait(max(0.0, wait_s - (time.monotonic() - started)))
                continue
            if spawn_error:
                kind, reason = FAILURE_OTHER, spawn_error
            elif returncode == 0:
                kind, reason = FAILURE_OTHER, f"py-spy dump of PID {pid} printed no readable JSON"
            else:
                kind, reason = explain_failure(pid, read_output(err_path))
            self._note_failure(kind, reason)
            if kind == FAILURE_EXITED:
                return
            failures += 1
            self.stop.wait(max(backoff(failures), min(settings.dump_every_s, MAX_BACKOFF_S)))

    def _dump_read(self, threads: list[ThreadStack]) -> float:
        """A dump's threads are in: deliver them, check the main thread's stack (waking this process when it
        moved), and return how long until the next dump."""
        pid = self.pid
        worker = any(is_worker_stack(t.frames) for t in threads)
        with self._lock:
            self._results.add_dump(self._current_state(), threads, worker)
        with self._lock:
            state = self._current_state()
            if state is not None and state.is_worker:  # its parent's main thread shows its changes
                self.policy.check_stacks = False
            moved = self.policy.stack_check(main_thread_position(threads, pid), main_thread_stack(threads, pid))
            every_s = self._settings.stack_check_every_s
            if every_s is not None:  # within the checks' CPU budget, shared by all
                checked = sum(1 for s in self._peers.values() if s.policy.checking_stacks)
                self.policy.stack_check_every_s = stack_check_interval_s(self.dump_cpu_s, checked, every_s)
            wait_s = self._tree.dump_wait_s(pid, self.policy.dump_wait_s())
        if moved is not None and not self.stop.is_set():
            # The dumps saw the new phase: the ended window's samples (a second or more of the old
            # phase, and py-spy at 1 Hz may take that long to write them) would only delay the mark.
            self._wake(f"PID {pid}: {moved}", pids=[pid], wait_for_cut=False)
        return wait_s

    # --- deliveries -------------------------------------------------------------------------------

    def _current_state(self) -> ProcessState | None:
        """Under the lock: this process's state, unless this sampler was retired."""
        if self._peers.get(self.pid) is not self:
            return None
        return self._results.states.get(self.pid)

    def _window_gone(self, epoch: int) -> None:
        """A record window ended with nothing to deliver: a mark need not wait for it."""
        with self._lock:
            self._results.window_in(self.pid, epoch)

    def _deliver_window(self, window: Window, problem: str | None = None) -> None:
        """A window's samples, and (``problem``) why its waiting was not measured when one of its halves failed."""
        worker = any(is_worker_stack(c.frames) for c in window.counts)
        with self._lock:
            state = self._current_state()
            self._results.add_window(state, window, worker)
            if problem and state is not None:
                self._results.event(problem)

    def _note_killed(self, mode: str, signal_name: str, delay_s: float) -> None:
        with self._lock:
            self._results.note_killed(self.pid, self._current_state(), mode, signal_name, delay_s)

    def _note_failure(self, kind: str, reason: str) -> None:
        with self._lock:
            self._results.note_failure(self._current_state(), kind, reason)


def _window(pid: int, counts: list[StackCount], samples: int, pair: RecordPair, plan: WindowPlan,
            started: float) -> Window:
    """The finished window as delivered: its span from the pair's start (``started``, time.monotonic()) to its
    samples' end, and of that span the part after py-spy's start-up, where it sampled."""
    ended = pair.ended or time.monotonic()
    sampling_from = pair.sampling_from
    sampled = ended - sampling_from if sampling_from is not None and started <= sampling_from <= ended else None
    return Window(pid, counts, samples, ended - started, plan.epoch, time.time() - (time.monotonic() - started),
                  plan.rate_hz, sampled)


def read_pair(pid: int, pair: RecordPair, files: _WindowFiles, every_ok: bool, native: bool
          ) -> tuple[int, list[StackCount], str | None]:
    """What a window's pair took of ``pid``: (samples, counts split into working and waiting, and why its waiting was
    not measured when one half failed). ``every_ok``: the --idle half ended as it should (or was ended early).

    One half failing leaves the other's counts standing. Without the active half, the waiting is not
    measured: the samples at a known blocking call count as waiting (py-spy's own fallback list), the rest as
    working, and the reading says so. Without the --idle half, only the working samples are known: they are
    delivered as such, and the reading says that the window's waiting was not measured."""
    every_raw = read_output(files.out) if every_ok else ""
    every = parse_raw(every_raw, pid, native=native) if every_raw else []
    active_run = pair.active
    why_not = pair.active_error
    if active_run is not None:
        if active_run.killed_by is not None:
            why_not = f"killed by {active_run.killed_by}"
        elif active_run.returncode != 0 and not (active_run.cut and active_run.signalled):
            why_not = explain_failure(pid, read_output(files.active_log))[1]
    if why_not is None:
        active_raw = read_output(files.active_out)
        active = parse_raw(active_raw, pid, native=native) if active_raw else []
        if every:
            return samples_in(every), asleep_at_sleep_lines(split_by_activity(every, active)), None
        if not active:
            return 0, [], None
        return (samples_in(active), active,
                f"PID {pid}: a record window's waiting was not measured (its py-spy --idle half failed): "
                f"its samples are its working ones only")
    if not every:
        return 0, [], None
    return (samples_in(every), idle_at_known_waits(every),
            f"PID {pid}: a record window's waiting was not measured (its py-spy without --idle: "
            f"{why_not}): only its samples at a known blocking call count as waiting")


def _drain(fd: int) -> None:
    try:
        while os.read(fd, 64):
            pass
    except (BlockingIOError, OSError):
        pass
