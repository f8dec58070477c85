"""diagnose_job(history, previous, hang_after_s) -> JobVerdict: the verdict on a distributed job (torchrun,
mp.spawn) from each rank's own verdict and how much of its time each rank waits for the others.
diagnose_job_across_nodes({node: history}, ...) in job_across_nodes.py is the same judgement (judge_ranks) over every
node's ranks, each diagnosed on its own node's frames and named with its node ("rank 3 on n2 is the straggler").

Each rank is diagnosed as a lone process: project_rank() (rank_projection.py) cuts a frame down to that rank and
its helper processes, and diagnose() runs on the projected history with the rank's previous verdict (kept in the
previous JobVerdict's ranks). The ranks are then compared, in this order:

1. rank_exited: a rank is gone while others live: they wait for it until the collective timeout. A rank this
   node should hold that was never seen (JobInfo.missing_ranks: it exited before gputop attached, or is not
   running on a job that runs only on this machine) is gone too. Every other rank of a known world that is not
   seen here is said after the headline (outside the watched tree, or not on this node): absent_ranks.py.
2. hung_rank: a rank is stuck outside a collective (its main thread silent, as diagnose judges it) while the
   others wait in one: the job is hung, though its launcher looks fine.
3. straggler: the others wait in collectives most of the time while one rank works elsewhere: the job's
   bottleneck is that rank's own.
4. shared: every rank has the same bottleneck, said once.
5. mixed: otherwise; the job's verdict is that of the rank that waits least.

Pure, like diagnose(): frames in, a JobVerdict out, no I/O and no clock. Projections are memoised by frame
identity, so each frame is projected once per rank and a tick costs one diagnose() per rank. A rank's notes on thin
evidence and on CPUs shared with other work are picked out by their kind (verdict_lines.py) and said once for the job
(the shared CPUs worked out for the whole job: contention.with_job_contention).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from dataclasses import dataclass

from probes.diagnosis.absent_ranks import (
    SeenRunning,
    absent_ranks_lines,
    leftover_advice,
    leftover_lines,
    missing_advice,
    missing_head,
)
from probes.diagnosis.collectives import collective_gaps, gap_line
from probes.diagnosis.contention import with_job_contention
from probes.diagnosis.evidence import Evidence
from probes.diagnosis.exit_causes import (
    account,
    asked_to_stop,
    ended,
    failure_line,
    kernel_records,
    last_log_failure,
    log_failures,
)
from probes.diagnosis.rank_projection import RankHistory
from probes.diagnosis.stacks import (
    COMMS,
    PEER_WAIT_SYNC,
    classify_stack,
    describe,
    format_where,
    is_reducer_wait,
)
from probes.diagnosis.straggler_place import RankTimes, excess_place
from probes.diagnosis.verdict import (
    CONFIDENCE_FULL_SAMPLES,
    CONFIDENCE_FULL_SECONDS,
    DEFAULT_HANG_AFTER_S,
    HOLD_MIN_CONFIDENCE,
    PROVISIONAL_CONFIDENCE,
    THIN_SAMPLES,
    diagnose,
    diagnose_with_evidence,
)
from probes.diagnosis.verdict_lines import THIN_EVIDENCE_NOTES, VerdictLine, without
from probes.diagnosis.windows import STACK_WINDOW_S
from probes.frame import (
    ROLE_MAIN,
    ROLE_RANK,
    Frame,
    JobFinding,
    JobInfo,
    JobVerdict,
    Liveness,
    ProcessSample,
    RankVerdict,
    StackFrame,
    Verdict,
)
from probes.recent import recent_frames

# A straggler: the other ranks wait in collectives at least WAITING_SHARE of their samples, and it waits at
# least STRAGGLER_MARGIN less than the least-waiting of them. Once named, it stays named while the picture
# still nearly holds (STAY_*): one noisy window must not move the blame.
WAITING_SHARE = 0.5
STRAGGLER_MARGIN = 0.3
STAY_WAITING_SHARE = 0.35
STAY_MARGIN = 0.15
# Default collective timeouts (init_process_group's timeout), minutes.
COLLECTIVE_TIMEOUT_MIN = {"gloo": 30, "nccl": 10}
RANKS_LISTED = 4  # ranks named one by one in a line; the rest are counted

# --- the ranks ---------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class _Member:
    rank: int
    pid: int
    sample: ProcessSample | None  # its latest reading; None once it has left the frames
    alive: bool
    node: str | None = None  # the node it runs on, in a job merged across nodes


@dataclass
class DiagnosedRank:
    member: _Member
    verdict: Verdict
    evidence: Evidence | None
    history: Sequence[Frame]  # the rank's own history (RankHistory: its node's frames, cut down to it)

    @property
    def rank(self) -> int:
        return self.member.rank

    @property
    def label(self) -> str:
        """'rank 3', or 'rank 3 on n2' in a job merged across nodes."""
        node = self.member.node
        return f"rank {self.rank}" if node is None else f"rank {self.rank} on {node}"

    @property
    def samples(self) -> int:
        return self.evidence.main.samples if self.evidence is not None else 0

    @property
    def wait(self) -> float | None:
        """Share of its main thread's samples waiting for the other ranks (None without samples)."""
        if self.evidence is None or not self.evidence.main.samples:
            return None
        return self.evidence.main.share(COMMS)

    @property
    def hung(self) -> bool:
        return self.verdict.liveness == "hung"


