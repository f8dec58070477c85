"""Unit tests of the panes' pure parts: formatters, the process tree order, GPU and CPU texts, the verdict
text and timeline, and the call-tree cut that feeds probes.sampling.stacks.call_tree."""

from __future__ import annotations

import io

from rich.console import Console

from probes.diagnosis.stacks import short_path
from probes.frame import (
    CpuReading,
    Frame,
    GpuDevice,
    GpuReading,
    HostCpuReading,
    ProcessSample,
    StackCount,
    StackFrame,
    TargetInfo,
    Verdict,
)
from probes.monitoring.monitor import NO_LOG_HINT
from probes.view import MonitorView, Pace, VerdictChange
from tui.panes.cpu import command_width, cpu_notes, cpu_summary, tree_order
from tui.panes.gpu import clock_event_words, gpu_text, ordered_devices
from tui.panes.stacks import hot_column_widths, window_counts
from tui.panes.text import bar, clip, clip_left, duration, offset, size, sparkline
from tui.panes.verdict import pace_text, timeline_text, verdict_renderable


def plain(renderable, width: int = 120) -> str:
    console = Console(width=width, file=io.StringIO(), record=True)
    console.print(renderable)
    return console.export_text()


def frame(seq: int = 1, time: float = 100.0, **kwargs) -> Frame:
    return Frame(seq=seq, time=time, interval_s=1.0, target=TargetInfo(pid=10, alive=True), **kwargs)


def test_durations_offsets_and_sizes():
    assert duration(0.4) == "0.4 s"
    assert duration(45) == "45 s"
    assert duration(185) == "3m05s"
    assert duration(2 * 3600 + 14 * 60) == "2h14m"
    assert offset(75) == "+1:15" and offset(3725) == "+1:02:05"
    assert size(None) == "-" and size(512) == "512 B" and size(3 * 1024**3) == "3.0 GiB"


def test_sparkline_scales_buckets_and_keeps_gaps():
    assert sparkline([0, 50, 100], 3, top=100) == "▁▅█"
    assert sparkline([100, None, 0], 3, top=100) == "█ ▁"
    squeezed = sparkline(list(range(60)), 15, top=60)
    assert len(squeezed) == 15 and squeezed[0] == "▁" and squeezed[-1] in "▇█"
    assert sparkline([], 10, top=1) == ""


def test_bar_fills_against_the_maximum():
    assert bar(50, 100, 10).plain == "█████░░░░░"
    assert bar(None, 100, 4).plain == "····"
    assert bar(5, 0, 4).plain == "····"


def test_short_paths_and_clipping():
    assert short_path("/usr/lib/python3.11/site-packages/torch/utils/data/dataloader.py") == \
        "torch/utils/data/dataloader.py"
    assert short_path("/usr/lib/python3.11/threading.py") == "threading.py"
    assert short_path("/home/me/run/train.py") == "train.py"  # as the verdict's evidence names it
    assert short_path("<frozen importlib._bootstrap>") == "<frozen importlib._bootstrap>"
    assert clip("abcdef", 4) == "abc…" and clip("abc", 4) == "abc"
    assert clip_left("torch/utils/data.py:10", 10) == "…ata.py:10"
    assert clip_left("abcdef", 4) == "…def"


def test_process_tree_order_puts_workers_under_their_parent():
    processes = (
        ProcessSample(pid=30, ppid=20, role="dataloader_worker", name="pt_data_worker"),
        ProcessSample(pid=20, ppid=10, role="forkserver", name="python"),
        ProcessSample(pid=10, ppid=1, role="main", name="python"),
        ProcessSample(pid=40, ppid=99, role="other", name="orphan"),
        ProcessSample(pid=11, ppid=10, role="dataloader_worker", name="pt_data_worker"),
    )
    assert [(depth, p.pid) for depth, p in tree_order(processes, root_pid=10)] == [
        (0, 10), (1, 11), (1, 20), (2, 30), (1, 40)]


