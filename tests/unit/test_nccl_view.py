"""NCCL's own view in the verdict (probes/diagnosis/nccl_view.py), on frames carrying the RAS transcripts of
tests/fixtures/nccl_ras (built from NCCL's source: that folder's README): a dead process, an unresponsive one, and a
rank one AllReduce behind said only once it stays behind with the leaders standing still; nothing where RAS did not
answer or all is well."""

from __future__ import annotations

import dataclasses
from pathlib import Path

from support.frames import FORWARD, PID, main_count, make_frame, proc
from support.processes import wait_for

from probes.diagnosis.nccl_view import nccl_lines
from probes.machine_records import NcclRasReading
from probes.monitoring.monitor import fold

TRANSCRIPTS = Path(__file__).parents[1] / "fixtures" / "nccl_ras"


def _frame(i: int, transcript: str | None, answered: bool = True):
    frame = make_frame(i, counts=[main_count(FORWARD, n=10)],
                       processes=[proc(cpu=100.0, role="rank", rank=7)])
    ras = NcclRasReading(read_at=frame.time, address="localhost:28028", answered=answered,
                         raw=(TRANSCRIPTS / transcript).read_text() if transcript else "") \
        if transcript is not None or not answered else None
    return dataclasses.replace(frame, nccl_ras=ras)


def test_a_dead_process_is_said_with_where_it_ran():
    assert nccl_lines([_frame(0, "dead_rank.txt")]) == [
        "NCCL (its RAS port): 1 job process considered dead: PID 4104 on node 10.0.0.1 (GPU 3)"]


def test_a_rank_one_behind_is_said_once_it_stays_behind_with_its_main_thread():
    unresponsive = "NCCL (its RAS port): 1 job process not answering: PID 4106 on node 10.0.0.1 (GPU 5)"
    # one reading: one AllReduce behind is a busy job's normal skew, unsaid
    assert nccl_lines([_frame(0, "unresponsive_and_behind.txt")]) == [unresponsive]
    behind = ("NCCL (its RAS port): rank 7 is 1 AllReduce behind on communicator 5f2c9a1e7b3d4c80, for two readings "
              "with the others at operation 1234: the job waits for it; its main thread is in Linear.forward "
              "(torch/nn/modules/linear.py:125), called from GPT.forward (model.py:180)")
    twice = [_frame(0, "unresponsive_and_behind.txt"), _frame(1, None), _frame(2, "unresponsive_and_behind.txt")]
    assert nccl_lines(twice) == [unresponsive, behind]
    # shown under the verdict's headline
    assert fold(twice).view.verdict.evidence[1:3] == (unresponsive, behind)


def test_nothing_is_said_where_ras_did_not_answer_or_all_is_well():
    assert nccl_lines([_frame(0, None, answered=False)]) == []
    assert nccl_lines([_frame(0, "healthy_8_ranks.txt"), _frame(1, "healthy_8_ranks.txt")]) == []
    assert nccl_lines([make_frame(0, counts=[main_count(FORWARD)], processes=[proc(pid=PID)])]) == []


def test_the_poller_asks_from_its_own_thread_and_hands_each_answer_once():
    import threading

    from probes.sensors.nccl_ras import RasPoller, RasReading

    asked = threading.Event()
    addresses = []

    def query(address):
        addresses.append(address)
        asked.set()
        return RasReading(address, True, None, "NCCL version 2.27.3 compiled with CUDA 12.9", 0.01)

    poller = RasPoller(every_s=3600.0, query=query)
    assert poller.take() is None
    poller.want(None)  # not an NCCL job: never asked
    assert not asked.wait(0.2)
    poller.want(("localhost", 28028))
    try:
        got = wait_for(poller.take, timeout=10.0, interval=0.01)  # stored right after the query returns
        assert got[1].raw.startswith("NCCL version 2.27.3")
        assert poller.take() is None  # handed out once
        assert addresses == [("localhost", 28028)]
    finally:
        poller.close()
