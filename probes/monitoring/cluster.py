"""One job across nodes: the frames of N `gputop agent` streams (one per node) merged into one picture.

Two parts, neither imports Textual:

- ClusterMonitor folds frames that carry their node (Frame.node) the way Monitor folds one node's: each node
  keeps its own Monitor (PIDs are node-local: two nodes' frames are never mixed in one Frame or one History),
  and each round the nodes' ranks are judged together by probes.diagnosis.job_across_nodes, the
  same judgement a one-node job gets, each rank named with its node ("rank 3 on n2 is the straggler"). What
  the nodes show beside their ranks (GPUs that clock lower, CPUs taken) is added to the job's evidence. A node
  whose stream ended, or that sent nothing for `lost_after_s`, is lost: said with the time, its ranks left out
  of the judgement, the others go on. A node whose agent says that no task of the job runs there (Slurm's
  account: the job holds the node, its tasks there have ended, with srun's words on how; probes/sensors/slurm.py
  NoTaskHere) is no_task, never lost: the ranks it held are named gone with how their tasks ended ("rank 1 on n2
  is gone: its task exited with status 1 at 14:18:50"). It works on live streams and on a recording of them alike
  (`replay`; a recording holds frames only, not what an agent said instead of them).
- AgentStreams runs the agents (any command whose stdout is an agent's: `srun ... -m tui agent`, ssh, or a
  test's `python -m tui agent --pid P`), one reader thread a stream, and hands over whole lines: a stream is
  one node's pipe, so lines of different nodes never interleave.
"""

from __future__ import annotations

import dataclasses
import json
import queue
import re
import subprocess
import threading
import time
from collections import deque
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from probes.diagnosis.absent_ranks import missing_rank_words, ranks_seen_gone
from probes.diagnosis.job_across_nodes import diagnose_job_across_nodes
from probes.diagnosis.rank_projection import reserve_cached_ranks
from probes.diagnosis.verdict import DEFAULT_HANG_AFTER_S
from probes.frame import Frame, JobVerdict, RankVerdict, from_jsonable, to_jsonable
from probes.jobs.world import ranges_text, rank_ranges
from probes.monitoring.monitor import Monitor
from probes.outputs.recording import RECORDING_SCHEMA, Recorder
from probes.outputs.snapshot import build_snapshot
from probes.reference.baseline import ComparisonInputs
from probes.sensors.slurm import NoTaskHere
from probes.view import MonitorView, NodeStatus, VerdictChange

LOST_AFTER_INTERVALS = 5  # a node silent this many ticks is lost (an agent writes a frame every tick)
MIN_LOST_AFTER_S = 10.0  # never sooner: one slow py-spy read or a busy login node must not lose a node
SLOWER_CLOCK_SHARE = 0.85  # a node whose GPUs clock below this share of the fastest node's is named
BUSY_CPU_SHARE = 0.9  # a node whose CPUs are this busy (by anyone) is named as taken
STDERR_LINES_KEPT = 5
# Past this many ranks the rank table and the snapshot summarise ranks that agree (agreeing_ranks): 512 rows
# say less than "ranks 2–511 on n1..n256: waits 80–90% for the others, like rank 1".
SUMMARY_MIN_RANKS = 16
MIN_GROUP = 3  # fewer agreeing ranks than this are shown one by one
WAITING_SHARE = 0.5  # ranks on either side of this wait share never agree
# The schema of a line an agent writes instead of a frame: what it says of its node (no task of the job there).
AGENT_NOTE_SCHEMA = "gputop.agent-note/1"

def node_document(status: NodeStatus) -> dict[str, Any]:
    """A node in the snapshot's `nodes` list."""
    return {"name": status.name, "state": status.state, "ranks": status.ranks,
            "last_frame_time": status.last_frame_time, "lost_at": status.lost_at, "reason": status.reason,
            "gpu_clock_mhz": status.gpu_clock_mhz, "busy_cpu_share": status.busy_cpu_share,
            "bottleneck": status.bottleneck, "note": status.note, "line": status.line()}


