"""Time shares per phase over the last minutes, the phases that recur with their period, and what a verdict's
fix can win (probes/diagnosis/shares.py), on constructed frames; and how the monitor shows them beside the
verdict and in the snapshot."""

from __future__ import annotations

import dataclasses
import json

import pytest
from support.frames import (
    BACKWARD,
    DATALOADER_WAIT,
    FORWARD,
    ROOT,
    SITE,
    STDLIB,
    TORCH_SAVE,
    TRAIN,
    fr,
    h200,
    main_count,
    make_frame,
)

from probes.diagnosis.shares import SPEEDUP_MIN_SAMPLES, TimeShares, max_speedup, shares_summary, time_shares
from probes.diagnosis.stacks import is_evaluation, is_logging
from probes.frame import GpuProcess, SampledWindow
from probes.monitoring.monitor import fold

# nanoGPT's evaluation: a forward pass under estimate_loss.
ESTIMATE_LOSS = (fr("GPT.forward", "/home/alice/nanogpt/model.py", 180), fr("estimate_loss", TRAIN, 120)) + ROOT


@pytest.mark.parametrize("stack, evaluating", [
    (ESTIMATE_LOSS, True),
    ((fr("validation_step", "/home/alice/lit/model.py", 40),) + ROOT, True),
    ((fr("Trainer.evaluation_loop", SITE + "transformers/trainer.py", 4200),
      fr("Trainer.evaluate", SITE + "transformers/trainer.py", 4100)) + ROOT, True),
    ((fr("_EvaluationLoop.run", SITE + "lightning/pytorch/loops/evaluation_loop.py", 140),) + ROOT, True),
    # torch.compile's frame evaluation is no evaluation, nor is an optimizer step under @torch.no_grad().
    ((fr("eval_frame", SITE + "torch/_dynamo/eval_frame.py", 600),) + FORWARD, False),
    ((fr("Muon.step", "/home/alice/nanogpt/muon.py", 80),
      fr("decorate_context", SITE + "torch/utils/_contextlib.py", 120)) + ROOT, False),
    (FORWARD, False),
])
def test_evaluation_is_told_by_its_outer_frame(stack, evaluating):
    assert is_evaluation(stack) is evaluating


def test_logging_is_told_by_the_logging_module_or_a_tracker():
    assert is_logging((fr("Logger.info", STDLIB + "logging/__init__.py", 1500),) + ROOT)
    assert is_logging((fr("Run.log", SITE + "wandb/sdk/wandb_run.py", 1800),) + ROOT)
    assert not is_logging(FORWARD)


def _cycle_frames(n: int = 120) -> list:
    """An 18-second cycle: 12 s of training, 2 s of evaluation, 1 s of compute, 3 s saving a checkpoint."""
    frames = []
    for i in range(n):
        phase = i % 18
        stack = ESTIMATE_LOSS if phase in (12, 13) else TORCH_SAVE if phase >= 15 else FORWARD
        frames.append(make_frame(i, counts=[main_count(stack, n=5)], cpu=100.0))
    return frames


def test_a_checkpoint_every_few_iterations_is_named_with_its_share_and_period():
    shares = time_shares(_cycle_frames())
    assert shares.window_s == pytest.approx(120.0)
    assert shares.shares["checkpoint"] == pytest.approx(18 / 120)
    assert shares.shares["evaluation"] == pytest.approx(12 / 120)
    assert shares.shares["compute"] == pytest.approx(90 / 120)
    recurring = {r.phase: r for r in shares.recurring}
    assert set(recurring) == {"checkpoint", "evaluation"}
    assert recurring["checkpoint"].period_s == pytest.approx(18.0) and recurring["checkpoint"].episodes == 6
    assert recurring["evaluation"].period_s == pytest.approx(18.0) and recurring["evaluation"].episodes == 6


def test_a_short_save_that_windows_miss_keeps_its_period():
    """Issue 38, item 11: a 200 MB save every 15 s, short enough that a stack window can miss it. Seen at 15, 30 and
    60 s (the one at 45 s missed), the mean of the gaps said "every ~22 s"; the gaps of one period say 15."""
    seen_at = {15, 30, 60, 75, 105}  # 45 and 90 fell between windows
    frames = [make_frame(i, counts=[main_count(TORCH_SAVE if i in seen_at else FORWARD, n=5)], cpu=100.0)
              for i in range(118)]
    checkpoint = next(r for r in time_shares(frames).recurring if r.phase == "checkpoint")
    assert checkpoint.episodes == 5 and checkpoint.period_s == pytest.approx(15.0)


