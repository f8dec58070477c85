"""probes/sensors/flight_recorder.py and probes/diagnosis/collectives.py without a job: where a rank's environment
shows a recorder, NCCL dump files constructed in the pickle format torch's fr_trace reads (checked by running
fr_trace on them), a real torch worker server in this process, and the job verdict's wording on frames.

The real gloo job end to end: tests/e2e/test_flight_recorder_e2e.py.
"""

from __future__ import annotations

import os
import pickle
import subprocess
import sys

import pytest
from support.paths import REPO
from targets.nccl_dumps import nccl_dump


@pytest.fixture
def nccl_dumps(tmp_path):
    """Four ranks' dumps: ranks 0, 2, 3 entered all_reduce #412 and wait in it; rank 1 stopped after #411."""
    prefix = tmp_path / "nccl_trace_rank_"
    for rank in range(4):
        dump = nccl_dump(411, 411) if rank == 1 else nccl_dump(412, 411)
        (tmp_path / f"nccl_trace_rank_{rank}").write_bytes(pickle.dumps(dump))
    return str(prefix)


# --- NCCL dump files --------------------------------------------------------------------------------------


@pytest.mark.slow
def test_torchs_fr_trace_reads_the_constructed_dumps_and_agrees(nccl_dumps, tmp_path):
    """torch's own analyser reads the same files (it fails on a dump in another format) and finds the same gap."""
    result = subprocess.run(
        [sys.executable, "-m", "torch.distributed.flight_recorder.fr_trace", str(tmp_path), "--prefix",
         "nccl_trace_rank_", "-o", str(tmp_path / "db.pickle")], capture_output=True, text=True, timeout=120,
        cwd=REPO)
    said = result.stdout + result.stderr
    assert result.returncode == 0, said
    assert "Not all ranks joining collective, sequence number: 412" in said, said
    assert "missing ranks: {1}" in said and "collective: nccl:all_reduce" in said, said


# --- the probe on real processes -------------------------------------------------------------------------


@pytest.mark.slow
def test_the_probe_reads_only_processes_whose_environment_shows_a_recorder(spawn_target, tmp_path):
    from probes.frame import ProcessSample
    from probes.sensors.flight_recorder import FlightRecorderProbe

    recording = spawn_target("busy_loop.py", env={"TORCH_FR_BUFFER_SIZE": "100", "RANK": "0",
                                                  "TORCH_FR_DUMP_TEMP_FILE": str(tmp_path / "fr_")},
                             stdout=subprocess.PIPE, text=True, ready=lambda p: p.stdout.readline())
    plain = spawn_target("busy_loop.py", stdout=subprocess.PIPE, text=True, ready=lambda p: p.stdout.readline())
    probe = FlightRecorderProbe()

    def sample(proc, rank):
        return ProcessSample(pid=proc.pid, ppid=os.getpid(), role="rank", name="python", rank=rank)

    assert probe.read([sample(plain, None)]) is None
    reading = probe.read([sample(recording, 0), sample(plain, None)])
    (rank,) = reading.ranks
    assert (rank.rank, rank.pid, rank.source, rank.available) == (0, recording.pid, "none", False)
    assert rank.reason.startswith("recording (100 entries) but not readable from outside: set "
                                  "TORCH_WORKER_SERVER_SOCKET per rank"), rank.reason
    # a dump older than the process is a previous run's; one written since it started is read
    (tmp_path / "fr_0").write_bytes(pickle.dumps(nccl_dump(5, 4, first=1)))
    fresh = FlightRecorderProbe().read([sample(recording, 0)]).ranks[0]
    assert (fresh.source, fresh.available, fresh.groups[0].last_entered) == ("dump_file", True, 5)
    os.utime(tmp_path / "fr_0", (1_000_000_000, 1_000_000_000))
    assert not FlightRecorderProbe().read([sample(recording, 0)]).ranks[0].available
    recording.kill()
    recording.wait(timeout=30)
    gone = ProcessSample(pid=recording.pid, ppid=os.getpid(), role="rank", name="python", rank=0, alive=False)
    assert probe.read([gone]) is None
