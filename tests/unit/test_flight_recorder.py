"""probes/sensors/flight_recorder.py and probes/diagnosis/collectives.py without a job: where a rank's environment
shows a recorder, NCCL dump files constructed in the pickle format torch's fr_trace reads (checked by running
fr_trace on them), a real torch worker server in this process, and the job verdict's wording on frames.

The real gloo job end to end: tests/e2e/test_flight_recorder_e2e.py.
"""

from __future__ import annotations

import json
import os
import pickle
import threading

import pytest
from support.requires import needs_torch
from targets.nccl_dumps import GRAD_ELEMENTS, T0_NS, nccl_dump, nccl_entry

from probes.diagnosis.collectives import collective_gaps, gap_line, size_text
from probes.frame import CollectivesReading, RankCollectives
from probes.sensors.flight_recorder import (
    NCCL_DEFAULT_DUMP_PREFIX,
    FlightRecorderSource,
    WorkerServerError,
    ask_worker_server,
    find_source,
    listening_socket_owner,
    load_dump,
    parse_trace,
    read_rank,
)


@pytest.fixture
def nccl_dumps(tmp_path):
    """Four ranks' dumps: ranks 0, 2, 3 entered all_reduce #412 and wait in it; rank 1 stopped after #411."""
    prefix = tmp_path / "nccl_trace_rank_"
    for rank in range(4):
        dump = nccl_dump(411, 411) if rank == 1 else nccl_dump(412, 411)
        (tmp_path / f"nccl_trace_rank_{rank}").write_bytes(pickle.dumps(dump))
    return str(prefix)


# --- the environment -------------------------------------------------------------------------------------


def test_the_environment_names_the_ways_in():
    assert find_source({"RANK": "0"}) is None
    assert find_source({"TORCH_FR_BUFFER_SIZE": "0"}) is None  # recorder off
    source = find_source({"TORCH_FR_BUFFER_SIZE": "2000", "TORCH_WORKER_SERVER_SOCKET": "/run/r0.sock"})
    assert source == FlightRecorderSource(2000, "/run/r0.sock", NCCL_DEFAULT_DUMP_PREFIX, None)
    source = find_source({"TORCH_NCCL_TRACE_BUFFER_SIZE": "100", "TORCH_NCCL_DEBUG_INFO_TEMP_FILE": "/d/fr_",
                          "TORCH_NCCL_DEBUG_INFO_PIPE_FILE": "/d/pipe_"})
    assert (source.buffer_size, source.socket_path, source.dump_prefix, source.pipe_prefix) == \
        (100, None, "/d/fr_", "/d/pipe_")
    # TORCH_FR_* wins over the older TORCH_NCCL_* names, as in torch
    assert find_source({"TORCH_FR_BUFFER_SIZE": "50", "TORCH_NCCL_TRACE_BUFFER_SIZE": "9",
                        "TORCH_FR_DUMP_TEMP_FILE": "/a_", "TORCH_NCCL_DEBUG_INFO_TEMP_FILE": "/b_"}) == \
        FlightRecorderSource(50, None, "/a_", None)
    # a worker server alone (recorder off): still a way in, it answers with an empty buffer
    assert find_source({"TORCH_WORKER_SERVER_SOCKET": "/s"}).socket_path == "/s"


# --- NCCL dump files --------------------------------------------------------------------------------------


def test_an_nccl_dump_names_the_rank_that_never_joined(nccl_dumps):
    source = FlightRecorderSource(2000, None, nccl_dumps, "/dev/shm/fr_pipe_")
    ranks = tuple(read_rank(1000 + rank, rank, source, started_at=0.0) for rank in range(4))
    assert [(r.source, r.available) for r in ranks] == [("dump_file", True)] * 4
    group = ranks[0].groups[0]
    assert (group.pg_id, group.pg_name, group.last_entered, group.last_completed) == ("0", "default_pg", 412, 411)
    assert [(p.seq, p.op, p.backend, p.input_bytes) for p in group.pending] == [(412, "all_reduce", "nccl",
                                                                                4 * GRAD_ELEMENTS)]
    assert ranks[1].trigger == f"write to /dev/shm/fr_pipe_1.pipe (NCCL: the rank then dumps to {nccl_dumps}1)"
    (gap,) = collective_gaps(CollectivesReading(ranks))
    assert (gap.seq, gap.op, gap.waiting, gap.missing) == (412, "all_reduce", (0, 2, 3), ((1, 411),))
    assert gap.waiting_since == pytest.approx(T0_NS / 1e9 + 7)
    line = gap_line(gap)
    assert line.startswith("rank 1 never entered all_reduce #412 (process group 0, 26 MB, its last: #411); "
                           "ranks 0, 2, 3 wait in it since "), line
    assert line.endswith(" (Flight Recorder)")


