"""The Monitor on constructed frames: the one fold every front end reads (history, verdict, timeline,
recording, the job's pace against the baseline), and replays that stay linear in their length."""

from __future__ import annotations

import dataclasses

import pytest
from support.frames import FORWARD, T0, TOKENIZE, main_count, make_frame
from support.nanogpt_case import gpu_bound_frames

import probes.monitoring.monitor as monitor_module
from probes.diagnosis.shown import pace_cross_check_line
from probes.frame import ProgressReading
from probes.monitoring.monitor import (
    NO_LOG_HINT,
    NO_LOG_IN_RECORDING,
    Monitor,
    fold,
    recording_meta,
)
from probes.outputs.recording import Recorder, load_recording
from probes.reference.baseline import load_comparison_inputs
from probes.reference.job_pace import Pace


def test_views_carry_history_verdict_and_a_timeline_of_changes():
    frames = [make_frame(i, counts=[main_count(TOKENIZE, n=10)], cpu=100.0) for i in range(6)]
    frames += [make_frame(i, counts=[main_count(FORWARD, n=10)], cpu=100.0) for i in range(6, 25)]
    monitor = Monitor(hang_after_s=5.0, history_frames=10)
    views = [monitor.ingest(frame) for frame in frames]
    assert views[0].first_time == frames[0].time and views[-1].first_time == frames[0].time
    assert len(views[-1].frames) == 10  # bounded history
    assert [(c.bottleneck, c.liveness) for c in views[-1].timeline] == [
        ("data_bound", "progressing"), ("cpu_bound", "progressing")]
    assert views[-1].verdict.bottleneck == "cpu_bound" and monitor.view is views[-1]


def test_the_seed_case_pace_corrected_mfu_and_the_evidence_line():
    """nanoGPT, GPT-2 XL, 1,048,576 tokens per iteration, 21 s/iter on an H200, printing mfu 164%."""
    comparison = load_comparison_inputs(None, "gpt2-xl", 1_048_576)
    view = fold(gpu_bound_frames(), comparison=comparison, replay=False).view
    pace = view.pace
    assert pace.seconds_per_iter == 21.0 and pace.iteration == 7 and pace.reported_mfu_pct == 164.0
    assert pace.recent_seconds_per_iter == (21.0,) * 8
    assert pace.tokens_per_s == pytest.approx(1_048_576 / 21.0)
    assert pace.comparison.corrected_mfu_pct == pytest.approx(51.8, abs=0.1)
    assert pace.gpu_name == "NVIDIA H200"
    assert view.verdict.bottleneck == "gpu_bound"
    assert view.verdict.evidence[1] == ("21.0 s/iter = 52% MFU on the NVIDIA H200; the log's 164% is against an "
                                        "A100's 312 TFLOP/s: compute-bound, as expected for this model")
    assert any("312" in line for line in pace.comparison.lines)  # why the log said 164%


def test_the_pace_line_stays_out_of_the_verdict_fed_back_to_diagnose():
    comparison = load_comparison_inputs(None, "gpt2-xl", 1_048_576)
    monitor = fold(gpu_bound_frames(12), comparison=comparison)
    assert sum("MFU on the" in line for line in monitor.view.verdict.evidence) == 1


def test_no_log_says_how_to_give_one():
    frames = [make_frame(i, counts=[main_count(FORWARD, n=10)]) for i in range(3)]
    live = fold(frames, replay=False).view
    assert live.pace.hint == NO_LOG_HINT and "--log PATH" in NO_LOG_HINT
    assert live.pace.seconds_per_iter is None
    assert fold(frames, replay=True).view.pace.hint == NO_LOG_IN_RECORDING


def test_snapshot_has_the_pace_and_the_baseline_comparison():
    comparison = load_comparison_inputs(None, "gpt2-xl", 1_048_576)
    document = fold(gpu_bound_frames(), comparison=comparison).snapshot()
    assert document["progress"]["seconds_per_iter"] == 21.0
    assert document["progress"]["recent_seconds_per_iter"] == [21.0] * 8
    assert document["progress"]["baseline"]["corrected_mfu_pct"] == pytest.approx(51.8, abs=0.1)
    assert document["verdict"]["evidence"][1].startswith("21.0 s/iter = 52% MFU on the NVIDIA H200")
    with pytest.raises(ValueError):
        Monitor().snapshot()