def _is_alive(sample: ProcessSample | None) -> bool:
    return sample is not None and sample.alive and sample.state != "zombie"


def job_members(history: Sequence[Frame], previous: JobVerdict | None) -> list[_Member]:
    """The job's ranks by rank: those in the latest frame, and those seen before (in the previous verdict or
    the recent frames) that are gone now and whose rank no new process has taken."""
    latest = history[-1]
    job = latest.job
    if job is not None and job.kind == "launched":
        return _launched(latest, job)
    samples = [p for p in latest.processes if p.role == ROLE_RANK]
    order = {pid: i for i, pid in enumerate(job.rank_pids)} if job is not None else {}
    unnumbered = sorted((p for p in samples if p.rank is None), key=lambda p: (order.get(p.pid, len(order)), p.pid))
    by_rank: dict[int, _Member] = {}
    for p in samples:
        number = p.rank if p.rank is not None else unnumbered.index(p)
        member = _Member(number, p.pid, p, _is_alive(p))
        if number not in by_rank or (member.alive and not by_rank[number].alive):
            by_rank[number] = member  # a restarted rank replaces the old process that held its number
    seen_before: list[tuple[int, int, ProcessSample | None]] = []
    for frame in recent_frames(history, STACK_WINDOW_S):
        seen_before += [(p.rank, p.pid, p) for p in frame.processes if p.role == ROLE_RANK and p.rank is not None]
    if previous is not None:
        seen_before += [(r.rank, r.pid, None) for r in previous.ranks]
    for number, pid, sample in seen_before:
        if number not in by_rank:
            by_rank[number] = _Member(number, pid, sample, False)
    return [by_rank[number] for number in sorted(by_rank)]


def _launched(latest: Frame, job: JobInfo) -> list[_Member]:
    """The one training process under a launcher (a shell script, srun)."""
    candidates = [job.selected_pid, *job.rank_pids]
    candidates += [p.pid for p in latest.processes if p.role in (ROLE_RANK, ROLE_MAIN)]
    pid = next((c for c in candidates if c is not None and c != job.launcher_pid), None)
    if pid is None:
        return []
    sample = latest.process(pid)
    number = sample.rank if sample is not None and sample.rank is not None else 0
    return [_Member(number, pid, sample, _is_alive(sample))]


def diagnose_rank(history: Sequence[Frame], member: _Member, previous: RankVerdict | None,
                   hang_after_s: float) -> DiagnosedRank:
    own = RankHistory(history, member.pid)
    verdict, evidence = diagnose_with_evidence(own, previous.verdict if previous is not None else None, hang_after_s)
    return DiagnosedRank(member, verdict, evidence, own)


def _rank_verdict(d: DiagnosedRank) -> RankVerdict:
    sample = d.member.sample
    cpu = d.evidence.main_cpu_pct if d.evidence is not None else None
    if cpu is None and sample is not None and d.member.alive:
        cpu = sample.cpu_pct
    wait = d.wait
    return RankVerdict(
        rank=d.rank, pid=d.member.pid, verdict=d.verdict,
        local_rank=sample.local_rank if sample is not None else None,
        gpu_index=sample.gpu_index if sample is not None else None,
        cpu_pct=round(cpu, 1) if cpu is not None else None,
        collective_wait_ratio=round(wait, 3) if wait is not None else None,
        samples=d.samples, node=d.member.node)


# --- what the ranks do ------------------------------------------------------------------------------------


def _pct(fraction: float) -> str:
    return f"{100.0 * fraction:.0f}%"


def _base_name(function: str) -> str:
    return function.rsplit(".", 1)[-1]


def ranks_text(ranks: Sequence[DiagnosedRank]) -> str:
    numbers = [str(d.rank) for d in ranks]
    if len(numbers) > RANKS_LISTED:
        numbers = numbers[:RANKS_LISTED] + [f"{len(numbers) - RANKS_LISTED} more"]
    return ("rank " if len(ranks) == 1 else "ranks ") + ", ".join(numbers)


