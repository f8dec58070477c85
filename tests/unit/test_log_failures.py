"""Why it died, in the job's own words (issue 40): the failure lines of a log (probes/logformats/failures.py), kept by
the log probe (probes/sensors/progress.py) and said in the exited verdict and the job's rank_exited
(probes/diagnosis/exit_causes.py, verdict.py, job.py). The real deaths are tests/e2e/test_log_failures_e2e.py.

Where each line comes from (the code that prints it):

- a traceback and its last line: CPython's traceback module; ``[rank0]: `` before each line: the excepthook
  ``init_process_group`` installs (torch/distributed/distributed_c10d.py, ``excepthook_prefix``);
- "DataLoader worker (pid 57) is killed by signal: Killed." and "... exited unexpectedly with exit code 1. Details
  are lost due to multiprocessing. ...": torch/csrc/DataLoader.cpp (``_error_if_any_worker_fails``, called from the
  SIGCHLD handler of torch/utils/data/_utils/signal_handling.py); "DataLoader worker (pid(s) 57) exited
  unexpectedly": torch/utils/data/dataloader.py (``_try_get_data``);
- "failed (exitcode: 1) local_rank: 0 (pid: 7405) of binary: ...": torch/distributed/elastic/multiprocessing/api.py;
  the failure table (``rank : 1 (local_rank: 1)``, ``exitcode : -9 (pid: 1234)  (SIGKILL)``), "Signal 9 (SIGKILL)
  received by PID 1234" and ``ChildFailedError``: torch/distributed/elastic/multiprocessing/errors/__init__.py
  (``_FAILURE_FORMAT_TEMPLATE``, ``ProcessFailure.__post_init__``);
- "Watchdog caught collective operation timeout: WorkNCCL(SeqNum=..., OpType=ALLREDUCE, ...) ran for 600000
  milliseconds before timing out.": torch/csrc/distributed/c10d/ProcessGroupNCCL.cpp (``WorkNCCL::checkTimeout``,
  after ``logPrefix()``, "[PG ID 0 PG GUID 0(default_pg) Rank 3] "); "NCCL error in: ...": NCCLUtils.hpp
  (``C10D_NCCL_CHECK``);
- "Timed out waiting 10000ms for recv operation to complete": third_party/gloo/gloo/transport/tcp/unbound_buffer.cc;
  "Connection closed by peer [addr]:port", "Read error [addr]:port: Connection reset by peer", "Read timeout [addr]":
  gloo/transport/tcp/pair.cc (``Pair::read``), each after GLOO_ERROR_MSG's "[file:line] ";
- "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has a total capacity of ...":
  c10/cuda/CUDACachingAllocator.cpp (TORCH_CHECK_WITH(OutOfMemoryError, ...)).

tests/fixtures/log_failures/ holds three whole logs as real jobs printed them here (its README says how).
"""

from __future__ import annotations

import dataclasses
import json
import signal
from pathlib import Path

import pytest
from support.frames import FORWARD, PID, T0, main_count, make_frame
from support.job_frames import (
    ALL_REDUCE,
    RANK0,
    RANK1,
    count,
    job_frame,
    job_info,
    rank_proc,
    run_job,
    straggler_frames,
)

from probes.diagnosis.exit_causes import LOG_FAILURE_BEFORE_S, last_log_failure
from probes.frame import Frame, LogFailure, ProcessExit, ProgressReading, from_jsonable, to_jsonable
from probes.logformats.failures import FAILURE_LINE_CHARS, FailureReader, read_failures
from probes.monitoring.monitor import fold
from probes.sensors.progress import KEPT_FAILURES, KEPT_LAUNCHER_FAILURES, LogProgressProbe

FAILURES = Path(__file__).parents[1] / "fixtures" / "log_failures"
LOGS = Path(__file__).parents[1] / "fixtures" / "logs"


def _one(line: str) -> LogFailure | None:
    found = read_failures([line])
    assert len(found) <= 1, found
    return found[0] if found else None


# --- the recogniser on real lines -------------------------------------------------------------------


