"""The job picker in a real terminal: `python -m tui` with no PID, run inside tmux and read back with
`tmux capture-pane -p`, as a person would use it.

Against real jobs (the `jobs` fixture, tests/support/picker_jobs.py: a torchrun 2-rank gloo job and a plain loop,
from a folder of their own): the list shows, `/` filters it down to this test's jobs (the machine may run others),
`n` sorts by command and `n` again turns the order round, Enter attaches and the attach screen shows the chosen job.
And with exactly one job (a PID namespace holding one training loop): it is attached at once, with a note that says so.

Each test uses its own tmux server (tests/support/tmux.py's Tmux) and kills every process it started.
"""

from __future__ import annotations

import os
import re
import shutil
import sys

import pytest
from support.paths import REPO
from support.picker_jobs import START_TIMEOUT_S
from support.tmux import TMUX_MARKS, Tmux

pytestmark = [*TMUX_MARKS, pytest.mark.timeout(int(START_TIMEOUT_S) + 300)]
ATTACH_TIMEOUT_S = 90  # the attach screen's first readings (py-spy on every process) on a busy 2-core machine


@pytest.fixture
def tmux(request):
    session = Tmux(request.node.name)
    yield session
    session.kill()


def row_order(screen: str, pids: list[int]) -> list[int]:
    """The given PIDs in the order their rows stand on the screen."""
    lines = screen.splitlines()
    where = {pid: next(i for i, line in enumerate(lines) if re.match(rf"\s*{pid}\s", line)) for pid in pids}
    return sorted(pids, key=where.get)


def test_the_picker_lists_sorts_filters_and_attaches(tmux, jobs):
    plain, torchrun = jobs.plain.pid, jobs.torchrun.pid
    tmux.start(f"{sys.executable} -m tui", 200, 50)
    tmux.wait_for(lambda s: "training job" in s and "sorted by CPU%" in s, 60, "the picker")

    tmux.keys("/")
    tmux.wait_for(lambda s: "filter: part of a command" in s, 10, "the filter box")  # focused: type into it
    tmux.keys("-l", jobs.folder.name)  # literally: this test's folder, in both jobs' commands
    tmux.keys("Enter")
    screen = tmux.wait_for(lambda s: "2 matching" in s and f"{plain} " in s and f"{torchrun} " in s, 30,
                           "this test's two jobs, filtered")
    assert f"{jobs.not_torch.pid} " not in screen  # no torch, no row
    assert re.search(rf"^\s*{torchrun}\s+torchrun 2 ranks \+2 workers\s", screen, re.MULTILINE), screen
    assert re.search(rf"^\s*{plain}\s+python \+1 worker\s", screen, re.MULTILINE), screen

    # By command: the same interpreter, then "-m torch.distributed.run" before "/tmp/.../job_train.py".
    tmux.keys("n")
    screen = tmux.wait_for(lambda s: "sorted by command" in s and "reversed" not in s, 10, "sorted by command")
    assert row_order(screen, [plain, torchrun]) == [torchrun, plain], screen
    tmux.keys("n")
    screen = tmux.wait_for(lambda s: "sorted by command, reversed" in s, 10, "the order turned round")
    assert row_order(screen, [plain, torchrun]) == [plain, torchrun], screen

    tmux.keys("Down")  # the cursor from the top row (the plain loop) to the torchrun job
    tmux.keys("Enter")
    screen = tmux.wait_for(lambda s: f"attached to torchrun (PID {torchrun}): watching the torchrun job, 2 ranks" in s,
                           ATTACH_TIMEOUT_S, "the attach screen on the torchrun job")
    assert "Enter attaches" not in screen  # the picker has given way
    tmux.keys("q")
    screen = tmux.wait_for(lambda s: "GPUTOP_EXIT=" in s, 15, "gputop exiting")
    assert "GPUTOP_EXIT=0" in screen and "Traceback" not in screen
    assert jobs.torchrun.poll() is None and jobs.plain.poll() is None  # quitting leaves the jobs alone


@pytest.mark.skipif(os.geteuid() != 0 or shutil.which("unshare") is None,
                    reason="needs root and unshare for a PID namespace that holds one job")
def test_the_only_job_is_attached_at_once_with_a_note(tmux, tmp_path):
    log = tmp_path / "train.log"
    # A PID namespace with its own /proc and one training loop in it: the shell waits for the loop's first step
    # (its "ready" line), then runs gputop with no PID. gputop is the shell's child, not the loop's parent.
    script = (f"{sys.executable} {REPO}/tests/targets/job_train.py --workers 1 > {log} 2>&1 & "
              f"until grep -q ready {log}; do sleep 0.2; done; {sys.executable} -m tui; echo GPUTOP_EXIT=$?; "
              "kill -9 -1")
    tmux.start(f"unshare --pid --fork --mount-proc --kill-child sh -c '{script}'", 200, 50)
    screen = tmux.wait_for(lambda s: "one training job here" in s and "DataLoader worker" in s,
                           START_TIMEOUT_S, "the only job attached, with the note")
    loop_pid = int(re.search(r"ready 0 (\d+)", log.read_text()).group(1))  # its PID inside the namespace
    assert f"PID {loop_pid}" in screen
    assert "Enter attaches" not in screen  # no picker for one job
    tmux.keys("q")
    screen = tmux.wait_for(lambda s: "GPUTOP_EXIT=" in s, 15, "gputop exiting")
    assert "GPUTOP_EXIT=0" in screen and "Traceback" not in screen
    # The note's copy on stderr stays in the terminal once the TUI has closed.
    assert re.search(rf"gputop: one training job here, attached: python \+1 worker \(PID {loop_pid}\) .*job_train\.py"
                     r".*; to pick another: gputop --list, then gputop --pid PID", screen), screen
