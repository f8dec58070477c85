"""CPUs shared with other work in a distributed job (issue 31): the job's own processes (its ranks, their DataLoader
workers, the launcher) are never other work. A rank's projection leaves the rest of its job out of the host's busy
CPUs; the job's verdict says the shared CPUs once, for the whole job, in place of its ranks' lines.

Constructed frames of a 2-rank gloo job (tests/support/job_frames.py) on a 2-CPU host whose busy CPUs are set.
"""

from __future__ import annotations

import dataclasses

from support.frames import LONG_MATMUL, main_count, make_frame
from support.job_frames import (
    DDP_WAIT,
    FORWARD,
    LAUNCHER,
    RANK0,
    RANK1,
    SLOW_PYTHON,
    WORKER0,
    WORKER1,
    count,
    job_frame,
    rank_proc,
    run_job,
    worker_proc,
)

from probes.diagnosis.contention import LINE_PREFIX, _said, job_contention, with_job_contention
from probes.diagnosis.evidence import SAMPLES_REACH_S
from probes.diagnosis.rank_projection import project_rank
from probes.diagnosis.verdict_lines import VerdictLine, kind_of
from probes.frame import CpuReading, HostCpuReading, Verdict
from probes.monitoring.monitor import fold

CPUS = 2
AGED_OUT = 8 + int(SAMPLES_REACH_S) + 1  # the frame from which the first 8 frames' samples are out of reach


def _frames(busy_cpus: float, n: int = 8):
    """Rank 1 works in Python at 60% of a core, rank 0 waits for it at 20% (queued for a core 20% of the time, so
    its verdict weighs shared CPUs), each with a worker at 5%, the launcher at 0.5%: the job uses 0.9 CPUs; the
    host's CPUs were busy `busy_cpus`, the job's use included."""
    host = HostCpuReading(online_cpus=CPUS, allowed_cpus=CPUS, busy_cpus=busy_cpus)
    return [dataclasses.replace(job_frame(i, [
        rank_proc(RANK0, 0, cpu=20.0, main_thread_runqueue_pct=20.0), worker_proc(WORKER0, RANK0, cpu=5.0),
        rank_proc(RANK1, 1, cpu=60.0), worker_proc(WORKER1, RANK1, cpu=5.0)], counts=[
        count(RANK0, DDP_WAIT, n=9, idle=True), count(RANK0, FORWARD, n=1),
        count(RANK1, SLOW_PYTHON, n=9), count(RANK1, FORWARD, n=1)]), host=host) for i in range(n)]


def _contention_lines(lines) -> list[str]:
    return [line for line in lines if kind_of(line) == "contention"]


def test_a_ranks_projection_leaves_the_rest_of_its_job_out_of_the_busy_cpus():
    frame = _frames(busy_cpus=1.9, n=1)[0]
    projected = project_rank(frame, RANK0)
    # Rank 1 (0.6), its worker (0.05) and the launcher (0.005) are the job's: what is left is rank 0's 0.25 and
    # the 1.0 that processes outside the job used.
    assert round(projected.host.busy_cpus, 3) == round(1.9 - 0.655, 3)
    assert {p.pid for p in projected.processes} == {RANK0, WORKER0}
    assert project_rank(dataclasses.replace(frame, host=HostCpuReading()), RANK0).host == HostCpuReading()
    assert LAUNCHER in {p.pid for p in frame.processes}  # (the launcher is in the frame, counted with the job)


def test_a_job_alone_on_its_cpus_is_never_said_to_share_them():
    job = run_job(_frames(busy_cpus=0.92))[-1]
    assert job.finding == "straggler" and job.responsible_rank == 1
    assert not _contention_lines(job.verdict.evidence) and not _contention_lines(job.verdict.advice)
    for rank in job.ranks:  # each rank's own verdict neither: the other rank is its job, not other work
        assert not any(line.startswith(LINE_PREFIX) for line in rank.verdict.evidence), rank.verdict.evidence


def test_other_work_is_said_once_for_the_job_with_the_jobs_own_figure():
    job = run_job(_frames(busy_cpus=1.9))[-1]
    assert job.finding == "straggler" and job.responsible_rank == 1
    assert _contention_lines(job.verdict.evidence) == [
        "CPUs shared with other work: other processes used 1.0 of the 2 CPUs this job may run on, the job 0.9"]
    assert len(_contention_lines(job.verdict.advice)) == 1
    assert _contention_lines(job.verdict.advice)[0].startswith("The job gets 0.9 of its 2 CPUs")
    assert sum(line.startswith(LINE_PREFIX) or f": {LINE_PREFIX}" in line for line in job.verdict.evidence) == 1
    # Each rank's own verdict says what it got beside the processes outside the job.
    said = {rank.rank: _contention_lines(rank.verdict.evidence) for rank in job.ranks}
    assert said[1] == ["CPUs shared with other work: processes outside the job used 1.0 of the 2 CPUs this job may "
                       "run on, this rank 0.7"]
    assert job_contention(_frames(busy_cpus=1.9))[0] == _contention_lines(job.verdict.evidence)[0]