def test_a_torchrun_gloo_timeout_log_gives_the_ranks_error_then_torchruns_account():
    found = read_failures((FAILURES / "torchrun_gloo_timeout.log").read_text().splitlines())
    assert [(f.kind, f.rank, f.pid, f.signal, f.exit_code) for f in found] == [
        ("gloo_timeout", 0, None, None, None),  # rank 0's traceback's last line, never one of its frames
        ("rank_failed", None, 7405, None, 1),  # torchrun's log line: "failed (exitcode: 1) local_rank: 0 (pid: 7405)"
        ("launcher_failed", None, None, None, None),  # its own ChildFailedError
        ("rank_failed", 1, 7406, signal.SIGTERM, None),  # the table: rank 1 stopped by torchrun
        ("rank_failed", 0, 7405, None, 1),  # the table's root cause
    ]
    # The line in the job's words, without the "[rank0]: " tag, the source path cut to its file.
    assert found[0].text == ("RuntimeError: [unbound_buffer.cc:78] Timed out waiting 10000ms for recv operation to "
                             "complete")


def test_a_killed_dataloader_worker_is_named_with_its_signal():
    found = read_failures((FAILURES / "dataloader_worker_killed.log").read_text().splitlines())
    assert [(f.kind, f.pid, f.signal) for f in found] == [("worker_killed", 10197, signal.SIGKILL),
                                                         ("worker_exited", 10197, None)]
    assert found[0].text == "RuntimeError: DataLoader worker (pid 10197) is killed by signal: Killed."
    assert found[1].text == "RuntimeError: DataLoader worker (pid(s) 10197) exited unexpectedly"


def test_a_connection_reset_outside_gloo_is_the_exception_it_is():
    found = read_failures((FAILURES / "dataloader_connection_reset.log").read_text().splitlines())
    assert [(f.kind, f.text) for f in found] == [
        ("exception", "ConnectionResetError: [Errno 104] Connection reset by peer")]


@pytest.mark.parametrize(("line", "kind", "rank", "pid", "sig", "code"), [
    ("torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has a total capacity of 79.14 GiB "
     "of which 1.06 GiB is free.", "cuda_oom", None, None, None, None),
    ("RuntimeError: CUDA out of memory. Tried to allocate 36.00 MiB (GPU 0; 7.93 GiB total capacity; 130.35 MiB "
     "already allocated)", "cuda_oom", None, None, None, None),
    ("[rank3]:[E1207 11:46:02.297000 7401 torch/csrc/distributed/c10d/ProcessGroupNCCL.cpp:632] [PG ID 0 PG GUID "
     "0(default_pg) Rank 3] Watchdog caught collective operation timeout: WorkNCCL(SeqNum=668, OpType=ALLREDUCE, "
     "NumelIn=52, NumelOut=52, Timeout(ms)=600000) ran for 600097 milliseconds before timing out.",
     "nccl_timeout", 3, None, None, None),
    ("[E ProcessGroupNCCL.cpp:475] [Rank 1] Watchdog caught collective operation timeout: WorkNCCL(SeqNum=5, "
     "OpType=BROADCAST, Timeout(ms)=1800000) ran for 1800583 milliseconds before timing out.",
     "nccl_timeout", 1, None, None, None),
    ("torch.distributed.DistBackendError: NCCL error in: ../torch/csrc/distributed/c10d/ProcessGroupNCCL.cpp:1970, "
     "unhandled system error (run with NCCL_DEBUG=INFO for details), NCCL version 2.19.3",
     "nccl_error", None, None, None, None),
    ("RuntimeError: NCCL error: unhandled cuda error, NCCL version 2.10.3", "nccl_error", None, None, None, None),
    ("RuntimeError: [../third_party/gloo/gloo/transport/tcp/pair.cc:598] Connection closed by peer "
     "[127.0.0.1]:29500", "gloo_peer_lost", None, None, None, None),
    ("RuntimeError: [../third_party/gloo/gloo/transport/tcp/pair.cc:534] Read error [10.0.0.2]:4322: Connection "
     "reset by peer", "gloo_peer_lost", None, None, None, None),
    ("RuntimeError: [../third_party/gloo/gloo/transport/tcp/pair.cc:575] Read timeout [10.0.0.2]:4322",
     "gloo_timeout", None, None, None, None),
    ("RuntimeError: DataLoader worker (pid 57) is killed by signal: Bus error. It is possible that dataloader's "
     "workers are out of shared memory. Please try to raise your shared memory limit.",
     "worker_killed", None, 57, signal.SIGBUS, None),
    ("RuntimeError: DataLoader worker (pid 91) exited unexpectedly with exit code 1. Details are lost due to "
     "multiprocessing. Rerunning with num_workers=0 may give better error trace.",
     "worker_exited", None, 91, None, 1),
    ("RuntimeError: DataLoader worker (pid(s) 57, 58) exited unexpectedly", "worker_exited", None, 57, None, None),
    ("  traceback : Signal 9 (SIGKILL) received by PID 1234", None, None, None, None, None),  # the table's repeat
    ("Signal 9 (SIGKILL) received by PID 1234", "rank_failed", None, 1234, signal.SIGKILL, None),
    ("  exitcode  : -9 (pid: 1234)  (SIGKILL)", "rank_failed", None, 1234, signal.SIGKILL, None),
])
def test_each_source_line_is_recognised(line, kind, rank, pid, sig, code):
    found = _one(line)
    if kind is None:
        assert found is None
        return
    assert found is not None and (found.kind, found.rank, found.pid, found.signal, found.exit_code) == \
        (kind, rank, pid, sig, code)


