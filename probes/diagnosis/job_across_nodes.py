"""diagnose_job_across_nodes({node: history}, ...) -> JobVerdict: the verdict on one job whose ranks run on several
nodes, the same judgement as a one-node job's (probes/diagnosis/job.py judge_ranks) over every node's ranks, each
diagnosed on its own node's frames and named with its node ("rank 3 on n2 is the straggler"). A rank that ran where
no task of the job runs now (probes/monitoring/cluster.py gone_ranks: what Slurm and srun said of that node) is a
missing rank, and what was read of its end leads the verdict: "rank 1 on n2 is gone: its task exited with status 1
at 14:18:50; rank 0 waits for it in all_reduce until ...".

The part of job.py's judgement that reads several nodes, kept apart so that job.py stays one node's: it uses
job.py's helpers for a rank (how it is diagnosed, whether and where it waits for the others).

Pure, like diagnose_job(): frames in, a JobVerdict out, no I/O and no clock.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence

from probes.diagnosis.job import (
    RANKS_LISTED,
    DiagnosedRank,
    collective_backend,
    diagnose_rank,
    in_collective_now,
    job_members,
    judge_ranks,
    ranks_text,
    timeout_text,
    wait_place,
)
from probes.diagnosis.verdict import DEFAULT_HANG_AFTER_S
from probes.frame import Frame, JobVerdict


def diagnose_job_across_nodes(histories: Mapping[str, Sequence[Frame]], previous: JobVerdict | None = None,
                              hang_after_s: float = DEFAULT_HANG_AFTER_S,
                              extra_evidence: Sequence[str] = (),
                              gone: Mapping[int, str] | None = None) -> JobVerdict | None:
    """The verdict on one job whose ranks run on several nodes, from each node's own history ({node: frames},
    the nodes still answering). Each node's ranks are found and diagnosed on that node's frames (PIDs are the
    node's own, never mixed), tagged with the node, then judged together by judge_ranks: "rank 3 on n2 is the
    straggler". None when no node's latest frame has a job. `gone`: ranks that ran where no task of the job runs
    now, each with what was read of its end ({1: "rank 1 on n2 is gone: its task exited with status 1 at
    14:18:50"}, probes/monitoring/cluster.py gone_ranks): missing ranks, said in those words (_gone_first)."""
    diagnosed: list[DiagnosedRank] = []
    missing: list[int] = []
    jobs = {node: job for node, history in histories.items() if history and (job := history[-1].job) is not None}
    with_job = list(jobs)
    if not with_job:
        return None
    for node in with_job:
        history = histories[node]
        mine = (dataclasses.replace(previous, ranks=tuple(r for r in previous.ranks if r.node == node))
                if previous is not None else None)
        prior = {r.pid: r for r in mine.ranks} if mine is not None else {}
        for member in job_members(history, mine):
            member = dataclasses.replace(member, node=node)
            diagnosed.append(diagnose_rank(history, member, prior.get(member.pid), hang_after_s))
        missing += jobs[node].missing_ranks
    diagnosed.sort(key=lambda d: (d.rank, d.member.node or ""))
    # The backend, the Flight Recorders and the clock are read from the node of the lowest rank (rank 0's).
    lead_node = diagnosed[0].member.node if diagnosed else None  # (every rank here is tagged with its node)
    lead = histories[lead_node if lead_node is not None else with_job[0]]
    alive = {d.rank for d in diagnosed if d.member.alive}
    gone = {rank: said for rank, said in (gone or {}).items() if rank not in alive}  # (a rank restarted since)
    missing += [rank for rank in gone if rank not in {d.rank for d in diagnosed}]
    judged = judge_ranks(lead, diagnosed, previous, missing=sorted(set(missing)), extra_evidence=extra_evidence)
    return _gone_first(judged, gone, diagnosed, lead)


def _gone_first(judged: JobVerdict, gone: Mapping[int, str], diagnosed: Sequence[DiagnosedRank],
                history: Sequence[Frame]) -> JobVerdict:
    """A job whose gone rank (rank_exited) is one diagnose_job_across_nodes was told of: its headline says what
    was read of the end ("rank 1 on n2 is gone: its task exited with status 1 at 14:18:50; rank 0 waits for it in
    all_reduce until ..."), not only that the rank is not seen."""
    if judged.finding != "rank_exited" or judged.responsible_rank not in gone:
        return judged
    live = [d for d in diagnosed if d.member.alive]
    waiting = [d for d in live if in_collective_now(d)]
    said = list(dict.fromkeys(gone[rank] for rank in sorted(gone)))  # ranks of one srun line share their words
    head = "; ".join(said[:RANKS_LISTED]) + (f"; {len(said) - RANKS_LISTED} more gone" if len(said) > RANKS_LISTED
                                             else "")
    backend, why = collective_backend(history, live)
    them = "it" if len(gone) == 1 else "them"
    if waiting:
        verb = "waits" if len(waiting) == 1 else "wait"
        head += (f"; {ranks_text(waiting)} {verb} for {them} in {wait_place(waiting[0])} until "
                 f"{timeout_text(backend, why)}")
    elif live:
        head += f"; the others will wait for {them} at their next collective until {timeout_text(backend, why)}"
    verdict = dataclasses.replace(judged.verdict, evidence=(head, *judged.verdict.evidence[1:]))
    return dataclasses.replace(judged, verdict=verdict)