@dataclass
class _Node:
    monitor: Monitor
    last_frame_time: float | None = None  # the frame's own time
    last_heard: float | None = None  # our clock when its last line came (live), or its last frame's time
    lost_at: float | None = None
    reason: str | None = None
    pending: bool = False  # a frame came since the last merge
    target_pid: int | None = None  # the one job merged from this node (an agent with --follow may send more)
    no_task: NoTaskHere | None = None  # its agent says no task of the job runs there now (since its last frame)


class ClusterMonitor:
    """Folds the frames of several nodes into one MonitorView; see the module docstring. A MonitorProtocol
    (probes/view/monitor_view.py), as Monitor is, so a front end can use either."""

    def __init__(self, *, hang_after_s: float = DEFAULT_HANG_AFTER_S, comparison: ComparisonInputs | None = None,
                 recorder: Recorder | None = None, replay: bool = False, interval_s: float = 1.0,
                 lost_after_s: float | None = None, expected_nodes: Sequence[str] = ()) -> None:
        self.hang_after_s = hang_after_s
        self.comparison = comparison
        self.replay = replay
        self.recorder = recorder
        self.record_problem: str | None = None
        self.interval_s = interval_s
        self.lost_after_s = lost_after_s if lost_after_s is not None else \
            max(MIN_LOST_AFTER_S, LOST_AFTER_INTERVALS * interval_s)
        self.nodes: dict[str, _Node] = {}
        for name in expected_nodes:
            self._node(name)
        self._job: JobVerdict | None = None
        self._timeline: list[VerdictChange] = []
        self._view: MonitorView | None = None
        self._statuses: tuple[NodeStatus, ...] = ()
        self._cache_ranks = 0

    @property
    def view(self) -> MonitorView | None:
        return self._view

    @property
    def statuses(self) -> tuple[NodeStatus, ...]:
        return self._statuses

    def add(self, frame: Frame, heard_at: float | None = None) -> None:
        """Fold one node's frame into that node's Monitor (and the recording); the merge waits for merge()."""
        node = self._node(frame.node or "?")
        if node.target_pid is None:
            node.target_pid = frame.target.pid
        elif frame.target.pid != node.target_pid:  # an agent that follows several jobs there: the first is merged
            return
        if self.recorder is not None and not self.recorder.append(frame):
            self.record_problem = self.recorder.problem
            self.recorder.close()
            self.recorder = None
        node.monitor.ingest(frame)
        node.no_task = None  # it sends frames again: a task of the job runs there
        node.last_frame_time = frame.time
        node.last_heard = heard_at if heard_at is not None else frame.time
        if node.lost_at is not None and node.reason and "silent" in node.reason:
            node.lost_at, node.reason = None, None  # it answers again
        node.pending = True

    def ingest(self, frame: Frame) -> MonitorView | None:
        """add() then, once every node still answering has sent a frame this round, merge (a recording holds
        the nodes' frames interleaved: one merge a round, not one per frame)."""
        if self._node(frame.node or "?").pending:
            self.merge(now=frame.time)
        self.add(frame)
        answering = [n for n in self.nodes.values() if n.lost_at is None and n.last_frame_time is not None]
        if answering and all(n.pending for n in answering):
            self.merge(now=frame.time)
        return self._view

    def renamed(self, started_as: str, name: str) -> None:
        """The agent started for `started_as` calls its node `name` (ssh to an address or a full name, the node's
        hostname in its frames): the node waited for under the first name is that one, not one more."""
        node = self.nodes.get(started_as)
        if node is not None and started_as != name and node.last_frame_time is None and node.lost_at is None:
            del self.nodes[started_as]

    def no_task_here(self, name: str, said: NoTaskHere, heard_at: float | None = None) -> None:
        """A node's agent says that no task of the job runs there (and what Slurm says of its tasks' end): the
        node answers, and holds no rank of the job now."""
        node = self._node(name)
        node.no_task = said
        node.last_heard = heard_at if heard_at is not None else time.time()
        if node.lost_at is not None and "silent" in (node.reason or ""):
            node.lost_at, node.reason = None, None  # it answers again

    def node_ended(self, name: str, reason: str, at: float | None = None) -> None:
        """A node's stream ended (its agent, or the srun or ssh that ran it, exited): lost from now on, unless its
        agent had said that no task of the job runs there (then nothing of the job was lost with it)."""
        node = self._node(name)
        if node.no_task is not None:
            node.reason = reason
            return
        if node.lost_at is None or "silent" in (node.reason or ""):
            node.lost_at = at if at is not None else time.time()
            node.reason = reason

    def merge(self, now: float | None = None) -> MonitorView | None:
        """One round: find the silent nodes, judge every answering node's ranks together, build the view."""
        now = now if now is not None else time.time()
        for node in self.nodes.values():
            if node.lost_at is None and node.no_task is None and node.last_heard is not None and \
                    now - node.last_heard > self.lost_after_s:
                node.lost_at = node.last_heard + self.lost_after_s
                node.reason = f"silent: no frame for {self.lost_after_s:.0f} s"
            node.pending = False
        answering = {name: view for name, node in self.nodes.items()  # each answering node's latest view
                     if node.lost_at is None and (view := node.monitor.view) is not None}
        self._statuses = tuple(self._status(name, node) for name, node in sorted(self.nodes.items()))
        if not answering:
            return self._view
        histories = {name: view.frames for name, view in answering.items()}
        ranks = sum(s.ranks for s in self._statuses)
        if ranks > self._cache_ranks:  # every node's ranks diagnosed each round: keep all their summaries
            self._cache_ranks = ranks
            reserve_cached_ranks(ranks)
        said = _lost_lines(self._statuses) + _no_task_lines(self._statuses) + _node_lines(self._statuses)
        notes = {name: node.no_task for name, node in self.nodes.items()
                 if node.no_task is not None and node.lost_at is None}
        accounted = all(s.state in ("live", "no_task") for s in self._statuses)
        self._job = diagnose_job_across_nodes(histories, self._job, self.hang_after_s, extra_evidence=said,
                                              gone=gone_ranks(notes, answering, accounted))
        absent = absent_across_nodes(notes, answering, accounted)
        lead_name = next((r.node for r in self._job.ranks if r.node in answering), None) if self._job else None
        base = answering[lead_name] if lead_name is not None else next(iter(answering.values()))  # the lead's
        verdict = self._job.verdict if self._job is not None else base.verdict
        pair = (verdict.bottleneck, verdict.liveness)
        if not self._timeline or (self._timeline[-1].bottleneck, self._timeline[-1].liveness) != pair:
            self._timeline.append(VerdictChange(verdict.since if verdict.since is not None else now, *pair))
        node_frames = {name: view.frames for name, view in answering.items()}
        self._view = dataclasses.replace(base, verdict=verdict, job=self._job, timeline=tuple(self._timeline),
                                         replay=self.replay, nodes=self._statuses, node_frames=node_frames,
                                         absent_across_nodes=absent)
        return self._view

    def settle(self, now: float) -> MonitorView | None:
        """The last round at `now`, whichever node sent last (MonitorProtocol): a recording's end holds frames
        of a round that ingest() has not merged."""
        return self.merge(now=now)

    def snapshot(self, partial: str | None = None) -> dict[str, Any]:
        """The snapshot document: the lead node's frames, the job verdict across nodes, and `nodes`."""
        if self._view is None:
            raise ValueError("a snapshot needs at least one frame")
        view = self._view
        document = build_snapshot(view.frames, view.verdict, self.comparison, pace=view.pace, job=view.job,
                                  shares=view.shares, cannot_see=view.cannot_see, partial=partial)
        document["nodes"] = [node_document(s) for s in self._statuses]
        # target, processes, cpu, host, gpus and stacks are one node's (PIDs are each node's own): say whose.
        document["frames_node"] = view.latest.node
        if document.get("job") is not None and view.job is not None and len(view.job.ranks) > SUMMARY_MIN_RANKS:
            document["job"]["rank_groups"] = [rank_group_document(g) for g in agreeing_ranks(view.job)]
        return document

    def close(self) -> None:
        if self.recorder is not None:
            recorder, self.recorder = self.recorder, None
            recorder.close()

    # --- inside ----------------------------------------------------------------------------------------

    def _node(self, name: str) -> _Node:
        node = self.nodes.get(name)
        if node is None:
            node = _Node(Monitor(hang_after_s=self.hang_after_s, comparison=self.comparison, replay=self.replay))
            self.nodes[name] = node
        return node

    def _status(self, name: str, node: _Node) -> NodeStatus:
        view = node.monitor.view
        if node.no_task is not None and node.lost_at is None:
            return NodeStatus(name, "no_task", last_frame_time=node.last_frame_time, reason=node.reason,
                              note=node.no_task.line())
        if view is None:
            return NodeStatus(name, "lost" if node.lost_at is not None else "waiting", lost_at=node.lost_at,
                              reason=node.reason)
        latest = view.latest
        ranks = len(view.job.ranks) if view.job is not None else 0
        clocks = [d.sm_clock_mhz for d in latest.gpu.devices if d.in_target and d.sm_clock_mhz is not None] \
            if latest.gpu.available else []
        host = latest.host
        allowed = host.allowed_cpus or host.online_cpus
        busy = min(1.0, host.busy_cpus / allowed) if host.busy_cpus is not None and allowed else None
        return NodeStatus(
            name=name, state="lost" if node.lost_at is not None else "live", ranks=ranks,
            last_frame_time=node.last_frame_time, lost_at=node.lost_at, reason=node.reason,
            gpu_clock_mhz=round(sum(clocks) / len(clocks), 1) if clocks else None,
            busy_cpu_share=round(busy, 3) if busy is not None else None,
            bottleneck=view.verdict.bottleneck)


