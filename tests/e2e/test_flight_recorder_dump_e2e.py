"""A Flight Recorder dump the user asks for (--fr-dump, `f` in the TUI): gputop writes NCCL's debug-info pipe of
each rank whose job enabled it, once, never blocking, reads the dump the rank writes and says what it asked of
which rank; a worker server is read at once instead; a rank with no trigger is told what to set. Without the
request nothing is written.

The rank side is tests/targets/fr_pipe_rank.py: a real process that makes, polls and answers its pipe as
ProcessGroupNCCL does, and dumps in the format of the constructed NCCL dumps (tests/targets/nccl_dumps.py).
"""

from __future__ import annotations

import json
import os
import pickle
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest
from support.paths import REPO
from support.pilot import capture_notes, pilot_test, wait_until
from targets.nccl_dumps import nccl_dump

from probes.frame import ProcessSample
from probes.sensors.flight_recorder import (
    FlightRecorderProbe,
)

pytestmark = pytest.mark.timeout(300)

CLI_TIMEOUT_S = 120  # a headless run of a few seconds, on a busy machine


def rank_sample(pid: int, rank: int | None) -> ProcessSample:
    return ProcessSample(pid=pid, ppid=os.getppid(), role="rank", name="python", rank=rank)


def lines_of(out) -> list[str]:
    return out.read_text().splitlines() if out.exists() else []


def start_rank(spawn_target, tmp_path, *args, rank: int = 0, env=None):
    """One fake NCCL rank (no launcher) with its pipe under tmp_path; its stdout in tmp_path/rankN.out."""
    out = tmp_path / f"rank{rank}.out"
    environment = {"RANK": str(rank), "TORCH_NCCL_DEBUG_INFO_PIPE_FILE": str(tmp_path / "pipe_"),
                   "TORCH_FR_DUMP_TEMP_FILE": str(tmp_path / "fr_"), **(env or {})}
    with out.open("w") as handle:
        proc = spawn_target("fr_pipe_rank.py", *args, env=environment, stdout=handle, stderr=subprocess.STDOUT,
                            ready=lambda p: "ready" in lines_of(out))
    return proc, out


def read_until(probe, samples, done, timeout_s: float = 60.0):
    """Each tick's reading (as the engine reads once a second) until done(asks so far) holds."""
    asks, readings = [], []
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        reading = probe.read(samples)
        readings.append(reading)
        asks.extend(reading.asks if reading is not None else ())
        if done(asks):
            return asks, readings
        time.sleep(0.2)
    raise AssertionError(f"not done within {timeout_s} s: {[a.line for a in asks]}")


def gputop(pid: int, *args: str) -> subprocess.CompletedProcess:
    """The real command, headless, without GPU or stacks (what is tested here needs neither)."""
    return subprocess.run([sys.executable, "-m", "tui", "--pid", str(pid), "--no-gpu", "--no-stacks",
                           "--snapshot", "-", *args], capture_output=True, text=True, timeout=CLI_TIMEOUT_S,
                          cwd=REPO, env=dict(os.environ, PYTHONPATH=str(REPO)))


# --- the probe on real processes -------------------------------------------------------------------------


@pytest.mark.slow
def test_asked_once_the_rank_dumps_and_the_dump_is_read_at_once(spawn_target, tmp_path):
    proc, out = start_rank(spawn_target, tmp_path, rank=1)
    stale = tmp_path / "fr_1"  # a previous run's dump: not the answer
    stale.write_bytes(pickle.dumps(nccl_dump(5, 4, first=1)))
    os.utime(stale, (1_000_000_000, 1_000_000_000))
    probe = FlightRecorderProbe(read_interval_s=3600)  # no scheduled read in the way: only the request reads
    samples = [rank_sample(proc.pid, 1)]
    before = probe.read(samples).ranks[0]
    assert not before.available and before.trigger.startswith(f"write to {tmp_path}/pipe_1.pipe")
    probe.request_dump()
    asks, readings = read_until(probe, samples, lambda asks: any(a.action != "pipe_written" for a in asks))
    assert [(a.rank, a.pid, a.action) for a in asks] == [(1, proc.pid, "pipe_written"), (1, proc.pid, "dumped")]
    assert asks[0].line == (f"asked rank 1 (PID {proc.pid}) to dump its Flight Recorder through {tmp_path}/pipe_1"
                            f".pipe (it reads the pipe every 1 s and writes {tmp_path}/fr_1)")
    assert asks[1].line.startswith(f"rank 1 (PID {proc.pid}) dumped its Flight Recorder to {tmp_path}/fr_1 ")
    dumped = readings[-1].ranks[0]
    assert (dumped.source, dumped.available, dumped.path) == ("dump_file", True, f"{tmp_path}/fr_1")
    assert (dumped.groups[0].last_entered, dumped.groups[0].last_completed) == (411, 411)
    assert lines_of(out).count("pipe read 1 bytes") == 1  # one byte, one dump
    # the next ticks ask nothing more
    probe.read(samples)
    assert lines_of(out).count("pipe read 1 bytes") == 1