def test_the_verdict_names_recurring_phases_while_the_window_is_compute():
    monitor = fold(_cycle_frames(), replay=False)
    verdict = monitor.view.verdict
    assert verdict.bottleneck == "cpu_bound"  # the current window: training
    assert verdict.evidence[1:3] == ("also: saving a checkpoint 15% of the last 2 min, every ~18 s",
                                     "also: evaluating 10% of the last 2 min, every ~18 s")
    document = json.loads(json.dumps(monitor.snapshot()))
    assert document["time_shares"] == {"compute": 0.75, "checkpoint": 0.15, "evaluation": 0.1}
    assert document["time_shares_window_s"] == 120.0
    assert document["recurring_phases"][0] == {"phase": "checkpoint", "share": 0.15, "period_s": 18.0,
                                               "episodes": 6}
    assert document["verdict"]["max_speedup"] is None  # more CPU is its fix: no phase it removes


def test_a_phase_that_never_ends_does_not_recur():
    frames = [make_frame(i, counts=[main_count(TORCH_SAVE, n=1), main_count(FORWARD, n=4)], cpu=100.0)
              for i in range(30)]
    shares = time_shares(frames)
    assert shares.shares["checkpoint"] == pytest.approx(0.2) and shares.recurring == ()


def test_one_long_phase_split_by_the_samplers_gaps_does_not_recur():
    # As in the first compile of GPT-2 XL (tests/fixtures/h200/gpt2xl_s1): ticks with no window, and once a window of
    # two samples outside compiling (a stack py-spy caught mid-change). One compile, not one "every 14 s".
    from support.frames import COMPILING

    samples = [[main_count(COMPILING, n=4)], [], [], [main_count(FORWARD[:1], n=2)], [], [main_count(COMPILING, n=5)]]
    frames = [make_frame(i, counts=samples[i % len(samples)]) for i in range(60)]
    shares = time_shares(frames)
    assert shares.shares["compile"] > 0.8 and shares.recurring == ()


def _compile_runs(runs: int) -> list:
    """`runs` runs of compiling, 6 s each, with 10 s of training after each."""
    from support.frames import COMPILING

    return [make_frame(i, counts=[main_count(COMPILING if i % 16 < 6 else FORWARD, n=5)]) for i in range(16 * runs)]


def test_compiling_twice_is_a_warm_up_and_from_a_third_time_a_recurring_phase():
    # The eval graph, an evaluation, then the training graph: the one-time warm-up of two graphs, no period.
    assert time_shares(_compile_runs(2)).recurring == ()
    recurring = time_shares(_compile_runs(3)).recurring
    assert [(r.phase, r.episodes, r.period_s) for r in recurring] == [("compile", 3, pytest.approx(16.0))]


def test_a_warm_up_promises_no_speed_up_and_a_storm_what_stopping_it_wins():
    from support.frames import COMPILING

    warm_up = fold([make_frame(i, counts=[main_count(COMPILING, n=5)]) for i in range(12)], replay=False)
    verdict = warm_up.view.verdict
    assert verdict.bottleneck == "compile_warmup" and verdict.max_speedup is None
    assert not any("faster" in line for line in verdict.evidence), verdict.evidence
    storm = fold([make_frame(i, counts=[main_count(COMPILING, n=3), main_count(FORWARD, n=2)]) for i in range(12)],
                 replay=False)
    verdict = storm.view.verdict
    assert verdict.evidence[0].startswith("recompilation storm") and verdict.max_speedup == pytest.approx(2.5)
    assert "up to 2.5× faster if the recompiles stopped (compiling takes 60% of the time)" in verdict.evidence


def test_samples_count_for_the_time_they_stand_for():
    # The sampler slowed from 10 Hz to 1 Hz: a sample at 1 Hz stands for ten at 10 Hz.
    fast = [make_frame(i, counts=[main_count(FORWARD, n=10)], cpu=100.0) for i in range(10)]
    slow = [make_frame(i, counts=[main_count(DATALOADER_WAIT, n=1, idle=True)], cpu=100.0) for i in range(10, 20)]
    fast = [dataclasses.replace(f, stacks=dataclasses.replace(f.stacks, rate_hz=10.0)) for f in fast]
    slow = [dataclasses.replace(f, stacks=dataclasses.replace(f.stacks, rate_hz=1.0)) for f in slow]
    assert time_shares(fast + slow).shares == {"compute": pytest.approx(0.5), "data": pytest.approx(0.5)}