def in_collective_now(d: DiagnosedRank) -> bool:
    """It waits for the other ranks now: hung with its main thread in a collective, or waiting in most of its
    recent samples."""
    ev = d.evidence
    if ev is None:
        return False
    if d.hung and ev.stuck_stack:
        return classify_stack(ev.stuck_stack, idle=True, peer_wait=ev.peer_wait).activity == COMMS
    return (d.wait or 0.0) >= WAITING_SHARE


def wait_place(d: DiagnosedRank) -> str:
    """Where a rank waits for the others, in words: 'all_reduce', 'the gradient all-reduce (DDP, in backward)'."""
    ev = d.evidence
    if ev is None:
        return "a collective"
    responsible = None
    if d.hung and ev.stuck_stack:
        responsible = classify_stack(ev.stuck_stack, idle=True, peer_wait=ev.peer_wait).responsible
    if responsible is None:
        responsible = ev.main.top(COMMS)[0]
    if responsible is None:
        return "a collective"
    if is_reducer_wait((responsible,)):
        return "the gradient all-reduce (DDP, inside backward)"
    if ev.peer_wait == PEER_WAIT_SYNC and not _is_collective_frame(responsible):
        return f"a GPU synchronisation at {describe(responsible)} while its GPU spins (NCCL waiting for peers)"
    return _base_name(responsible.function)


def _is_collective_frame(frame: StackFrame) -> bool:
    return classify_stack((frame,), idle=False).activity == COMMS


def collective_backend(history: Sequence[Frame], members: Sequence[DiagnosedRank]) -> tuple[str | None, str]:
    """(the process group's backend, how that is known), from NCCL's threads in the stacks, the job's
    environment, or the absence of GPUs (NCCL needs them); (None, '') when nothing says."""
    for frame in reversed(recent_frames(history, STACK_WINDOW_S)):
        names = [t.name for t in frame.stacks.threads] + [c.thread_name for c in frame.stacks.counts]
        if any(name and name.startswith("pt_nccl") for name in names):
            return "nccl", "NCCL's threads are running"
    environment = history[-1].target.environment or {}
    if any(key.startswith(("NCCL_", "TORCH_NCCL_")) for key in environment):
        return "nccl", "NCCL variables are set"
    if any(key.startswith("GLOO_") for key in environment):
        return "gloo", "GLOO variables are set"
    gpus = [d for d in members if d.member.sample is not None and d.member.sample.gpu_index is not None]
    devices = history[-1].gpu.devices if history[-1].gpu.available else ()
    if not gpus and not any(d.in_target for d in devices):
        return "gloo", "no rank uses a GPU"
    return None, ""


def timeout_text(backend: str | None, why: str) -> str:
    """Until when ranks wait in a collective: the process group's timeout, whose default is all that is known
    (init_process_group(timeout=...) in the job's code is not read)."""
    if backend is None:
        return "the process group's timeout (by default 30 min with gloo, 10 min with NCCL)"
    return f"the process group's timeout ({COLLECTIVE_TIMEOUT_MIN[backend]} min by {backend}'s default; {why})"


def _job_liveness(ranks: Sequence[DiagnosedRank]) -> Liveness:
    """All ranks silent: hung. Otherwise progressing if any moves (those waiting in collectives wait on it)."""
    states = [d.verdict.liveness for d in ranks]
    if states and all(s == "hung" for s in states):
        return "hung"
    if "progressing" in states:
        return "progressing"
    return "unknown"


def _evidence_of(d: DiagnosedRank, limit: int = 3) -> list[str]:
    """A rank's own evidence, each line naming the rank, without its thin-evidence notes and shared CPUs (said
    once, for the job)."""
    lines = without(d.verdict.evidence, *THIN_EVIDENCE_NOTES, "contention")
    return [f"rank {d.rank}: {line}" for line in lines[:limit]]


# --- the findings, in order -------------------------------------------------------------------------------


@dataclass
class _Finding:
    finding: JobFinding
    verdict: Verdict
    responsible_rank: int | None = None
    ranks_involved: tuple[DiagnosedRank, ...] = ()  # whose sample counts make the finding thin or not


