"""Pilot tests of a distributed job's screen: the Ranks pane, selecting a rank with `[` / `]` (or 5, j/k,
enter), the CPU and Stacks panes scoped to the selected rank and its workers, the job verdict naming the
responsible rank with the selected rank's own verdict under it, and the job's note in the status bar.

The frames are the 2-rank torchrun straggler recording (tests/fixtures/frames/ddp_straggler.jsonl, built by
make_job_frames.py after a real run). The job verdict is constructed here and put on every view the app's
Monitor makes, so these tests pin what the screen does with a given verdict, whatever rules produce it.
"""

from __future__ import annotations

import dataclasses
import threading
from pathlib import Path

from support.pilot import RecordedEngine, frames_of, hot_functions, pilot_test, table_rows, text_of, wait_until
from textual.widgets import Static

from probes.frame import JobInfo, JobVerdict, ProcessSample, RankVerdict, StackCount, StackFrame, Verdict
from probes.outputs.recording import read_recording
from tui.app import make_app
from tui.panes.ranks import RankRow, rank_verdict_words
from tui.panes.text import finding_words

FRAMES = Path(__file__).parents[1] / "fixtures" / "frames"
WIDE, SMALL = (160, 48), (80, 24)
LAUNCHER, RANK0, RANK1 = 41000, 41021, 41022
WORKER = 41050  # a DataLoader worker of rank 1, added by with_worker()


def straggler_frames():
    return list(read_recording(FRAMES / "ddp_straggler.jsonl"))


def straggler_verdict() -> JobVerdict:
    rank0 = Verdict(bottleneck="comms_bound", liveness="progressing", confidence=0.8,
                    evidence=("main thread waits 80% of its samples in backward at 29% CPU: the all-reduce",))
    rank1 = Verdict(bottleneck="cpu_bound", liveness="progressing", confidence=0.8,
                    evidence=("main thread busy 96% of the time in slow_preprocess (ddp_straggler.py:33)",))
    job = Verdict(bottleneck="cpu_bound", liveness="progressing", confidence=0.8, since=None,
                  evidence=("rank 1 (PID 41022) holds the job back: busy in slow_preprocess while rank 0 waits "
                            "80% of its samples for it",),
                  advice=("look at slow_preprocess on rank 1: every other rank waits for it each step",))
    return JobVerdict(verdict=job, finding="straggler", responsible_rank=1, ranks=(
        RankVerdict(rank=0, pid=RANK0, verdict=rank0, local_rank=0, cpu_pct=31.0, collective_wait_ratio=0.8,
                    samples=60),
        RankVerdict(rank=1, pid=RANK1, verdict=rank1, local_rank=1, cpu_pct=97.0, collective_wait_ratio=0.05,
                    samples=60)))


def with_job_verdict(app, job: JobVerdict | None):
    """Every view the app's Monitor makes carries `job` (and its verdict as the view's verdict); with None,
    no job verdict at all, as before one is reached."""
    ingest = app.monitor.ingest

    def ingest_with_job(frame):
        view = ingest(frame)
        if job is None:
            return dataclasses.replace(view, job=None)
        return dataclasses.replace(view, job=job, verdict=job.verdict)

    app.monitor.ingest = ingest_with_job
    return app


def job_app(frames=None, job: JobVerdict | None = None):
    frames = frames if frames is not None else straggler_frames()
    return with_job_verdict(make_app(replay_frames=frames, clock=lambda: frames[-1].time + 2),
                            job or straggler_verdict())


def with_job_info(frames, **changes):
    return [dataclasses.replace(f, job=dataclasses.replace(f.job, **changes)) for f in frames]


def with_worker(frames):
    """Rank 1 gets a DataLoader worker (owner_pid = rank 1) that takes samples of its own."""
    worker = ProcessSample(pid=WORKER, ppid=RANK1, role="dataloader_worker", name="pt_data_worker", cpu_pct=40.0,
                           owner_pid=RANK1)
    sample = StackCount(pid=WORKER, tid=WORKER, thread_name="MainThread", idle=False, count=5,
                        frames=(StackFrame("_worker_loop", "/venv/site-packages/torch/utils/data/_utils/worker.py"),))
    return [dataclasses.replace(f, processes=(*f.processes, worker),
                                stacks=dataclasses.replace(f.stacks, counts=(*f.stacks.counts, sample)
                                                           if f.stacks.counts else ()))
            for f in frames]


class GatedEngine(RecordedEngine):
    """Holds a tick (by number) until its event is set: the screen can be caught between two frames."""

    def __init__(self, frames, *, gates: dict[int, threading.Event]) -> None:
        super().__init__(frames, interval_s=0.05)
        self.gates = gates

    def tick(self):
        if self.ticks in self.gates:
            self.gates[self.ticks].wait(10)
        return super().tick()


