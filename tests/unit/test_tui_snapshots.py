"""SVG snapshots of the app replaying real recordings, at 80x24 and 160x48, with the clock frozen.

A failing snapshot writes snapshot_report.html: look at the difference before accepting it with
`pytest tests/unit/test_tui_snapshots.py --snapshot-update`. The verdict's words come from probes.diagnosis,
so a change of its rules shows up here too, on purpose.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from probes.outputs.recording import read_recording
from tui.app import make_app

RECORDINGS = Path(__file__).parents[1] / "fixtures" / "recordings"
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
    # Recorded by gputop without CAP_SYS_PTRACE on a sleeping process of user nobody (tests/unit/test_doctor.py's case).
    assert snap_compare(replay_app("ptrace_denied"), terminal_size=SIZES[size])


def test_call_tree_of_the_hottest_frame(snap_compare):
    assert snap_compare(replay_app("data_bound"), press=["enter"], terminal_size=SIZES["160x48"])


def test_now_view_with_idle_threads(snap_compare):
    assert snap_compare(replay_app("hung"), press=["i", "d"], terminal_size=SIZES["160x48"])


def test_help(snap_compare):
    assert snap_compare(replay_app("data_bound"), press=["question_mark"], terminal_size=SIZES["80x24"])


CONSTRUCTED = Path(__file__).parents[1] / "fixtures" / "frames"


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


def picker_app():
    """The job picker (`gputop` with no PID) over a fixed census: four jobs of the kinds a GPU node runs."""
    from probes.jobs.census import CensusReading, JobSummary
    from tui.picker import JobPicker

    now = 1_800_000_000.0
    venv = "/home/ana/venv/bin/python"
    jobs = (
        JobSummary(root_pid=41200, launcher="torchrun", ranks=8, world_size=16, workers=32, processes=41,
                   gpus=tuple(range(8)), cpu_pct=812.0, started_at=now - 9240, found_by="torchrun launcher",
                   command=f"{venv} -m torch.distributed.run --nproc_per_node 8 --nnodes 2 train_llama.py "
                           "--config configs/llama3_8b.yaml"),
        JobSummary(root_pid=40877, launcher="python", ranks=1, world_size=None, workers=4, processes=5,
                   gpus=(0,), cpu_pct=97.0, started_at=now - 15_300, found_by="PID 40877 holds a GPU context",
                   command=f"{venv} train.py config/train_gpt2.py --compile=False"),
        JobSummary(root_pid=43012, launcher="deepspeed", ranks=2, world_size=2, workers=0, processes=3,
                   gpus=(0, 1), cpu_pct=180.5, started_at=now - 75, found_by="deepspeed launcher",
                   command=f"{venv} -u -m deepspeed.launcher.launch --world_info=eyJsb2NhbGhvc3QiOiBbMCwgMV19 "
                           "finetune.py --deepspeed ds_config.json"),
        JobSummary(root_pid=39001, launcher="bash", ranks=1, world_size=None, workers=0, processes=2, gpus=(),
                   cpu_pct=None, started_at=now - 30, found_by="imports torch", command="bash run_eval.sh"),
    )
    reading = CensusReading(jobs=jobs, time=now)
    return JobPicker(lambda: reading, initial=reading, clock=lambda: now, refresh_s=None)


@pytest.mark.parametrize("size", SIZES, ids=list(SIZES))
def test_job_picker(snap_compare, size):
    assert snap_compare(picker_app(), terminal_size=SIZES[size])


def test_job_picker_sorted_by_age_and_filtered(snap_compare):
    assert snap_compare(picker_app(), press=["a", "slash", "t", "r", "a", "i", "n"], terminal_size=SIZES["160x48"])


def merged_replay_app():
    """A 2-node job merged across nodes (tests/support/cluster_frames.py's constructed frames; both nodes' ranks have
    one PID, n2's GPU clocks lower): the panes follow the selected rank's node and say which it is."""
    from support.cluster_frames import straggler_round

    from probes.frame import GpuDevice, GpuReading

    def gpu(clock: int) -> GpuReading:
        return GpuReading(available=True, devices=(GpuDevice(index=0, name="NVIDIA H200", sm_clock_mhz=clock,
                                                             max_sm_clock_mhz=1980, in_target=True),))

    frames = [f for i in range(8) for f in straggler_round(i, gpu(1980), gpu(1200))]
    frozen = frames[-1].time + SECONDS_AFTER_LAST_FRAME
    return make_app(replay_frames=frames, clock=lambda: frozen)


@pytest.mark.parametrize("size", SIZES, ids=list(SIZES))
def test_merged_job_with_rank_1_on_n2_selected(snap_compare, size):
    # `[` from "all ranks" selects the last rank: rank 1 on n2 (PID 501, as rank 0 on n1). The pane marks what does
    # not fit ("more below") after its next refresh: pressed here and waited for, the picture does not depend on
    # whether that refresh came before the screenshot (it came or not with the order the tests ran in).
    async def select_rank_1(pilot) -> None:
        await pilot.press("left_square_bracket")
        await pilot.pause()
        await pilot.pause()

    assert snap_compare(merged_replay_app(), run_before=select_rank_1, terminal_size=SIZES[size])