def test_cpu_summary_and_oversubscription_warning():
    reading = CpuReading(cgroup_version="v2", quota_cpus=2.0, affinity_cpus=8, effective_cpus=2.0,
                         usage_cpus=1.96, throttled_fraction=0.4, pressure_some_avg10=37.0, runnable_threads=9)
    assert cpu_summary(reading).plain == \
        "CPUs 2 (quota 2, affinity 8) · using 2.0 · throttled 40% · pressure 37%"

    def frame(cpu: CpuReading, host: HostCpuReading | None = None, cpu_pct: float = 50.0) -> Frame:
        return Frame(seq=1, time=0.0, interval_s=1.0, target=TargetInfo(pid=10, alive=True), cpu=cpu,
                     host=host or HostCpuReading(),
                     processes=(ProcessSample(pid=10, ppid=1, role="main", name="python", cpu_pct=cpu_pct),))

    assert cpu_notes(frame(reading)).plain == "⚠ 9 runnable threads > 2 CPUs: threads wait for a core"
    assert cpu_notes(frame(CpuReading(effective_cpus=4.0, runnable_threads=2))).plain == ""
    shared = HostCpuReading(allowed_cpus=2, busy_cpus=1.9, steal_pct=3.0)
    assert cpu_notes(frame(CpuReading(effective_cpus=2.0), shared)).plain == \
        "⚠ other processes use 1.4 of the 2 CPUs it may run on, steal 3%"
    assert "no quota" in cpu_summary(CpuReading(cgroup_version="v1", effective_cpus=4.0)).plain
    assert command_width(80) == 0 and command_width(120) > 10


def test_gpu_text_orders_the_targets_gpus_first_and_names_clock_reasons():
    busy = GpuDevice(index=1, name="NVIDIA H200", uuid="GPU-1", sm_clock_mhz=1755, max_sm_clock_mhz=1980,
                     power_w=690, power_limit_w=700, util_gpu_pct=100, mem_used_bytes=70 * 1024**3,
                     mem_total_bytes=140 * 1024**3, temperature_c=63, clock_event_reasons=("sw_power_cap",),
                     gpm_sm_active_pct=81, gpm_tensor_active_pct=44, in_target=True)
    idle = GpuDevice(index=0, name="NVIDIA H200", uuid="GPU-0", util_gpu_pct=0, power_w=80)
    assert [d.index for d in ordered_devices([idle, busy])] == [1, 0]
    frames = [frame(seq=i, time=100.0 + i, gpu=GpuReading(available=True, devices=(idle, busy)))
              for i in range(5)]
    text = gpu_text(frames).plain
    assert text.index("GPU1 H200 [target]") < text.index("GPU0 H200")
    assert "1755/1980 MHz" in text and "690/700 W" in text and "mem 70.0 GiB/140.0 GiB" in text
    assert "clocks held by: software power cap" in text
    assert "GPM: SM active 81% · tensor 44%" in text
    assert "last min" in text and "(not the target's)" in text
    assert clock_event_words(("hw_thermal_slowdown", "unknown_0x400")) == \
        "hardware thermal slowdown (too hot), unknown 0x400"


def test_no_gpu_is_one_line_with_the_reason():
    text = gpu_text([frame(gpu=GpuReading(available=False, reason="NVML library not found"))]).plain
    assert text == "GPU none: NVML library not found"


def test_verdict_text_says_since_when_and_hides_the_opening_no_verdict():
    verdict = Verdict(bottleneck="data_bound", liveness="progressing", confidence=0.8,
                      evidence=("main waits in _next_data 90% of samples", "2 workers at 99% CPU", "third", "4th"),
                      advice=("raise num_workers",), since=130.0, samples=40)
    view = MonitorView(frames=(frame(time=160.0),), verdict=verdict, first_time=100.0, timeline=(
        VerdictChange(100.0, "unknown", "unknown"), VerdictChange(104.0, "compile_warmup", "progressing"),
        VerdictChange(130.0, "data_bound", "progressing")))
    text = plain(verdict_renderable(view, now=175.0))
    assert "input-bound" in text and "on 40 samples · for 45 s" in text
    assert "main waits in _next_data" in text and "third" in text
    assert "→ raise num_workers" in text
    # the evidence past the first three follows the advice, never dropped
    assert text.index("third") < text.index("→ raise num_workers") < text.index("4th")
    assert timeline_text(view).plain == "timeline +0:04 compiling (warm-up) → +0:30 input-bound"
    two = plain(verdict_renderable(view, now=175.0, max_evidence=2))
    assert two.index("→ raise num_workers") < two.index("third") < two.index("4th")