def verdict_text(app) -> str:
    return text_of(app.query_one("#verdict-text", Static).content)


def process_pids(app) -> list[int]:
    return [int(row[0]) for row in table_rows(app, "processes")]


def footer_keys(app) -> list[str]:
    return [active.binding.key_display for active in app.screen.active_bindings.values() if active.binding.show]


def stacks_title(app) -> str:
    title = app.query_one("#stacks").border_title
    return getattr(title, "plain", str(title))


@pilot_test
async def test_rank_table_lists_each_rank_with_its_verdict_in_a_few_words():
    app = job_app()
    async with app.run_test(size=WIDE) as pilot:
        await pilot.pause()
        assert app.query_one("#ranks").display
        rows = table_rows(app, "ranks-table")
        assert [(row[0], row[2]) for row in rows] == [("0", str(RANK0)), ("1", str(RANK1))]
        assert rows[0][5] == "80%" and rows[0][6] == "waits 80% for the others"
        assert rows[1][4] == "97%" and rows[1][6] == "straggler: host-CPU-bound"
        head = verdict_text(app).splitlines()[0]
        assert "host-CPU-bound" in head and "straggler: rank 1" in head
        assert app.job_note_text().plain.strip() == \
            f"attached to torchrun (PID {LAUNCHER}): watching the torchrun job, 2 ranks on this node"
        # Attached to the launcher: no rank is selected, every process shows.
        assert process_pids(app) == [LAUNCHER, RANK0, RANK1]
        assert "all processes" in stacks_title(app)


@pilot_test
async def test_brackets_step_through_the_ranks_and_scope_processes_stacks_and_verdict():
    app = job_app()
    async with app.run_test(size=WIDE) as pilot:
        await pilot.pause()
        await pilot.press("right_square_bracket")
        assert app.selected_rank_pid == RANK0
        assert process_pids(app) == [RANK0]
        assert f"rank 0 (PID {RANK0})" in stacks_title(app)
        assert not any("slow_preprocess" in f for f in hot_functions(app))
        lines = verdict_text(app).splitlines()
        assert "straggler: rank 1" in lines[0]
        assert lines[1].startswith(f"▶ rank 0 (PID {RANK0}): waits 80% for the others")
        assert table_rows(app, "ranks-table")[0][0] == "▶ 0"

        await pilot.press("right_square_bracket")
        assert app.selected_rank_pid == RANK1
        assert process_pids(app) == [RANK1]
        assert hot_functions(app)[0].startswith("slow_preprocess")
        assert verdict_text(app).splitlines()[1].startswith(f"▶ rank 1 (PID {RANK1}): straggler: host-CPU-bound")

        await pilot.press("right_square_bracket")  # past the last rank: all ranks again
        assert app.selected_rank_pid is None
        assert process_pids(app) == [LAUNCHER, RANK0, RANK1]
        assert "▶" not in verdict_text(app)

        await pilot.press("left_square_bracket")
        assert app.selected_rank_pid == RANK1


@pilot_test
async def test_without_a_note_the_status_line_names_the_job():
    app = job_app(with_job_info(straggler_frames(), note=None))
    async with app.run_test(size=SMALL) as pilot:
        await pilot.pause()
        assert "torchrun job, 2 ranks" in app.status_text().plain and app.job_note_text() is None
        assert not app.query_one("#job-note").display


@pilot_test
async def test_the_rank_the_user_attached_to_is_selected_first_and_its_note_heads_the_screen():
    note = f"attached to rank 1 (PID {RANK1}): watching the torchrun job (PID {LAUNCHER}) it belongs to"
    app = job_app(with_job_info(straggler_frames(), attached_pid=RANK1, selected_pid=RANK1, note=note))
    async with app.run_test(size=SMALL) as pilot:
        await pilot.pause()
        assert app.selected_rank_pid == RANK1
        assert process_pids(app) == [RANK1]
        # The note has the header's second line to itself; the status line no longer says what the note says.
        assert app.job_note_text().plain.strip() == note and app.query_one("#job-note").region.height == 1
        assert "torchrun job, 2 ranks" not in app.status_text().plain


@pilot_test
async def test_a_selected_rank_brings_its_workers_into_the_cpu_and_stacks_panes():
    app = job_app(with_worker(straggler_frames()))
    async with app.run_test(size=WIDE) as pilot:
        await pilot.pause()
        await pilot.press("left_square_bracket")  # from all ranks back to the last one
        assert app.selected_rank_pid == RANK1
        assert process_pids(app) == [RANK1, WORKER]
        assert f"rank 1 (PID {RANK1}) + 1 worker" in stacks_title(app)
        assert "_worker_loop" in hot_functions(app)
        await pilot.press("left_square_bracket")
        assert process_pids(app) == [RANK0]
        assert "_worker_loop" not in hot_functions(app)