def _rank_exited(history: Sequence[Frame], live: list[DiagnosedRank], gone: list[DiagnosedRank],
                 previous: JobVerdict | None) -> _Finding | None:
    if not gone:
        return None
    exits = ended(history)
    kernel = kernel_records(history)
    log = log_failures(history)
    # The rank that ended first is the one to look at: the others often end because it did (a launcher stops them,
    # or their collective times out). One asked to stop (SIGTERM from torchrun) comes after one that was not, seen in
    # the same tick or not.
    def end_order(d: DiagnosedRank) -> tuple[bool, bool, float]:
        end = exits.get(d.member.pid)
        return (end is None, end is not None and asked_to_stop(end, log), end.seen_at if end is not None else 0.0)

    gone = sorted(gone, key=end_order)
    first = gone[0]
    # "first" only where it was seen to end before the others
    ended_first = first.member.pid in exits and all(
        d.member.pid in exits and exits[d.member.pid].seen_at > exits[first.member.pid].seen_at for d in gone[1:])
    # How the first one ended goes in the headline, and its own last words in the log right after it; the others' below.
    first_how = account(exits[first.member.pid], kernel, log).how if first.member.pid in exits else None
    failure = last_log_failure(log, exits[first.member.pid].seen_at if first.member.pid in exits else None,
                               first.rank, first.member.pid)
    how_lines = [failure_line(failure, f"{first.label}'s")] if failure is not None else []
    how_lines += [f"{d.label} (PID {d.member.pid}) {account(exits[d.member.pid], kernel, log).how}"
                  for d in gone[1:RANKS_LISTED] if d.member.pid in exits]
    backend, why = collective_backend(history, live + gone)
    timeout = timeout_text(backend, why)
    if len(gone) == 1:
        gone_words = f"{first.label} (PID {first.member.pid}) has ended"
    else:
        listed = sorted(gone, key=lambda d: d.rank)
        pids = ", ".join(str(d.member.pid) for d in listed[:RANKS_LISTED])
        gone_words = f"{ranks_text(listed)} (PID {pids}) have ended" + \
            (f", {first.label}{' first' if ended_first else ''}" if first_how else "")
    gone_words += f": {first_how}" if first_how else ""
    advice = [
        (f"Find why {ranks_text(gone)} ended: the launcher's output has its exit code and traceback; dmesg shows "
         "whether the OOM killer ended it."),
        ("A shorter timeout makes the others fail instead of waiting: init_process_group(timeout=timedelta("
         "minutes=...)); with NCCL, TORCH_NCCL_ASYNC_ERROR_HANDLING=1 turns the wait into an error."),
        "torchrun --max-restarts N restarts the whole group when a rank fails.",
    ]
    if not live:
        launcher = history[-1].target
        lines = [f"{gone_words}; no rank runs now, and the launcher (PID {launcher.pid}) is still running: it is "
                 "finishing, or about to restart them", *how_lines]
        bottleneck = previous.verdict.bottleneck if previous is not None else "unknown"
        return _Finding("rank_exited", Verdict(bottleneck, "exited", 1.0, tuple(lines), tuple(advice)),
                        first.rank)
    waiting = [d for d in live if in_collective_now(d)]
    still = f"{ranks_text(live)} still runs: it waits" if len(live) == 1 else f"{ranks_text(live)} still run: they wait"
    lines = [f"{gone_words}; {still} for {'it' if len(gone) == 1 else 'them'} at the next collective until {timeout}",
             *how_lines]
    for d in live[:RANKS_LISTED]:
        if d in waiting:
            lines.append(f"rank {d.rank} waits in {wait_place(d)}" +
                         (f", silent for {d.evidence.stuck_for_s:.0f} s" if d.hung and d.evidence else ""))
        else:
            lines.append(f"rank {d.rank}: {d.verdict.bottleneck}, {d.verdict.liveness}")
    bottleneck = "comms_bound" if waiting else live[0].verdict.bottleneck
    liveness = _job_liveness(live)
    return _Finding("rank_exited", Verdict(bottleneck, liveness, 1.0 if waiting else 0.6, tuple(lines),
                                           tuple(advice)), first.rank)


