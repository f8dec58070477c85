"""modded-nanogpt's and nanochat's step lines, live: a tiny torch model trained on CPU one optimizer step every
0.3 s of wall time (tests/targets/modded_nanogpt_like.py, nanochat_like.py), printing the programs' own lines
(tests/support/program_lines.py, their f-strings) to a log file, watched by the real `gputop --pid P` until its
pace has seen enough steps (never a fixed wait). Each target writes when each of its steps ended to a side file:
the pace gputop reports must be the true rate over the steps its counter spans within 10%, and nanochat's own MFU
must reach the snapshot with the peak nanochat divides by named for the GPU gputop is told of.

The targets keep a schedule (step k ends at start + k·interval), so after the machine's load held one back its
next steps come faster, catching up: the rate over a stretch is not the interval. So the truth is taken over the
same steps as gputop's counter, from the first it saw to the last in the snapshot, not over the whole run."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest
from support.jobwatch import watch_until
from support.processes import wait_for

from probes.pace import PACE_WINDOW_S

pytestmark = [pytest.mark.slow, pytest.mark.timeout(300)]

INTERVAL_S = 0.3
STEPS_SEEN = 15  # steps gputop must have watched the counter move over before its pace is judged


def start(spawn_target, tmp_path: Path, script: str, *args: str) -> tuple[subprocess.Popen, Path, Path]:
    log, steps = tmp_path / f"{script}.log", tmp_path / f"{script}.steps"
    with log.open("w") as handle:
        target = spawn_target(script, "--interval", str(INTERVAL_S), "--steps-file", str(steps), *args,
                              stdout=handle, stderr=subprocess.STDOUT)
    wait_for(lambda: steps.exists() and steps.read_text().count("\n") >= 2, timeout=120)
    return target, log, steps


def paced_over(name: str, steps: int):
    """A view predicate: the log is read as ``name`` and its counter has moved ``steps`` since first seen."""
    first: list[int] = []

    def reached(view) -> bool:
        progress = view.latest.progress
        if progress is None or progress.format != name or progress.iteration is None:
            return False
        first[:] = first or [progress.iteration]
        return bool(progress.seconds_per_iter) and progress.iteration - first[0] >= steps

    return reached


def step_ends(steps_file: Path) -> dict[int, float]:
    """When each step ended, as the target wrote it."""
    return {int(step): float(end) for step, end in
            (line.split() for line in steps_file.read_text().splitlines() if len(line.split()) == 2)}


def true_seconds_per_step(watched, name: str, steps_file: Path) -> float:
    """The target's own rate over the steps gputop's counter spans: from the start of its window (the first step it
    saw, or the one probes.pace keeps as the start once a minute has gone by) to the last step in the snapshot.
    Each tick's newest step is a sighting, timed by its line's write: the step's end."""
    ends = step_ends(steps_file)
    last = watched.document["progress"]["iteration"]
    sightings: list[int] = []
    for frame in watched.frames:
        progress = frame.progress
        if progress is not None and progress.format == name and progress.iteration is not None \
                and progress.iteration <= last and (not sightings or progress.iteration > sightings[-1]):
            sightings.append(progress.iteration)
    while len(sightings) > 2 and ends[sightings[1]] <= ends[last] - PACE_WINDOW_S:
        sightings.pop(0)
    return (ends[last] - ends[sightings[0]]) / (last - sightings[0])


def test_modded_nanogpt_lines_give_the_true_pace(spawn_target, tmp_path):
    target, log, steps = start(spawn_target, tmp_path, "modded_nanogpt_like.py")
    watched = watch_until(target.pid, tmp_path, paced_over("modded_nanogpt", STEPS_SEEN),
                          extra_args=("--no-stacks",))
    progress = watched.document["progress"]
    assert (progress["source"], progress["format"]) == (str(log), "modded_nanogpt")
    truth = true_seconds_per_step(watched, "modded_nanogpt", steps)
    assert progress["seconds_per_iter"] == pytest.approx(truth, rel=0.10), (progress, truth)
    # train_time between its lines is the printed figure: it agrees with the counter, so no mismatch is claimed
    assert progress["printed_seconds_per_iter"] is None, progress
    print(f"modded-nanogpt: gputop {progress['seconds_per_iter']:.3f} s/step, the target's own {truth:.3f}")


def test_nanochat_lines_give_the_true_pace_and_its_mfu_with_its_peak(spawn_target, tmp_path):
    # 1e9 FLOP/s as the peak: a share of it that a CPU reaches, so the MFU printed is not nanochat's CPU 0.00.
    target, log, steps = start(spawn_target, tmp_path, "nanochat_like.py", "--gpu-peak-flops", "1e9")
    watched = watch_until(target.pid, tmp_path, paced_over("nanochat", STEPS_SEEN),
                          extra_args=("--no-stacks", "--gpu", "NVIDIA L40", "--model", "tiny",
                                      "--tokens-per-iter", "512"))
    progress = watched.document["progress"]
    assert (progress["source"], progress["format"]) == (str(log), "nanochat")
    truth = true_seconds_per_step(watched, "nanochat", steps)
    assert progress["seconds_per_iter"] == pytest.approx(truth, rel=0.10), (progress, truth)
    assert progress["printed_seconds_per_iter"] is None, progress  # its dt agrees with the counter
    printed = [float(line.split("bf16_mfu: ")[1].split(" ")[0]) for line in log.read_text().splitlines()
               if "bf16_mfu: " in line]
    assert progress["reported_mfu_pct"] in printed and progress["reported_mfu_pct"] > 0
    tokens = [float(line.split("tok/sec: ")[1].split(" ")[0].replace(",", "")) for line in log.read_text().splitlines()
              if "tok/sec: " in line]
    assert progress["reported_tokens_per_s"] in tokens and progress["reported_tokens_per_s"] > 0
    assert any(line.startswith("The log's own ") and "every rank's tokens of the optimizer step" in line
               for line in progress["baseline"]["lines"]), progress["baseline"]["lines"]
    # nanochat's "l4" row matches an L40: its MFU divides by the L4's 121 TFLOP/s, said and flagged.
    assert ("The log's MFU is against 121 TFLOP/s per GPU, nanochat's get_peak_flops row for the NVIDIA L40, not "
            "this GPU's peak: its bf16 dense peak is 181.1 TFLOP/s") in "\n".join(progress["baseline"]["lines"])
    print(f"nanochat: gputop {progress['seconds_per_iter']:.3f} s/step, the target's own {truth:.3f}; "
          f"its MFU {progress['reported_mfu_pct']}%")
