"""`gputop` with no PID: the job census (probes/jobs/census.py), `--list` / `--list --json`, and the picker.

Real targets, run from a folder of their own (a copy of tests/targets/job_train.py and job_torchrun.py under a
name no other test uses), so that on a machine shared with other test runs each check can single out its own
jobs: a plain torch training loop with one DataLoader worker, a torchrun 2-rank gloo job with one worker per
rank, and a Python process that never imports torch (it must not be listed). GPUs come through the real NVML
probe driven by tests/support/fake_pynvml.py (no GPU here), in a census process of its own. The pure parts (sorting,
filtering, the words of a row) are unit-tested on constructed summaries; the picker's screen is an SVG snapshot
of a fixed list (tests/unit/test_tui_snapshots.py); the picker in a real terminal is tests/e2e/test_job_picker_tmux.py.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest
from support.picker_jobs import START_TIMEOUT_S, Jobs
from support.processes import stop_process_tree

from probes.jobs.census import imports_torch
from tui.exitcodes import EXIT_NO_JOB, EXIT_OK, EXIT_USAGE

REPO = Path(__file__).resolve().parents[2]


def gputop(*args: str, timeout: float = 120) -> subprocess.CompletedProcess:
    """The real command, without a terminal (stdin from /dev/null, output to pipes)."""
    env = dict(os.environ, PYTHONPATH=str(REPO))
    return subprocess.run([sys.executable, "-m", "tui", *args], capture_output=True, text=True, timeout=timeout,
                          cwd=REPO, env=env, stdin=subprocess.DEVNULL, check=False)


def ours(document: dict, folder: Path) -> dict[int, dict]:
    """The listed jobs whose command runs from our folder, by root PID."""
    return {job["root_pid"]: job for job in document["jobs"] if str(folder) in job["command"]}


def until_listed(jobs: Jobs, timeout_s: float = 60.0) -> dict:
    """`gputop --list --json` again until both our trainings are listed with all their workers: the census of a
    moment, so a worker just starting may be missed once. Returns the last document."""
    deadline = time.monotonic() + timeout_s
    while True:
        result = gputop("--list", "--json")
        assert result.returncode == EXIT_OK, result.stderr
        document = json.loads(result.stdout)
        found = ours(document, jobs.folder)
        plain, torchrun = found.get(jobs.plain.pid), found.get(jobs.torchrun.pid)
        if (plain and torchrun and plain["workers"] == 1 and torchrun["workers"] == 2 and torchrun["ranks"] == 2) \
                or time.monotonic() > deadline:
            return document
        time.sleep(0.5)


@pytest.mark.slow
@pytest.mark.timeout(int(START_TIMEOUT_S) + 200)
def test_list_groups_the_jobs_by_launcher_and_rank_and_leaves_out_a_process_without_torch(jobs):
    document = until_listed(jobs)
    assert document["schema"] == "gputop.jobs/1"
    found = ours(document, jobs.folder)
    # Exactly two jobs from our folder: each rank and each worker is part of its job, never a job of its own, and
    # the Python process that never imported torch is not one.
    assert set(found) == {jobs.plain.pid, jobs.torchrun.pid}, found
    assert jobs.not_torch.pid not in {job["root_pid"] for job in document["jobs"]}
    plain, torchrun = found[jobs.plain.pid], found[jobs.torchrun.pid]
    assert (plain["launcher"], plain["ranks"], plain["workers"], plain["found_by"]) == ("python", 1, 1,
                                                                                         "imports torch")
    assert (torchrun["launcher"], torchrun["ranks"], torchrun["world_size"], torchrun["workers"]) == (
        "torchrun", 2, 2, 2)
    assert torchrun["processes"] == 5  # the agent, 2 ranks, a worker each
    for job in (plain, torchrun):
        assert job["cpu_pct"] is None  # one reading, printed at once: a CPU% needs a second (the picker's refresh)
        assert 0 < job["age_s"] < START_TIMEOUT_S + 120
    assert "job_train.py" in plain["command"] and "torch.distributed.run" in torchrun["command"]

    text = gputop("--list")
    assert text.returncode == EXIT_OK, text.stderr
    lines = {int(line.split()[0]): line for line in text.stdout.splitlines()[1:]}
    assert text.stdout.splitlines()[0].split() == ["PID", "JOB", "GPU", "AGE", "COMMAND"]
    assert "torchrun 2 ranks +2 workers" in lines[jobs.torchrun.pid]
    assert "python +1 worker " in lines[jobs.plain.pid]
    assert jobs.not_torch.pid not in lines
    assert "Traceback" not in text.stderr


@pytest.mark.slow
@pytest.mark.timeout(int(START_TIMEOUT_S) + 200)
def test_without_a_terminal_and_without_a_pid_the_list_is_printed(jobs):
    until_listed(jobs)
    result = gputop()
    assert result.returncode == EXIT_OK, result.stderr
    assert result.stdout.splitlines()[0].split()[:2] == ["PID", "JOB"]
    assert any(line.split()[0] == str(jobs.torchrun.pid) for line in result.stdout.splitlines()[1:])
    assert "no terminal to pick in: attach with gputop --pid PID" in result.stderr


@pytest.mark.slow
def test_a_process_that_imported_torch_is_told_from_one_that_did_not(tmp_path):
    ready = tmp_path / "ready"
    code = "import sys, time, pathlib\n{}\npathlib.Path(sys.argv[1]).write_text('x')\nwhile True: time.sleep(0.05)"
    with_torch = subprocess.Popen([sys.executable, "-c", code.format("import torch"), str(ready) + ".torch"],
                                  start_new_session=True)
    without = subprocess.Popen([sys.executable, "-c", code.format("import json"), str(ready) + ".plain"],
                               start_new_session=True)
    try:
        deadline = time.monotonic() + 120
        while not (Path(str(ready) + ".torch").exists() and Path(str(ready) + ".plain").exists()):
            assert time.monotonic() < deadline, "the two processes did not start"
            time.sleep(0.1)
        assert imports_torch(with_torch.pid)
        assert not imports_torch(without.pid)
    finally:
        stop_process_tree(with_torch)
        stop_process_tree(without)


@pytest.mark.slow
@pytest.mark.skipif(os.geteuid() != 0 or shutil.which("unshare") is None,
                    reason="needs root and unshare for a PID namespace with nothing in it")
def test_no_job_is_one_line_and_its_own_exit_status():
    # A fresh PID namespace with its own /proc: nothing in it but gputop, so no job whatever else this machine runs.
    env = dict(os.environ, PYTHONPATH=str(REPO))
    for args in (["--list"], ["--list", "--json"], []):
        result = subprocess.run(["unshare", "--pid", "--fork", "--mount-proc", sys.executable, "-m", "tui", *args],
                                capture_output=True, text=True, timeout=120, cwd=REPO, env=env,
                                stdin=subprocess.DEVNULL, check=False)
        assert result.returncode == EXIT_NO_JOB, (args, result.stderr)
        said = [line for line in result.stderr.splitlines() if not line.startswith("gputop: GPUs not shown")]
        assert said == ["gputop: no training job found on this machine (no Python process that imports torch, "
                        "no launcher, no rank): start one, or try gputop demo"], result.stderr
        if args == ["--list", "--json"]:
            assert json.loads(result.stdout)["jobs"] == []
        else:
            assert result.stdout == ""


@pytest.mark.slow
@pytest.mark.parametrize("args, words", [
    (["--json"], "--json prints the job list: use it with --list"),
    (["--list", "--pid", "1"], "give --list or --pid, not both"),
    (["--snapshot", "-"], "say which process to sample: gputop --pid PID (find it with: gputop --list)"),
])
def test_what_does_not_go_together_is_one_line(args, words):
    result = gputop(*args)
    assert result.returncode == EXIT_USAGE
    assert result.stderr.count("\n") == 1 and words in result.stderr and "Traceback" not in result.stderr


# --- the pure parts ---------------------------------------------------------------------------------------

NOW = 10_000.0


CENSUS_WITH_FAKE_NVML = """
import json, sys
sys.path.insert(0, "tests")
import pynvml
from support.fake_pynvml import GIB, FakeGpu, FakeNvml
from probes.jobs.census import JobCensus
from probes.sensors.nvml import NvmlGpuProbe

