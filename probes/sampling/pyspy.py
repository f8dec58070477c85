"""The stack sampler: py-spy over every process of the target's tree, on background threads.

:class:`StackSampler` is the coordinator that the engine talks to: which processes are sampled (``set_targets``,
``restart``), their parts in the tree (``set_roles``), the wakes when the picture may have moved (``observe``,
``wake``), and one reading per tick (``collect``). The work is done beside it, one concern a module:

* probes/sampling/pyspy_binary.py: the py-spy binary, the only module that starts it (each child, their CPU
  cost, the command line of each kind of run, what a failure means);
* probes/sampling/process_sampler.py: one process's record windows, dumps and GIL windows, back to back on
  its own threads, with retries and the windows a wake ends early;
* probes/sampling/sampler_results.py: what was gathered until the next ``collect()``, each process's state,
  and the phase mark a wake puts on a reading.

Reading py-spy's output is probes/sampling/pyspy_output.py; the rates, window lengths and dump cadence each
process gets are decided by its probes/sampling/sampling_policy.SamplingPolicy, which the sampler only obeys; who
of a many-process tree samples at all (alike DataLoader workers in turns, agreeing ranks about two at a time) by
one probes/sampling/tree_sampling.TreeSamplingPolicy over the tree, which each record window and dump waits for.

For each process of the target's tree, :class:`StackSampler` keeps up to three kinds of py-spy child running:

* a rolling ``py-spy record --format raw`` window, run as a pair started together
  (probes/sampling/pyspy_binary.RecordPair): one with ``--idle`` (every thread in every sample), one without
  (only the samples py-spy found the thread active in). Raw output carries no per-sample active flag; the pair's
  difference per stack is each stack's waiting samples, measured in the same window rather than inferred from
  dumps (issue 39). Measured here (py-spy 0.4.3, Python 3.11, a busy
  main thread plus 100 idle threads): a sample costs ~0.012 core-seconds (it grows with threads x
  rate) and each record start ~0.02-0.07, while one ``py-spy dump`` costs ~0.035 core-seconds, so a
  dump per sample would cost about three times as much and spawn a process per sample. ``record``
  writes its file only when it ends, so windows are short at first (1 s, so the first hot frames
  arrive fast) and then double up to 5 s to amortise the start (the policy's choice). Counts arrive in lumps, one per
  finished window. py-spy spaces samples randomly (exponential gaps), so a window's wall time varies.
* a ``py-spy dump --json`` every ``dump_every_s`` (the first at once): each thread's current stack with
  py-spy's ``active`` and ``owns_gil`` flags (and native frames where asked for). These are the reading's
  ``threads``: the latest stack of each thread (a hung one's), the stack checks below. One dump per
  5 s costs a 25th of a dump per sample at 5 Hz.

* a ``py-spy record --gil`` window (who holds the GIL at each look), only while a thread other than the main
  one was seen working in the latest dump: a one-thread process cannot contend for its GIL, so most
  processes (DataLoader workers, a plain training loop) never get one. With ``--gil`` py-spy reads one
  thread per look (the holder) and skips the /proc scan of every thread's state, so a look is cheaper than
  a full sample; a look at which nobody holds the GIL records nothing, and ``--duration D --rate R`` takes
  exactly D x R looks of which the last is not written (py-spy 0.4 stops before recording it), so the
  window's looks are D x R - 1. Measured on tests/targets/gil_threads.py (a torch loop beside a pure-Python
  thread): 100 looks at 20 Hz cost 0.01 core-seconds against 0.04 for the full record of the same window.

py-spy runs ``--nonblocking`` by default (probes/sampling/pyspy_binary.py says why). The default rate, 5 Hz,
was measured with this sampler (records, dumps and starts together) on the 100-idle-thread target: 0.047 core
at 2 Hz, 0.076 at 5 Hz, 0.146 at 10 Hz; with one thread, 0.009 core at 5 Hz.

A wake (the cheap per-tick signals moved, see probes/sampling/sampling_policy.py) ends the running record windows
with SIGINT, on which py-spy 0.4 writes what it sampled so far ("Stopped sampling because Control-C pressed");
SIGTERM or SIGKILL would lose it. Once two windows since the last wake are in, a process's dumps come every
second or two and double as stack checks: when three in a row catch the main thread in a function its recent
windows never saw it in (the policy's ``stack_check``), that process alone is woken the same way, for changes
of phase that only the stacks show. Each dump's CPU time (wait4) sets how often: all checks together stay
within probes/sampling/sampling_policy.stack_check_budget_cores (0.02 core for one process, towards 0.01 for a
node's).

Children are started with ``posix_spawn`` and reaped with ``wait4`` so that their CPU time is known
(:meth:`StackSampler.sampler_cpu_seconds`). A py-spy that fails is retried with exponential backoff
(capped at 30 s); one killed by someone else (the OOM killer, a stray ``kill``) is restarted the same way
and each restart is reported with its count; a process that exits is reported once and left alone. Every
child ends by itself within a window even if gputop is killed, and :meth:`StackSampler.close` kills them
at once.
"""