@dataclass(frozen=True)
class RankGroup:
    """Ranks that agree (the same bottleneck and liveness, on the same side of half their time waiting), shown
    as their lowest rank (`like`) and one line for the rest."""

    like: RankVerdict
    others: tuple[RankVerdict, ...]

    @property
    def ranks_text(self) -> str:
        return ranges_text(rank_ranges(r.rank for r in self.others))

    @property
    def nodes(self) -> tuple[str, ...]:
        return tuple(sorted({r.node for r in self.others if r.node is not None}, key=_natural))

    @property
    def nodes_text(self) -> str:
        """'n2', 'n2, n3', 'n2..n8' (first..last of more than two, in natural order)."""
        nodes = self.nodes
        return ", ".join(nodes) if len(nodes) <= 2 else f"{nodes[0]}..{nodes[-1]}"

    @property
    def waits(self) -> tuple[float, float] | None:
        shares = [r.collective_wait_ratio for r in self.others if r.collective_wait_ratio is not None]
        return (min(shares), max(shares)) if shares else None

    def line(self) -> str:
        """'ranks 2–511 on n1..n256: comms_bound, waits 80–90%, like rank 1'."""
        waits = self.waits
        said: str = self.like.verdict.bottleneck if self.like.verdict.liveness != "hung" else "hung"
        if waits is not None:
            said += f", waits {100 * waits[0]:.0f}%" + (f"–{100 * waits[1]:.0f}%" if waits[1] > waits[0] else "")
        where = f" on {self.nodes_text}" if self.nodes else ""
        return f"ranks {self.ranks_text}{where}: {said}, like rank {self.like.rank}"