def _rank_missing(history: Sequence[Frame], live: list[DiagnosedRank], missing: Sequence[int],
                  seen: SeenRunning | None = None) -> _Finding | None:
    """Ranks the job's nodes should hold that were never seen (JobInfo.missing_ranks: gone before gputop
    attached, or not running on a job that runs only on this machine): the live ranks cannot finish a collective
    without them. Their words: absent_ranks.py (`seen`: when ranks were last seen running, past the history)."""
    job = history[-1].job
    missing = list(missing)
    if job is None or not missing or not live:  # (missing ranks are the job's: never without one)
        return None
    backend, why = collective_backend(history, live)
    timeout = (timeout_text(backend, why) if backend is not None
               else "the collective timeout (gloo 30 min, NCCL 10 min by default)")
    head, waits_for = missing_head(job, missing, RANKS_LISTED, history, seen)
    waiting = [d for d in live if in_collective_now(d)]
    if waiting:
        verb = "waits" if len(waiting) == 1 else "wait"
        head += f"; {ranks_text(waiting)} {verb}{waits_for} in {wait_place(waiting[0])}: hung until {timeout}"
    else:
        them = "it" if len(missing) == 1 else "them"
        head += f"; the others will wait for {them} at their next collective until {timeout}"
    lines = [head, *leftover_lines(job, RANKS_LISTED)]
    for d in [d for d in live if d not in waiting][:RANKS_LISTED]:
        lines.append(f"rank {d.rank}: {d.verdict.bottleneck}, {d.verdict.liveness}")
    end_wait = leftover_advice(job, backend, RANKS_LISTED)
    advice = [
        missing_advice(job, missing, RANKS_LISTED, history, seen),
        *([end_wait] if end_wait else []),
        ("A shorter timeout makes the others fail instead of waiting: init_process_group(timeout=timedelta("
         "minutes=...)); with NCCL, TORCH_NCCL_ASYNC_ERROR_HANDLING=1 turns the wait into an error."),
    ]
    # Every live rank waiting for a rank that no longer exists: no collective can finish, whatever they show.
    everyone_waits = len(waiting) == len(live)
    verdict = Verdict("comms_bound" if waiting else live[0].verdict.bottleneck,
                      "hung" if everyone_waits else _job_liveness(live), 1.0 if everyone_waits else 0.6,
                      tuple(lines), tuple(advice))
    return _Finding("rank_exited", verdict, missing[0])


def _hung_rank(history: Sequence[Frame], live: list[DiagnosedRank]) -> _Finding | None:
    stuck = [(d, d.evidence) for d in live if d.hung and d.evidence is not None and not in_collective_now(d)]
    if not stuck:
        return None
    culprit, ev = max(stuck, key=lambda s: (s[1].stuck_for_s, -s[0].rank))
    where = "an unknown place (no stack of its main thread was sampled)"
    if ev.stuck_stack:
        found = classify_stack(ev.stuck_stack, idle=True, peer_wait=ev.peer_wait)
        where = format_where(found.responsible, found.user_frame)
    others = [d for d in live if d is not culprit]
    waiting = [d for d in others if in_collective_now(d)]
    head = f"{culprit.label} stuck in {where} for {ev.stuck_for_s:.0f} s"
    parts = [head]
    for d in waiting[:RANKS_LISTED]:
        parts.append(f"rank {d.rank} waits for it in {wait_place(d)}")
    lines = ["; ".join(parts)]
    lines += _evidence_of(culprit, limit=2)
    for d in [d for d in others if d not in waiting][:RANKS_LISTED]:
        lines.append(f"rank {d.rank}: {d.verdict.bottleneck}, {d.verdict.liveness}")
    backend, why = collective_backend(history, live)
    advice = list(culprit.verdict.advice)
    if waiting:
        advice.insert(0, (f"The other ranks wait in a collective until {timeout_text(backend, why)}: find what "
                          f"rank {culprit.rank} waits for (py-spy dump --pid {culprit.member.pid}"
                          f"{f' on {culprit.member.node}' if culprit.member.node else ''}), not them."))
    verdict = Verdict(culprit.verdict.bottleneck, "hung", culprit.verdict.confidence, tuple(lines), tuple(advice),
                      step=culprit.verdict.step)
    return _Finding("hung_rank", verdict, culprit.rank)


