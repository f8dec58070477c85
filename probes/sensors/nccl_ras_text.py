"""The status text NCCL's RAS service sends (src/ras/client_support.cc), read into typed facts; pure.

The text is made for people: a header (NCCL and CUDA versions), a job summary (nodes, processes, GPUs), a table of
communicator groups (communicators of the same size, node count, status and errors are one row), then an Errors and
a Warnings section naming what went wrong: processes that are dead or unresponsive, and, per communicator
("#<group>-<index> (<hash>)"), ranks missing, ranks with errors, and ranks whose status or collective operation
counts differ from the others'. NCCL names a rank only where its group is an outlier (one rank always; otherwise at
most 10 ranks and a quarter of the communicator, or under half with VERBOSE STATUS), so the counts of a majority are
known by value and size, not by rank.

Formats read: NCCL 2.26 to 2.30 (counts per collective kind: "different AllReduce operation counts"; missing ranks
one per line with their process) and 2.24-2.25 ("different collective operation counts", one count for all kinds, read
here as the kind "collective"; "The missing ranks: 3,5"). A line read as none of them is kept in `unparsed`, so a
newer NCCL's additions show rather than vanish.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field, replace
from typing import Literal

MissingState = Literal["dead", "unresponsive", "missing"]


@dataclass(frozen=True)
class RasProcess:
    """A job process NCCL names: dead, or not answering ("Process 4106 on node 10.0.0.1 managing GPU 5")."""

    pid: int
    node: str
    gpus: str  # as printed: "5", "0,1", or "0,1 (NVML 2,3)" where CUDA and NVML number them apart


@dataclass(frozen=True)
class RasRank:
    """A communicator rank as NCCL names it; its GPU, process and node where NCCL found them."""

    rank: int
    gpu: str | None = None  # "3", or "3 (NVML 5)"
    pid: int | None = None
    node: str | None = None


@dataclass(frozen=True)
class RasMissingRank:
    """A rank NCCL got no data from: dead (its process is unreachable over RAS), unresponsive (its process is listed as
    not answering), or missing (NCCL printed no process, or the process is in neither list)."""

    rank: RasRank
    state: MissingState


@dataclass(frozen=True)
class RasCountGroup:
    """Ranks that have launched the same number of collective operations of one kind."""

    operation: str  # "AllReduce", "AllGather", ...; "collective" (all kinds together) before NCCL 2.26
    count: int  # operations launched; 0: none yet
    n_ranks: int
    ranks: tuple[RasRank, ...]  # those NCCL named (all of an outlier group, none of a majority)


@dataclass(frozen=True)
class RasLag:
    """Ranks behind the furthest ranks of a communicator on one kind of collective. A lag of one is normal between two
    ranks of a busy job (RAS samples each process at a slightly different moment); one that stays across readings
    while the leaders' count stands still is a hang."""

    operation: str
    behind: int  # operations fewer than the leaders launched
    count: int
    lead: int  # the leaders' count
    n_ranks: int
    ranks: tuple[int, ...]  # the lagging ranks NCCL named; fewer than n_ranks where it named none


@dataclass(frozen=True)
class RasStatusGroup:
    """Ranks of one status where a communicator's ranks differ (INIT, RUNNING, FINALIZE, ABORT; NOCOMM: not a member
    any more, printed UNKNOWN before NCCL 2.26)."""

    status: str
    n_ranks: int
    ranks: tuple[RasRank, ...]


@dataclass(frozen=True)
class RasRankErrors:
    """Ranks of a communicator that reported one NCCL error, at initialization or asynchronously."""

    phase: Literal["initialization", "asynchronous"]
    error: str  # as NCCL words it: "Remote process error", "System error", ...
    n_ranks: int
    ranks: tuple[RasRank, ...]