def test_torchruns_table_gives_each_exitcode_its_rank():
    table = """============================================================
train.py FAILED
------------------------------------------------------------
Failures:
[1]:
  time      : 2026-12-07_11:46:07
  host      : node3
  rank      : 5 (local_rank: 1)
  exitcode  : -9 (pid: 2345)  (SIGKILL)
  error_file: <N/A>
  traceback : Signal 9 (SIGKILL) received by PID 2345
------------------------------------------------------------
Root Cause (first observed failure):
[0]:
  time      : 2026-12-07_11:46:02
  host      : node3
  rank      : 4 (local_rank: 0)
  exitcode  : 1 (pid: 2344)
  error_file: <N/A>
  traceback : To enable traceback see: https://pytorch.org/docs/stable/elastic/errors.html
============================================================""".splitlines()
    assert [(f.rank, f.pid, f.signal, f.exit_code) for f in read_failures(table)] == [
        (5, 2345, signal.SIGKILL, None), (4, 2344, None, 1)]


def test_a_traceback_gives_its_last_line_once_complete_and_never_a_frame():
    reader = FailureReader()
    lines = ["Traceback (most recent call last):",
             '  File "train.py", line 12, in <module>',
             "    raise RuntimeError(\"NCCL error: the source line of a frame\")",
             "    self.model.forward",
             "ValueError: the batch had 3 dimensions"]
    said = [reader.read(line) for line in lines]
    assert said[:4] == [None] * 4  # nothing is taken before the traceback is complete
    assert said[4] is not None and (said[4].kind, said[4].text) == ("exception",
                                                                    "ValueError: the batch had 3 dimensions")
    # A bare exception name ends one too; a line that is no exception amid the frames (another process's) does not.
    assert [f.text for f in read_failures(["Traceback (most recent call last):", '  File "a.py", line 1, in f',
                                           "step 30 | loss 0.03", "KeyboardInterrupt"])] == ["KeyboardInterrupt"]


def test_two_ranks_tracebacks_interleaved_are_each_their_own():
    lines = ["[rank0]: Traceback (most recent call last):", "[rank1]: Traceback (most recent call last):",
             '[rank0]:   File "train.py", line 3, in <module>', '[rank1]:   File "train.py", line 3, in <module>',
             "[rank1]: torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB.",
             "[rank0]: RuntimeError: the loss is nan"]
    assert [(f.kind, f.rank) for f in read_failures(lines)] == [("cuda_oom", 1), ("exception", 0)]


