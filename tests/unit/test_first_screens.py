"""What a new user reads first (issue 31, "tried as a new user would"), on screens and at the end of commands:

- the headless run's last line on stderr, the verdict in the TUI's words with the most its fix can win;
- a hung job whose stuck place names no bottleneck reads as a verdict ("HUNG · no progress seen for …"), never
  "no verdict yet" beside HUNG, in the verdict pane, its timeline and the ranks table;
- the verdict pane keeps its first advice line whole at 80×24 and 160×48, on the real recordings of
  tests/fixtures/recordings and the constructed 2-rank job;
- the job picker keeps the cursor on its job while refreshes sort the rows again, and a Down pressed as a
  refresh arrives moves on the rows the person saw; the CPU column says "…" until the first refresh measures it;
- `gputop compare` sets A's predicted gain against B's pace only where B is A's job again;
- a machine without a GPU is said in one short line; `--snapshot`'s own help says it samples 10 s by default.

The end-to-end side (real targets, the real command, tmux) is tests/e2e/test_first_screens_e2e.py.
"""

from __future__ import annotations

import dataclasses
import io
import threading
from contextlib import redirect_stderr
from pathlib import Path

import pytest
from support.pilot import pilot_test, table_rows, wait_until
from support.screen import pane_rows, words
from textual import events

from probes.compare import RunSummary, compare_runs
from probes.doctor import frame_blind_spots
from probes.frame import Frame, GpuReading, JobVerdict, TargetInfo, Verdict
from probes.jobs.census import CensusReading, JobSummary
from probes.outputs.recording import read_recording
from probes.sensors.nvml import NO_LIBRARY
from probes.view import MonitorView, VerdictChange
from tui.app import make_app
from tui.cli import build_parser
from tui.commands.attach import tell_cannot_see
from tui.panes.ranks import RankRow, rank_verdict_words
from tui.panes.text import verdict_line
from tui.panes.verdict import VerdictPane, timeline_text, verdict_renderable
from tui.picker import JobPicker

REPO = Path(__file__).resolve().parents[2]
RECORDINGS = REPO / "tests" / "fixtures" / "recordings"
CONSTRUCTED = REPO / "tests" / "fixtures" / "frames"
SIZES = {"80x24": (80, 24), "160x48": (160, 48)}


# --- the headless run's last line -------------------------------------------------------------------------


def test_the_verdict_line_is_the_headers_words_with_the_gain_and_its_condition():
    starved = Verdict(bottleneck="data_bound", liveness="progressing", confidence=0.76, max_speedup=5.7, samples=48)
    assert verdict_line(starved) == ("input-bound · progressing · on 48 samples · up to 5.7× faster if the input "
                                     "pipeline kept up (it holds the step 82% of the time)")
    # No gain where the verdict carries none; the bound of a busy GPU in its own words.
    assert verdict_line(dataclasses.replace(starved, max_speedup=None)) == "input-bound · progressing · on 48 samples"
    # Every sample in the phase but a sample or two: a floor, its share in words (shares.max_speedup's at_least),
    # and that it is a 95% bound.
    assert verdict_line(dataclasses.replace(starved, max_speedup=None, min_speedup=34.0)) == (
        "input-bound · progressing · on 48 samples · at least 34× faster (a 95% lower bound) if the input pipeline "
        "kept up (it holds the step nearly all of the time)")
    gpu = Verdict(bottleneck="gpu_bound", liveness="progressing", confidence=0.9, max_speedup=1.25, samples=9,
                  from_counters=True)
    assert verdict_line(gpu) == ("GPU-bound · progressing · on counters and 9 samples · anything outside the GPU can "
                                 "win at most 1.2× (it is busy 80% of the time)")
    # A job's verdict names the rank, as the pane's first line does.
    job = JobVerdict(verdict=starved, finding="straggler", responsible_rank=1)
    assert verdict_line(starved, job).startswith("input-bound · straggler: rank 1 · progressing · on 48 samples")
    hung = Verdict(bottleneck="unknown", liveness="hung", confidence=1.0, stalled_s=125.0)
    assert verdict_line(hung) == "HUNG · no progress seen for 2m05s"


