"""The collective a rank never joined, from the ranks' Flight Recorders, end to end: a real 2-rank torchrun job
on gloo (tests/targets/fr_job.py) where rank 1 stops before an all_reduce that rank 0 enters, watched by the
real command (`python -m tui --pid <torchrun> --snapshot OUT --record REC`) until the job verdict is hung_rank.

With the recorder on and torch's worker server per rank (TORCH_WORKER_SERVER_SOCKET), the snapshot names the
collective, its sequence number (the one rank 0 printed on entering it) and the rank that never joined; the
same job without them gives no such evidence and no error.
"""

from __future__ import annotations

import shutil
import subprocess
import tempfile
from pathlib import Path

import pytest
from support.jobwatch import TIMEOUT_S, watch_job_until
from support.processes import said_ready

pytestmark = [pytest.mark.slow, pytest.mark.timeout(2 * TIMEOUT_S + 60)]


@pytest.fixture
def socket_dir():
    """A short directory for the ranks' sockets (a Unix socket's path must stay under 108 bytes)."""
    path = tempfile.mkdtemp(prefix="gputop-fr-", dir="/tmp")
    yield path
    shutil.rmtree(path, ignore_errors=True)


def start_job(spawn_target, tmp_path: Path, *args: str):
    out = tmp_path / "job.out"
    with out.open("w") as handle:
        target = spawn_target("fr_job.py", "--launch", *args, stdout=handle, stderr=subprocess.STDOUT,
                              timeout=TIMEOUT_S, ready=lambda proc: said_ready(out.read_text()))
    return target, out


def _flight_recorder_named(job) -> bool:
    return job.finding == "hung_rank" and any("never entered" in line for line in job.verdict.evidence)


def test_the_collective_a_rank_never_joined_is_named(spawn_target, tmp_path, socket_dir):
    target, out = start_job(spawn_target, tmp_path, "--socket-dir", socket_dir)
    document, frames, _, stderr = watch_job_until(target.pid, tmp_path, _flight_recorder_named)
    entered = next(line for line in out.read_text().splitlines() if line.startswith("entering all_reduce #"))
    seq = int(entered.rpartition("#")[2])
    job = document["job"]
    assert (job["finding"], job["responsible_rank"]) == ("hung_rank", 1), document["verdict"]
    evidence = document["verdict"]["evidence"]
    assert evidence[0].startswith("rank 1 stuck in wait_for_checkpoint (fr_job.py:"), evidence
    line = evidence[1]
    assert line.startswith(f"rank 1 never entered all_reduce #{seq} (process group 0, 1.0 MB, its last: "
                           f"#{seq - 1}); rank 0 waits in it since "), line
    gaps = document["collectives"]["gaps"]
    assert len(gaps) == 1, gaps
    gap = gaps[0]
    assert (gap["seq"], gap["op"], gap["input_bytes"], gap["waiting"], gap["missing"]) == \
        (seq, "all_reduce", 1_048_576, [0], [[1, seq - 1]]), gap
    ranks = {r["rank"]: r for r in document["collectives"]["ranks"]}
    assert {r: (ranks[r]["source"], ranks[r]["available"]) for r in ranks} == \
        {0: ("worker_server", True), 1: ("worker_server", True)}
    assert ranks[0]["path"] == f"{socket_dir}/rank0.sock"
    assert "Traceback" not in stderr
    print(f"named after {frames[-1].time - frames[0].time:.1f} s of frames: {line}")


def test_without_the_recorder_there_is_no_such_evidence_and_no_error(spawn_target, tmp_path):
    target, _ = start_job(spawn_target, tmp_path)
    document, _, jobs, stderr = watch_job_until(target.pid, tmp_path, lambda job: job.finding == "hung_rank")
    assert document["job"]["responsible_rank"] == 1
    assert document["collectives"] is None
    assert not any("Flight Recorder" in line or "never entered" in line for line in document["verdict"]["evidence"])
    assert all(job is None or job.finding != "hung_rank" or not _flight_recorder_named(job) for job in jobs)
    assert "Traceback" not in stderr