def agreeing_ranks(job: JobVerdict | None, keep: Sequence[tuple[str | None, int]] = ()) -> tuple[RankGroup, ...]:
    """The job's ranks that agree, grouped (a pure function of the verdict, for the rank table and the snapshot
    of a job of many ranks): the rank the verdict names and the ranks in `keep` ((node, pid): the one a person
    selected) are never folded into a group; groups of fewer than MIN_GROUP ranks are not made."""
    if job is None:
        return ()
    kept = set(keep)
    by_key: dict[tuple, list[RankVerdict]] = {}
    for rank in sorted(job.ranks, key=lambda r: r.rank):
        if rank.rank == job.responsible_rank or (rank.node, rank.pid) in kept:
            continue
        waits = rank.collective_wait_ratio
        key = (rank.verdict.bottleneck, rank.verdict.liveness, None if waits is None else waits >= WAITING_SHARE)
        by_key.setdefault(key, []).append(rank)
    groups = [RankGroup(ranks[0], tuple(ranks[1:])) for ranks in by_key.values() if len(ranks) >= MIN_GROUP]
    return tuple(sorted(groups, key=lambda g: g.like.rank))


def rank_group_document(group: RankGroup) -> dict[str, Any]:
    """A group in the snapshot's `job.rank_groups`."""
    return {"like_rank": group.like.rank, "ranks": [list(span) for span in rank_ranges(r.rank for r in group.others)],
            "count": len(group.others), "nodes": list(group.nodes), "bottleneck": group.like.verdict.bottleneck,
            "liveness": group.like.verdict.liveness,
            "collective_wait_ratio": list(group.waits) if group.waits is not None else None, "line": group.line()}