def with_windows(frame, *windows: tuple[float, int]):
    """The frame with the main process's py-spy windows that ended in its tick: (wall seconds, samples) each."""
    pid = frame.target.pid
    taken = tuple(SampledWindow(pid=pid, started=frame.time - seconds, seconds=seconds, samples=samples)
                  for seconds, samples in windows)
    return dataclasses.replace(frame, stacks=dataclasses.replace(frame.stacks, windows=taken, achieved_rate_hz=4.6))


def test_a_tick_with_a_fast_cut_window_counts_the_wall_time_its_windows_took():
    """From a live run under load: a wake cut a window at 20 Hz as a checkpoint began (19 samples in 0.88 s) and a
    5 Hz window followed (4 in 0.87 s), all in the save. Weighed by the tick's one rate (4.6 Hz), those 1.75 s
    counted 5 s, and the checkpoint's share came out 28% against the log's 15%. Each window's samples stand for
    its own wall time."""
    computing = [with_windows(make_frame(i, counts=[main_count(FORWARD, n=19)], cpu=100.0), (4.25, 19))
                 for i in range(4)]
    saving = with_windows(make_frame(4, counts=[main_count(TORCH_SAVE, n=23, idle=True)], cpu=5.0),
                          (0.88, 19), (0.87, 4))
    shares = time_shares([*computing, saving])
    assert shares.shares["checkpoint"] == pytest.approx(1.75 / (1.75 + 17.0))


IMPORTING_TORCH = (
    fr("<module>", SITE + "torch/_ops.py", 62),
    fr("_call_with_frames_removed", "<frozen importlib._bootstrap>", 241),
    fr("_find_and_load", "<frozen importlib._bootstrap>", 1176),
) + ROOT


def test_start_up_imports_are_no_phase_of_the_loop():
    """Seen live on a crowded machine: importing torch took 30 s, counted as compute, and a job that then waited for
    data in every sample read "it holds the step 29% of the time", a gain of 1.4×."""
    starting = [make_frame(i, counts=[main_count(IMPORTING_TORCH, n=10)], cpu=100.0) for i in range(10)]
    starved = [make_frame(i, counts=[main_count(DATALOADER_WAIT, n=4, idle=True), main_count(FORWARD, n=1)],
                          cpu=5.0) for i in range(10, 20)]
    shares = time_shares(starting + starved)
    assert shares.shares == {"data": pytest.approx(0.8), "compute": pytest.approx(0.2)} and shares.samples == 50
    assert time_shares(starting) is None  # nothing of the loop yet


def test_no_samples_no_shares():
    assert time_shares([make_frame(i, cpu=100.0) for i in range(5)]) is None
    assert time_shares([]) is None


@pytest.mark.parametrize("bottleneck, phases, factor, words", [
    ("data_bound", {"data": 0.6, "compute": 0.4}, 2.5,
     "up to 2.5× faster if the input pipeline kept up (it holds the step 60% of the time)"),
    ("checkpoint_save", {"checkpoint": 0.2, "compute": 0.8}, 1.25,
     "up to 1.2× faster if checkpoints were saved in the background (saving takes 20% of the time)"),
    ("comms_bound", {"collectives": 0.5, "compute": 0.5}, 2.0,
     "up to 2.0× faster if collectives overlapped with compute (they take 50% of the time)"),
    # gputop demo's first checkpoint: one decimal read "up to 1.0× faster", no claim at all
    ("checkpoint_save", {"checkpoint": 0.04, "compute": 0.96}, 1 / 0.96,
     "up to 4% faster if checkpoints were saved in the background (saving takes 4% of the time)"),
])
def test_what_a_fix_can_win_is_one_over_one_minus_the_share_it_removes(bottleneck, phases, factor, words):
    gain = max_speedup(TimeShares(window_s=120.0, shares=phases, samples=SPEEDUP_MIN_SAMPLES), bottleneck)
    assert gain.factor == pytest.approx(factor) and gain.words == words


def test_a_phase_that_rounds_to_none_of_the_time_says_no_gain():
    assert max_speedup(TimeShares(window_s=120.0, shares={"checkpoint": 0.003, "compute": 0.997},
                                  samples=SPEEDUP_MIN_SAMPLES * 10), "checkpoint_save") is None


