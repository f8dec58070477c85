"""A node of a running Slurm job where no task of it runs (its task exited, as a rank that died there): Slurm's
account read from what Slurm 22.05 really printed (tests/fixtures/slurm/, see its README), the agent that says it
instead of ending, and the merge that names the gone rank with how its task ended and never calls the node lost.

No process is started: Slurm's commands are answered from the fixtures, frames are constructed
(tests/support/cluster_frames.py). tests/e2e/test_slurm_gone_rank_e2e.py runs the same on the real two-node cluster.
"""

from __future__ import annotations

import argparse
import dataclasses
import io
import os

import pytest
from support.cluster_frames import PID, node_frame
from support.job_frames import ALL_REDUCE, FORWARD, T0, count
from support.paths import REPO

from probes.frame import ThreadStack
from probes.monitoring.cluster import (
    AgentNote,
    ClusterMonitor,
    agent_note_line,
    node_document,
    parse_frame_line,
    run_merge,
)
from probes.monitoring.node_watch import TargetFrame
from probes.sensors import slurm
from probes.sensors.slurm import (
    OUTPUT_TAIL_BYTES,
    NoTaskHere,
    SlurmError,
    SlurmStep,
    StepInfo,
    TaskEnd,
    agent_target,
    clock,
    parse_task_ends,
    read_task_ends,
)

FIXTURES = REPO / "tests" / "fixtures" / "slurm"
JOB = "19696701"  # the job of the fixtures
OUTPUT = "/tmp/explore/hold2.out"  # its output file, as `scontrol show job` named it there
SRUN_LINE = "srun: error: n2: task 1: Exited with exit code 1"


# --- srun's lines in the job's output ---------------------------------------------------------------------


def test_srun_lines_on_its_tasks_ends_are_read_and_only_they():
    ends = parse_task_ends((FIXTURES / "output_task_ends.out").read_text(), written_at=T0)
    assert [(e.node, e.tasks, e.exit_code, e.how) for e in ends] == [
        ("n2", (1,), None, "Killed"), ("n2", (1,), None, "Segmentation fault"),
        ("n2", (1,), 1, "Exited with exit code 1"), ("n2", (2, 3), 3, "Exited with exit code 3"),
        ("n1", (0, 1), 3, "Exited with exit code 3"), ("n2", (2,), 2, "Exited with exit code 2"),
        ("n2", (3,), 3, "Exited with exit code 3"), ("n1", (0,), 2, "Exited with exit code 2"),
        ("n1", (1,), 3, "Exited with exit code 3"), ("n2", (2, 3), 1, "Exited with exit code 1"),
        ("n1", (0,), None, "Terminated")]
    # The file's last line was written when the file was: at that time; every earlier one by then.
    assert (ends[-1].at, ends[-1].by) == (T0, None) and all((e.at, e.by) == (None, T0) for e in ends[:-1])
    assert ends[0].ended() == f"ended (Killed) by {clock(T0)}"
    assert ends[2].ended() == f"exited with status 1 by {clock(T0)}"
    assert ends[-1].ended() == f"ended (Terminated) at {clock(T0)}"
    assert TaskEnd("n2", (1,), "Exited with exit code 1", 1, SRUN_LINE).ended() == "exited with status 1"