def test_recordings_carry_the_same_header_whichever_front_end_wrote_them(tmp_path):
    comparison = load_comparison_inputs(None, "gpt2-xl", 1_048_576)
    meta = recording_meta(4242, 5.0, comparison)
    resolved = meta.pop("pace_inputs")  # what replay reads back (tests/unit/test_pace_inputs.py)
    assert meta == {"pid": 4242, "hang_after_s": 5.0, "model": "gpt2-xl", "tokens_per_iter": 1_048_576,
                    "baseline": None}
    assert (resolved["family"], resolved["shape_from"], resolved["tokens_per_iter"]) == \
        ("gpt2", "--model gpt2-xl", 1_048_576)
    path = tmp_path / "run.jsonl"
    monitor = Monitor(recorder=Recorder(path, meta=meta))
    for frame in gpu_bound_frames(3):
        monitor.ingest(frame)
    monitor.close()
    assert [f.seq for f in load_recording(path).frames] == [1, 2, 3]
    assert '"pid":4242' in path.read_text().splitlines()[0]


def test_a_failed_write_stops_the_recording_not_the_monitor(tmp_path):
    class FullDisk(Recorder):
        def _write(self, obj):
            if self.frames >= 1:
                raise OSError(28, "No space left on device")
            super()._write(obj)

    monitor = Monitor(recorder=FullDisk(tmp_path / "run.jsonl"))
    views = [monitor.ingest(frame) for frame in gpu_bound_frames(4)]
    assert len(views[-1].frames) == 4
    assert monitor.recorder is None and "No space left on device" in monitor.record_problem


def test_folding_a_long_recording_diagnoses_a_bounded_window_per_frame(monkeypatch):
    """Replay is linear in the recording's length: each frame is diagnosed once, over at most the
    history's capacity (the old replay re-diagnosed frames[:i] for every i)."""
    seen = []
    real = monitor_module.diagnose

    def counting(frames, previous=None, hang_after_s=5.0):
        seen.append(len(frames))
        return real(frames, previous, hang_after_s)

    monkeypatch.setattr(monitor_module, "diagnose", counting)
    frames = [dataclasses.replace(make_frame(i, counts=[main_count(FORWARD, n=2)]), seq=i + 1) for i in range(700)]
    fold(frames)
    assert len(seen) == 700 and max(seen) == 600


def _live_entries(frames) -> tuple[int, int]:
    """How many of these frames' stacks, and of the frames, are still alive."""
    import gc

    gc.collect()
    return sum(ref() is not None for ref, _ in frames), sum(ref() is not None for _, ref in frames)


def test_the_diagnosis_caches_keep_no_frame_the_history_has_let_go():
    """Their entries die with their frames: an hour's soak once grew for 40 minutes because they held 2528
    frames' stacks alive when the History held 600."""
    import weakref

    from probes.diagnosis import frame_stacks

    monitor = Monitor(hang_after_s=5.0, history_frames=20)
    refs = []
    for i in range(200):
        frame = make_frame(i, counts=[main_count(TOKENIZE if i % 7 else FORWARD, n=10)], cpu=100.0)
        refs.append((weakref.ref(frame.stacks), weakref.ref(frame)))
        monitor.ingest(frame)
        del frame
    stacks_alive, frames_alive = _live_entries(refs)
    assert frames_alive == 20 and stacks_alive == 20  # the history's, no more
    assert len(frame_stacks._frame_cache) <= 20 + 1


def test_a_jobs_rank_projections_go_with_their_frames():
    import weakref

    from support.job_frames import straggler_frames

    from probes.diagnosis import rank_projection

    monitor = Monitor(hang_after_s=5.0, history_frames=10)
    refs = []
    for frame in straggler_frames(60):
        refs.append((weakref.ref(frame.stacks), weakref.ref(frame)))
        monitor.ingest(frame)
    del frame
    _, frames_alive = _live_entries(refs)
    assert frames_alive == 10
    assert 0 < len(rank_projection._projections) <= 10 * 2  # two ranks, each projected once per frame alive