def test_the_verdict_says_what_it_rests_on_and_never_a_percent():
    """Issue 38, item 6: "90% sure" over 9 samples read as a probability; a score is not one. Under 10 samples the
    verdict is provisional and says how many; a counter-based one says so; no percent of confidence anywhere."""
    thin = Verdict(bottleneck="data_bound", liveness="progressing", confidence=0.4, samples=4)
    assert verdict_line(thin) == "input-bound · progressing · provisional: 4 samples"
    one = dataclasses.replace(thin, samples=1)
    assert verdict_line(one).endswith("provisional: 1 sample")
    for verdict in (thin, one, dataclasses.replace(thin, samples=258, confidence=0.91)):
        assert "%" not in verdict_line(verdict) and "sure" not in verdict_line(verdict)


# --- a hung job with no bottleneck named ------------------------------------------------------------------


def plain(renderable, width: int = 120) -> str:
    from rich.console import Console

    console = Console(width=width, file=io.StringIO(), record=True)
    console.print(renderable)
    return console.export_text()


def test_a_hung_job_with_no_bottleneck_named_reads_as_a_verdict():
    hung = Verdict(bottleneck="unknown", liveness="hung", confidence=1.0, stalled_s=14.0, since=105.0,
                   evidence=("no progress for 14 s (hang threshold 5 s): main thread 0.00% CPU",
                             "main thread stuck at train.py:34 in rotate_logs; thread MainThread, PID 10"),
                   advice=("Threads wait on each other: take locks in one global order.",))
    frame = Frame(seq=9, time=114.0, interval_s=1.0, target=TargetInfo(pid=10, alive=True))
    view = MonitorView(frames=(frame,), verdict=hung, first_time=100.0, timeline=(
        VerdictChange(100.0, "unknown", "unknown"), VerdictChange(101.0, "idle", "progressing"),
        VerdictChange(105.0, "unknown", "hung")))
    text = plain(verdict_renderable(view, now=116.0))
    first = text.splitlines()[0]
    assert "no verdict yet" not in text
    assert first.split() == ["HUNG", "no", "progress", "seen", "for", "14", "s"], first
    assert timeline_text(view).plain == "timeline +0:01 idle → +0:05 HUNG"
    row = RankRow(pid=10, rank=1, verdict=hung, responsible=True)
    assert rank_verdict_words(row, "hung_rank") == "hung: the others wait for it"


# --- the verdict pane's first advice line, whole on screen -------------------------------------------------


def replay(path: Path):
    frames = list(read_recording(path))
    frozen = frames[-1].time + 2.0
    return make_app(replay_frames=frames, clock=lambda: frozen)


@pytest.mark.parametrize("size", SIZES, ids=list(SIZES))
@pytest.mark.parametrize("path", [RECORDINGS / "data_bound.jsonl", RECORDINGS / "hung.jsonl",
                                  RECORDINGS / "exited.jsonl", RECORDINGS / "ptrace_denied.jsonl",
                                  CONSTRUCTED / "ddp_straggler.jsonl"], ids=lambda path: path.stem)
@pilot_test
async def test_the_first_advice_line_is_whole_on_screen(path, size):
    app = replay(path)
    async with app.run_test(size=SIZES[size]) as pilot:
        await wait_until(pilot, lambda: app.view is not None and bool(app.view.verdict.advice))
        pane = app.query_one(VerdictPane)
        await pilot.pause(0.2)  # the pane drawn at its size
        shown = words(" ".join(pane_rows(app, pane)))
        first_advice = words(app.view.verdict.advice[0])
        assert f"→ {first_advice}" in shown, "\n".join(pane_rows(app, pane))


# --- the job picker -----------------------------------------------------------------------------------------

NOW = 1_800_000_000.0


def job(pid: int, cpu: float | None) -> JobSummary:
    return JobSummary(root_pid=pid, launcher="python", ranks=1, world_size=None, workers=0, processes=1, gpus=(),
                      cpu_pct=cpu, started_at=NOW - 100 - pid, found_by="imports torch",
                      command=f"python job{pid}.py")


def census(*cpus: tuple[int, float | None]) -> CensusReading:
    return CensusReading(jobs=tuple(job(pid, cpu) for pid, cpu in cpus), time=NOW)