def test_a_held_job_verdict_keeps_one_shared_cpus_line():
    """A job verdict held over thin evidence keeps its predecessor's lines: its shared CPUs are said afresh, once."""
    frames = _frames(busy_cpus=1.9, n=8)
    host = frames[0].host
    quiet = [dataclasses.replace(job_frame(i, [rank_proc(RANK0, 0, cpu=20.0), rank_proc(RANK1, 1, cpu=60.0)]),
                                 host=host) for i in range(8, AGED_OUT)]  # the straggler's samples age out
    few = [dataclasses.replace(job_frame(i, [rank_proc(RANK0, 0, cpu=20.0), rank_proc(RANK1, 1, cpu=60.0)], counts=[
        count(RANK0, FORWARD, n=1), count(RANK1, FORWARD, n=1)]), host=host) for i in range(AGED_OUT, AGED_OUT + 3)]
    held = run_job(frames + quiet + few)[-1]
    assert held.finding == "straggler" and any(line.startswith("holding:") for line in held.verdict.evidence)
    assert _contention_lines(held.verdict.evidence) == [
        "CPUs shared with other work: other processes used 1.1 of the 2 CPUs this job may run on, the job 0.8"]
    assert len(_contention_lines(held.verdict.advice)) == 1, held.verdict.advice


def test_across_nodes_the_first_rank_that_shares_its_cpus_says_it_under_its_name():
    """Each node's share differs, so a job merged across nodes keeps a rank's own line, once, under its name; lines
    of that kind the job's verdict already carried (a held verdict's) are replaced."""
    rank_verdict = run_job(_frames(busy_cpus=1.9))[-1].ranks[1].verdict
    stale = VerdictLine(LINE_PREFIX + "other processes used 1.9 of the 2 CPUs this job may run on, the job 0.1",
                        "contention")
    job = Verdict("cpu_bound", "progressing", 0.8, ("rank 1 on n2 is the straggler: ...", stale), ("advice",))
    said = with_job_contention(job, _frames(busy_cpus=1.9), [("rank 0 on n1", Verdict("comms_bound", "progressing",
                                                                                          0.8, ("waits",))),
                                                              ("rank 1 on n2", rank_verdict)], one_node=False)
    assert _contention_lines(said.evidence) == [
        "rank 1 on n2: CPUs shared with other work: processes outside the job used 1.0 of the 2 CPUs this job may "
        "run on, this rank 0.7"]
    assert said.evidence[0] == "rank 1 on n2 is the straggler: ..."
    # cpu_bound is short of CPU: the advice comes right after the first.
    assert said.advice[0] == "advice" and said.advice[1].startswith("Processes outside the job use 1.0 of its 2 CPUs")
    # No rank says its CPUs are shared: nothing is said, and a stale line goes.
    quiet = with_job_contention(job, _frames(busy_cpus=1.9), [("rank 1 on n2", Verdict("cpu_bound", "progressing",
                                                                                        0.8, ("works",)))], False)
    assert quiet.evidence == ("rank 1 on n2 is the straggler: ...",) and quiet.advice == ("advice",)


# --- what the others cost the job: its main thread's wait for a CPU (issue 38, item 8) ---------------------------


def test_others_on_cpus_the_job_does_not_want_are_said_and_nothing_is_to_be_moved():
    """A job that sleeps 80% of each step by design, beside a process busy on one of its two CPUs: its main thread
    never waits for a CPU (schedstat), so "the job gets 0.1 of its 2 CPUs: other processes use the rest" was a false
    cause; the line says what was measured and no advice follows."""
    line, advice = _said(1.0, 2, 2.0, 0.0, 0.1, rank=False, queued_pct=0.0)
    assert line == (f"{LINE_PREFIX}other processes used 1.0 of the 2 CPUs this job may run on, the job 0.1; its main "
                    "thread waited for a CPU 0% of the time: it is not short of one")
    assert advice == ""


def test_others_that_make_the_job_wait_are_said_with_the_wait_measured():
    line, advice = _said(1.9, 2, 2.0, 0.0, 0.3, rank=False, queued_pct=14.6)
    assert "not short" not in line
    assert advice.startswith("While other processes used 1.9 of its 2 CPUs, the job's main thread waited for a CPU "
                             "15% of the time: find them (top, sorted by CPU)")
    _, unread = _said(1.9, 2, 2.0, 0.0, 0.3, rank=False)  # no schedstat: the older words, the job's own figure
    assert unread.startswith("The job gets 0.3 of its 2 CPUs: other processes use the rest. Find them")


def _beside_one_busy_process(queued_pct: float) -> Verdict:
    """A host-CPU-bound loop (its samples in one long matmul) at 20% CPU of a 2-CPU machine whose other process keeps
    one CPU busy, its main thread queued `queued_pct` of the time."""
    frames = [dataclasses.replace(
        make_frame(i, counts=[main_count(LONG_MATMUL, n=10)], cpu=20.0, main_thread_cpu_pct=20.0,
                   main_thread_runqueue_pct=queued_pct, cpu_reading=CpuReading(effective_cpus=2.0, affinity_cpus=2)),
        host=HostCpuReading(online_cpus=2, allowed_cpus=2, busy_cpus=1.2)) for i in range(20)]
    return fold(frames, replay=True).view.verdict


def test_a_verdict_on_a_job_not_short_of_a_cpu_tells_it_to_move_nothing():
    verdict = _beside_one_busy_process(queued_pct=0.0)
    assert not any(kind_of(line) == "contention" for line in verdict.advice), verdict.advice
    queued = _beside_one_busy_process(queued_pct=30.0)
    assert any(kind_of(line) == "contention" and "waited for a CPU 30% of the time" in line
               for line in queued.advice), queued.advice