def test_the_same_failure_said_twice_in_a_row_is_kept_once():
    watchdog = ("[PG ID 0 PG GUID 0(default_pg) Rank 2] Watchdog caught collective operation timeout: WorkNCCL("
                "SeqNum=9, OpType=ALLREDUCE, NumelIn=1, NumelOut=1, Timeout(ms)=600000) ran for 600011 milliseconds "
                "before timing out.")
    lines = [watchdog, f"[PG ID 0 PG GUID 0(default_pg) Rank 2] Process group watchdog thread terminated with "
             f"exception: {watchdog}"]
    assert [(f.kind, f.rank) for f in read_failures(lines)] == [("nccl_timeout", 2)]


def test_a_failure_line_is_shortened_and_its_secrets_hidden():
    found = _one("RuntimeError: CUDA out of memory while loading --hf-token=hf_abcdefghijklmnop " + "x" * 400)
    assert found is not None and len(found.text) == FAILURE_LINE_CHARS and found.text.endswith("…")
    assert "hf_abcdefghijklmnop" not in found.text


def test_no_step_line_fixture_is_taken_for_a_failure():
    for path in sorted(LOGS.glob("*.log")):
        assert read_failures(path.read_text(errors="replace").splitlines()) == [], path.name


# --- the probe keeps them -----------------------------------------------------------------------------


def test_the_log_probe_keeps_the_last_failures_it_reads(tmp_path):
    log = tmp_path / "train.log"
    log.write_text("step 10 | loss 2.31 | time 500ms\n")
    probe = LogProgressProbe(pid=999_999, log_path=str(log))
    try:
        first = probe.read()
        assert first is not None and first.failures == ()
        with log.open("a") as handle:
            handle.write("step 20 | loss 2.12 | time 500ms\n")
            handle.write((FAILURES / "dataloader_worker_killed.log").read_text())
        reading = probe.read()
        assert reading is not None and reading.iteration == 20
        assert [(f.kind, f.pid) for f in reading.failures] == [("worker_killed", 10197), ("worker_exited", 10197)]
        assert all(f.logged_at is not None for f in reading.failures)
        # Bounded: the job's own last few, whatever else the log says after them.
        with log.open("a") as handle:
            for i in range(KEPT_FAILURES + 3):
                handle.write(f"Traceback (most recent call last):\n  File \"x.py\", line {i}\nValueError: {i}\n")
            handle.write((FAILURES / "torchrun_gloo_timeout.log").read_text().split("recv operation to complete\n")[1])
        kept = probe.read().failures
        own = [f"ValueError: {i}" for i in range(3, 3 + KEPT_FAILURES)]
        assert [f.text for f in kept if f.kind == "exception"] == own
        # torchrun's account (its log line, ChildFailedError, the table's two rows) keeps its own few, after them
        assert [f.kind for f in kept[KEPT_FAILURES:]] == ["launcher_failed", "rank_failed", "rank_failed"]
        assert len(kept) == KEPT_FAILURES + KEPT_LAUNCHER_FAILURES
    finally:
        probe.close()


def test_a_log_without_step_lines_still_carries_its_failures(tmp_path):
    log = tmp_path / "train.log"
    log.write_text((FAILURES / "dataloader_worker_killed.log").read_text())
    probe = LogProgressProbe(pid=999_999, log_path=str(log))
    try:
        reading = probe.read()
        assert reading is not None and reading.source is None and reading.no_pace is not None
        assert [f.kind for f in reading.failures] == ["worker_killed", "worker_exited"]
    finally:
        probe.close()


# --- the verdicts' words ---------------------------------------------------------------------------------


def _progress(*failures: LogFailure) -> ProgressReading:
    return ProgressReading(no_pace="no pace: no step lines recognised yet", failures=failures)


def _died(failures: tuple[LogFailure, ...], exits: tuple[ProcessExit, ...]) -> list:
    live = [make_frame(i, counts=[main_count(FORWARD, n=10)]) for i in range(3)]
    dead = dataclasses.replace(make_frame(3, alive=False), exits=exits, progress=_progress(*failures))
    return [*live, dead]


def test_the_exited_verdict_says_the_logs_last_error_right_after_its_headline():
    oom = LogFailure("cuda_oom", "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has "
                     "a total capacity of 79.14 GiB of which 1.06 GiB is free.", logged_at=T0 + 3.5)
    own = ProcessExit(pid=PID, role="main", name="python", seen_at=T0 + 4.0, exit_code=1, read_from="zombie")
    verdict = fold(_died((oom,), (own,))).view.verdict
    assert verdict.liveness == "exited"
    assert verdict.evidence[0] == (f"PID {PID} has exited: exited with status 1, as Python does on an uncaught "
                                   "exception.")
    assert verdict.evidence[1] == f"the log's last error: {oom.text}"


