"""A real 2-rank torchrun job (gloo, CPU) whose rank 1 is slow, watched by `python -m tui --pid <torchrun PID>` in
tmux and read back with `tmux capture-pane -p`, as a person would: the job's note, the Ranks pane with the
straggler named, `]` selecting a rank and scoping the panes to it, and the same at 80x24.

Each test uses its own tmux server (tests/support/tmux.py's Tmux) and kills every process it started.
"""

from __future__ import annotations

import re
import subprocess
import sys

import pytest
from support.paths import REPO
from support.processes import free_port, stop_process_tree
from support.tmux import TMUX_MARKS, Tmux

TARGET = REPO / "tests" / "targets" / "tui_ddp_straggler.py"
VERDICT_TIMEOUT_S = 120  # torch's import and gloo's rendezvous on a crowded 2-core machine, then a few samples

pytestmark = TMUX_MARKS  # slow; needs tmux and py-spy


@pytest.fixture
def tmux(request):
    session = Tmux(request.node.name)
    yield session
    session.kill()


@pytest.fixture
def straggler_job(tmp_path):
    """torchrun with 2 ranks; rank 1 spends 0.3 s of CPU in slow_preprocess each step."""
    log_path = tmp_path / "job.log"
    with open(log_path, "w") as log:
        process = subprocess.Popen(
            [sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", "2", "--master_addr", "127.0.0.1",
             "--master_port", str(free_port()), str(TARGET), "--slow-rank", "1"],
            stdout=log, stderr=subprocess.STDOUT, start_new_session=True, cwd=REPO)
    try:
        yield process, log_path
    finally:
        stop_process_tree(process)


def rank_pids(log_path) -> dict[int, int]:
    """{rank: PID} from the ranks' own "rank R step N pid P" lines."""
    text = log_path.read_text(errors="replace")
    return {int(rank): int(pid) for rank, pid in re.findall(r"rank (\d) step \d+ pid (\d+)", text)}


def test_a_person_finds_the_straggler_selects_it_and_reads_its_stacks(tmux, straggler_job):
    job, log_path = straggler_job
    tmux.start(f"{sys.executable} -m tui --pid {job.pid}", 160, 48)

    def job_verdict_and_rank_rows(screen: str) -> bool:
        # The verdict line and the rank table are redrawn one after the other: wait for a screen showing both
        # (a capture between the two can show the new verdict over the previous tick's rows).
        ranks = rank_pids(log_path)
        return set(ranks) == {0, 1} and "straggler: rank 1" in screen and "5 Ranks" in screen and bool(
            re.search(rf"^\s+1\s+1\s+{ranks[1]}\s.*straggler: ", screen, re.MULTILINE)) and bool(
            re.search(rf"^\s+0\s+0\s+{ranks[0]}\s.*waits \d+% for the others", screen, re.MULTILINE))

    screen = tmux.wait_for(job_verdict_and_rank_rows, VERDICT_TIMEOUT_S,
                           "the job verdict naming rank 1, and the Ranks pane's rows saying the same")
    ranks = rank_pids(log_path)
    assert f"attached to torchrun (PID {job.pid}): watching the torchrun job, 2 ranks" in screen

    tmux.keys("]")  # rank 0
    tmux.keys("]")  # rank 1
    screen = tmux.wait_for(lambda s: f"rank 1 (PID {ranks[1]}) selected" in s, 10, "rank 1 selected")
    assert f"▶ rank 1 (PID {ranks[1]}): straggler: " in screen  # its own verdict under the job's
    assert f"4 Stacks · hot frames · 30 s (w) · rank 1 (PID {ranks[1]})" in screen
    process_rows = [line[:76] for line in screen.splitlines() if re.match(r"^  \d+ ", line)]
    assert [row.split()[0] for row in process_rows] == [str(ranks[1])], screen  # only the rank's tree
    screen = tmux.wait_for(lambda s: "slow_preprocess" in s, 30, "rank 1's hot frame")

    tmux.run("resize-window", "-x", "80", "-y", "24")
    # The panes are redrawn one after the other at the new size: wait for the whole screen, the verdict at its top
    # included (a loaded CI run captured the panes below redrawn with the verdict not yet back at the top).
    screen = tmux.wait_for(lambda s: "5 Ranks" in s and max(len(line) for line in s.splitlines()) <= 80
                           and str(ranks[0]) in s and "slow_preprocess" in s and "straggler: rank 1" in s
                           and f"▶ rank 1 (PID {ranks[1]})" in s, 10, "the job at 80x24")
    assert screen.splitlines()[0].lstrip().startswith("gputop"), screen  # the header on top: nothing scrolled off

    tmux.keys("q")
    screen = tmux.wait_for(lambda s: "GPUTOP_EXIT=" in s, 15, "gputop exiting")
    assert "GPUTOP_EXIT=0" in screen and "Traceback" not in screen
    assert job.poll() is None  # quitting gputop leaves the job alone