def _natural(name: str) -> tuple:
    """n2 before n10."""
    return tuple(int(part) if part.isdigit() else part for part in re.split(r"(\d+)", name))


def _lost_lines(statuses: Sequence[NodeStatus]) -> list[str]:
    return [f"{s.line()}: its ranks are not judged" for s in statuses if s.state == "lost"]


def _no_task_lines(statuses: Sequence[NodeStatus]) -> list[str]:
    return [s.line() for s in statuses if s.state == "no_task"]


def gone_ranks(notes: Mapping[str, NoTaskHere], views: Mapping[str, MonitorView], accounted: bool) -> dict[int, str]:
    """{rank: 'rank 1 on n2 is gone: its task exited with status 1 at 14:18:50'}: the job's ranks that ran where
    no task of it runs now (`notes`, by node), from what was read. srun's line on a node's tasks names them by
    task number, which is the rank where the ranks are Slurm's tasks (the job's kind is slurm: RANK is
    SLURM_PROCID); under a launcher of its own (torchrun in each task) it is not. Ranks of the world that no node
    shows are gone too once every node is `accounted` for (each sends frames or says it runs no task: none lost
    or still waited for), without a node or an end that nothing read."""
    jobs = [view.latest.job for view in views.values() if view.latest.job is not None]
    if not notes or not jobs:
        return {}
    gone: dict[int, str] = {}
    if any(job.kind == "slurm" for job in jobs):
        for name, note in sorted(notes.items(), key=lambda item: _natural(item[0])):
            for end in note.ends:
                one = len(end.tasks) == 1
                said = (f"{'rank' if one else 'ranks'} {ranges_text(rank_ranges(end.tasks))} on {name} "
                        f"{'is' if one else 'are'} gone: {'its task' if one else 'their tasks'} {end.ended()}")
                for task in end.tasks:
                    gone.setdefault(task, said)
    world = max((job.world_size or 0 for job in jobs), default=0)
    seen = {rank.rank for view in views.values() if view.job is not None for rank in view.job.ranks}
    unseen = [rank for rank in range(world) if rank not in seen and rank not in gone]
    if unseen and accounted:
        one = len(unseen) == 1
        nodes = ", ".join(sorted(notes, key=_natural))
        said = (f"{'rank' if one else 'ranks'} {ranges_text(rank_ranges(unseen))} of {world} "
                f"{'is' if one else 'are'} gone: no node of the job runs {'it' if one else 'them'} ({nodes} "
                f"{'runs' if len(notes) == 1 else 'run'} no task of it now)")
        gone.update(dict.fromkeys(unseen, said))
    return gone