def test_a_dump_older_than_the_rank_is_a_previous_runs(nccl_dumps):
    source = FlightRecorderSource(2000, None, nccl_dumps, None)
    written = os.stat(f"{nccl_dumps}0").st_mtime
    stale = read_rank(1000, 0, source, started_at=written + 60)
    assert not stale.available and stale.source == "none"
    assert "not readable from outside" in stale.reason


def test_a_dump_that_would_run_code_is_refused(tmp_path):
    class Payload:
        def __reduce__(self):
            return (os.system, ("touch " + str(tmp_path / "ran"),))

    (tmp_path / "fr_0").write_bytes(pickle.dumps({"entries": [Payload()]}))
    reading = read_rank(1000, 0, FlightRecorderSource(100, None, str(tmp_path / "fr_"), None), started_at=0.0)
    assert not reading.available
    assert "may hold only plain values" in reading.reason
    assert not (tmp_path / "ran").exists()
    (tmp_path / "fr_1").write_bytes(b"\x80\x04garbage")
    reading = read_rank(1001, 1, FlightRecorderSource(100, None, str(tmp_path / "fr_"), None), started_at=0.0)
    assert not reading.available and "could not be read" in reading.reason


def test_a_json_dump_reads_like_a_pickle_one(tmp_path):
    (tmp_path / "fr_0").write_text(json.dumps(nccl_dump(412, 411)))
    assert parse_trace(load_dump(str(tmp_path / "fr_0"))) == parse_trace(nccl_dump(412, 411))


def test_gloo_pg_status_lagging_its_entries_is_not_believed():
    """Seen on gloo (torch 2.13): pg_status said last completed #3 while entries 4 and 5 were retired."""
    dump = nccl_dump(6, 5, first=1)
    dump["pg_status"]["0"] = {"last_completed_collective": "3", "last_enqueued_collective": "6",
                              "last_started_collective": "-1"}
    (group,) = parse_trace(dump)
    assert (group.last_entered, group.last_completed, [p.seq for p in group.pending]) == (6, 5, [6])


def test_point_to_point_entries_and_bad_entries_are_left_out():
    dump = nccl_dump(3, 3, first=1)
    dump["entries"] += [dict(nccl_entry(0, "started", retired=False, created_s=9, op="send"), is_p2p=True,
                             p2p_seq_id=1), "not an entry"]
    (group,) = parse_trace(dump)
    assert group.last_entered == 3 and not group.pending
    assert parse_trace({"entries": "nonsense", "pg_status": []}) == ()


def test_ranks_in_step_show_no_gap():
    dumps = [nccl_dump(412, 412), nccl_dump(412, 411)]  # one finished #412, the other still in it: no one missing
    reading = CollectivesReading(tuple(read_from(rank, dump) for rank, dump in enumerate(dumps)))
    assert collective_gaps(reading) == ()
    assert collective_gaps(None) == ()


def read_from(rank: int, dump: dict) -> RankCollectives:
    return RankCollectives(rank=rank, pid=100 + rank, source="dump_file", available=True, groups=parse_trace(dump))


def test_sizes_in_words():
    assert [size_text(n) for n in (None, 12, 4000, 1_048_576, 26_214_400, 3 * 10**9)] == \
        [None, "12 B", "4.0 kB", "1.0 MB", "26 MB", "3.0 GB"]


# --- the worker server ------------------------------------------------------------------------------------


@needs_torch
def test_a_real_worker_server_is_asked_and_its_owner_checked(tmp_path):
    """torch's own _WorkerServer (what worker_main() starts) in this process: its recorder is empty (no process
    group), its socket is ours and no other process's."""
    from torch._C._distributed_c10d import _WorkerServer

    path = str(tmp_path / "w.sock")
    server = _WorkerServer(path)
    try:
        assert ask_worker_server(path, "ping") == "pong"
        assert listening_socket_owner(path, os.getpid()) is True
        assert listening_socket_owner(path, os.getppid()) is False
        assert listening_socket_owner(str(tmp_path / "none.sock"), os.getpid()) is None
        with pytest.raises(WorkerServerError, match="404"):
            ask_worker_server(path, "no_such_handler")
        reading = read_rank(os.getpid(), 0, FlightRecorderSource(None, path, None, None))
        assert (reading.source, reading.available, reading.groups) == ("worker_server", True, ())
        elsewhere = read_rank(os.getppid(), 0, FlightRecorderSource(None, path, None, None))
        assert not elsewhere.available and "another process's socket" in elsewhere.reason
    finally:
        server.shutdown()
    gone = read_rank(os.getpid(), 0, FlightRecorderSource(100, path, None, None))
    assert not gone.available and "nothing listens on" in gone.reason


