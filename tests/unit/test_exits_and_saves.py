"""How a session ends and where it leaves its files (issue 37): Ctrl-C in the TUI ends with 130 as the docs say; `s`
saves into gputop's own folder (never the current one, a clone's working tree), made private, and says the full
path; a run with --record says where the recording went and how many frames it holds; `gputop doctor` on a
machine without a GPU finds that, and fails nothing (exit 0), while a GPU it may not read still counts."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pynvml
import pytest
from support.fake_pynvml import FakeGpu, FakeNvml
from support.pilot import capture_notes, frames_of, pilot_test

from probes.doctor import Check, DoctorReport, check_nvml
from probes.outputs.recording import Recorder
from probes.sensors.nvml import nvml_capabilities
from tui.app import make_app
from tui.commands.doctor import exit_status as doctor_exit_status
from tui.commands.doctor import format_report
from tui.exitcodes import EXIT_INTERRUPTED, EXIT_LIMITED, EXIT_OK

WIDE = (160, 48)


# --- Ctrl-C ----------------------------------------------------------------------------------------------


@pilot_test
async def test_ctrl_c_ends_the_tui_with_130_and_q_with_0():
    interrupted = make_app(replay_frames=frames_of("exited"))
    async with interrupted.run_test(size=WIDE) as pilot:
        await pilot.press("ctrl+c")
        await pilot.pause()
    assert interrupted.return_code == EXIT_INTERRUPTED == 130
    quit_ = make_app(replay_frames=frames_of("exited"))
    async with quit_.run_test(size=WIDE) as pilot:
        await pilot.press("q")
        await pilot.pause()
    assert quit_.return_code == EXIT_OK
    from tui.app import exit_status  # what the commands return once the app has run

    assert (exit_status(interrupted), exit_status(quit_)) == (EXIT_INTERRUPTED, EXIT_OK)


# --- `s`: where the snapshot goes -----------------------------------------------------------------------------


@pilot_test
async def test_save_goes_to_gputops_state_folder_not_the_current_one(tmp_path, monkeypatch):
    state = tmp_path / "state"
    here = tmp_path / "clone"
    here.mkdir()
    monkeypatch.setenv("XDG_STATE_HOME", str(state))
    monkeypatch.chdir(here)
    old = os.umask(0o022)
    try:
        app = make_app(replay_frames=frames_of("exited"))  # no save_dir: the default a user gets
        notes = capture_notes(app)
        async with app.run_test(size=WIDE) as pilot:
            await pilot.pause()
            await pilot.press("s")
            await pilot.pause()
    finally:
        os.umask(old)
    folder = state / "gputop"
    saved = sorted(path.name for path in folder.iterdir())
    assert len(saved) == 2 and saved[0].endswith(".json") and saved[1].endswith(".svg"), saved
    assert list(here.iterdir()) == []  # nothing left in the working tree
    assert stat.S_IMODE(folder.stat().st_mode) == 0o700
    assert any(str(folder / saved[0]) in note for note in notes), notes  # the full path, on the screen


def test_without_xdg_state_home_the_folder_is_under_the_home_folder(tmp_path, monkeypatch):
    from tui.export import snapshots_dir

    monkeypatch.delenv("XDG_STATE_HOME", raising=False)
    monkeypatch.setenv("HOME", str(tmp_path))
    assert snapshots_dir() == tmp_path / ".local" / "state" / "gputop"
    monkeypatch.setenv("XDG_STATE_HOME", "relative/state")  # the XDG spec: a relative path is to be ignored
    assert snapshots_dir() == tmp_path / ".local" / "state" / "gputop"


# --- --record: where it went ----------------------------------------------------------------------------------


def test_a_recording_says_where_it_was_written_and_how_many_frames(tmp_path, capsys):
    from tui.commands.shared import tell_recording

    path = tmp_path / "run.jsonl"
    recorder = Recorder(path)
    for frame in frames_of("exited")[:3]:
        recorder.append(frame)
    recorder.close()
    tell_recording(recorder)
    assert capsys.readouterr().err == f"gputop: recording written to {path} (3 frames)\n"


def test_a_recording_that_stopped_says_why_unless_already_said(tmp_path, capsys):
    from tui.commands.shared import tell_recording

    recorder = Recorder(tmp_path / "run.jsonl")
    recorder.problem = "recording to run.jsonl stopped after 2 frames: No space left on device; ..."
    tell_recording(recorder, problem_told=True)
    assert capsys.readouterr().err == ""
    tell_recording(recorder)
    assert capsys.readouterr().err == f"gputop: {recorder.problem}\n"
    recorder.close()


# --- gputop doctor on a machine without a GPU ------------------------------------------------------------------


def _report(nvml: FakeNvml) -> DoctorReport:
    ok = (Check("ptrace", "ok", "may trace"), Check("stacks", "ok", "py-spy 0.4.3"),
          Check("pid_namespace", "ok", "host's"))
    return DoctorReport(None, None, (*ok, *check_nvml(nvml_capabilities(nvml))))


@pytest.mark.parametrize("nvml", [
    FakeNvml([FakeGpu()], init_error=pynvml.NVML_ERROR_LIBRARY_NOT_FOUND),  # no driver installed
    FakeNvml([FakeGpu()], init_error=pynvml.NVML_ERROR_DRIVER_NOT_LOADED),
    FakeNvml([]),  # a driver, no device
], ids=["no-library", "no-driver", "no-device"])
def test_a_machine_without_a_gpu_is_a_finding_not_a_failure(nvml):
    report = _report(nvml)
    assert doctor_exit_status(report) == EXIT_OK
    assert report.as_dict()["status"] == "ok"
    lines = format_report(report)
    nvml_line = next(line for line in lines if line.split()[1:2] == ["nvml"])
    assert nvml_line.split()[0] == "note" and "no NVIDIA GPU here" in nvml_line
    assert not any("fix:" in line for line in lines)  # nothing to fix: no GPU is what the machine is
    assert "nothing to fix" in lines[-1]


def test_a_gpu_gputop_may_not_read_still_counts():
    report = _report(FakeNvml([FakeGpu()], init_error=pynvml.NVML_ERROR_NO_PERMISSION))
    assert doctor_exit_status(report) == EXIT_LIMITED
    assert any(line.split()[:2] == ["CANNOT", "nvml"] for line in format_report(report))


def test_private_folder_keeps_an_existing_folder_as_it_is(tmp_path):
    from probes.outputs.private_files import make_private_dir

    shared = tmp_path / "shared"
    shared.mkdir(mode=0o755)
    os.chmod(shared, 0o755)
    assert make_private_dir(shared) == shared and stat.S_IMODE(shared.stat().st_mode) == 0o755
    made = make_private_dir(tmp_path / "a" / "b")
    assert made.is_absolute() and stat.S_IMODE(made.stat().st_mode) == 0o700
    assert isinstance(made, Path)