holder = int(sys.argv[1])
out = {}
for case, nvml in (("gpus", FakeNvml([FakeGpu(), FakeGpu(processes=[(holder, 2 * GIB)])])),
                   ("no_driver", FakeNvml([], init_error=pynvml.NVML_ERROR_LIBRARY_NOT_FOUND))):
    census = JobCensus(gpu_probe=NvmlGpuProbe(nvml))
    reading = census.scan()
    census.close()
    out[case] = {"note": reading.gpu_note, "jobs": [job.to_json(reading.time) for job in reading.jobs]}
print(json.dumps(out))
"""


@pytest.mark.slow
def test_a_gpu_context_makes_a_job_and_its_gpu_is_shown_through_nvml(tmp_path):
    # The census runs in a process of its own (what the caller started is never a job), with the fake NVML
    # (tests/support/fake_pynvml.py) listing a Python process that never imported torch on GPU 1.
    ready = tmp_path / "ready"
    holder = subprocess.Popen([sys.executable, "-c", "import sys, time, pathlib\npathlib.Path(sys.argv[1]).touch()\n"
                               "while True: time.sleep(0.05)", str(ready)], start_new_session=True)
    try:
        deadline = time.monotonic() + 60
        while not ready.exists():
            assert time.monotonic() < deadline, "the GPU holder did not start"
            time.sleep(0.05)
        result = subprocess.run([sys.executable, "-c", CENSUS_WITH_FAKE_NVML, str(holder.pid)], cwd=REPO,
                                env=dict(os.environ, PYTHONPATH=str(REPO)), capture_output=True, text=True,
                                timeout=120, check=False)
        assert result.returncode == 0, result.stderr
        out = json.loads(result.stdout)
        (row,) = [job for job in out["gpus"]["jobs"] if job["root_pid"] == holder.pid]
        assert row["gpus"] == [1] and row["found_by"] == f"PID {holder.pid} holds a GPU context"
        assert out["gpus"]["note"] is None
        assert holder.pid not in {job["root_pid"] for job in out["no_driver"]["jobs"]}  # no NVML, no torch: none
        assert out["no_driver"]["note"].startswith("GPUs not shown: NVML library not found")
    finally:
        stop_process_tree(holder)