def _straggler(live: list[DiagnosedRank], previous: JobVerdict | None, launcher_pid: int | None,
               now: float) -> _Finding | None:
    # Each rank with samples, with its main thread's profile and its share waiting for the others.
    measured = [(d, d.evidence.main, d.evidence.main.share(COMMS)) for d in live
                if d.evidence is not None and d.evidence.main.samples]
    if len(measured) < 2:
        return None
    slow, slow_main, slow_wait = min(measured, key=lambda m: (m[2], m[0].rank))
    others = [(d, wait) for d, _, wait in measured if d is not slow]
    least = min(wait for _, wait in others)
    named_before = previous is not None and previous.finding == "straggler" and \
        previous.responsible_rank == slow.rank
    need_wait, need_margin = (STAY_WAITING_SHARE, STAY_MARGIN) if named_before else (WAITING_SHARE, STRAGGLER_MARGIN)
    if least < need_wait or least - slow_wait < need_margin:
        return None
    place = excess_place(RankTimes(slow.history, slow.member.pid, slow_main),
                         [RankTimes(d.history, d.member.pid, m) for d, m, _ in measured if d is not slow])
    if place.shared:
        return None
    first, first_wait = others[0]
    if len(others) == 1:
        waits = f"rank {first.rank} waits for it in {wait_place(first)} {_pct(first_wait)} of the time"
    else:
        top = max(wait for _, wait in others)
        waits = (f"{ranks_text([d for d, _ in others])} wait for it in {wait_place(first)} {_pct(least)}–"
                 f"{_pct(top)} of the time")
    others_there = "the other rank" if len(others) == 1 else "the other ranks"
    places = "; ".join(f"{_pct(p.share)}{' of its samples' if not i else ''} in {p.where}, {others_there} "
                       f"{_pct(p.usual)}" for i, p in enumerate(place.places))
    lines = [f"{slow.label} is the straggler: {places}; {waits}"]
    lines += _evidence_of(slow, limit=2)
    lines.append("collective waits: " + ", ".join(f"rank {d.rank} {_pct(wait)}" for d, _, wait in measured[:8]))
    advice = list(slow.verdict.advice)
    watch = f"gputop --pid {launcher_pid}" if launcher_pid is not None else "gputop on the launcher"
    advice.append(
        f"Confirm across ranks: time each step's sections on every rank (time.perf_counter around data, forward, "
        f"backward, then all_gather them): rank {slow.rank} should be the slowest outside the all-reduce. "
        f"{watch} shows every rank's wait share beside its verdict; uneven work by rank (a larger data shard, "
        "rank-0-only logging or evaluation) is the usual cause.")
    support = min(1.0, min(d.samples for d, _, _ in measured) / CONFIDENCE_FULL_SAMPLES)
    persistence = 0.0
    if named_before and previous is not None and previous.verdict.since is not None:
        persistence = min(1.0, max(0.0, now - previous.verdict.since) / CONFIDENCE_FULL_SECONDS)
    strength = min(1.0, least - slow_wait + 0.4)
    confidence = strength * (0.45 + 0.35 * support + 0.2 * persistence)
    # The step facts of the rank whose advice the job's verdict carries: its levers were checked against them (a merge
    # of every rank's would show facts no lever was checked against, and counts of no one process).
    verdict = Verdict(slow.verdict.bottleneck, slow.verdict.liveness, confidence, tuple(lines), tuple(advice),
                      step=slow.verdict.step, samples=min(d.samples for d, _, _ in measured))
    return _Finding("straggler", verdict, slow.rank, tuple(d for d, _, _ in measured))


def _shared(live: list[DiagnosedRank]) -> _Finding | None:
    """Every rank with the same bottleneck; or that one on some ranks while the rest wait for them in a collective
    (comms_bound): the collective wait is the others' time spent on it, downstream of the same cause (two
    data-starved ranks take turns waiting for each other's batch in the all-reduce)."""
    bottlenecks = {d.verdict.bottleneck for d in live}
    if len(bottlenecks) > 1:
        bottlenecks.discard("comms_bound")
    if len(live) < 2 or len(bottlenecks) != 1:
        return None
    (bottleneck,) = bottlenecks
    lead = max((d for d in live if d.verdict.bottleneck == bottleneck), key=lambda d: (d.verdict.confidence, -d.rank))
    own = without(lead.verdict.evidence, *THIN_EVIDENCE_NOTES, "contention")
    head = f"all {len(live)} ranks: {bottleneck}"
    if own:
        head += f" — rank {lead.rank}: {own[0]}"
    lines = [head, *own[1:3]]
    waits = [(d.rank, d.wait) for d in live if d.wait is not None]
    if waits:
        line = "collective waits: " + ", ".join(f"rank {rank} {_pct(wait)}" for rank, wait in waits[:8])
        waiting = [d for d in live if d.verdict.bottleneck == "comms_bound"]
        if waiting:  # their own verdicts in the list say comms_bound: say that it is the same cause
            own_words = "its own" if len(waiting) == 1 else "their own"
            line += f" ({ranks_text(waiting)} comms_bound on {own_words}: the wait for the others, the same cause)"
        lines.append(line)
    confidence = min(d.verdict.confidence for d in live)
    verdict = Verdict(bottleneck, _job_liveness(live), confidence, tuple(lines), lead.verdict.advice,
                      one_time_cost=lead.verdict.one_time_cost,  # a warm-up on every rank promises no speed-up
                      step=lead.verdict.step, samples=_fewest_samples(live),
                      from_counters=lead.verdict.from_counters)
    return _Finding("shared", verdict, None, tuple(live))


def _fewest_samples(live: list[DiagnosedRank]) -> int | None:
    """The job's verdict over its ranks rests on the thinnest rank's samples."""
    counted = [d.verdict.samples for d in live if d.verdict.samples is not None]
    return min(counted) if counted else None