@pytest.mark.slow
def test_a_rank_whose_pipe_has_no_reader_is_said_in_one_line(spawn_target, tmp_path):
    proc, _ = start_rank(spawn_target, tmp_path, "--no-reader")
    probe = FlightRecorderProbe()
    probe.request_dump()
    started = time.monotonic()
    reading = probe.read([rank_sample(proc.pid, 0)])
    assert time.monotonic() - started < 5.0
    (ask,) = reading.asks
    assert (ask.action, ask.path) == ("not_asked", f"{tmp_path}/pipe_0.pipe")
    assert ask.line == (f"could not ask rank 0 (PID {proc.pid}) for a Flight Recorder dump: no process reads "
                        f"{tmp_path}/pipe_0.pipe (ENXIO): the rank's NCCL process group is not up, or the rank is "
                        "gone; nothing was written")
    assert probe.awaited_lines() == []


@pytest.mark.slow
def test_ranks_without_a_trigger_are_told_what_to_set(spawn_target, tmp_path):
    recording = spawn_target("busy_loop.py", env={"RANK": "0", "TORCH_FR_BUFFER_SIZE": "100"},
                             stdout=subprocess.PIPE, text=True, ready=lambda p: p.stdout.readline())
    plain = spawn_target("busy_loop.py", env={"RANK": "1"}, stdout=subprocess.PIPE, text=True,
                         ready=lambda p: p.stdout.readline())
    probe = FlightRecorderProbe()
    probe.request_dump()
    reading = probe.read([rank_sample(recording.pid, 0), rank_sample(plain.pid, 1)])
    assert [(a.rank, a.action) for a in reading.asks] == [(0, "not_asked"), (1, "not_asked")]
    for ask in reading.asks:
        assert ask.line.startswith(f"asked rank {ask.rank} (PID {ask.pid}) nothing: ")
        assert "set TORCH_NCCL_DEBUG_INFO_PIPE_FILE=DIR/fr_pipe_ in the ranks' environment" in ask.line
        assert "or TORCH_WORKER_SERVER_SOCKET per rank" in ask.line
    assert "its job enabled no dump on demand" in reading.asks[0].line
    assert "its environment enables no Flight Recorder dump on demand" in reading.asks[1].line
    assert probe.read([rank_sample(plain.pid, 1)]) is None  # asked once: the next tick says nothing


@pytest.mark.slow
def test_a_worker_server_is_read_now_on_request_not_at_the_next_scheduled_read(spawn_target, tmp_path):
    short = tempfile.mkdtemp(prefix="gputop-frd-", dir="/tmp")  # a Unix socket's path must stay under 108 bytes
    sock = Path(short) / "w.sock"
    proc, _ = start_rank(spawn_target, tmp_path, "--worker-server",
                           env={"TORCH_WORKER_SERVER_SOCKET": str(sock), "TORCH_FR_BUFFER_SIZE": "100",
                                "TORCH_NCCL_DEBUG_INFO_PIPE_FILE": ""})
    probe = FlightRecorderProbe(read_interval_s=3600)
    samples = [rank_sample(proc.pid, 0)]
    first = probe.read(samples).ranks[0]
    assert (first.source, first.available) == ("worker_server", True), first.reason
    assert probe.read(samples).ranks[0] is first  # kept: the next scheduled read is an hour away
    probe.request_dump()
    reading = probe.read(samples)
    (ask,) = reading.asks
    assert (ask.action, ask.path) == ("read_now", str(sock))
    assert ask.line == (f"read rank 0 (PID {proc.pid})'s Flight Recorder now through its worker server at {sock} "
                        "(read-only: no dump asked)")
    assert reading.ranks[0] is not first and reading.ranks[0].read_at > first.read_at
    assert not list(tmp_path.glob("fr_*"))  # nothing dumped
    proc.kill()
    proc.wait(timeout=30)
    shutil.rmtree(short, ignore_errors=True)


# --- the command and the key -----------------------------------------------------------------------------