@pytest.mark.parametrize("samples, data_share, words", [
    (129, 1.0, "at least 43× faster (a 95% lower bound) if the input pipeline kept up (it holds the step 100% of "
               "the time); 0 of 129 samples (last 60 s) fell outside it: more cannot be measured"),
    (60, 59 / 60, "at least 13× faster (a 95% lower bound) if the input pipeline kept up (it holds the step 98% "
                  "of the time); 1 of 60 samples (last 60 s) fell outside it: more cannot be measured"),
])
def test_a_phase_with_almost_no_samples_outside_it_says_the_least_its_fix_wins(samples, data_share, words):
    """Every sample waiting for data puts no number on the step's own time: "up to 100×" was the cap, not a
    measurement. What the samples show is a floor: n / 3 with none outside (95%)."""
    shares = TimeShares(window_s=60.0, shares={"data": data_share, "compute": 1 - data_share}, samples=samples)
    gain = max_speedup(shares, "data_bound")
    assert gain is not None and gain.at_least and gain.words == words
    assert not max_speedup(dataclasses.replace(shares, shares={"data": 0.9, "compute": 0.1}, samples=60),
                           "data_bound").at_least  # 6 samples outside: the bound rests on them


def test_a_verdict_whose_gain_is_a_floor_promises_no_bound():
    frames = [make_frame(i, counts=[main_count(DATALOADER_WAIT, n=10, idle=True)], cpu=40.0) for i in range(20)]
    monitor = fold(frames, replay=False)
    verdict = monitor.view.verdict
    assert verdict.bottleneck == "data_bound"
    assert any(line.startswith("at least 67× faster (a 95% lower bound) if the input pipeline kept up")
               for line in verdict.evidence)
    assert verdict.max_speedup is None and monitor.snapshot()["verdict"]["max_speedup"] is None
    assert verdict.min_speedup == pytest.approx(200 / 3, abs=0.01) and monitor.snapshot()["verdict"]["min_speedup"] == \
        verdict.min_speedup


def test_a_busy_gpu_leaves_little_for_anything_else():
    gain = max_speedup(TimeShares(window_s=60.0, shares={"compute": 1.0}, gpu_util_pct=97.0), "gpu_bound")
    assert gain.factor == pytest.approx(1 / 0.97)
    assert gain.words == "nothing outside the GPU can win more than 3% (it is busy 97% of the time)"
    assert max_speedup(TimeShares(window_s=60.0, shares={"compute": 1.0}), "cpu_bound") is None
    assert max_speedup(None, "data_bound") is None


def test_a_data_bound_verdict_says_what_the_fix_can_win_and_the_snapshot_holds_the_number():
    frames = [make_frame(i, counts=[main_count(DATALOADER_WAIT, n=6, idle=True), main_count(FORWARD, n=4)],
                         cpu=40.0) for i in range(20)]
    monitor = fold(frames, replay=False)
    verdict = monitor.view.verdict
    assert verdict.bottleneck == "data_bound"
    assert "up to 2.5× faster if the input pipeline kept up (it holds the step 60% of the time)" in verdict.evidence
    assert verdict.max_speedup == 2.5
    assert monitor.snapshot()["verdict"]["max_speedup"] == 2.5


def test_a_gpu_bound_verdict_bounds_every_other_fix():
    frames = [make_frame(i, counts=[main_count(FORWARD, n=5)], cpu=100.0, gpu=h200(util=97.0)) for i in range(10)]
    verdict = fold(frames, replay=False).view.verdict
    assert verdict.bottleneck == "gpu_bound"
    assert "nothing outside the GPU can win more than 3% (it is busy 97% of the time)" in verdict.evidence
    assert verdict.max_speedup == pytest.approx(1.03)


def test_the_summary_puts_the_largest_share_first_with_the_periods():
    assert shares_summary(time_shares(_cycle_frames())) == (
        "time, last 2 min: compute 75% · checkpoint 15% (every ~18 s) · evaluation 10% (every ~18 s)")


def test_a_jobs_shares_follow_its_lowest_rank_not_the_launcher():
    from support.job_frames import straggler_frames

    # Rank 0 waits in backward for rank 1 8 samples in 10; the launcher (the tree's root) has no samples at all.
    # (Its wait counts as idle here: the diagnosis, which knows it is a rank, calls it a collective wait.)
    shares = time_shares(straggler_frames(n=8))
    assert shares.shares == {"compute": pytest.approx(0.2), "idle": pytest.approx(0.8)}


# --- waiting on the GPU is not idle (issue 29) ------------------------------------------------------------------
# In a GPU-bound step the main thread blocks in backward's tail or a `.item()` with the GIL released: py-spy
# calls those samples idle.
def _gpu_step_frames(util: float, n: int = 20, gpu=None) -> list:
    return [make_frame(i, counts=[main_count(FORWARD, n=3), main_count(BACKWARD, n=2, idle=True)], cpu=60.0,
                       gpu=gpu or h200(util=util)) for i in range(n)]