def _mixed(live: list[DiagnosedRank]) -> _Finding:
    lead = min(live, key=lambda d: (d.wait if d.wait is not None else 1.0, d.rank))
    own = without(lead.verdict.evidence, *THIN_EVIDENCE_NOTES, "contention")
    waits = f", waits {_pct(lead.wait)} of the time" if lead.wait is not None else ""
    lines = [f"{lead.label} (waits least{waits}): {own[0] if own else lead.verdict.bottleneck}", *own[1:3]]
    others = [d for d in live if d is not lead]
    if others:
        lines.append("other ranks: " + "; ".join(
            f"rank {d.rank} {d.verdict.bottleneck}" + (f" (waits {_pct(d.wait)})" if d.wait is not None else "")
            for d in others[:RANKS_LISTED]))
    verdict = Verdict(lead.verdict.bottleneck, _job_liveness(live), lead.verdict.confidence, tuple(lines),
                      lead.verdict.advice, one_time_cost=lead.verdict.one_time_cost, step=lead.verdict.step,
                      samples=lead.verdict.samples, from_counters=lead.verdict.from_counters)
    return _Finding("mixed", verdict, None, tuple(live))


# --- thin evidence and the job's verdict ------------------------------------------------------------------

_COMPARED: tuple[JobFinding, ...] = ("straggler", "shared", "mixed")  # findings that rest on sample shares


def _settle(found: _Finding, previous: JobVerdict | None) -> _Finding:
    """Thin evidence (a rank with fewer than THIN_SAMPLES samples) keeps a finding provisional and never
    overturns one reached on more: the previous finding stands, saying what it holds back."""
    if (found.finding not in _COMPARED or not found.ranks_involved
            or found.verdict.bottleneck in ("unknown", "cannot_see")):  # no samples is their premise, not thin
        return found
    thinnest = min(found.ranks_involved, key=lambda d: (d.samples, d.rank))
    if thinnest.samples >= THIN_SAMPLES:
        return found
    lines = without(found.verdict.evidence, *THIN_EVIDENCE_NOTES)
    n = thinnest.samples
    if previous is not None and previous.finding in _COMPARED and \
            previous.verdict.confidence >= HOLD_MIN_CONFIDENCE and previous.verdict.liveness != "hung" and \
            (previous.finding, previous.responsible_rank) != (found.finding, found.responsible_rank):
        kept = without(previous.verdict.evidence, *THIN_EVIDENCE_NOTES)
        kept.append(VerdictLine(f"holding: the latest samples point to {found.finding}, too few (rank "
                                f"{thinnest.rank}: {n}; {THIN_SAMPLES} needed) to change the verdict", "holding"))
        return _Finding(previous.finding, dataclasses.replace(previous.verdict, evidence=tuple(kept)),
                        previous.responsible_rank, found.ranks_involved)
    lines.append(VerdictLine(f"provisional: only {n} sample{'s' if n != 1 else ''} of rank {thinnest.rank}'s main "
                             f"thread so far ({THIN_SAMPLES} make a verdict)", "provisional"))
    verdict = dataclasses.replace(found.verdict, evidence=tuple(lines),
                                  confidence=min(found.verdict.confidence, PROVISIONAL_CONFIDENCE))
    return dataclasses.replace(found, verdict=verdict)


def _with_collectives(found: _Finding, latest: Frame) -> Verdict:
    """A hung job's verdict with what the ranks' Flight Recorders say: the collective some ranks wait in and
    the ranks that never entered it, after the headline. Only once hung: a running job shows such a gap for a
    moment at every step."""
    verdict = found.verdict
    if latest.collectives is None or (verdict.liveness != "hung" and found.finding != "hung_rank"):
        return verdict
    lines = [gap_line(gap) for gap in collective_gaps(latest.collectives)]
    advice = list(verdict.advice)
    # A rank not read whose job enabled a dump on demand (NCCL's pipe): say how; pulled only when the user asks.
    triggers = [r.trigger for r in latest.collectives.ranks if r.trigger and not r.available]
    if triggers:
        advice.append(f"The job enabled a dump on demand: {triggers[0]}; gputop writes it only when asked "
                      "(--fr-dump, or f in the TUI).")
    if not lines and not triggers:
        return verdict
    evidence = (*verdict.evidence[:1], *lines, *verdict.evidence[1:])
    return dataclasses.replace(verdict, evidence=evidence, advice=tuple(advice))


def _elsewhere(latest: Frame) -> JobVerdict | None:
    """A client (srun) whose job's processes are not in the watched tree: nothing here trains, so nothing here
    is judged; its quiet must never read as a hang."""
    job = latest.job
    if job is None or not job.training_elsewhere:
        return None
    said = job.note or f"the {job.kind} job's training processes are not in the watched tree"
    verdict = Verdict(bottleneck="unknown", liveness="unknown", confidence=0.0, evidence=(said,),
                      advice=("attach to a process of the job on the node where it runs (a task, or "
                              "--slurm-job JOBID there)",))
    return JobVerdict(verdict=verdict, finding="elsewhere")