def test_a_printed_time_the_counter_overruled_is_said_for_what_it_is():
    micro = Pace(iteration=40, seconds_per_iter=0.64, printed_seconds_per_iter=0.031, derived_from="step counter")
    assert pace_cross_check_line(micro) == (
        "the log's printed time averages 31 ms/step over the window, but the step counter moved every 0.64 s "
        "(21× longer): the printed time covers part of each step (the forward+backward alone, or one of several "
        "micro-steps; data loading and what else runs between the lines are outside it); the pace is the counter's")
    spans = Pace(iteration=40, seconds_per_iter=0.5, printed_seconds_per_iter=2.0, derived_from="step counter")
    assert pace_cross_check_line(spans) == (
        "the log's printed time averages 2.00 s/step over the window, but the step counter moved every 0.50 s "
        "(4.0× shorter): the printed figure is longer than the steps take: it times one slower part and scales it "
        "to the step (the micro-batch that also runs the optimizer step, times the micro-batches), or spans more "
        "than one step; the pace is the counter's")
    assert pace_cross_check_line(Pace(iteration=40, seconds_per_iter=0.64)) is None


def test_a_derived_figure_and_a_bar_are_named_in_the_cross_check():
    litgpt = Pace(iteration=12, seconds_per_iter=3.2, printed_seconds_per_iter=4.12, derived_from="step counter",
                  printed_from="iter time × 4 micro-batches per step")
    assert pace_cross_check_line(litgpt).startswith(
        "the log's iter time × 4 micro-batches per step averages 4.12 s/step over the window, but the step counter "
        "moved every 3.20 s (1.3× shorter)")
    bar = Pace(iteration=80, seconds_per_iter=0.128, printed_seconds_per_iter=0.0855, derived_from="step counter",
               printed_from="the bar's own rate")
    assert pace_cross_check_line(bar) == (
        "the bar's own rate averages 86 ms/step over the window, but the step counter moved every 0.13 s (1.5× "
        "longer): a bar's rate is its own moving average, weighted to its latest updates; the pace is the counter's")


@pytest.mark.parametrize("ratio", [1.0, 1.04, 1 / 1.04])
def test_no_disagreement_is_claimed_where_it_would_read_one(ratio):
    """Never "1.0×": figures within 5% of each other are no mismatch, whatever reached the Pace (whether they
    disagree is probes/pace.py's claim, which starts above 1.25 and holds down to 1.15:
    tests/unit/test_pace_rule.py)."""
    pace = Pace(iteration=40, seconds_per_iter=0.64 * ratio, printed_seconds_per_iter=0.64, derived_from="step counter")
    assert pace_cross_check_line(pace) is None


def test_the_cross_check_sits_in_the_verdict_as_shown():
    frames = [make_frame(i, counts=[main_count(FORWARD)], cpu=100.0,
                         progress=ProgressReading(source="/runs/train.log", format="nanogpt", iteration=i,
                                                  seconds_per_iter=0.64, printed_seconds_per_iter=0.031,
                                                  derived_from="step counter", last_update=T0 + i))
              for i in range(8)]
    evidence = fold(frames, replay=False).view.verdict.evidence
    assert evidence[1].startswith("the log's printed time averages 31 ms/step over the window, but the step counter "
                                  "moved every 0.64 s (21× longer)")


def test_a_full_collection_comes_once_a_minute_whoever_asks(monkeypatch):
    """The interpreter's free lists are emptied only by a full collection; monitors ask for one each tick and get
    one a minute between them all (wall time, so a fast replay does not collect per minute of its frames)."""
    import probes.monitoring.monitor as monitor_module

    collections: list[int] = []
    monkeypatch.setattr(monitor_module.gc, "collect", lambda *args: collections.append(1) or 0)
    monkeypatch.setattr(monitor_module, "_last_full_collection", 1000.0)
    every = monitor_module.FULL_COLLECTION_EVERY_S
    assert not monitor_module.collect_now_and_then(1000.0 + every / 2)
    assert monitor_module.collect_now_and_then(1000.0 + every)
    assert not monitor_module.collect_now_and_then(1000.0 + every + 1)  # another monitor, the same minute
    assert monitor_module.collect_now_and_then(1000.0 + 2 * every + 1)
    assert len(collections) == 2
