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

import os
import subprocess
import sys
from pathlib import Path

from probes.jobs.census import JobSummary, job_matches, sort_jobs
from tui.joblist import job_cells, job_words

REPO = Path(__file__).resolve().parents[2]


def gputop(*args: str, timeout: float = 120) -> subprocess.CompletedProcess:
    """The real command, without a terminal (stdin from /dev/null, output to pipes)."""
    env = dict(os.environ, PYTHONPATH=str(REPO))
    return subprocess.run([sys.executable, "-m", "tui", *args], capture_output=True, text=True, timeout=timeout,
                          cwd=REPO, env=env, stdin=subprocess.DEVNULL, check=False)


# --- the pure parts ---------------------------------------------------------------------------------------

NOW = 10_000.0


def summary(pid: int, *, cpu: float | None = 10.0, started: float | None = NOW - 60, command: str = "python x.py",
            launcher: str = "python", ranks: int = 1, world: int | None = None, workers: int = 0) -> JobSummary:
    return JobSummary(root_pid=pid, launcher=launcher, ranks=ranks, world_size=world, workers=workers,
                      processes=1 + workers, gpus=(), cpu_pct=cpu, started_at=started, command=command,
                      found_by="imports torch")


def test_sorting_is_htops():
    busy = summary(1, cpu=90.0, started=NOW - 3600, command="python b.py")
    young = summary(2, cpu=5.0, started=NOW - 10, command="python a.py")
    unknown = summary(3, cpu=None, started=None, command="python c.py")
    assert [j.root_pid for j in sort_jobs([young, unknown, busy], "cpu", NOW)] == [1, 2, 3]
    assert [j.root_pid for j in sort_jobs([busy, unknown, young], "age", NOW)] == [2, 1, 3]
    assert [j.root_pid for j in sort_jobs([busy, unknown, young], "command", NOW)] == [2, 1, 3]
    assert [j.root_pid for j in sort_jobs([busy, unknown, young], "command", NOW, reverse=True)] == [3, 1, 2]
    # By the command as shown, the interpreter's folder left out: what the user reads.
    shown_a, shown_b = summary(5, command="/zzz/bin/python a.py"), summary(6, command="/aaa/bin/python b.py")
    assert [j.root_pid for j in sort_jobs([shown_b, shown_a], "command", NOW)] == [5, 6]


def test_a_filter_matches_command_launcher_or_pid():
    job = summary(4242, command="/opt/venv/bin/python train.py --lr 3e-4", launcher="torchrun", ranks=2, world=2)
    assert job_matches(job, "TRAIN") and job_matches(job, "torchrun") and job_matches(job, "4242")
    assert job_matches(job, "  ") and not job_matches(job, "deepspeed")


def test_the_words_of_a_row():
    assert job_words(summary(1, workers=1)) == "python +1 worker"
    assert job_words(summary(1, launcher="torchrun", ranks=2, world=2, workers=4)) == "torchrun 2 ranks +4 workers"
    assert job_words(summary(1, launcher="torchrun", ranks=1, world=4)) == "torchrun 1/4 ranks"
    cells = job_cells(summary(7, cpu=None, started=NOW - 125, command="/opt/venv/bin/python train.py"), NOW)
    assert cells == ("7", "python", "-", "-", "2m05s", "python train.py")


def test_gpus_read_as_runs():
    from tui.joblist import gpu_words

    assert [gpu_words(g) for g in ((), (0,), (0, 1), (0, 1, 2, 3, 4, 5, 6, 7), (1, 2, 3, 6))] == [
        "-", "0", "0,1", "0-7", "1-3,6"]
    assert job_words(summary(1, launcher="bash")) == "bash"


def test_the_census_adds_torch_processes_once_each_and_never_gputops_own_ancestors():
    from probes.jobs.follow import find_training_jobs
    from probes.sensors.proctree import NodeProcess

    # PIDs far above any real one (resolve_root finds nothing there and keeps each as named), and gputop (this
    # process) placed in the table under a Python shell that imported torch: a tree that holds gputop is no job.
    base = 4_000_000_000
    shell, trainer, its_worker, plain, our_parent = (base + i for i in range(5))
    me = os.getpid()
    procs = {
        shell: NodeProcess(shell, 1, "bash", ("bash",)),
        trainer: NodeProcess(trainer, shell, "python", ("python", "train.py")),
        its_worker: NodeProcess(its_worker, trainer, "pt_data_worker", ("python", "train.py")),
        plain: NodeProcess(plain, shell, "python", ("python", "serve.py")),
        our_parent: NodeProcess(our_parent, shell, "python", ("python", "-m", "pytest")),
        me: NodeProcess(me, our_parent, "python", ("python", "-m", "tui")),
    }
    torch_users = {trainer, its_worker, our_parent, me}
    asked = []

    def imports(pid: int) -> bool:
        asked.append(pid)
        return pid in torch_users

    found = find_training_jobs(procs=procs, imports_torch=imports)
    assert [(job.root_pid, job.why) for job in found] == [(trainer, "imports torch")]
    assert its_worker not in asked  # covered by its trainer: its maps are never read
    assert find_training_jobs(procs=procs) == []  # serve --follow's census, without the predicate, as before


def test_a_training_process_started_by_a_torch_importing_python_is_its_own_job():
    # A notebook kernel, a sweep driver or a test runner imports torch and starts `python train.py` with
    # subprocess: the trainer is a job of its own, not part of its parent's (seen in CI, where pytest had
    # imported torch and hid the test's training job). Its DataLoader worker (forked: the same command line)
    # stays part of the trainer's job.
    from probes.jobs.follow import find_training_jobs
    from probes.sensors.proctree import NodeProcess

    base = 4_000_000_000
    driver, trainer, its_worker = (base + i for i in range(3))
    procs = {
        driver: NodeProcess(driver, 1, "python", ("python", "sweep.py")),
        trainer: NodeProcess(trainer, driver, "python", ("python", "train.py", "--lr", "3e-4")),
        its_worker: NodeProcess(its_worker, trainer, "pt_data_worker", ("python", "train.py", "--lr", "3e-4")),
    }
    found = find_training_jobs(procs=procs, imports_torch=lambda pid: True)
    assert [job.root_pid for job in found] == [driver, trainer]


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


def test_a_pid_that_is_no_job_is_one_line_naming_the_jobs_found_here():
    from probes.jobs.census import CensusReading, NotAJob
    from tui.joblist import not_a_job_line

    why = "it is this system's init, and this gputop runs under it"
    snippet = summary(12, command="/usr/bin/python3 -c import time\nwhile True: time.sleep(1)")  # a program inline
    torchrun = summary(30, launcher="torchrun", ranks=2, world=2, workers=2,
                       command="/v/bin/python -m torch.distributed.run")

    def line_with(*jobs: JobSummary) -> str:
        return not_a_job_line(NotAJob(1, "tini", why, CensusReading(jobs=jobs, time=NOW)))

    assert line_with(snippet, torchrun) == (
        "PID 1 (tini) is not a training job: it is this system's init, and this gputop runs under it; the training "
        "jobs here: PID 12 python (python3 -c import time while True: time.sleep(1)), PID 30 torchrun 2 ranks "
        "+2 workers (python -m torch.distributed.run); attach to one with gputop --pid PID")
    assert line_with().endswith("runs under it; no training job found on this machine (gputop --list looks again)")
    many = line_with(*(summary(p) for p in range(2, 10)))
    assert "PID 6 python" in many and "PID 7 " not in many
    assert many.endswith(" and 3 more (gputop --list); attach to one with gputop --pid PID")