@dataclass(frozen=True)
class RasCommGroup:
    """One row of the communicators table."""

    group: int
    comms: int  # communicators in the group
    nodes_per_comm: int
    ranks_per_node: str  # "8", or "7-8" where communicators differ
    ranks_per_comm: int  # the communicator's size
    ranks_in_group: int  # distinct GPUs that answered, over the group's communicators
    status: str  # the furthest status of any rank: INIT, RUNNING, FINALIZE, ABORT
    errors: tuple[str, ...]  # () for OK; INCOMPLETE, ERROR, MISMATCH


@dataclass(frozen=True)
class RasCommunicator:
    """A communicator NCCL names under Errors or Warnings ("#0-0 (5f2c9a1e7b3d4c80) INCOMPLETE")."""

    label: str  # "#0-0": its group in the table, and its place in the group
    group: int
    hash: str  # the communicator hash, as in NCCL's own log lines
    size: int | None  # its ranks, from its group's row
    problems: tuple[str, ...] = ()  # INCOMPLETE, ERROR, MISMATCH, in the order NCCL printed them
    missing_count: int | None = None  # "Missing communicator data from N ranks"
    missing: tuple[RasMissingRank, ...] = ()  # the missing ranks NCCL named
    counts: tuple[RasCountGroup, ...] = ()
    statuses: tuple[RasStatusGroup, ...] = ()
    errors: tuple[RasRankErrors, ...] = ()

    def lagging(self) -> tuple[RasLag, ...]:
        """The groups of ranks behind the leaders, per kind of collective, the furthest behind first."""
        lags: list[RasLag] = []
        for operation in dict.fromkeys(group.operation for group in self.counts):
            groups = [group for group in self.counts if group.operation == operation]
            lead = max(group.count for group in groups)
            for group in groups:
                if group.count < lead:
                    ranks = tuple(rank.rank for rank in group.ranks)
                    lags.append(RasLag(operation, lead - group.count, group.count, lead, group.n_ranks, ranks))
        return tuple(sorted(lags, key=lambda lag: -lag.behind))


@dataclass(frozen=True)
class RasStatus:
    """What a RAS status reply says."""

    nccl_version: str | None = None
    cuda_compiled: str | None = None  # the CUDA NCCL was built with: "12.9"
    cuda_runtime: int | None = None  # 12090
    cuda_driver: int | None = None
    nodes: int | None = None
    processes: int | None = None
    gpus: int | None = None
    processes_per_node: int | None = None  # None where nodes differ (NCCL then prints a distribution)
    gpus_per_process: int | None = None
    gather_s: float | None = None  # how long NCCL took to gather the communicators' data
    groups: tuple[RasCommGroup, ...] = ()
    communicators: tuple[RasCommunicator, ...] = ()
    dead_count: int = 0  # job processes NCCL considers dead (unreachable over RAS)
    dead: tuple[RasProcess, ...] = ()  # those it named
    unresponsive_count: int = 0  # job processes that sent no data (reachable, or not yet known dead)
    unresponsive: tuple[RasProcess, ...] = ()
    timeouts: int = 0  # communication timeouts while gathering (a process slow or gone)
    complete: bool = False  # the reply reached its Warnings section: nothing was cut off
    unparsed: tuple[str, ...] = ()  # non-blank lines read as nothing known

    @property
    def recognized(self) -> bool:
        """Whether the text is RAS's at all."""
        return self.nccl_version is not None or self.nodes is not None or bool(self.groups)

    @property
    def healthy(self) -> bool:
        """Whole, with every communicator OK and no process dead, silent or slow to answer."""
        return (self.complete and not self.dead_count and not self.unresponsive_count and not self.timeouts
                and all(not group.errors for group in self.groups))

    def lagging(self) -> tuple[tuple[RasCommunicator, RasLag], ...]:
        """Every communicator's lagging ranks, the furthest behind first."""
        pairs = [(comm, lag) for comm in self.communicators for lag in comm.lagging()]
        return tuple(sorted(pairs, key=lambda pair: -pair[1].behind))


# What follows a rank where NCCL names it: " -- GPU 3 managed by process 4104 on node 10.0.0.1", or that it could not.
_DETAIL = (r"(?: -- (?:GPU (?P<gpu>.+?) managed by process (?P<pid>\d+) on node (?P<node>\S+)"
           r"|\[process information not found\]))?")