def absent_across_nodes(notes: Mapping[str, NoTaskHere], views: Mapping[str, MonitorView],
                        accounted: bool) -> tuple[tuple[str, str, str | None], ...]:
    """(rank, words, node) for the Ranks pane of a job merged across nodes: each rank of the world that no node
    shows running, with the node that reported it (its own column). Where a node's agent says no task of the job
    runs there, srun's own line on its end ("exited with status 1 at 18:54:19", n2); where a node's frames find a
    rank it should hold missing, the one-node words of absent_ranks.py ("exited at 18:54:19", "not running"); a rank
    no node shows once every node is accounted for, "gone: no node runs it" (as gone_ranks says), with no node."""
    words: dict[int, tuple[str, str | None]] = {}
    jobs = [view.latest.job for view in views.values() if view.latest.job is not None]
    if any(job.kind == "slurm" for job in jobs):  # srun names tasks, which are ranks only where Slurm launched them
        for name, note in sorted(notes.items(), key=lambda item: _natural(item[0])):
            for end in note.ends:
                for task in end.tasks:
                    words.setdefault(task, (end.ended(), name))
    for name, view in sorted(views.items(), key=lambda item: _natural(item[0])):
        frames = view.shown_frames
        job = frames[-1].job
        if name in notes or job is None or not job.missing_ranks:  # a node with no task: its frames are old
            continue
        gone = ranks_seen_gone(frames, job.missing_ranks, view.seen_running)
        for rank in job.missing_ranks:
            words.setdefault(rank, (missing_rank_words(job, rank, gone), name))
    if notes and accounted:  # every node answers: a rank of the world none shows is nowhere
        world = max((job.world_size or 0 for job in jobs), default=0)
        seen = {rank.rank for view in views.values() if view.job is not None for rank in view.job.ranks}
        for rank in range(world):
            if rank not in seen:
                words.setdefault(rank, ("gone: no node runs it", None))
    return tuple((str(rank), *words[rank]) for rank in sorted(words))


def _node_lines(statuses: Sequence[NodeStatus]) -> list[str]:
    """What sets a node apart from the others: GPUs that clock lower, CPUs that others' work takes."""
    live = [s for s in statuses if s.state == "live"]
    lines = []
    clocked = [(s, s.gpu_clock_mhz) for s in live if s.gpu_clock_mhz is not None]
    if len(clocked) >= 2:
        fastest, fastest_mhz = max(clocked, key=lambda pair: pair[1])
        for s, mhz in clocked:
            if mhz < SLOWER_CLOCK_SHARE * fastest_mhz:
                lines.append(f"{s.name}'s GPUs clock at {mhz:.0f} MHz against {fastest_mhz:.0f} "
                             f"MHz on {fastest.name}: its ranks run slower (power, heat or a clock limit there)")
    if len(live) >= 2:
        for s in live:
            others = [o.busy_cpu_share for o in live if o is not s and o.busy_cpu_share is not None]
            if s.busy_cpu_share is not None and s.busy_cpu_share >= BUSY_CPU_SHARE and others and \
                    max(others) < BUSY_CPU_SHARE:
                lines.append(f"{s.name}'s CPUs are {100 * s.busy_cpu_share:.0f}% busy (the other nodes' at most "
                             f"{100 * max(others):.0f}%): its ranks are short of CPU there")
    return lines


# --- running the agents ----------------------------------------------------------------------------------


@dataclass(frozen=True)
class AgentSpec:
    """One agent to run: the node it is for (named before its first frame says so) and its command."""

    node: str
    argv: tuple[str, ...]
    # The exit status with which the command says it never reached the node (ssh: 255): then no frame came
    # because the node refused or was unreachable, not because it lacks this installation.
    unreachable_status: int | None = None