def under_cursor(app: JobPicker) -> int:
    from textual.widgets import DataTable

    return app.shown_pids[app.query_one(DataTable).cursor_row]


@pilot_test
async def test_a_down_pressed_as_a_refresh_sorts_again_moves_on_the_rows_the_person_saw():
    seen = census((1, 90.0), (2, 50.0), (3, 10.0), (4, 5.0))
    resorted = census((1, 10.0), (2, 50.0), (3, 90.0), (4, 60.0))  # 3, 4, 2, 1
    app = JobPicker(lambda: seen, initial=seen, clock=lambda: NOW, refresh_s=None)
    async with app.run_test(size=(120, 20)) as pilot:
        await pilot.pause()
        assert app.shown_pids == [1, 2, 3, 4] and under_cursor(app) == 1
        # The key comes first, the refresh right behind it, before either is handled: the person pressed Down on
        # the rows they saw (1 above 2), so the cursor lands on 2, wherever the refresh then puts it.
        app.post_message(events.Key("down", None))
        app.call_later(app._received, resorted)
        await wait_until(pilot, lambda: app.shown_pids == [3, 4, 2, 1])
        await pilot.pause()
        assert under_cursor(app) == 2
        await pilot.press("enter")
    assert app.return_value == 2


@pilot_test
async def test_until_a_key_moves_it_the_cursor_stays_on_the_top_row():
    """Seen in tmux: the first screen sorted jobs whose CPU% was still being measured, the cursor stayed with the
    job first then, and after the refresh Enter attached to a pytest on the second row while torchrun sat on top."""
    measuring = census((1, None), (2, None))
    measured = census((1, 2.0), (2, 6.0))  # 2 first now
    app = JobPicker(lambda: measuring, initial=measuring, clock=lambda: NOW, refresh_s=None)
    async with app.run_test(size=(120, 20)) as pilot:
        await pilot.pause()
        first = under_cursor(app)
        app._received(measured)
        await pilot.pause()
        assert app.shown_pids == [2, 1] and under_cursor(app) == 2, first
        await pilot.press("enter")
    assert app.return_value == 2


@pilot_test
async def test_the_cursor_stays_on_its_job_while_refreshes_sort_the_rows_again():
    readings = iter([census((1, 90.0), (2, 80.0), (3, 70.0), (4, 60.0)),
                     census((2, 10.0), (3, 95.0), (4, 60.0), (5, 99.0)),  # 1 gone, 5 new: 5, 3, 4, 2
                     census((2, 99.0), (3, 1.0), (4, 60.0), (5, 50.0))])  # 2, 4, 5, 3
    first = next(readings)
    app = JobPicker(lambda: first, initial=first, clock=lambda: NOW, refresh_s=None)
    async with app.run_test(size=(120, 20)) as pilot:
        await pilot.pause()
        await pilot.press("down", "down")
        assert under_cursor(app) == 3
        for reading, order in zip(readings, ([5, 3, 4, 2], [2, 4, 5, 3]), strict=True):
            app._received(reading)
            await pilot.pause()
            assert app.shown_pids == order and under_cursor(app) == 3
        await pilot.press("up")  # Up moves from where the job is now: the row above it
        assert under_cursor(app) == 5
        await pilot.press("enter")
    assert app.return_value == 5


@pilot_test
async def test_the_cpu_column_says_measuring_until_the_first_refresh_measures_it():
    first = census((11, None), (12, None))  # a census's first scan: no CPU% yet
    measured = census((11, 3.0), (12, 97.0))
    go = threading.Event()
    scans: list[CensusReading] = []

    def scan() -> CensusReading:  # off the UI thread: held until the first screen has been read
        go.wait(60)
        scans.append(measured)
        return measured

    # The next regular refresh a minute away: whatever shows the CPU% is the first refresh.
    app = JobPicker(scan, initial=first, clock=lambda: NOW, refresh_s=60.0)
    async with app.run_test(size=(120, 20)) as pilot:
        await pilot.pause()
        assert [row[3] for row in table_rows(app, "picker-table")] == ["…", "…"]
        go.set()
        await wait_until(pilot, lambda: app.shown_pids == [12, 11], timeout_s=30)
        assert [row[3] for row in table_rows(app, "picker-table")] == ["97", "3"]
        assert len(scans) == 1