_LINES: dict[str, re.Pattern[str]] = {name: re.compile(pattern) for name, pattern in {
    "version": r"NCCL version (\S+) compiled with CUDA (\S+)$",
    "cuda": r"CUDA runtime version (-?\d+), driver version (-?\d+)$",
    "job": r"Job summary$",
    "summary5": r"\s*(\d+)\s+(\d+)\s+(\d+)\s+(\d+)\s+(\d+)$",
    "summary3": r"\s*(\d+)\s+(\d+)\s+(\d+)$",
    "summary_other": r"\s*(?:\d+\s+)*\d+$|\s*(?:Nodes|Processes|\(total\)|per node|per process|GPUs)(?:\s.*)?$"
                     r"|The outlier nodes?:$|  Node \S+ running process(?:es)? [\d,]+$",
    "comms": r"Communicators\.\.\.(?: \((\d+(?:\.\d+)?)s\))?$",
    "no_comms": r"No communicator data collected!$",
    "table_head": r"Group\s+Comms\s+Nodes.*|\s+#\s+in group.*",
    "row": r"\s*(\d+)\s+(\d+)\s+(\d+)\s+(\d+(?:-\d+)?)\s+(\d+)\s+(\d+)\s+([A-Z]+)\s+([A-Z,]+)$",
    "section": r"(Errors|Warnings)$",
    "rule": r"=+$",
    "block": r"(INCOMPLETE|DEAD|TIMEOUT)$",
    "job_missing": r"  Missing communicator data from (\d+) job process(?:es)?$",
    "job_dead": r"  (\d+) job process(?:es are| is) considered dead\b.*$",
    "process": r"  Process (\d+) on node (\S+) managing GPUs? (.+)$",
    "unknown_processes": r"  \[could not find information on \d+ process(?:es)?\]$",
    "timeouts": r"  Encountered (\d+) communication timeouts? while gathering communicator data$",
    "comm": r"#(\d+)-(\d+) \(([0-9a-fA-F]+)\) (INCOMPLETE|ERROR|MISMATCH)$",
    "comm_missing": r"  Missing communicator data from (\d+) ranks?$",
    "missing_list": r"  The missing ranks?: ([\d,\s]*)$",
    "rank": r"  Rank (\d+)" + _DETAIL + "$",
    "rank_status": r"  Rank ([\d,]+) has status (\w+)" + _DETAIL + "$",
    "rank_count": r"  Rank (\d+) has (?:launched up to operation (\d+)|not launched any operations)" + _DETAIL + "$",
    "rank_error": r"  Rank (\d+) reported (.+?)" + _DETAIL + "$",
    "status_differ": r"  Communicator ranks have different status$",
    "counts_differ": r"  Communicator ranks have different (\w+) operation counts$",
    "ranks_status": r"  (\d+) ranks have status (\w+)$",
    "ranks_count": r"  (\d+) ranks have (?:launched up to operation (\d+)|not launched any operations)$",
    "ranks_error": r"  (\d+) ranks reported (.+)$",
    "error_phase": r"  (Initialization|Asynchronous) errors? on (\d+) ranks?$",
    "unknown_ranks": r"  The unknown ranks: ([\d,\s]*)$",
}.items()}


@dataclass
class _Header:
    """The reply's header and job summary while they are read."""

    nccl_version: str | None = None
    cuda_compiled: str | None = None
    cuda_runtime: int | None = None
    cuda_driver: int | None = None
    nodes: int | None = None
    processes: int | None = None
    gpus: int | None = None
    processes_per_node: int | None = None
    gpus_per_process: int | None = None
    gather_s: float | None = None