@pilot_test
async def test_enter_on_a_row_of_the_rank_table_selects_that_rank():
    app = job_app()
    async with app.run_test(size=WIDE) as pilot:
        await pilot.pause()
        await pilot.press("5")
        assert app.focused.id == "ranks-table"
        await pilot.press("j", "enter")
        assert app.selected_rank_pid == RANK1
        assert process_pids(app) == [RANK1]


@pilot_test
async def test_escape_in_stacks_goes_back_to_the_rank_not_to_every_process():
    app = job_app()
    async with app.run_test(size=WIDE) as pilot:
        await pilot.pause()
        await pilot.press("right_square_bracket", "3", "enter")  # rank 0, then its row in the CPU pane
        assert f"PID {RANK0} (rank 0)" in stacks_title(app)
        await pilot.press("escape")
        assert f"rank 0 (PID {RANK0})" in stacks_title(app) and "all processes" not in stacks_title(app)


@pilot_test
async def test_rank_keys_are_listed_in_help_and_footer_only_for_a_job():
    app = job_app()
    async with app.run_test(size=WIDE) as pilot:
        await pilot.pause()
        groups = dict(app.help_bindings())
        assert [b.key_display for b in groups["Distributed job"]] == ["[ ]", "5"]
        assert all(b.tooltip for b in groups["Distributed job"])
        assert "[ ]" in footer_keys(app)
    lone = make_app(replay_frames=frames_of("data_bound"))
    async with lone.run_test(size=WIDE) as pilot:
        await pilot.pause()
        assert not lone.query_one("#ranks").display
        assert "Distributed job" not in dict(lone.help_bindings())
        assert "[ ]" not in footer_keys(lone)
        await pilot.press("right_square_bracket", "5")
        assert lone.selected_rank_pid is None


@pilot_test
async def test_ranks_show_from_the_frames_before_any_job_verdict():
    app = with_job_verdict(make_app(replay_frames=straggler_frames()), None)
    async with app.run_test(size=WIDE) as pilot:
        await pilot.pause()
        rows = table_rows(app, "ranks-table")
        assert [row[2] for row in rows] == [str(RANK0), str(RANK1)]
        assert [row[6] for row in rows] == ["-", "-"] and rows[1][4] == "96%"
        await pilot.press("right_square_bracket")
        assert process_pids(app) == [RANK0]


@pilot_test
async def test_a_rank_restarted_under_a_new_pid_stays_selected_and_a_vanished_one_lets_go():
    frames = straggler_frames()

    def replace_rank1(frame, **changes):
        return dataclasses.replace(frame, processes=tuple(
            dataclasses.replace(p, **changes) if p.pid == RANK1 else p for p in frame.processes))

    restarted = [replace_rank1(f, pid=RANK1 + 100, restart_count=1) for f in frames[3:6]]
    renumbered = [replace_rank1(f, pid=RANK1 + 200, rank=None, role="other") for f in frames[6:]]
    gates = [threading.Event(), threading.Event()]
    engine = GatedEngine(frames[:3] + restarted + renumbered, gates={3: gates[0], 6: gates[1]})
    app = with_job_verdict(make_app(engine=engine), None)  # the frames' own ranks: no verdict to keep old PIDs
    async with app.run_test(size=WIDE) as pilot:
        await wait_until(pilot, lambda: app.view is not None and app.view.latest.seq == 3)
        await pilot.press("left_square_bracket")
        assert app.selected_rank_pid == RANK1
        gates[0].set()
        await wait_until(pilot, lambda: app.view.latest.seq == 6)
        await pilot.pause()
        assert app.selected_rank_pid == RANK1 + 100
        assert process_pids(app) == [RANK1 + 100]
        gates[1].set()
        await wait_until(pilot, lambda: app.view.latest.seq >= len(frames))
        await pilot.pause()
        assert app.selected_rank_pid is None
        assert [row[2] for row in table_rows(app, "ranks-table")] == [str(RANK0)]


@pilot_test
async def test_80x24_keeps_verdict_ranks_and_stacks_readable_and_folds_processes_until_3():
    app = job_app(with_worker(straggler_frames()))
    async with app.run_test(size=SMALL) as pilot:
        await pilot.pause()
        await pilot.press("right_square_bracket", "right_square_bracket")
        for pane in ("verdict", "ranks", "stacks"):
            region = app.query_one(f"#{pane}").region
            assert region.height >= 4 and region.bottom <= 23, (pane, region)  # above the footer
        assert app.query_one("#ranks-table").region.height == 3  # heading and both ranks
        assert app.query_one("#hot").region.height >= 5
        assert app.query_one("#cpu").region.height == 1  # its title: the rank table has each rank's CPU%
        lines = verdict_text(app).splitlines()
        assert "straggler: rank 1" in lines[0] and lines[1].startswith("▶ rank 1")
        await pilot.press("3")
        await pilot.pause()
        assert app.query_one("#processes").region.height == 3  # heading, the rank and its worker
        assert app.query_one("#stacks").region.height >= 4


