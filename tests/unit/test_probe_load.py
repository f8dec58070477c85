"""`gputop probe` on a busy machine says its figure is not a clean baseline (issue 20: torch measured 48x slower
beside other work, and the probe said nothing). The real probe (tiny model, CPU) beside two real busy processes; the
judgement itself on set figures, since this shared test machine is never quiet enough to show a clean run."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from probes.reference.probe_load import ProbeLoad, judge

REPO = Path(__file__).resolve().parents[2]
pytest.importorskip("torch")


def test_the_text_report_says_it_too(capsys):
    from tui.commands.probe import other_load_words

    busy = judge(ProbeLoad(allowed_cpus=2, others_cpus_before=1.9, others_cpus_during=1.7, others_cpus_after=2.0,
                            on_cpu=True))
    words = other_load_words(busy)
    assert words.startswith("NOT A CLEAN BASELINE: other processes used 1.7 of the 2 CPUs it may run on while it "
                            "timed its steps (before 1.9, after 2.0)")
    quiet = judge(ProbeLoad(allowed_cpus=16, others_cpus_before=0.1, others_cpus_during=0.2, others_cpus_after=0.1))
    assert quiet.clean and quiet.note is None
    assert other_load_words(quiet).startswith("quiet (other processes' CPUs of 16: before 0.1, during 0.2, after 0.1")


@pytest.mark.parametrize("others, allowed, on_cpu, clean", [
    (0.1, 2, True, True),      # a shell and gputop itself: noise
    (0.5, 2, True, False),     # a quarter of a 2-core machine
    (1.0, 64, True, False),    # one busy core of 64 holds back every step of torch's CPU thread pool
    (1.0, 64, False, True),    # a GPU probe needs a core to launch kernels, not all 64
    (8.0, 64, False, False),
])
def test_busy_means_a_core_for_a_cpu_probe_and_a_share_for_a_gpu_probe(others, allowed, on_cpu, clean):
    assert judge(ProbeLoad(allowed_cpus=allowed, others_cpus_during=others, on_cpu=on_cpu)).clean is clean


def test_other_processes_on_the_gpu_make_it_not_clean():
    load = judge(ProbeLoad(allowed_cpus=8, others_cpus_during=0.0, gpu_other_processes=(4242,)))
    assert not load.clean and "other compute processes on its GPU (PID 4242)" in load.note


def test_the_gpus_other_processes_are_read_through_nvml_and_only_on_the_probes_gpu():
    from support.fake_pynvml import FakeGpu, FakeNvml

    from probes.reference.probe_load import LoadWatch

    mine, other = "GPU-11111111-0000-0000-0000-000000000000", "GPU-22222222-0000-0000-0000-000000000000"
    nvml = FakeNvml([FakeGpu(uuid=mine, processes=[(os.getpid(), 1 << 30), (4242, 1 << 30)]),
                     FakeGpu(uuid=other, processes=[(5151, 1 << 30)])])
    watch = LoadWatch(gpu=True, sleep=lambda _s: None, nvml=nvml)
    watch.gpu_uuid = "11111111-0000-0000-0000-000000000000"  # as torch's device properties say it
    watch.before()
    watch.after()
    load = watch.result()
    assert load.gpu_other_processes == (4242,)  # not the probe itself, not another GPU's process
    assert not load.clean and "PID 4242" in load.note


def test_a_baseline_that_was_not_clean_says_so_in_the_comparison(tmp_path):
    import dataclasses

    from probes.frame import ProgressReading
    from probes.models import PRESETS
    from probes.reference.baseline import compare_progress, load_comparison_inputs
    from probes.reference.gpt_probe import ProbeConfig, run_probe

    result = run_probe(ProbeConfig(PRESETS["tiny"], "tiny", batch_size=2, steps=2, warmup=1, device="cpu"),
                       measure_load=False)
    busy = judge(ProbeLoad(allowed_cpus=2, others_cpus_during=1.8, on_cpu=True))
    path = tmp_path / "probe.json"
    path.write_text(json.dumps(dataclasses.asdict(dataclasses.replace(result, other_load=busy))))
    inputs = load_comparison_inputs(str(path), None, None)
    assert inputs.baseline.other_load == busy  # read back from its JSON
    compared = compare_progress(ProgressReading(source="train.log", format="nanogpt", iteration=10,
                                                seconds_per_iter=1.0), inputs, None)
    assert any(line.startswith("The baseline was timed beside other work: other processes used 1.8")
               for line in compared.lines), compared.lines