def test_a_worker_reaped_before_gputop_read_it_is_said_killed_per_the_main_processs_log():
    killed = LogFailure("worker_killed", "RuntimeError: DataLoader worker (pid 57) is killed by signal: Killed.",
                        pid=57, signal=signal.SIGKILL, logged_at=T0 + 3.2)
    chained = LogFailure("worker_exited", "RuntimeError: DataLoader worker (pid(s) 57) exited unexpectedly", pid=57,
                         logged_at=T0 + 3.3)
    worker = ProcessExit(pid=57, role="dataloader_worker", name="pt_data_worker", seen_at=T0 + 3.0,
                         read_from="reaped by its parent before gputop read how it ended")
    own = ProcessExit(pid=PID, role="main", name="python", seen_at=T0 + 4.0, exit_code=1, read_from="zombie")
    verdict = fold(_died((killed, chained), (worker, own))).view.verdict
    assert verdict.evidence[0] == (
        f"PID {PID} has exited: exited with status 1, as Python does on an uncaught exception, after its DataLoader "
        "worker PID 57 was killed by SIGKILL (per the main process's own log): sent by the kernel's OOM killer, a "
        "scheduler's limit or `kill -9`.")
    assert verdict.evidence[1] == f"the log's last error: {chained.text}"
    # Without the log, how it ended stays unknown, and is said so.
    unknown = fold(_died((), (worker, own))).view.verdict
    assert "PID 57 (pt_data_worker) ended, 1 s before it: how it ended is not known (reaped by its parent before " \
           "gputop read how it ended)" in unknown.evidence[1]


def test_a_rank_that_crashed_is_the_cause_before_one_its_launcher_stopped():
    """torchrun stops the other ranks once one fails and exits, often in the same tick: rank 0 killed by SIGTERM (per
    torchrun's log), rank 1 by SIGSEGV (its zombie). The crash is the cause in the headline, named by its rank."""
    stopped = LogFailure("rank_failed", "exitcode  : -15 (pid: 501)", pid=501, signal=signal.SIGTERM,
                         logged_at=T0 + 3.4)
    rank0 = ProcessExit(pid=501, role="rank", name="python", seen_at=T0 + 3.0, rank=0,
                        read_from="reaped by its parent before gputop read how it ended")
    rank1 = ProcessExit(pid=502, role="rank", name="python", seen_at=T0 + 3.0, signal=signal.SIGSEGV, rank=1,
                        read_from="zombie")
    own = ProcessExit(pid=PID, role="launcher", name="torchrun", seen_at=T0 + 4.0, exit_code=1, read_from="zombie")
    verdict = fold(_died((stopped,), (rank0, rank1, own))).view.verdict
    assert verdict.evidence[0].startswith(
        f"PID {PID} has exited: exited with status 1, as Python does on an uncaught exception, after its rank 1 PID "
        "502 was killed by SIGSEGV"), verdict.evidence[0]
    assert any(line.startswith("its rank 0 PID 501 (python) ended") and "SIGTERM" in line
               for line in verdict.evidence), verdict.evidence


def test_an_old_failure_is_not_this_exits_and_a_launchers_account_gives_way_to_the_jobs_own_words():
    stale = LogFailure("exception", "ValueError: from a run before", logged_at=T0 + 3.5 - LOG_FAILURE_BEFORE_S - 1)
    assert last_log_failure((stale,), near=T0 + 3.5) is None
    own = LogFailure("gloo_timeout", "RuntimeError: [unbound_buffer.cc:78] Timed out waiting 10000ms for recv "
                     "operation to complete", rank=0, logged_at=T0 + 3)
    table = LogFailure("launcher_failed", "torch.distributed.elastic.multiprocessing.errors.ChildFailedError:",
                       logged_at=T0 + 4)
    assert last_log_failure((own, table), near=T0 + 4) == own
    assert last_log_failure((table,), near=T0 + 4) == table
    # A rank's own line is its own, never another rank's.
    assert last_log_failure((own,), near=T0 + 4, rank=1, pid=RANK1) is None


