"""A Flight Recorder dump the user asks for (--fr-dump, `f` in the TUI): gputop writes NCCL's debug-info pipe of
each rank whose job enabled it, once, never blocking, reads the dump the rank writes and says what it asked of
which rank; a worker server is read at once instead; a rank with no trigger is told what to set. Without the
request nothing is written.

The rank side is tests/targets/fr_pipe_rank.py: a real process that makes, polls and answers its pipe as
ProcessGroupNCCL does, and dumps in the format of the constructed NCCL dumps (tests/targets/nccl_dumps.py).
"""

from __future__ import annotations

import os
import subprocess
import sys
import time

import pytest
from support.paths import REPO

from probes.sensors.flight_recorder import (
    TORCH_DEFAULT_BUFFER_SIZE,
    find_source,
    write_dump_pipe,
)

pytestmark = pytest.mark.timeout(300)

CLI_TIMEOUT_S = 120  # a headless run of a few seconds, on a busy machine


def gputop(pid: int, *args: str) -> subprocess.CompletedProcess:
    """The real command, headless, without GPU or stacks (what is tested here needs neither)."""
    return subprocess.run([sys.executable, "-m", "tui", "--pid", str(pid), "--no-gpu", "--no-stacks",
                           "--snapshot", "-", *args], capture_output=True, text=True, timeout=CLI_TIMEOUT_S,
                          cwd=REPO, env=dict(os.environ, PYTHONPATH=str(REPO)))


# --- the pipe itself -------------------------------------------------------------------------------------


def test_a_pipe_nobody_reads_is_one_line_and_no_wait(tmp_path):
    pipe = tmp_path / "pipe_0.pipe"
    os.mkfifo(pipe)
    started = time.monotonic()
    problem = write_dump_pipe(str(pipe))
    assert time.monotonic() - started < 1.0  # O_NONBLOCK: fails at once instead of waiting for a reader
    assert problem == (f"no process reads {pipe} (ENXIO): the rank's NCCL process group is not up, or the rank is "
                       "gone; nothing was written")


def test_only_an_existing_fifo_is_written(tmp_path):
    assert write_dump_pipe(str(tmp_path / "none.pipe")).startswith(f"there is no pipe at {tmp_path}/none.pipe")
    assert not (tmp_path / "none.pipe").exists()  # never created
    regular = tmp_path / "file.pipe"
    regular.write_text("the job's")
    assert write_dump_pipe(str(regular)) == f"{regular} is not a pipe (FIFO): nothing was written"
    assert regular.read_text() == "the job's"


def test_the_pipe_alone_enables_the_trigger_with_torchs_default_buffer():
    source = find_source({"TORCH_NCCL_DEBUG_INFO_PIPE_FILE": "/d/p_"})
    assert (source.buffer_size, source.pipe_prefix, source.pipe_poll_s) == (TORCH_DEFAULT_BUFFER_SIZE, "/d/p_", 1.0)
    assert find_source({"TORCH_NCCL_DEBUG_INFO_PIPE_FILE": "/d/p_", "TORCH_FR_BUFFER_SIZE": "0"}) is None
    # the rank reads its pipe each coordination check while dumps on timeout are on, else each heartbeat timeout
    assert find_source({"TORCH_NCCL_DEBUG_INFO_PIPE_FILE": "/d/p_", "TORCH_NCCL_COORD_CHECK_MILSEC": "250"}
                       ).pipe_poll_s == 0.25
    assert find_source({"TORCH_NCCL_DEBUG_INFO_PIPE_FILE": "/d/p_", "TORCH_NCCL_DUMP_ON_TIMEOUT": "0"}
                       ).pipe_poll_s == 480