def test_idle_samples_while_the_targets_gpu_is_busy_are_waiting_for_the_gpu():
    shares = time_shares(_gpu_step_frames(util=100.0))
    assert shares.shares == {"compute": pytest.approx(0.6), "gpu_wait": pytest.approx(0.4)}
    assert shares_summary(shares) == "time, last 20 s: compute 60% · GPU wait 40%"
    # Beside a quiet GPU (below GPU_WAIT_UTIL_PCT) the same samples stay idle.
    assert time_shares(_gpu_step_frames(util=20.0)).shares == {"compute": pytest.approx(0.6),
                                                                "idle": pytest.approx(0.4)}
    # So they do beside a busy GPU that is another job's: NVML maps its process to a PID outside the target's tree.
    other = h200(util=100.0)
    device = dataclasses.replace(other.devices[0], in_target=False,
                                 processes=(GpuProcess(pid=777, local_pid=777),))
    shares = time_shares(_gpu_step_frames(util=100.0, gpu=dataclasses.replace(other, devices=(device,))))
    assert shares.shares == {"compute": pytest.approx(0.6), "idle": pytest.approx(0.4)}


def test_each_frame_is_judged_by_its_own_gpu_reading():
    busy, quiet = _gpu_step_frames(util=100.0, n=10), _gpu_step_frames(util=0.0, n=20)[10:]
    shares = time_shares(busy + quiet).shares
    assert shares == {"compute": pytest.approx(0.6), "gpu_wait": pytest.approx(0.2), "idle": pytest.approx(0.2)}


def _windowed(spans: list[tuple[float, float]], sampled: list[float | None] | None = None):
    """Frames each holding one main-process window (start, end) of which `sampled` seconds sampled, computing."""
    frames = []
    for index, (start, end) in enumerate(spans):
        frame = make_frame(index, counts=[main_count(FORWARD, n=10)], cpu=100.0)
        window = SampledWindow(pid=frame.target.pid, started=start, seconds=end - start, samples=10,
                               sampled_seconds=sampled[index] if sampled else None)
        frames.append(dataclasses.replace(frame, stacks=dataclasses.replace(frame.stacks, windows=(window,))))
    return frames


def test_the_gaps_between_pyspys_windows_are_said_as_unsampled_time():
    """Each window is a py-spy started anew; on a crowded machine the start-up leaves seconds between two, and a
    phase there is in no share. 8 s of windows over 10 s: 20% unsampled, said beside the shares."""
    frames = _windowed([(100.0, 104.0), (105.0, 107.0), (106.5, 108.0), (109.0, 110.0)])
    shares = time_shares(frames)
    assert shares.unsampled == pytest.approx(0.2)
    assert shares_summary(shares).startswith("time, last ") and "(of the 80% sampled): compute 100%" in \
        shares_summary(shares)
    assert json.loads(json.dumps(fold(frames).snapshot()))["time_shares_unsampled"] == 0.2


def test_windows_that_meet_leave_nothing_unsampled_and_say_nothing():
    shares = time_shares(_windowed([(100.0, 105.0), (105.0, 110.0), (110.0, 115.0)]))
    assert shares.unsampled == pytest.approx(0.0)
    assert "sampled" not in shares_summary(shares)
    assert time_shares([make_frame(0, counts=[main_count(FORWARD, n=10)], cpu=100.0)]).unsampled is None


def test_pyspys_start_up_inside_each_window_is_unsampled_time_too():
    """A window runs from py-spy's start; its samples begin once it has attached (a second or more under load)."""
    frames = _windowed([(100.0, 105.0), (105.0, 110.0)], sampled=[4.0, 3.0])
    assert time_shares(frames).unsampled == pytest.approx(0.3)
    assert "(of the 70% sampled)" in shares_summary(time_shares(frames))


def test_a_windows_samples_stand_for_the_time_it_sampled_not_its_start_up():
    """Two ticks of 10 samples: the first window sampled 1 s of its 3 s (a slow start-up), the second 3 s of 3 s:
    the first one's samples stand for 1 s, so its phase holds a quarter of the time, not half."""
    computing, waiting = _windowed([(100.0, 103.0), (103.0, 106.0)], sampled=[1.0, 3.0])
    waiting = dataclasses.replace(waiting, stacks=dataclasses.replace(
        waiting.stacks, counts=(main_count(DATALOADER_WAIT, n=10, idle=True),)))
    assert time_shares([computing, waiting]).shares == {"compute": pytest.approx(0.25), "data": pytest.approx(0.75)}