# --- gputop compare: a predicted gain only against the same job ------------------------------------------


def run(label: str, bottleneck: str, seconds: float, flops: int | None, tokens: int | None) -> RunSummary:
    return RunSummary(label=label, source=f"{label}.json", kind="snapshot", seconds_per_iter=seconds,
                      tokens_per_iter=tokens, flops_per_token=flops, bottleneck=bottleneck,
                      max_speedup=5.7 if bottleneck == "data_bound" else None,
                      time_shares={"data": 0.82, "compute": 0.18} if bottleneck == "data_bound" else {"compute": 1.0})


def said_gain(a: RunSummary, b: RunSummary) -> list[str]:
    return [line for line in compare_runs(a, b).verdict if "could win" in line]


def test_compare_sets_a_predicted_gain_against_measured_only_for_the_same_job():
    before = run("A", "data_bound", 1.0, 1_000_000, 524_288)
    fixed = run("B", "cpu_bound", 0.25, 1_010_000, 524_288)  # the same model within its vocabulary's padding
    assert said_gain(before, fixed) == ["A's verdict (data_bound) said its fix could win up to 5.7× per iteration; "
                                        "B got 4.0×"]
    other_model = run("B", "cpu_bound", 10.0, 2_850_000, 524_288)
    other_batch = run("B", "cpu_bound", 0.5, 1_000_000, 262_144)
    unknown = run("B", "cpu_bound", 0.5, None, None)
    for b in (other_model, other_batch, unknown):
        comparison = compare_runs(before, b)
        assert said_gain(before, b) == [], comparison.verdict
        # Issue 38, item 12: two jobs side by side each have their own limit; nothing "moved" between them.
        assert not any("moved" in line for line in comparison.verdict), comparison.verdict
        assert "the bottlenecks differ: A data_bound, B cpu_bound (not the same job" in " ".join(comparison.verdict)
    assert "the bottleneck moved: data_bound → cpu_bound" in compare_runs(before, fixed).verdict


# --- no GPU here: one short line; --snapshot's default duration in its help --------------------------------


def test_no_gpu_on_this_machine_is_one_short_line():
    frame = Frame(seq=1, time=1.0, interval_s=1.0, target=TargetInfo(pid=10, alive=True),
                  gpu=GpuReading(available=False, reason=NO_LIBRARY))
    view = MonitorView(frames=(frame,), cannot_see=frame_blind_spots(frame))
    said = io.StringIO()
    with redirect_stderr(said):
        tell_cannot_see(view, set())
    assert said.getvalue() == ("gputop: no NVIDIA GPU here (NVML: libnvidia-ml.so.1 not found): GPU readings and GPU "
                               "rules are off\n")
    # A reason with a fix worth reading keeps its finding and its fix.
    denied = dataclasses.replace(frame, gpu=GpuReading(available=False, reason="no permission to use NVML"))
    said = io.StringIO()
    with redirect_stderr(said):
        tell_cannot_see(MonitorView(frames=(denied,), cannot_see=frame_blind_spots(denied)), set())
    assert said.getvalue().startswith("gputop: cannot see (nvml): no permission to use NVML; fix: give gputop's user")


def test_snapshot_help_says_it_samples_10_s_without_duration():
    parser = build_parser()
    snapshot = next(action for action in parser._actions if "--snapshot" in action.option_strings)
    assert snapshot.help is not None and "10 s" in snapshot.help and "--duration" in snapshot.help
    readme = (REPO / "docs" / "commands.md").read_text()
    assert "`--snapshot`\nor `--flamegraph` without `--duration` samples 10 s" in readme


def test_rank_verdict_still_names_a_hung_ranks_bottleneck_where_there_is_one():
    comms = Verdict(bottleneck="comms_bound", liveness="hung")
    row = RankRow(pid=10, rank=1, verdict=comms, responsible=True)
    assert rank_verdict_words(row, "hung_rank") == "hung: the others wait for it (collectives-bound)"
