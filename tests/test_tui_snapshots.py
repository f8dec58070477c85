"""SVG snapshots of the app replaying real recordings, at 80x24 and 160x48, with the clock frozen.

A failing snapshot writes snapshot_report.html: look at the difference before accepting it with
`pytest tests/test_tui_snapshots.py --snapshot-update`. The verdict's words come from probes.diagnosis,
so a change of its rules shows up here too, on purpose.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from probes.recording import read_recording
from tui.app import make_app

RECORDINGS = Path(__file__).parent / "fixtures" / "recordings"
SIZES = {"80x24": (80, 24), "160x48": (160, 48)}
# "Since" texts are measured 2 s after the last frame, so they do not depend on when the test runs.
SECONDS_AFTER_LAST_FRAME = 2.0


def replay_app(name: str):
    frames = list(read_recording(RECORDINGS / f"{name}.jsonl"))
    frozen = frames[-1].time + SECONDS_AFTER_LAST_FRAME
    return make_app(replay_frames=frames, clock=lambda: frozen)


@pytest.mark.parametrize("size", SIZES, ids=list(SIZES))
@pytest.mark.parametrize("recording", ["data_bound", "hung", "exited"])
def test_replay(snap_compare, recording, size):
    assert snap_compare(replay_app(recording), terminal_size=SIZES[size])


@pytest.mark.parametrize("size", SIZES, ids=list(SIZES))
def test_ptrace_denied_says_cannot_see_in_the_header_and_the_verdict(snap_compare, size):
    # Recorded by gputop without CAP_SYS_PTRACE on a sleeping process of user nobody (tests/test_doctor.py's case).
    assert snap_compare(replay_app("ptrace_denied"), terminal_size=SIZES[size])


def test_call_tree_of_the_hottest_frame(snap_compare):
    assert snap_compare(replay_app("data_bound"), press=["enter"], terminal_size=SIZES["160x48"])


def test_now_view_with_idle_threads(snap_compare):
    assert snap_compare(replay_app("hung"), press=["i", "d"], terminal_size=SIZES["160x48"])


def test_help(snap_compare):
    assert snap_compare(replay_app("data_bound"), press=["question_mark"], terminal_size=SIZES["80x24"])


CONSTRUCTED = Path(__file__).parent / "fixtures" / "frames"


def job_replay_app():
    """The 2-rank torchrun straggler (constructed after a real run): the job verdict comes from the real
    probes.diagnosis.job, so a change of its rules shows here too."""
    frames = list(read_recording(CONSTRUCTED / "ddp_straggler.jsonl"))
    frozen = frames[-1].time + SECONDS_AFTER_LAST_FRAME
    return make_app(replay_frames=frames, clock=lambda: frozen)


@pytest.mark.parametrize("size", SIZES, ids=list(SIZES))
def test_ddp_straggler_with_the_straggler_selected(snap_compare, size):
    # `[` from "all ranks" selects the last rank: rank 1, the straggler.
    assert snap_compare(job_replay_app(), press=["left_square_bracket"], terminal_size=SIZES[size])


def test_ddp_straggler_all_ranks(snap_compare):
    assert snap_compare(job_replay_app(), terminal_size=SIZES["160x48"])


def test_help_with_job_keys(snap_compare):
    assert snap_compare(job_replay_app(), press=["question_mark"], terminal_size=SIZES["80x24"])