def test_the_end_of_a_long_output_is_read_and_its_last_line_timed_by_the_file(tmp_path):
    out = tmp_path / "job.out"
    out.write_text("x" * 100 + "\n" + ("training step\n" * (OUTPUT_TAIL_BYTES // 14 + 10)) +
                   (FIXTURES / "output_rank_exits.out").read_text())
    os.utime(out, (T0, T0))
    ends = read_task_ends(str(out))
    assert [(e.line, e.at) for e in ends] == [(SRUN_LINE, T0)]
    with out.open("a") as more:
        more.write("[rank0] still waiting\n")
    os.utime(out, (T0 + 9, T0 + 9))
    assert [(e.at, e.by) for e in read_task_ends(str(out))] == [(None, T0 + 9)]
    missing = read_task_ends(str(tmp_path / "gone.out"))
    assert isinstance(missing, SlurmError) and missing.reason.startswith("cannot read the job's output ")


# --- agent_target: Slurm asked, its answers from the fixtures ------------------------------------------------


@pytest.fixture
def slurm_answers(monkeypatch, tmp_path):
    """scontrol answered with what the test cluster printed, the job's output file in tmp_path (srun's line its
    last, written at T0), and no slurmstepd of the job on this machine. Returns {fixture name: text} to edit."""
    out = tmp_path / "hold2.out"
    out.write_text((FIXTURES / "output_rank_exits.out").read_text())
    os.utime(out, (T0, T0))
    answers = {
        "job": (FIXTURES / "show_job_batch.txt").read_text().replace(OUTPUT, str(out)),
        "steps": (FIXTURES / "show_step_with_agents.txt").read_text().replace("19696708", JOB),
    }
    hostnames = {"n[1-2]": "n1\nn2\n", "n1": "n1\n", "n2": "n2\n"}

    def scontrol(*args: str):
        if args[:2] == ("show", "job"):
            return answers["job"]
        if args[:2] == ("show", "step"):
            return answers["steps"]
        if args[:2] == ("show", "hostnames"):
            return hostnames[args[2]]
        raise AssertionError(args)

    monkeypatch.setattr(slurm, "_scontrol", scontrol)
    monkeypatch.setattr(slurm, "slurm_missing", lambda: None)
    monkeypatch.setattr(slurm, "stepd_pids", lambda step=None: {})
    monkeypatch.delenv("SLURM_JOB_ID", raising=False)
    answers["output"] = str(out)
    return answers


def test_a_node_the_job_holds_without_a_task_is_said_with_slurms_account(slurm_answers):
    found = agent_target(SlurmStep(JOB), "n2")
    assert isinstance(found, NoTaskHere), found
    # The task step lists n2; the batch step and the merge's own agent steps are never the job's tasks.
    assert [str(s.step) for s in found.steps] == [f"{JOB}.0"]
    assert [(e.line, e.tasks, e.exit_code, e.at) for e in found.ends] == [(SRUN_LINE, (1,), 1, T0)]
    assert found.line() == (f"no task of job {JOB} here: its step {JOB}.0 runs on n[1-2] (2 tasks) with none left "
                            f"on n2; srun wrote \"{SRUN_LINE}\" in {slurm_answers['output']}, its last line, at "
                            f"{clock(T0)}")
    # n1 holds the job too: srun wrote nothing on its tasks, and that is said as such.
    n1 = agent_target(SlurmStep(JOB), "n1")
    assert isinstance(n1, NoTaskHere) and n1.ends == ()
    assert n1.line().endswith(f"srun wrote no line on a task of n1 in the end of {slurm_answers['output']} (it "
                              "writes none for a task that exits with status 0)")


def test_a_node_the_job_does_not_hold_or_a_job_that_ended_is_one_line_as_before(slurm_answers):
    other = agent_target(SlurmStep(JOB), "n3")
    assert isinstance(other, SlurmError) and "runs no task step on this node" in other.reason
    slurm_answers["job"] = slurm_answers["job"].replace("JobState=RUNNING", "JobState=COMPLETED")
    ended = agent_target(SlurmStep(JOB), "n2")
    assert isinstance(ended, SlurmError) and f"Slurm job {JOB} (COMPLETED, nodes n[1-2])" in ended.reason


def test_a_job_srun_started_outside_a_batch_script_says_where_its_words_went(slurm_answers):
    slurm_answers["job"] = (FIXTURES / "show_job_interactive.txt").read_text()
    slurm_answers["steps"] = slurm_answers["steps"].replace("19696705", JOB)
    found = agent_target(SlurmStep("19696705"), "n2")
    assert isinstance(found, NoTaskHere) and found.source is None
    assert found.unread == ("job 19696705 was started by srun outside a batch script: srun wrote how its tasks "
                            "ended on its own terminal")
    assert found.line().endswith(f"how its tasks here ended was not read: {found.unread}")


def test_a_line_read_as_the_last_keeps_its_time_when_more_was_written_after_it():
    end = TaskEnd("n2", (1,), "Exited with exit code 1", 1, SRUN_LINE, at=T0)
    earlier = NoTaskHere(JOB, "n2", ends=(end,), source="/j.out")
    later = NoTaskHere(JOB, "n2", ends=(dataclasses.replace(end, at=None, by=T0 + 30),), source="/j.out")
    assert later.keeping_times(earlier).ends[0].ended() == f"exited with status 1 at {clock(T0)}"
    assert later.keeping_times(None) == later


# --- the agent ------------------------------------------------------------------------------------------


def agent_args(*extra: str) -> argparse.Namespace:
    from tui.commands.agent import AgentCommand

    parser = argparse.ArgumentParser()
    AgentCommand().prepare_parser(parser)
    args = parser.parse_args(["--slurm-job", JOB, "--no-gpu", "--no-stacks", *extra])
    args.interval = 0.01  # below what the command line allows: ticks of a test that starts no process
    return args


def lines_of(out: io.StringIO) -> list:
    return [parse_frame_line(line) for line in out.getvalue().splitlines()]


def no_task(ends=()) -> NoTaskHere:
    step = StepInfo(SlurmStep(JOB, "0"), "python", "n[1-2]", 2, "n1", 92)
    return NoTaskHere(JOB, "n2", (step,), tuple(ends), source="/j.out")


def test_an_agent_without_a_task_of_the_job_says_so_each_tick_and_ends_with_the_job(monkeypatch):
    from tui.commands import agent

    answers = [no_task(), no_task(), SlurmError("Slurm job 19696701 (COMPLETED, nodes n[1-2]) runs no task step")]
    monkeypatch.setattr(slurm, "agent_target", lambda step, node: answers.pop(0))
    monkeypatch.setattr(agent, "SLURM_RECHECK_S", 0.0)  # asked again every tick
    monkeypatch.setenv("SLURMD_NODENAME", "n2")
    out = io.StringIO()
    assert agent.stream_frames(agent_args(), out, no_task()) == 0
    header, *notes = lines_of(out)
    assert header["slurm_job"] == JOB and header["node"] == "n2"
    assert len(notes) == 2 and all(isinstance(n, AgentNote) and n.node == "n2" and n.no_task == no_task()
                                   for n in notes)


def test_an_agent_whose_watched_tasks_end_says_what_slurm_says_instead_of_ending(monkeypatch):
    """Its tasks here were watched, then ended: the agent asks Slurm at once and writes a note after the last
    frame, rather than exiting as if the node had gone."""
    from probes.monitoring import node_watch
    from tui.commands import agent

    last = dataclasses.replace(node_frame("n2", 5, 1, [count(PID, FORWARD)], cpu=0.0), target=dataclasses.replace(
        node_frame("n2", 5, 1, [], cpu=0.0).target, alive=False))

    class Watch:  # NodeWatch over one target that has just ended
        def __init__(self, config, *, pid, follow):
            self.config, self.watched = config, {pid: object()}

        def tick(self):
            return [TargetFrame(root, last) for root in self.watched]

        def drop(self, root):
            del self.watched[root]

        def close(self):
            pass

    ended = no_task([TaskEnd("n2", (1,), "Exited with exit code 1", 1, SRUN_LINE, at=T0)])
    answers = [ended, SlurmError("the job has ended")]
    monkeypatch.setattr(node_watch, "NodeWatch", Watch)
    monkeypatch.setattr(slurm, "agent_target", lambda step, node: answers.pop(0))
    monkeypatch.setattr(agent, "SLURM_RECHECK_S", 0.0)
    args = agent_args()
    args.pid = 4242
    out = io.StringIO()
    assert agent.stream_frames(args, out) == 0
    _, frame, note = lines_of(out)
    assert frame.target.alive is False and isinstance(note, AgentNote) and note.no_task == ended


# --- the merge ------------------------------------------------------------------------------------------


def hung_rank_0(i: int, kind: str = "slurm", world: int = 2, node: str = "n1"):
    """n1's rank 0, a Slurm task, stuck in all_reduce."""
    frame = node_frame(node, i, 0, [count(PID, ALL_REDUCE, n=5, idle=True)], cpu=0.0, main_cpu=0.0,
                       threads=[ThreadStack(pid=PID, tid=PID, name="MainThread", idle=True, frames=ALL_REDUCE)])
    job = dataclasses.replace(frame.job, kind=kind, world_size=world, slurm_step=f"{JOB}.0")
    return dataclasses.replace(frame, job=job)


def merged(notes: dict[str, NoTaskHere], rounds: int = 12, lost: tuple[str, ...] = (), **frame_kw):
    monitor = ClusterMonitor(hang_after_s=5.0, expected_nodes=["n1", *notes, *lost])
    for name in lost:
        monitor.node_ended(name, "its agent's stream ended (exit status 143)", at=T0)
    for i in range(rounds):
        monitor.add(hung_rank_0(i, **frame_kw))
        for name, note in notes.items():
            monitor.no_task_here(name, note, heard_at=T0 + i + 1)
        monitor.merge(now=T0 + i + 1)
    return monitor


def test_the_merge_names_the_gone_rank_with_its_end_and_the_node_is_not_lost():
    end = TaskEnd("n2", (1,), "Exited with exit code 1", 1, SRUN_LINE, at=T0 - 30)
    monitor = merged({"n2": no_task([end])})
    view = monitor.view
    assert (view.job.finding, view.job.responsible_rank) == ("rank_exited", 1)
    assert (view.verdict.bottleneck, view.verdict.liveness) == ("comms_bound", "hung")
    assert view.verdict.evidence[0] == (
        f"rank 1 on n2 is gone: its task exited with status 1 at {clock(T0 - 30)}; rank 0 waits for it in "
        "all_reduce until the process group's timeout (30 min by gloo's default; no rank uses a GPU)")
    assert view.verdict.evidence[1] == f"n2: {no_task([end]).line()}"
    n1, n2 = view.nodes
    assert (n1.state, n2.state, n2.lost_at) == ("live", "no_task", None)
    # Its agent ending, or no note for longer than a node may be silent, loses nothing: no task ran there.
    monitor.node_ended("n2", "its agent ended (exit status 0) after saying no task of the job runs there", at=T0 + 13)
    for i in range(13, 40):
        monitor.add(hung_rank_0(i))
        monitor.merge(now=T0 + i + 1)
    assert [s.state for s in monitor.statuses] == ["live", "no_task"]
    assert not any("lost" in line for line in monitor.view.verdict.evidence)
    document = node_document(monitor.statuses[1])
    assert (document["state"], document["note"], document["lost_at"]) == ("no_task", no_task([end]).line(), None)


def test_where_how_the_task_ended_was_not_read_the_rank_no_node_runs_is_gone_without_a_node():
    view = merged({"n2": dataclasses.replace(no_task(), source=None, unread="job 12 was started by srun ...")}).view
    assert (view.job.finding, view.job.responsible_rank) == ("rank_exited", 1)
    assert view.verdict.evidence[0].startswith("rank 1 of 2 is gone: no node of the job runs it (n2 runs no task "
                                               "of it now); rank 0 waits for it in all_reduce until ")


def test_a_task_number_is_not_taken_for_a_rank_under_a_launcher_of_its_own():
    """torchrun in each task: srun's task 1 is n2's torchrun, not rank 1; the ranks no node runs are named."""
    end = TaskEnd("n2", (1,), "Exited with exit code 1", 1, SRUN_LINE, at=T0)
    view = merged({"n2": no_task([end])}, kind="torchrun", world=3).view
    assert view.verdict.evidence[0].startswith("ranks 1–2 of 3 are gone: no node of the job runs them (n2 runs no "
                                               "task of it now); rank 0 waits for them in all_reduce until ")


def test_ranks_no_node_shows_are_not_called_gone_while_a_node_is_lost():
    view = merged({"n2": no_task()}, lost=("n3",), world=3).view
    assert view.job.finding != "rank_exited"
    assert not any("gone" in line for line in view.verdict.evidence)
    assert [s.state for s in view.nodes] == ["live", "no_task", "lost"]


def test_a_node_that_sends_frames_again_is_live_again():
    monitor = merged({"n2": no_task()}, rounds=3)
    frame = dataclasses.replace(hung_rank_0(3, node="n2"), node="n2")
    monitor.add(frame)
    monitor.merge(now=T0 + 5)
    assert [s.state for s in monitor.statuses] == ["live", "live"]


def test_an_agents_note_is_a_line_of_its_stream_and_the_merge_reads_it():
    note = AgentNote("n2", T0, no_task([TaskEnd("n2", (1,), "Exited with exit code 1", 1, SRUN_LINE, by=T0)]))
    assert parse_frame_line(agent_note_line(note)) == note
    assert parse_frame_line('{"schema": "gputop.agent-note/1", "node": "n2"}') is None  # cut short: nothing

    import threading
    import time

    from probes.monitoring.cluster import AgentSpec, StreamEvent

    stop = threading.Event()

    class Streams:  # what AgentStreams hands over: n1's frames, n2's note, n2's stream ending after it
        specs = (AgentSpec("n1", ()), AgentSpec("n2", ()))

        def events(self, timeout: float) -> list[StreamEvent]:
            stop.set()
            return [*(StreamEvent("n1", frame=hung_rank_0(i), heard_at=time.time()) for i in range(12)),
                    StreamEvent("n2", note=note, heard_at=time.time()),
                    StreamEvent("n2", ended="its agent ended (exit status 0) after saying no task of the job runs "
                                            "there", heard_at=time.time())]

    monitor = ClusterMonitor(hang_after_s=5.0)
    run_merge(Streams(), monitor, stop, interval_s=3600.0)
    assert [s.state for s in monitor.statuses] == ["live", "no_task"]
    assert monitor.view.verdict.evidence[0].startswith(f"rank 1 on n2 is gone: its task exited with status 1 by "
                                                       f"{clock(T0)}; rank 0 waits for it in all_reduce")


def test_the_merge_stops_once_every_stream_has_ended_whether_its_node_was_lost_or_had_no_task():
    from probes.monitoring.cluster import AgentSpec, StreamEvent

    note = AgentNote("n2", T0, no_task())
    given = [[*(StreamEvent("n1", frame=hung_rank_0(i), heard_at=T0 + i) for i in range(3)),
              StreamEvent("n2", note=note, heard_at=T0 + 1),
              StreamEvent("n1", ended="its agent's stream ended (exit status 0)", heard_at=T0 + 4),
              StreamEvent("n2", ended="its agent ended (exit status 0) after saying no task of the job runs there",
                          heard_at=T0 + 4)]]

    class Streams:
        specs = (AgentSpec("n1", ()), AgentSpec("n2", ()))
        asked = 0

        def events(self, timeout: float) -> list[StreamEvent]:
            self.asked += 1
            assert self.asked < 100, "the merge went on reading after every stream had ended"
            return given.pop() if given else []

    import threading

    monitor = ClusterMonitor(hang_after_s=5.0)
    run_merge(Streams(), monitor, threading.Event(), interval_s=3600.0)
    assert [s.state for s in monitor.statuses] == ["lost", "no_task"]