from __future__ import annotations

import shutil
import signal
import sys
import tempfile
import threading
import time
from collections.abc import Sequence

from probes.frame import SampledWindow, StacksReading
from probes.sampling.process_sampler import ProcessSampler, SamplerSettings
from probes.sampling.pyspy_binary import PyspyChildren, find_pyspy, install_hint, pyspy_version
from probes.sampling.sampler_results import SamplerResults, availability, blocked
from probes.sampling.sampling_policy import (
    DEFAULT_DUMP_EVERY_S,
    DEFAULT_RATE_HZ,
    FIRST_WINDOW_S,
    MAX_WINDOW_S,
    STACK_CHECK_EVERY_S,
    PhaseChangeDetector,
    PhaseSignals,
    SamplingPolicy,
)
from probes.sampling.stacks import merge_counts
from probes.sampling.tree_sampling import TreeRoles, TreeSamplingPolicy


class StackSampler:
    """Samples the stacks of a set of processes with py-spy on background threads; thread-safe.

    ``collect()`` drains what was gathered since the previous call. Counts arrive once per finished
    record window (1 s at first, then up to ``max_window_s``), so most ticks carry no counts: sum
    them over several frames. Each count's ``idle`` is measured by its window's pair: a stack's samples in
    the window taken without ``--idle`` are its working ones, the rest of its samples its waiting ones.
    ``achieved_rate_hz`` is samples per second of wall time over the latest windows, gaps included.

    ``observe()`` takes each tick's cheap signals (before ``collect()``); when the policy's detector says
    they moved, ``wake()`` ends the running windows with SIGINT so their samples come now, and the reading
    that carries them says so in ``phase_change``.

    One lock guards everything the processes' samplers share: the results, the children, each process's
    policy and the tree's.
    """

    def __init__(
        self,
        rate_hz: float = DEFAULT_RATE_HZ,
        native: bool = False,
        nonblocking: bool = True,
        dump_every_s: float = DEFAULT_DUMP_EVERY_S,
        pyspy_path: str | None = None,
        *,
        first_window_s: float = FIRST_WINDOW_S,
        max_window_s: float = MAX_WINDOW_S,
        settled_rate_hz: float | None = None,
        stack_check_every_s: float | None = STACK_CHECK_EVERY_S,
    ) -> None:
        """settled_rate_hz: sample at this rate while the picture holds still (None: always rate_hz).
        stack_check_every_s: dump at most this often to check the main thread's stack (None: never)."""
        path = pyspy_path or find_pyspy()
        self.settings = SamplerSettings(
            pyspy_path=path,
            rate_hz=float(rate_hz),
            settled_rate_hz=float(settled_rate_hz) if settled_rate_hz is not None else None,
            native=native,
            nonblocking=nonblocking and not native,  # py-spy cannot combine them
            dump_every_s=dump_every_s,
            first_window_s=first_window_s,
            max_window_s=max(max_window_s, first_window_s),
            stack_check_every_s=stack_check_every_s,
            workdir=tempfile.mkdtemp(prefix="gputop-pyspy-"),
        )
        self.version: str | None = None
        self._unavailable_reason: str | None = None
        if path is None:
            self._unavailable_reason = f"py-spy not found beside {sys.executable} or on PATH; {install_hint()}"
        else:
            self.version = pyspy_version(path)
            if self.version is None:
                self._unavailable_reason = f"py-spy at {path} does not run; {install_hint()}"

        self._lock = threading.Lock()
        self._children = PyspyChildren(self._lock)
        self._results = SamplerResults()
        self._samplers: dict[int, ProcessSampler] = {}
        self._retired: list[ProcessSampler] = []
        # Waking on a change of phase (see probes/sampling/sampling_policy.py).
        self._detector = PhaseChangeDetector()
        # Over the whole tree: who may sample now (probes/sampling/tree_sampling.py); everyone, until set_roles says
        # more.
        self._tree = TreeSamplingPolicy()

    def _new_sampler(self, pid: int) -> ProcessSampler:
        settings = self.settings
        policy = SamplingPolicy(settings.rate_hz, settings.settled_rate_hz, first_window_s=settings.first_window_s,
                                max_window_s=settings.max_window_s, dump_every_s=settings.dump_every_s,
                                stack_check_every_s=settings.stack_check_every_s)
        return ProcessSampler(pid, policy, settings=settings, lock=self._lock, tree=self._tree, results=self._results,
                              children=self._children, peers=self._samplers, wake=self.wake)

    # --- public API ---------------------------------------------------------------------------

    @property
    def description(self) -> str:
        settings = self.settings
        mode = "native, blocking" if settings.native else ("nonblocking" if settings.nonblocking else "blocking")
        return f"py-spy {self.version or '?'} ({mode})"

    def set_targets(self, pids: Sequence[int]) -> None:
        """Sample exactly these processes: start samplers for new pids, stop those for dropped ones."""
        wanted = list(dict.fromkeys(int(p) for p in pids))
        with self._lock:
            if self._children.closed:
                return
            for pid in [p for p in self._results.states if p not in wanted]:
                self._results.drop_process(pid)
                sampler = self._samplers.pop(pid, None)
                if sampler is not None:
                    sampler.stop.set()
                    self._retired.append(sampler)
            self._retired = [s for s in self._retired if any(t.is_alive() for t in s.threads)]
            if self._unavailable_reason is not None:
                for pid in wanted:
                    self._results.keep_process(pid)
                return
            for pid in wanted:
                if pid in self._samplers:
                    continue
                self._results.add_process(pid)
                sampler = self._new_sampler(pid)
                self._samplers[pid] = sampler
                sampler.start()
            retired_children = self._children.of_targets_other_than(wanted)
        for child in retired_children:
            child.signal(signal.SIGKILL)

    def restart(self, pids: Sequence[int], reason: str) -> None:
        """Sample these processes afresh, as if new: their py-spy children are killed, what their samplers
        learnt is dropped (a window still running holds the old program's stacks), and new ones start
        with short windows. For a process that ran a new program (exec keeps the PID). ``reason`` goes
        into the next reading's errors."""
        with self._lock:
            if self._children.closed:
                return
            current = list(self._results.states)
            restarted = [pid for pid in dict.fromkeys(pids) if pid in self._results.states]
            if not restarted:
                return
            self._results.event(reason)
        self.set_targets([pid for pid in current if pid not in restarted])
        self.set_targets(current)

    def set_roles(self, roles: TreeRoles) -> None:
        """Each sampled process's part in the tree, for the tree's policy: ("worker", its training process),
        ("rank", None), or None (samples on its own). See probes/sampling/tree_sampling.py."""
        with self._lock:
            self._tree.set_roles(roles)

    def observe(self, now: float, signals: dict[int, PhaseSignals]) -> str | None:
        """This tick's cheap signals per process (``now``: time.monotonic()); when they say the picture may have
        moved, wake() and return why. The processes that moved are called up at once (the tree's policy); the
        wake spares what the tree's policy says did not move (workers that did not, and everyone else when only
        workers did): on a node's 73 processes a wake of all of them every few seconds cost more than the rest."""
        with self._lock:
            reason = self._detector.observe(now, signals, steady=self._tree.steady_pids())
            moved = self._detector.moved_pids
            self._tree.called_up(moved, time.monotonic())
            spared = self._tree.spared_by_wake(moved)
        if reason is not None:
            self.wake(reason, spared=spared)
        return reason

    def wake(self, reason: str, pids: Sequence[int] | None = None, wait_for_cut: bool = True,
             spared: set[int] | frozenset[int] = frozenset()) -> None:
        """Look closely again at once: every process (or those of ``pids``, less those ``spared``) goes back to
        the fast rate, and its running record window is ended with SIGINT, on which py-spy writes the samples
        it has, so they arrive now rather than at the window's end. The reading that carries them is marked
        with ``reason`` (phase_change): stack counts up to it describe the phase before. ``wait_for_cut``
        False: the mark does not wait for those samples (the next reading carries it; they come late and are
        dropped). ``spared``: what the tree's policy says did not move (probes/sampling/tree_sampling.py)."""
        to_cut = []
        with self._lock:
            if self._children.closed:
                return
            if pids is not None:  # a stack check saw these move: the tree's policy calls them up, as observe() does
                self._tree.called_up(pids, time.monotonic())
            for pid, sampler in self._samplers.items():
                if (pids is not None and pid not in pids) or pid in spared:
                    continue
                sampler.policy.wake()
                window_running = sampler.window_epoch is not None
                self._results.woken(pid, sampler.policy.epoch, await_window=window_running and wait_for_cut)
                if window_running:
                    child = sampler.end_window_early()
                    if child is not None:
                        to_cut.append(child)
            self._results.set_mark(reason, time.monotonic())
        for child in to_cut:
            child.signal(signal.SIGINT)

    def collect(self) -> StacksReading:
        """Everything gathered since the previous collect()."""
        with self._lock:
            taken = self._results.collect()
        windows = taken.windows
        available, reason = availability(taken.states, self._unavailable_reason)
        settings = self.settings
        return StacksReading(
            available=available,
            reason=reason,
            blocked=None if available else blocked(taken.states, self._unavailable_reason,
                                                   settings.pyspy_path is not None),
            sampler=self.description if settings.pyspy_path else None,
            rate_hz=settings.rate_hz,
            achieved_rate_hz=taken.achieved_rate_hz,
            samples=sum(w.samples for w in windows),
            native=settings.native,
            threads=taken.threads,
            counts=merge_counts(taken.counts),
            errors=taken.errors,
            phase_change=taken.phase_change,
            gil=taken.gil,
            windows=tuple(SampledWindow(pid=w.pid, started=round(w.started, 3), seconds=round(w.wall_seconds, 3),
                                        samples=w.samples, rate_hz=w.rate_hz,
                                        sampled_seconds=None if w.sampled_seconds is None
                                        else round(w.sampled_seconds, 3)) for w in windows),
        )

    def worker_pids(self) -> set[int]:
        """Pids whose stacks run torch's DataLoader ``_worker_loop`` (with fork it sits under the
        parent's copied frames, so it is looked for anywhere in the stack, not only at the root)."""
        with self._lock:
            return self._results.worker_pids()

    def sampler_cpu_seconds(self) -> float:
        """CPU seconds used by this sampler's py-spy children so far, finished and running."""
        return self._children.cpu_seconds()

    def close(self) -> None:
        """Stop every sampler and kill every py-spy child; returns once they are reaped."""
        with self._lock:
            samplers = list(self._samplers.values()) + self._retired
            self._samplers.clear()
            self._retired = []
            for sampler in samplers:
                sampler.stop.set()
            children = self._children.close()
        for child in children:
            child.signal(signal.SIGKILL)
        for sampler in samplers:
            for thread in sampler.threads:
                thread.join(timeout=10)
        with self._lock:
            leftovers = self._children.running()
        for child in leftovers:  # only if a loop thread is stuck: never leave a child behind
            child.kill_and_reap()
        shutil.rmtree(self.settings.workdir, ignore_errors=True)