@dataclass(frozen=True)
class AgentNote:
    """A line an agent writes instead of a frame: no task of the job runs on its node, and what Slurm says of it."""

    node: str
    time: float
    no_task: NoTaskHere


def agent_note_line(note: AgentNote) -> str:
    """The note as one line of an agent's stream (beside its header and frames)."""
    return json.dumps({"schema": AGENT_NOTE_SCHEMA, "node": note.node, "time": note.time,
                       "no_task": to_jsonable(note.no_task)}, separators=(",", ":")) + "\n"


@dataclass(frozen=True)
class StreamEvent:
    """What one stream said: a frame, a note (no task of the job on its node), or that it ended (with why)."""

    node: str
    frame: Frame | None = None
    note: AgentNote | None = None
    ended: str | None = None
    heard_at: float = 0.0
    started_as: str | None = None  # the name the agent was started for (AgentSpec.node), where `node` differs


class AgentStreams:
    """Runs one agent command per node and reads their stdout, one thread a stream, into one queue."""

    def __init__(self, specs: Sequence[AgentSpec]) -> None:
        self.specs = tuple(specs)
        self._events: queue.Queue[StreamEvent] = queue.Queue()
        self._processes: list[subprocess.Popen] = []
        self._stderr: dict[str, deque[str]] = {}
        self.bytes_read: dict[str, int] = {}
        for spec in self.specs:
            self._start(spec)

    def _start(self, spec: AgentSpec) -> None:
        self._stderr[spec.node] = deque(maxlen=STDERR_LINES_KEPT)
        self.bytes_read[spec.node] = 0
        try:
            process = subprocess.Popen(spec.argv, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                                       stderr=subprocess.PIPE)
        except OSError as exc:
            self._events.put(StreamEvent(spec.node, ended=f"cannot start {spec.argv[0]}: {exc.strerror or exc}",
                                         heard_at=time.time()))
            return
        self._processes.append(process)
        stderr = threading.Thread(target=self._read_stderr, args=(spec.node, process), daemon=True,
                                  name=f"agent-{spec.node}-stderr")
        stderr.start()
        threading.Thread(target=self._read, args=(spec, process, stderr), daemon=True,
                         name=f"agent-{spec.node}").start()

    def _read(self, spec: AgentSpec, process: subprocess.Popen, stderr: threading.Thread) -> None:
        node = spec.node
        frames = notes = 0
        assert process.stdout is not None  # opened with PIPE
        for raw in process.stdout:
            self.bytes_read[spec.node] += len(raw)  # by the name it was started for: the one in specs
            frame = parse_frame_line(raw)
            if isinstance(frame, AgentNote):
                node = frame.node or node
                notes += 1
                self._events.put(StreamEvent(node, note=frame, heard_at=time.time(),
                                             started_as=spec.node if node != spec.node else None))
            elif isinstance(frame, Frame):
                if frame.node is None:
                    frame = dataclasses.replace(frame, node=node)
                else:  # the agent's own name for its node wins over the one it was started for
                    node = frame.node
                frames += 1
                self._events.put(StreamEvent(node, frame=frame, heard_at=time.time(),
                                             started_as=spec.node if node != spec.node else None))
        status = process.wait()
        stderr.join(timeout=5.0)  # its last words say why it ended: read them all first
        said = "; ".join(self._stderr.get(spec.node, ()))
        why = f"its agent's stream ended (exit status {status})" + (f": {said}" if said else "")
        if notes and not frames:  # it answered, saying no task of the job runs there: nothing was lost
            why = f"its agent ended (exit status {status}) after saying no task of the job runs there" + \
                (f": {said}" if said else "")
        elif not frames and spec.unreachable_status is not None and status == spec.unreachable_status:
            why = (f"no frame came: {spec.argv[0]} did not connect or was refused (exit status {status})" +
                   (f": {said}" if said else ""))
        elif not frames:  # it never ran: the host refused, or the node lacks this installation at the same path
            why = (f"no frame came (exit status {status})" + (f": {said}" if said else "") +
                   f"; it ran `{' '.join(spec.argv[-8:])}`: every node needs this gputop's Python and PYTHONPATH "
                   "at the same path")
        self._events.put(StreamEvent(node, ended=why, heard_at=time.time()))

    def _read_stderr(self, node: str, process: subprocess.Popen) -> None:
        assert process.stderr is not None  # opened with PIPE
        for raw in process.stderr:
            line = raw.decode("utf-8", "replace").strip()
            if line:
                self._stderr[node].append(line)

    def events(self, timeout: float) -> list[StreamEvent]:
        """What came within `timeout` seconds (at least one event waited for, then all that are queued)."""
        out = []
        try:
            out.append(self._events.get(timeout=max(0.0, timeout)))
            while True:
                out.append(self._events.get_nowait())
        except queue.Empty:
            pass
        return out

    def close(self) -> None:
        """Stop every agent: closing its stdout ends it (it stops when its reader goes), then SIGTERM, SIGKILL."""
        for process in self._processes:
            if process.poll() is None:
                process.terminate()
        for process in self._processes:
            try:
                process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()
            for pipe in (process.stdout, process.stderr):
                if pipe is not None:
                    pipe.close()