@pilot_test
async def test_a_launched_trainer_gets_its_note_but_no_rank_table():
    frames = frames_of("data_bound")
    main = frames[-1].processes[0]
    note = f"attached to bash (PID 10): watching python demo_target.py (PID {main.pid}) under it"
    job = JobInfo(kind="launched", attached_pid=10, root_pid=main.pid, launcher_pid=10, rank_pids=(main.pid,),
                  selected_pid=main.pid, note=note)
    app = make_app(replay_frames=[dataclasses.replace(f, job=job) for f in frames])
    async with app.run_test(size=SMALL) as pilot:
        await pilot.pause()
        assert not app.query_one("#ranks").display
        assert app.job_note_text().plain.strip() == note
        assert "input-bound" in verdict_text(app).splitlines()[0]
        assert "▶" not in verdict_text(app)
        assert len(process_pids(app)) == 3  # the whole tree, folded by nothing
        assert "[ ]" not in footer_keys(app)


@pilot_test
async def test_selecting_a_rank_while_paused_scopes_the_frozen_view():
    go_on = threading.Event()
    app = make_app(engine=GatedEngine(straggler_frames(), gates={4: go_on}))
    async with app.run_test(size=WIDE) as pilot:
        await wait_until(pilot, lambda: app.view is not None and app.view.latest.seq == 4)
        await pilot.press("p")
        go_on.set()
        await wait_until(pilot, lambda: app.view.latest.seq >= 8)
        await pilot.press("right_square_bracket")
        assert process_pids(app) == [RANK0]
        assert app._drawn_view.latest.seq == 4
        assert "PAUSED" in app.status_text().plain


def test_rank_verdict_words():
    verdict = Verdict(bottleneck="cpu_bound", liveness="progressing")
    row = RankRow(pid=1, rank=1, verdict=verdict, responsible=True, collective_wait_ratio=0.1)
    assert rank_verdict_words(row, "straggler") == "straggler: host-CPU-bound"
    assert rank_verdict_words(row, "shared") == "host-CPU-bound"
    waiting = dataclasses.replace(row, responsible=False, collective_wait_ratio=0.85,
                                  verdict=dataclasses.replace(verdict, bottleneck="comms_bound"))
    assert rank_verdict_words(waiting, "straggler") == "waits 85% for the others"
    hung = dataclasses.replace(waiting, verdict=dataclasses.replace(verdict, liveness="hung"))
    assert rank_verdict_words(hung, "hung_rank") == "hung, waiting 85% in collectives"
    stuck = dataclasses.replace(row, verdict=dataclasses.replace(verdict, liveness="hung", bottleneck="unknown"))
    assert rank_verdict_words(stuck, "hung_rank") == "hung: the others wait for it"
    assert rank_verdict_words(dataclasses.replace(row, alive=False), "rank_exited") == "exited"
    assert rank_verdict_words(dataclasses.replace(row, verdict=None), None) == "-"


def test_finding_words_name_the_responsible_rank():
    job = straggler_verdict()
    assert finding_words(job) == "straggler: rank 1"
    assert finding_words(dataclasses.replace(job, finding="hung_rank", responsible_rank=3)) == "stuck: rank 3"
    assert finding_words(dataclasses.replace(job, finding="rank_exited", responsible_rank=0)) == "rank 0 exited"
    assert finding_words(dataclasses.replace(job, finding="shared", responsible_rank=None)) == "all ranks alike"
    assert finding_words(dataclasses.replace(job, finding="single", responsible_rank=0)) is None


@pilot_test
async def test_ranks_with_no_process_here_are_listed_below_the_ranks_and_cannot_be_selected():
    frames = with_job_info(straggler_frames(), world_size=6, missing_ranks=(2,), ranks_elsewhere=((3, 5),))
    app = job_app(frames)
    async with app.run_test(size=WIDE) as pilot:
        await pilot.pause()
        rows = table_rows(app, "ranks-table")
        assert [(row[0], row[2], row[6]) for row in rows[2:]] == [
            ("2", "-", "gone (exited before attach)"), ("3–5", "-", "not on this node")]
        await pilot.press("5", "j", "j", "j", "enter")  # onto the last row, "3–5": nothing to select
        await pilot.pause()
        assert app.selected_rank_pid is None
        await pilot.press("right_square_bracket", "right_square_bracket", "right_square_bracket")
        assert app.selected_rank_pid is None, "[ and ] step through the ranks that have a process, then all"