def diagnose_job(history: Sequence[Frame], previous: JobVerdict | None = None,
                 hang_after_s: float = DEFAULT_HANG_AFTER_S, seen: SeenRunning | None = None) -> JobVerdict | None:
    """The verdict on the job in `history` (oldest frame first); None when its latest frame has no job or no
    ranks. Pass the previous JobVerdict for stability (each rank's previous verdict rides in it), and `seen`, the
    Monitor's record of when ranks were last seen running (it outlives the history)."""
    latest = history[-1] if history else None
    job = latest.job if latest is not None else None
    if latest is None or job is None:
        return None
    members = job_members(history, previous)
    if not members:
        return _elsewhere(latest)
    prior = {r.pid: r for r in previous.ranks} if previous is not None else {}
    diagnosed = [diagnose_rank(history, m, prior.get(m.pid), hang_after_s) for m in members]
    if job.kind == "launched":
        return JobVerdict(verdict=diagnosed[0].verdict, finding="single", ranks=_rank_verdicts(diagnosed),
                          responsible_rank=diagnosed[0].rank)
    if not latest.target.alive:  # the launcher itself has gone: the job is over
        verdict = diagnose(history, previous.verdict if previous is not None else None, hang_after_s)
        return JobVerdict(verdict=verdict, finding=previous.finding if previous is not None else "mixed",
                          ranks=_rank_verdicts(diagnosed),
                          responsible_rank=previous.responsible_rank if previous is not None else None)
    return judge_ranks(history, diagnosed, previous, missing=job.missing_ranks,
                       extra_evidence=absent_ranks_lines(job, RANKS_LISTED), seen=seen)


def judge_ranks(history: Sequence[Frame], diagnosed: Sequence[DiagnosedRank], previous: JobVerdict | None,
                missing: Sequence[int] = (), extra_evidence: Sequence[str] = (),
                seen: SeenRunning | None = None) -> JobVerdict:
    """The job's verdict over its diagnosed ranks, in the order of the module docstring: the one judgement, for
    one node's ranks (diagnose_job) or every node's, each rank tagged with its node (diagnose_job_across_nodes).
    `history` is the frames the backend, the Flight Recorders and the clock are read from; `extra_evidence`
    lines (what the nodes themselves show) go after the finding's headline."""
    latest = history[-1]
    ranks = _rank_verdicts(diagnosed)
    live = [d for d in diagnosed if d.member.alive]
    gone = [d for d in diagnosed if not d.member.alive]
    if not live and not gone:
        verdict = Verdict("unknown", "unknown", 0.0, tuple(extra_evidence) or ("no rank seen",))
        return JobVerdict(verdict=verdict, finding="mixed", ranks=ranks)
    if len(live) == 1 and not gone and not missing:
        verdict = live[0].verdict
        if extra_evidence:
            verdict = dataclasses.replace(verdict, evidence=(*verdict.evidence[:1], *extra_evidence,
                                                             *verdict.evidence[1:]))
        return JobVerdict(verdict=verdict, finding="single", ranks=ranks, responsible_rank=live[0].rank)
    launcher_pid = latest.job.launcher_pid if latest.job is not None else None
    found = (_rank_exited(history, live, gone, previous) or _rank_missing(history, live, missing, seen)
             or _hung_rank(history, live) or _straggler(live, previous, launcher_pid, latest.time)
             or _shared(live) or _mixed(live))
    found = _settle(found, previous)
    verdict = _with_collectives(found, latest)
    verdict = with_job_contention(verdict, history, [(d.label, d.verdict) for d in live],
                                  one_node=all(d.member.node is None for d in diagnosed))
    extra_evidence = [line for line in extra_evidence if line not in verdict.evidence]  # a held verdict has them
    if extra_evidence:
        verdict = dataclasses.replace(verdict, evidence=(*verdict.evidence[:1], *extra_evidence,
                                                         *verdict.evidence[1:]))
    since = latest.time
    if previous is not None and (previous.verdict.bottleneck, previous.verdict.liveness) == \
            (verdict.bottleneck, verdict.liveness) and previous.verdict.since is not None:
        since = previous.verdict.since
    verdict = dataclasses.replace(verdict, confidence=round(max(0.0, min(1.0, verdict.confidence)), 2), since=since)
    return JobVerdict(verdict=verdict, finding=found.finding, ranks=ranks, responsible_rank=found.responsible_rank)


def _rank_verdicts(diagnosed: Sequence[DiagnosedRank]) -> tuple[RankVerdict, ...]:
    return tuple(_rank_verdict(d) for d in diagnosed)