def test_the_failure_line_read_a_tick_after_the_exit_joins_the_verdict_said_then():
    frames = _died((), (ProcessExit(pid=PID, role="main", name="python", seen_at=T0 + 4.0, exit_code=1),))
    late = LogFailure("exception", "RuntimeError: the test asked this job to fail", logged_at=T0 + 4.2)
    frames.append(dataclasses.replace(make_frame(4, alive=False), exits=(), progress=_progress(late)))
    verdict = fold(frames).view.verdict
    assert verdict.evidence[1] == "the log's last error: RuntimeError: the test asked this job to fail"


def test_the_jobs_rank_exited_says_the_ranks_own_last_error():
    timeout = LogFailure("gloo_timeout", "RuntimeError: [unbound_buffer.cc:78] Timed out waiting 10000ms for recv "
                         "operation to complete", rank=1, logged_at=T0 + 4.5)
    frames = straggler_frames(4)
    gone = ProcessExit(pid=RANK1, role="rank", name="python", seen_at=T0 + 5.0, exit_code=1, read_from="zombie")
    frames += [dataclasses.replace(
        job_frame(i, [rank_proc(RANK0, 0, cpu=0.5, main_cpu=0.0)], counts=[count(RANK0, ALL_REDUCE, n=5, idle=True)],
                  job=job_info(ranks=(RANK0,))), exits=(gone,) if i == 4 else (), progress=_progress(timeout))
        for i in range(4, 10)]
    job = run_job(frames)[-1]
    assert job.finding == "rank_exited"
    assert job.verdict.evidence[0].startswith("rank 1 (PID 502) has ended: exited with status 1, as Python does on an "
                                              "uncaught exception; rank 0 still runs: it waits for it")
    assert job.verdict.evidence[1] == (
        "rank 1's last error: RuntimeError: [unbound_buffer.cc:78] Timed out waiting 10000ms for recv operation to "
        "complete — gloo: a collective waited past the process group's timeout for a peer")


def test_the_failures_ride_in_a_recorded_frame():
    failure = LogFailure("worker_killed", "RuntimeError: DataLoader worker (pid 57) is killed by signal: Killed.",
                         pid=57, signal=signal.SIGKILL, logged_at=T0 + 1.5)
    frame = make_frame(0, progress=_progress(failure))
    assert from_jsonable(Frame, json.loads(json.dumps(to_jsonable(frame)))) == frame


def test_of_two_ranks_gone_in_one_tick_the_one_that_crashed_is_named_not_the_one_stopped():
    """A loaded CI run: rank 1 read address 0, torchrun stopped rank 0 (SIGTERM) and both were gone by the next tick,
    its launcher still running. The headline named rank 0 "first" by the order of the exits; the crash leads, and
    "first" is not claimed of two ends seen in one tick."""
    stopped = LogFailure("rank_failed", "exitcode  : -15 (pid: 501)", pid=RANK0, signal=signal.SIGTERM,
                         logged_at=T0 + 4.6)
    frames = straggler_frames(4)
    rank0 = ProcessExit(pid=RANK0, role="rank", name="python", seen_at=T0 + 5.0, rank=0,
                        read_from="reaped by its parent before gputop read how it ended")
    rank1 = ProcessExit(pid=RANK1, role="rank", name="python", seen_at=T0 + 5.0, signal=signal.SIGSEGV, rank=1,
                        read_from="zombie")
    frames += [dataclasses.replace(job_frame(i, [], job=job_info(ranks=())), exits=(rank0, rank1) if i == 4 else (),
                                   progress=_progress(stopped)) for i in range(4, 6)]
    job = run_job(frames)[-1]
    assert job.finding == "rank_exited" and job.responsible_rank == 1, job
    assert job.verdict.evidence[0].startswith(
        f"ranks 0, 1 (PID {RANK0}, {RANK1}) have ended, rank 1: killed by SIGSEGV: a crash in native code"), \
        job.verdict.evidence[0]
