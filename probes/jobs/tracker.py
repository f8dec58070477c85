"""The job followed across ticks: :class:`JobTracker` lays out each tick's tree and applies it to the samples.

The engine builds one per watched PID. It decides the root once (probes/jobs/root.py), reads each process's
environment and command line once per process (PID and start time), its wait state each tick, lays the tree
out (probes/jobs/layout.py), keeps a job between a rank's exit and its restart, and fills Frame.job (a JobInfo)
with the words of the launcher's note.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from probes.frame import JobInfo, ProcessSample, StacksReading
from probes.jobs.facts import JobLayout, NoteContext, ProcessFacts
from probes.jobs.launchers import launcher_label, launcher_of_kind, launcher_of_process, read_dist_env
from probes.jobs.launchers.mp_spawn import is_spawn_child
from probes.jobs.layout import apply_layout, find_layout, stack_evidence
from probes.jobs.locality import NOT_PLACED, Locator, Placement
from probes.jobs.root import resolve_root_safely
from probes.jobs.world import WorldAccount, WorldWatch
from probes.sensors.proc_readers import main_thread_waits_for_child
from probes.sensors.process_facts import NO_ENV, DistEnv, is_python_command, process_executable, start_ticks


@dataclass(frozen=True)
class _Static:
    """What is read once per process (PID and start time): its environment and what its command line says."""

    cmdline: tuple[str, ...]
    env: DistEnv
    python: bool
    spawn_child: bool
    launcher_process: bool  # a known launcher's own process, by its command line


class JobTracker:
    """Follows the job found from `attached_pid` across ticks: update() lays out each tick's tree.

    root_pid is the process whose tree the engine should watch (decided once, at construction).
    """

    def __init__(self, attached_pid: int) -> None:
        self.attached_pid = attached_pid
        choice = resolve_root_safely(attached_pid)
        self.root_pid = choice.root_pid
        self._attached_rank = choice.attached_rank
        self._static: dict[tuple[int, int | None], _Static] = {}
        self._known_ranks: dict[int, int] = {}  # pid -> rank, as last laid out (mp.spawn's numbers stick)
        self._world_watch = WorldWatch()
        self._locator = Locator()
        self._main: int | None = None
        self._last_layout: JobLayout | None = None
        self._launchers: tuple[int, ...] = ()
        self._not_python: set[int] = set()
        self._last_info: JobInfo | None = None
        self._last_samples: tuple[ProcessSample, ...] = ()

    def unsampled_pids(self) -> set[int]:
        """Launchers that are not Python (bash, uv, srun): py-spy cannot read them, so the sampler skips them."""
        return {pid for pid in self._launchers if pid in self._not_python}

    def update(self, processes: Sequence[ProcessSample], stacks: StacksReading | None = None,
               started: Mapping[int, int] | None = None) -> tuple[JobInfo | None, tuple[ProcessSample, ...]]:
        """This tick's JobInfo (None for a lone process) and the samples with roles, ranks and owners set.
        ``started``: start times (clock ticks since boot) the caller read this tick (probes/sensors/proctree.py's
        started_ticks); a process not in it has its /proc/PID/stat read here."""
        try:
            return self._update(processes, stacks, started or {})
        except Exception:  # a probe never raises: a layout bug leaves the tree as proctree read it
            return None, tuple(processes)

    def _update(self, processes: Sequence[ProcessSample], stacks: StacksReading | None,
                started: Mapping[int, int]) -> tuple[JobInfo | None, tuple[ProcessSample, ...]]:
        if self._last_info is not None and processes and not any(p.alive for p in processes):
            # The root has ended (proctree returns its last samples marked ended): the job as last seen, ended.
            ended = tuple(dataclasses.replace(s, alive=False) for s in self._last_samples)
            return dataclasses.replace(self._last_info, rank_pids=(), selected_pid=None), ended
        spawn_evidence, waiting_in_stack = stack_evidence(stacks)
        children: dict[int, list[int]] = {}
        for p in processes:
            if p.ppid is not None and p.alive:
                children.setdefault(p.ppid, []).append(p.pid)
        facts = [self._facts(p, waiting_in_stack, children.get(p.pid, []), started.get(p.pid)) for p in processes]
        self._not_python = {f.pid for f in facts if not f.python}
        present = {p.pid for p in processes}
        self._static = {key: value for key, value in self._static.items() if key[0] in present}
        layout = find_layout(self.root_pid, facts, spawn_evidence, self._known_ranks, self._main)
        root = next((f for f in facts if f.pid == self.root_pid), None)
        last = self._last_layout
        if (layout is None and last is not None and root is not None
                and launcher_of_kind(last.kind).keeps_job_without_training(root)):
            # Between a rank's exit and its restart, or the script's next program: still the same job.
            launchers = tuple(pid for pid in last.launchers if pid in present) or (self.root_pid,)
            layout = dataclasses.replace(last, ranks=(), main_pid=None, launchers=launchers, other_candidates=0)
        if layout is None:
            self._launchers, self._last_layout, self._main, self._last_info = (), None, None, None
            return None, tuple(processes)
        self._last_layout = layout
        self._launchers = layout.launchers
        self._known_ranks = dict(layout.ranks)
        self._main = layout.main_pid
        by_pid = {f.pid: f for f in facts}
        samples = apply_layout(layout, processes, by_pid)
        self._last_info, self._last_samples = self._job_info(layout, samples, by_pid), samples
        return self._last_info, samples

    def _facts(self, sample: ProcessSample, waiting_in_stack: set[int], child_pids: list[int],
               started: int | None) -> ProcessFacts:
        if started is None:  # not read this tick by the caller
            started = start_ticks(sample.pid)
        key = (sample.pid, started)
        static = self._static.get(key)
        if static is None or (sample.cmdline and sample.cmdline != static.cmdline):  # new, or it exec'd
            if sample.alive or static is None:
                cmdline = sample.cmdline
                static = _Static(
                    cmdline=cmdline,
                    env=read_dist_env(sample.pid) if sample.alive else NO_ENV,
                    python=is_python_command(cmdline) or (
                        sample.alive and is_python_command((), process_executable(sample.pid))),
                    spawn_child=is_spawn_child(cmdline),
                    launcher_process=launcher_of_process(sample.name, cmdline) is not None,
                )
                self._static[key] = static
        waiting = sample.pid in waiting_in_stack
        # Only a process with a child can wait for one: the DataLoader workers of a node's job (64 of its 73
        # processes) are spared a read of wchan each tick.
        if static.python and sample.alive and not waiting and child_pids:
            waiting = main_thread_waits_for_child(sample.pid, child_pids)
        return ProcessFacts(
            pid=sample.pid, ppid=sample.ppid, role=sample.role, name=sample.name, cmdline=static.cmdline,
            alive=sample.alive, started=started or 0, python=static.python, env=static.env,
            spawn_child=static.spawn_child, waiting_for_child=waiting, launcher_process=static.launcher_process,
            cpu_seconds=sample.cpu_seconds,
        )

    def _job_info(self, layout: JobLayout, samples: Sequence[ProcessSample],
                  by_pid: Mapping[int, ProcessFacts]) -> JobInfo:
        live = {s.pid for s in samples if s.alive}
        rank_pids = tuple(pid for pid in layout.training_pids if pid in live)
        selected = None
        ranks = dict(layout.ranks)
        if self.attached_pid in ranks and self.attached_pid in live:
            selected = self.attached_pid
        elif self._attached_rank is not None:  # the rank the user named was restarted: follow its number
            selected = next((pid for pid in rank_pids if ranks.get(pid) == self._attached_rank), None)
        world, placement = self._world(layout, by_pid)
        return JobInfo(
            kind=layout.kind,
            attached_pid=self.attached_pid,
            root_pid=self.root_pid,
            launcher_pid=layout.launcher_pid,
            run_id=layout.run_id,
            world_size=layout.world_size,
            local_world_size=layout.local_world_size,
            rank_pids=rank_pids,
            selected_pid=selected,
            note=self._note(layout, by_pid, len(rank_pids)),
            slurm_step=layout.slurm_step,
            slurm_job=next((by_pid[pid].env.slurm_job for pid in layout.training_pids
                            if pid in by_pid and by_pid[pid].env.slurm_job), None),
            training_elsewhere=layout.training_elsewhere,
            missing_ranks=world.missing,
            ranks_elsewhere=world.elsewhere,
            one_machine=placement.one_machine if world.missing else None,
            ranks_outside=tuple((rank, pid) for rank, pid in placement.running_here if rank in world.outside),
            rank_leftovers=tuple((rank, pid) for rank, pid in placement.leftovers if rank in world.missing),
        )

    def _world(self, layout: JobLayout, by_pid: Mapping[int, ProcessFacts]) -> tuple[WorldAccount, Placement]:
        """The ranks of the world this node lacks: this node's share and number as the launcher states them. One
        that says nothing leaves the share unknown, unless the job shows it runs only on this machine
        (probes/jobs/locality.py, asked only while a rank is unseen): without that, nothing is called missing."""
        ranks = sorted((by_pid[pid] for pid, _ in layout.ranks if pid in by_pid), key=lambda f: not f.alive)
        local_world_size = launcher_of_kind(layout.kind).stated_local_world_size(layout, ranks) if ranks else None
        group_rank = next((f.env.group_rank for f in ranks if f.env.group_rank is not None), None)
        world_size = layout.world_size if ranks else None
        ranks_now = [rank for _, rank in layout.ranks]
        placement = NOT_PLACED
        unseen = self._world_watch.unseen(world_size, ranks_now)
        if unseen and local_world_size is None:
            placement = self._locator.place(ranks, unseen, by_pid.keys())
            if placement.one_machine is not None:
                local_world_size = world_size
        world = self._world_watch.update(world_size, local_world_size, group_rank, ranks_now,
                                         outside=[rank for rank, _ in placement.running_here])
        return world, placement

    def _note(self, layout: JobLayout, by_pid: Mapping[int, ProcessFacts], live_training: int) -> str:
        root = by_pid.get(self.root_pid)
        root_label = launcher_label(root.name, root.cmdline) if root is not None else "PID"
        context = NoteContext(attached_pid=self.attached_pid, root_pid=self.root_pid,
                              attached_rank=self._attached_rank, root_label=root_label,
                              live_training=live_training, processes=by_pid)
        return launcher_of_kind(layout.kind).note(layout, context)