def test_exited_view_keeps_the_last_live_frames():
    alive = frame(seq=1, time=100.0)
    gone = Frame(seq=2, time=101.0, interval_s=1.0, target=TargetInfo(pid=10, alive=False, exited_at=100.5))
    view = MonitorView(frames=(alive, gone))
    assert view.shown is alive and view.latest is gone
    text = plain(verdict_renderable(view, now=110.0))
    assert "exited 10 s ago" in text


def test_window_counts_and_column_widths():
    stack = (StackFrame(function="a", file="/src/a.py", line=1),)
    early = frame(seq=1, time=100.0, stacks=frame().stacks.__class__(available=True, counts=(
        StackCount(pid=1, tid=1, thread_name=None, idle=False, frames=stack, count=1),)))
    late = frame(seq=2, time=140.0, stacks=early.stacks)
    assert len(window_counts([early, late], 30.0)) == 1
    assert len(window_counts([early, late], 40.0)) == 2  # exactly 40 s old is inside a 40 s window, as in diagnose
    assert len(window_counts([early, late], None)) == 2
    function, file = hot_column_widths(100, longest_function=60)
    assert function + file + 2 * 6 + 10 == 100 and function < 60
    assert hot_column_widths(200, longest_function=20)[0] == 20


def test_pace_line_reads_like_the_seed_case_and_says_how_to_give_a_log():
    from support.nanogpt_case import gpu_bound_frames

    from probes.monitoring.monitor import fold
    from probes.reference.baseline import load_comparison_inputs

    view = fold(gpu_bound_frames(), comparison=load_comparison_inputs(None, "gpt2-xl", 1_048_576)).view
    assert pace_text(view.pace).plain == ("pace iter 7 · 21.0 s/iter ████████ · 49.9k tok/s · 513 TFLOP/s · MFU 52% "
                                          "(log 164%)")
    assert pace_text(Pace(hint=NO_LOG_HINT)).plain == NO_LOG_HINT  # "no pace: why" names itself
    counter = Pace(iteration=40, seconds_per_iter=2.0, printed_seconds_per_iter=0.1, derived_from="step counter")
    assert pace_text(counter).plain == "pace iter 40 · 2 s/iter (step counter; the log prints 0.1 s)"
    derived = Pace(iteration=20, seconds_per_iter=2.0, derived_from="CurrSamplesPerSec ÷ 32 samples per step")
    assert pace_text(derived).plain == "pace iter 20 · 2 s/iter (from CurrSamplesPerSec ÷ 32 samples per step)"


def test_the_mfu_the_log_printed_keeps_its_decimals_on_screen():
    # Issue 20: nanoGPT printed "mfu 0.01%" (a CPU run) and the pace line said "log 0%", which reads as a bug.
    from probes.logformats import parse_line
    from probes.reference.baseline import mfu_percent, printed_percent
    from probes.view import Pace
    from tui.panes.verdict import pace_text

    printed = parse_line("iter 120: loss 4.2113, time 812.35ms, mfu 0.01%").reported_mfu_pct
    line = pace_text(Pace(iteration=120, seconds_per_iter=0.81235, reported_mfu_pct=printed)).plain
    assert "(log 0.01%)" in line
    assert [printed_percent(v) for v in (164.31, 42.57, 3.4, 0.01, 0.0)] == ["164", "43", "3.4", "0.01", "0"]
    assert [mfu_percent(v) for v in (52.4, 3.456, 0.03, 0.004)] == ["52", "3.46", "0.03", "0.004"]