@pytest.mark.slow
def test_fr_dump_names_the_collective_and_without_it_nothing_is_written(spawn_target, tmp_path):
    """A 2-rank torchrun job of fake NCCL ranks; rank 1 stopped after all_reduce #411, rank 0 waits in #412."""
    out = tmp_path / "job.out"
    environment = {"TORCH_NCCL_DEBUG_INFO_PIPE_FILE": str(tmp_path / "pipe_"),
                   "TORCH_FR_DUMP_TEMP_FILE": str(tmp_path / "fr_")}
    with out.open("w") as handle:
        job = spawn_target("fr_pipe_rank.py", "--launch", env=environment, stdout=handle, stderr=subprocess.STDOUT,
                           timeout=120, ready=lambda p: lines_of(out).count("ready") == 2)
    # Read-only by default: both pipes stay unread, no dump is written, the trigger is only said.
    quiet = gputop(job.pid, "--duration", "3")
    assert quiet.returncode == 0, quiet.stderr
    assert "pipe read" not in out.read_text() and not list(tmp_path.glob("fr_*"))
    document = json.loads(quiet.stdout)
    assert [(r["rank"], r["available"]) for r in document["collectives"]["ranks"]] == [(0, False), (1, False)]
    assert document["collectives"]["ranks"][1]["trigger"].startswith(f"write to {tmp_path}/pipe_1.pipe")
    assert document["collectives"]["asks"] == [] and document["collectives"]["gaps"] == []
    assert "asked" not in quiet.stderr

    asked = gputop(job.pid, "--duration", "4", "--fr-dump")
    assert asked.returncode == 0, asked.stderr
    assert "Traceback" not in asked.stderr
    said = [line for line in asked.stderr.splitlines() if "Flight Recorder" in line]
    rank_pids = {ask["rank"]: ask["pid"] for ask in json.loads(asked.stdout)["collectives"]["asks"]}
    assert said[:2] == [f"gputop: asked rank {rank} (PID {rank_pids[rank]}) to dump its Flight Recorder through "
                        f"{tmp_path}/pipe_{rank}.pipe (it reads the pipe every 1 s and writes {tmp_path}/fr_{rank})"
                        for rank in (0, 1)], asked.stderr
    assert len(said) == 4, asked.stderr
    assert all(" dumped its Flight Recorder to " in line for line in said[2:]), asked.stderr
    assert out.read_text().count("pipe read 1 bytes") == 2  # once per rank
    document = json.loads(asked.stdout)
    (gap,) = document["collectives"]["gaps"]
    assert gap["line"].startswith("rank 1 never entered all_reduce #412 (process group 0, 26 MB, its last: #411); "
                                  "rank 0 waits in it since "), gap
    assert [(a["rank"], a["action"]) for a in document["collectives"]["asks"]] == \
        [(0, "pipe_written"), (1, "pipe_written"), (0, "dumped"), (1, "dumped")]


@pytest.mark.slow
def test_fr_dump_on_a_pipe_nobody_reads_and_on_a_rank_without_trigger(spawn_target, tmp_path):
    proc, _ = start_rank(spawn_target, tmp_path, "--no-reader")
    result = gputop(proc.pid, "--duration", "2", "--fr-dump")
    assert result.returncode == 0 and "Traceback" not in result.stderr, result.stderr
    said = [line for line in result.stderr.splitlines() if "Flight Recorder" in line]
    assert said == [f"gputop: could not ask rank 0 (PID {proc.pid}) for a Flight Recorder dump: no process reads "
                    f"{tmp_path}/pipe_0.pipe (ENXIO): the rank's NCCL process group is not up, or the rank is gone; "
                    "nothing was written"], result.stderr

    plain = spawn_target("busy_loop.py", env={"RANK": "0"}, stdout=subprocess.PIPE, text=True,
                         ready=lambda p: p.stdout.readline())
    result = gputop(plain.pid, "--duration", "2", "--fr-dump")
    assert result.returncode == 0 and "Traceback" not in result.stderr, result.stderr
    said = [line for line in result.stderr.splitlines() if "dump on demand" in line]
    assert len(said) == 1 and said[0].startswith(f"gputop: asked rank 0 (PID {plain.pid}) nothing: "), result.stderr
    assert "set TORCH_NCCL_DEBUG_INFO_PIPE_FILE=DIR/fr_pipe_" in said[0]


@pytest.mark.slow
@pilot_test
async def test_the_f_key_asks_and_says_what_it_asked(spawn_target, tmp_path):
    from probes.monitoring.engine import Engine, EngineConfig
    from tui.app import make_app

    proc, out = start_rank(spawn_target, tmp_path, rank=0)
    engine = Engine(proc.pid, EngineConfig(interval_s=0.5, sample_stacks=False, read_gpu=False))
    try:
        app = make_app(engine=engine)
        async with app.run_test(size=(160, 48)) as pilot:
            await wait_until(pilot, lambda: app.view is not None, timeout_s=60)
            notes = capture_notes(app)
            assert "pipe read" not in out.read_text()  # nothing written before the key
            await pilot.press("f")
            await wait_until(pilot, lambda: any("dumped its Flight Recorder" in n for n in notes), timeout_s=60)
        assert notes[0] == "asking the ranks for a Flight Recorder dump at the next reading…"
        assert notes[1] == (f"asked rank 0 (PID {proc.pid}) to dump its Flight Recorder through {tmp_path}/pipe_0"
                            f".pipe (it reads the pipe every 1 s and writes {tmp_path}/fr_0)")
        assert notes[2].startswith(f"rank 0 (PID {proc.pid}) dumped its Flight Recorder to {tmp_path}/fr_0 ")
        assert out.read_text().count("pipe read 1 bytes") == 1
        assert pickle.loads((tmp_path / "fr_0").read_bytes())["pg_status"]["0"]["last_enqueued_collective"] == 412
    finally:
        engine.close()