def test_a_server_that_never_answers_costs_its_timeout_and_is_said(tmp_path):
    import socket

    path = str(tmp_path / "mute.sock")
    listener = socket.socket(socket.AF_UNIX)
    listener.bind(path)
    listener.listen()
    accepted = []
    thread = threading.Thread(target=lambda: accepted.append(listener.accept()), daemon=True)
    thread.start()
    try:
        with pytest.raises(WorkerServerError, match=r"no answer within 0\.2 s"):
            ask_worker_server(path, "fr_trace_json", timeout_s=0.2)
    finally:
        thread.join(timeout=5)
        for conn, _ in accepted:
            conn.close()
        listener.close()


# --- the job's verdict -----------------------------------------------------------------------------------


def _found(liveness: str, finding: str):
    from probes.diagnosis.job import _Finding
    from probes.frame import Verdict

    verdict = Verdict("comms_bound", liveness, 0.9, ("rank 1 stuck in save (train.py:9) for 40 s", "more"),
                      ("find what rank 1 waits for",))
    return _Finding(finding, verdict, 1)


def _frame(ranks) -> object:
    from probes.frame import Frame, TargetInfo

    return Frame(seq=1, time=T0_NS / 1e9 + 60, interval_s=1.0, target=TargetInfo(pid=1, alive=True),
                 collectives=CollectivesReading(tuple(ranks)))


def test_a_hung_job_names_the_collective_after_its_headline_and_a_running_one_does_not(nccl_dumps):
    from probes.diagnosis.job import _with_collectives

    source = FlightRecorderSource(2000, None, nccl_dumps, None)
    frame = _frame(read_rank(1000 + rank, rank, source, started_at=0.0) for rank in range(4))
    hung = _with_collectives(_found("hung", "hung_rank"), frame)
    assert hung.evidence[0].startswith("rank 1 stuck in save")
    assert hung.evidence[1].startswith("rank 1 never entered all_reduce #412 (process group 0, 26 MB")
    assert hung.evidence[2:] == ("more",)
    running = _found("progressing", "straggler")
    assert _with_collectives(running, frame) == running.verdict  # a gap seen while running is a moment's


def test_an_unreadable_rank_says_so_and_the_trigger_is_offered_never_pulled(nccl_dumps, tmp_path):
    from probes.diagnosis.job import _with_collectives

    source = FlightRecorderSource(2000, None, nccl_dumps, str(tmp_path / "pipe_"))
    ranks = [read_rank(1000 + rank, rank, source, started_at=0.0) for rank in (0, 2, 3)]
    ranks.append(read_rank(1001, 1, FlightRecorderSource(2000, None, str(tmp_path / "none_"),
                                                         str(tmp_path / "pipe_")), started_at=0.0))
    verdict = _with_collectives(_found("hung", "hung_rank"), _frame(ranks))
    # rank 1's recorder is unread: nobody is known to have missed #412, so none is named, only where they wait
    assert not any("never entered" in line for line in verdict.evidence)
    assert verdict.evidence[1].startswith("ranks 0, 2, 3 wait in all_reduce #412 (process group 0, 26 MB) since ")
    assert verdict.evidence[1].endswith(" (Flight Recorder); rank 1 not read"), verdict.evidence[1]
    assert verdict.advice[-1] == (f"The job enabled a dump on demand: write to {tmp_path}/pipe_1.pipe (NCCL: the "
                                  f"rank then dumps to {tmp_path}/none_1); gputop writes it only when asked "
                                  "(--fr-dump, or f in the TUI).")
    assert not list(tmp_path.glob("pipe_*"))  # gputop wrote no trigger


# --- the probe on real processes -------------------------------------------------------------------------


def test_a_hung_job_whose_recorders_are_all_unread_is_told_the_trigger(tmp_path):
    from probes.diagnosis.job import _with_collectives

    source = FlightRecorderSource(2000, None, str(tmp_path / "none_"), str(tmp_path / "pipe_"))
    frame = _frame(read_rank(1000 + rank, rank, source, started_at=0.0) for rank in range(2))
    verdict = _with_collectives(_found("hung", "hung_rank"), frame)
    assert verdict.evidence == _found("hung", "hung_rank").verdict.evidence
    assert verdict.advice[-1].startswith(f"The job enabled a dump on demand: write to {tmp_path}/pipe_0.pipe")
    assert not list(tmp_path.iterdir())