@dataclass
class _Comm:
    """A communicator while its blocks are read (one may appear under Errors and again under Warnings)."""

    label: str
    group: int
    hash: str
    problems: list[str] = field(default_factory=list)
    missing_count: int | None = None
    missing: list[RasRank] = field(default_factory=list)
    counts: list[RasCountGroup] = field(default_factory=list)
    statuses: list[RasStatusGroup] = field(default_factory=list)
    errors: list[RasRankErrors] = field(default_factory=list)


def _rank(match: re.Match[str], rank: int | None = None) -> RasRank:
    pid = match.group("pid")
    return RasRank(int(match.group(1)) if rank is None else rank, match.group("gpu"),
                   int(pid) if pid else None, match.group("node"))


def _ints(text: str) -> list[int]:
    return [int(part) for part in re.split(r"[,\s]+", text.strip()) if part]


def parse_ras_status(text: str) -> RasStatus:
    """Read a RAS status reply (the text after the handshake, as `ncclras` prints it); never raises. Whatever is
    recognized is filled in; `complete` says whether the reply reached its end."""
    header = _Header()
    groups: list[RasCommGroup] = []
    comms: dict[str, _Comm] = {}
    dead: list[RasProcess] = []
    unresponsive: list[RasProcess] = []
    unparsed: list[str] = []
    dead_count = unresponsive_count = timeouts = 0
    complete = False
    block = ""  # the block a process or rank line belongs to: INCOMPLETE, DEAD, or a communicator's part
    comm: _Comm | None = None
    operation = ""  # the kind of collective whose counts are being listed
    error_phase: Literal["initialization", "asynchronous"] = "initialization"
    in_summary = False

    def add_to_last(kind: str, rank: RasRank) -> None:
        """A bare "Rank N -- ..." line: one more named member of the group opened just before it."""
        if comm is None:
            return
        if kind == "missing":
            comm.missing.append(rank)
        elif kind == "counts" and comm.counts:
            last = comm.counts[-1]
            comm.counts[-1] = replace(last, ranks=(*last.ranks, rank))
        elif kind == "statuses" and comm.statuses:
            status = comm.statuses[-1]
            comm.statuses[-1] = replace(status, ranks=(*status.ranks, rank))
        elif kind == "errors" and comm.errors:
            error = comm.errors[-1]
            comm.errors[-1] = replace(error, ranks=(*error.ranks, rank))

    for line in text.splitlines():
        line = line.rstrip("\r")
        if not line.strip():
            continue
        match = None
        name = ""
        for name, pattern in _LINES.items():
            if name.startswith("summary") and not in_summary:
                continue
            match = pattern.match(line)
            if match:
                break
        if match is None:
            unparsed.append(line)
            continue
        if name == "version":
            header.nccl_version, header.cuda_compiled = match.group(1), match.group(2)
        elif name == "cuda":
            header.cuda_runtime, header.cuda_driver = int(match.group(1)), int(match.group(2))
        elif name == "job":
            in_summary = True
        elif name == "summary5":
            (header.nodes, header.processes_per_node, header.gpus_per_process, header.processes,
             header.gpus) = (int(value) for value in match.groups())
        elif name == "summary3":
            # The totals row under a distribution (nodes differ): NCCL prints it last, after the per-node rows, whose
            # three-number rows (count, per node, per process) it overwrites.
            header.nodes, header.processes, header.gpus = (int(value) for value in match.groups())
        elif name == "comms":
            in_summary = False
            if match.group(1):
                header.gather_s = float(match.group(1))
        elif name == "row":
            index, count, nodes, per_node, size, in_group, status, errors = match.groups()
            groups.append(RasCommGroup(int(index), int(count), int(nodes), per_node, int(size), int(in_group),
                                       status, () if errors == "OK" else tuple(errors.split(","))))
        elif name == "section":
            complete = complete or match.group(1) == "Warnings"
            block, comm = "", None
        elif name == "block":
            block, comm = match.group(1), None
        elif name == "job_missing":
            unresponsive_count = int(match.group(1))
        elif name == "job_dead":
            dead_count = int(match.group(1))
        elif name == "process":
            process = RasProcess(int(match.group(1)), match.group(2), match.group(3))
            (dead if block == "DEAD" else unresponsive).append(process)
        elif name == "timeouts":
            timeouts += int(match.group(1))
        elif name == "comm":
            label = f"#{match.group(1)}-{match.group(2)}"
            comm = comms.setdefault(label, _Comm(label, int(match.group(1)), match.group(3).lower()))
            comm.problems.append(match.group(4))
            block = {"INCOMPLETE": "missing", "ERROR": "errors", "MISMATCH": ""}[match.group(4)]
        elif comm is None:
            if name not in ("rule", "table_head", "no_comms", "summary_other", "unknown_processes"):
                unparsed.append(line)
        elif name == "comm_missing":
            comm.missing_count = int(match.group(1))
        elif name == "missing_list":
            comm.missing.extend(RasRank(rank) for rank in _ints(match.group(1)))
        elif name == "status_differ":
            block = "statuses"
        elif name == "counts_differ":
            block, operation = "counts", match.group(1)
        elif name == "error_phase":
            block, error_phase = "errors", "initialization" if match.group(1) == "Initialization" else "asynchronous"
        elif name == "ranks_status":
            comm.statuses.append(RasStatusGroup(match.group(2), int(match.group(1)), ()))
        elif name == "ranks_count":
            comm.counts.append(RasCountGroup(operation or "collective", int(match.group(2) or 0),
                                             int(match.group(1)), ()))
        elif name == "ranks_error":
            comm.errors.append(RasRankErrors(error_phase, match.group(2), int(match.group(1)), ()))
        elif name == "rank_status":
            ranks = _ints(match.group(1))  # before 2.26 a list: "Rank 3,5 has status FINALIZE"
            named = tuple(_rank(match, rank) for rank in ranks) if len(ranks) == 1 else tuple(map(RasRank, ranks))
            comm.statuses.append(RasStatusGroup(match.group(2), len(ranks), named))
        elif name == "rank_count":
            comm.counts.append(RasCountGroup(operation or "collective", int(match.group(2) or 0), 1, (_rank(match),)))
        elif name == "rank_error":
            comm.errors.append(RasRankErrors(error_phase, match.group(2), 1, (_rank(match),)))
        elif name == "rank":
            add_to_last(block, _rank(match))
        elif name == "unknown_ranks":  # before 2.26, the ranks of status UNKNOWN (NOCOMM since) in one line
            for rank in _ints(match.group(1)):
                add_to_last("statuses", RasRank(rank))
        elif name not in ("rule", "table_head", "no_comms", "summary_other", "unknown_processes"):
            unparsed.append(line)

    sizes = {group.group: group.ranks_per_comm for group in groups}
    dead_at = {(process.pid, process.node) for process in dead}
    silent_at = {(process.pid, process.node) for process in unresponsive}

    def state(rank: RasRank) -> MissingState:
        if (rank.pid, rank.node) in dead_at:
            return "dead"
        if (rank.pid, rank.node) in silent_at:
            return "unresponsive"
        return "missing"

    communicators = tuple(
        RasCommunicator(c.label, c.group, c.hash, sizes.get(c.group), tuple(c.problems), c.missing_count,
                        tuple(RasMissingRank(rank, state(rank)) for rank in c.missing), tuple(c.counts),
                        tuple(c.statuses), tuple(c.errors))
        for c in comms.values())
    return RasStatus(
        nccl_version=header.nccl_version, cuda_compiled=header.cuda_compiled, cuda_runtime=header.cuda_runtime,
        cuda_driver=header.cuda_driver, nodes=header.nodes, processes=header.processes, gpus=header.gpus,
        processes_per_node=header.processes_per_node, gpus_per_process=header.gpus_per_process,
        gather_s=header.gather_s, groups=tuple(groups), communicators=communicators, dead_count=dead_count,
        dead=tuple(dead), unresponsive_count=unresponsive_count, unresponsive=tuple(unresponsive), timeouts=timeouts,
        complete=complete, unparsed=tuple(unparsed))