def parse_frame_line(raw: bytes | str) -> Frame | AgentNote | dict | None:
    """One line of an agent's stream: its Frame, a note (AgentNote: no task of the job on its node), the header
    (a dict with the recording schema), or None for a line that is none of them (srun's or ssh's own words)."""
    try:
        data = json.loads(raw)
    except (ValueError, RecursionError):
        return None
    if not isinstance(data, dict):
        return None
    if data.get("schema") == RECORDING_SCHEMA:
        return data
    if data.get("schema") == AGENT_NOTE_SCHEMA:
        try:
            return AgentNote(str(data["node"]), float(data["time"]), from_jsonable(NoTaskHere, data["no_task"]))
        except (TypeError, ValueError, KeyError, AttributeError):
            return None
    try:
        return from_jsonable(Frame, data)
    except (TypeError, ValueError, KeyError, AttributeError):
        return None


def run_merge(streams: AgentStreams, monitor: ClusterMonitor, stop: threading.Event, *, interval_s: float,
              duration_s: float | None = None, on_view: Callable[[MonitorView], None] | None = None) -> None:
    """Read the streams and merge once an interval until `stop`, `duration_s`, or every stream has ended; then
    once more if anything came after the last round, so that the view written at the end (the snapshot) holds
    every frame the recording does."""
    started = time.monotonic()
    next_merge = started + interval_s
    ended: set[str] = set()
    unmerged = False

    def merge_now() -> None:
        nonlocal unmerged
        view = monitor.merge(now=time.time())
        unmerged = False
        if on_view is not None and view is not None:
            on_view(view)

    while not stop.is_set():
        if duration_s is not None and time.monotonic() - started >= duration_s:
            break
        for event in streams.events(timeout=max(0.0, next_merge - time.monotonic())):
            if event.started_as is not None and (event.frame is not None or event.note is not None):
                monitor.renamed(event.started_as, event.node)
            if event.frame is not None:
                monitor.add(event.frame, heard_at=event.heard_at)
                unmerged = True
            elif event.note is not None:
                monitor.no_task_here(event.node, event.note.no_task, heard_at=event.heard_at)
                unmerged = True
            elif event.ended is not None:
                ended.add(event.node)
                monitor.node_ended(event.node, event.ended, at=event.heard_at)
                unmerged = True
        if time.monotonic() >= next_merge:
            merge_now()
            next_merge += interval_s
            if next_merge < time.monotonic():
                next_merge = time.monotonic() + interval_s
        if len(ended) >= len(streams.specs) and \
                all(n.lost_at is not None or n.no_task is not None for n in monitor.nodes.values()):
            break  # every stream has ended: nothing more will come
    if unmerged:
        merge_now()
