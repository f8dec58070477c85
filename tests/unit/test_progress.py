"""probes.sensors.progress: the probe on fixture logs, incremental tailing, and a live target (the line parsers are
tests/unit/test_logformats.py's)."""

from __future__ import annotations

import shutil
import time
from pathlib import Path

import pytest

from probes.frame import ProgressReading
from probes.logformats import FORMATS
from probes.sensors.progress import INITIAL_TAIL_BYTES, LogProgressProbe

LOGS = Path(__file__).parents[1] / "fixtures" / "logs"


# --- LogProgressProbe on fixture logs ----------------------------------------------------------------


@pytest.mark.parametrize(
    ("name", "fmt", "iteration", "seconds_per_iter"),
    [
        ("nanogpt.log", "nanogpt", 10, 21.03412),
        ("hf_trainer.log", "hf_trainer", 52, 1 / 1.92),  # the nested eval bar (25/63) is not the training bar
        ("tqdm.log", "tqdm", 6, 2.49),
        ("lightning.log", "lightning", 120, 1 / 3.99),  # the validation bar after it is skipped
        ("generic.log", "generic", 120, 0.52),  # its step counter: 10 steps per 5.2 s, as it prints
        ("generic.untimed.log", "generic", 120, 0.5),  # from the lines' own timestamps, 5 s per 10 steps
        # Lines with their own timestamps are timed by the step counter (probes/pace.py): 2 iterations in 26 s,
        # against the 12.9781 s it printed last
        ("megatron.log", "megatron", 3, 13.0),
        ("llm_c.log", "llm_c", 4, 2.00152),
        ("litgpt.log", "litgpt", 4, 4 * 0.2506),  # the optimizer step: 4 micro-batches of 250.6 ms
        ("torchtitan.log", "torchtitan", 20, (16.452 - 12.412) / 19),  # no time printed: its lines' timestamps
        ("deepspeed.log", "deepspeed", 20, 20.006 / 10),  # its counter: 10 steps in 20.006 s (it prints 16 samples/s)
        ("fairseq.log", "fairseq", 1000, 2.0),  # its counter: 100 updates per 200 s, as wpb / wps says
        ("composer.log", "composer", 18, 1 / 0.5001),  # throughput/batches_per_sec inside the last block
    ],
)
def test_probe_reads_fixture(tmp_path, name, fmt, iteration, seconds_per_iter):
    log = tmp_path / name
    shutil.copy(LOGS / name, log)
    probe = LogProgressProbe(pid=1, log_path=str(log), tokens_per_iter=1000)
    reading = probe.read()
    assert isinstance(reading, ProgressReading)
    assert (reading.format, reading.iteration, reading.source) == (fmt, iteration, str(log))
    assert reading.seconds_per_iter == pytest.approx(seconds_per_iter, rel=1e-6)
    assert reading.tokens_per_s == pytest.approx(1000 / seconds_per_iter, rel=1e-6)
    assert reading.last_line and reading.last_update


@pytest.mark.parametrize(
    ("name", "derived_from"),
    # Where the lines carry their own timestamps the counter moves from the first read: the step counter; where
    # they do not, the lines of a first read arrived at one time, and the pace is the printed figure's.
    [("megatron.log", "step counter"), ("litgpt.log", "iter time × 4 micro-batches per step"),
     ("torchtitan.log", "step counter"), ("deepspeed.log", "step counter"), ("fairseq.log", "step counter"),
     ("composer.log", "throughput/batches_per_sec"), ("nanogpt.log", None)],
)
def test_the_reading_says_what_its_pace_was_worked_out_from(tmp_path, name, derived_from):
    log = tmp_path / name
    shutil.copy(LOGS / name, log)
    reading = LogProgressProbe(1, str(log)).read()
    assert (reading.derived_from, reading.printed_seconds_per_iter) == (derived_from, None)


def test_the_step_counter_overrules_a_printed_time_it_disagrees_with(tmp_path):
    """A log printing a micro-step's 100 ms while its counter moves one step per 2 s (an iteration of 20 micro-steps):
    the pace is the counter's, and the printed figure is kept beside it."""
    log = tmp_path / "train.log"
    log.write_text("".join(f"2024-05-01 12:00:{2 * step:02d},000 step {step} | loss 2.0 | step_time 100ms\n"
                           for step in range(8)), encoding="utf-8")
    reading = LogProgressProbe(1, str(log)).read()
    assert reading.seconds_per_iter == pytest.approx(2.0)
    assert reading.derived_from == "step counter"
    assert reading.printed_seconds_per_iter == pytest.approx(0.1)
    assert reading.printed_from is None  # printed as a time, not worked out


@pytest.mark.parametrize(("lines", "claimed"), [(2, False), (4, False), (5, True)])
def test_the_counter_is_the_pace_from_two_lines_and_a_disagreement_needs_two_intervals(tmp_path, lines, claimed):
    """The rule of probes/pace.py: two step lines 2 s apart give the pace (not the 100 ms they print); that the
    printed time disagrees is said once it holds over two counted intervals, never on one, at three step lines in a
    row (HOLD_LINES: the lines 3, 4 and 5)."""
    log = tmp_path / "train.log"
    log.write_text("".join(f"2024-05-01 12:00:{2 * step:02d},000 step {step} | loss 2.0 | step_time 100ms\n"
                           for step in range(lines)), encoding="utf-8")
    reading = LogProgressProbe(1, str(log)).read()
    assert (reading.seconds_per_iter, reading.derived_from) == (pytest.approx(2.0), "step counter")
    assert (reading.printed_seconds_per_iter is not None) is claimed


def test_a_single_step_line_gives_its_printed_time(tmp_path):
    log = tmp_path / "train.log"
    log.write_text("2024-05-01 12:00:00,000 step 1 | loss 2.0 | step_time 100ms\n", encoding="utf-8")
    reading = LogProgressProbe(1, str(log)).read()
    assert (reading.seconds_per_iter, reading.derived_from, reading.printed_seconds_per_iter) == (0.1, None, None)


def test_printed_times_that_average_to_the_counter_claim_nothing(tmp_path):
    """Batches arriving in pairs from two DataLoader workers: each line prints its whole iteration, 1.1 s and
    0.1 s in turn. The counter over the window is their mean, and no disagreement is claimed."""
    log = tmp_path / "train.log"
    at, text = 0.0, ""
    for step in range(1, 12):
        took = 1.1 if step % 2 else 0.1
        at += took
        text += f"2024-05-01 12:00:{at:06.3f} step {step} loss 2.0 time {took * 1000:.0f}ms\n".replace(".", ",", 1)
    log.write_text(text, encoding="utf-8")
    reading = LogProgressProbe(1, str(log)).read()
    assert reading.seconds_per_iter == pytest.approx((at - 1.1) / 10)
    assert (reading.derived_from, reading.printed_seconds_per_iter) == ("step counter", None)


def test_a_counter_of_another_format_before_the_step_lines_is_not_their_start(tmp_path):
    """A bar that cannot be told from a training bar (no description, tqdm's "it": litdata's parquet reader's) before
    litgpt's step lines: the step counter times litgpt's lines from their own first one, not from the bar (the time
    between is model setup and compilation, no step). litdata's named "Progress" bar is not read at all
    (tests/unit/test_logformats_data_prep.py)."""
    log = tmp_path / "train.log"
    log.write_text("100%|██████████| 1/1 [00:03<00:00,  3.92s/it]\n", encoding="utf-8")
    probe = LogProgressProbe(1, str(log))
    assert probe.read().format == "tqdm"
    written = []
    for step in (1, 2):
        time.sleep(0.3)
        with log.open("a", encoding="utf-8") as out:
            out.write(f"Epoch 1 | iter {4 * step} step {step} | loss train: 4.977, val: n/a | iter time: 1937.53 ms "
                      "(step) remaining time: 8 days, 17:09:27\n")
        written.append(log.stat().st_mtime)
        reading = probe.read()
    assert (reading.format, reading.iteration, reading.derived_from) == ("litgpt", 2, "step counter")
    assert reading.seconds_per_iter == pytest.approx(written[1] - written[0])


def test_evaluation_bar_does_not_replace_the_training_bar(tmp_path):
    text = (LOGS / "hf_trainer.log").read_text(encoding="utf-8")
    during_eval = text[: text.index("18.21it/s]") + len("18.21it/s]\x1b[A")]  # the eval bar drawn last
    log = tmp_path / "train.log"
    log.write_text(during_eval, encoding="utf-8")
    reading = LogProgressProbe(1, str(log)).read()
    assert (reading.format, reading.iteration, reading.seconds_per_iter) == ("hf_trainer", 50, 0.5)


def test_nanogpt_reported_mfu_is_passed_on(tmp_path):
    log = tmp_path / "train.log"
    shutil.copy(LOGS / "nanogpt.log", log)
    assert LogProgressProbe(1, str(log)).read().reported_mfu_pct == pytest.approx(164.21)


def test_tail_is_incremental_and_follows_tqdm_redraws(tmp_path):
    log = tmp_path / "bar.log"
    log.write_text("\r  0%|          | 0/100 [00:00<?, ?it/s]", encoding="utf-8")
    probe = LogProgressProbe(1, str(log))
    assert probe.read().iteration == 0  # the newest bar has no terminator yet and still counts
    first_update = probe.read().last_update
    time.sleep(0.05)
    assert probe.read().last_update == first_update  # nothing new written: not "seen" again
    first_write = log.stat().st_mtime
    with log.open("a", encoding="utf-8") as out:
        out.write("\r  7%|▋         | 7/100 [00:14<03:06,  2.00s/it]")
    second_write = log.stat().st_mtime
    reading = probe.read()
    assert reading.iteration == 7
    # The pace is the counter's, timed to the two writes (the files' modification times), not the bar's 2.00 s/it
    assert (reading.seconds_per_iter, reading.derived_from) == (pytest.approx((second_write - first_write) / 7),
                                                                "step counter")
    assert reading.last_update > first_update


def test_split_multibyte_character_and_partial_line(tmp_path):
    log = tmp_path / "train.log"
    log.write_bytes(b"")
    probe = LogProgressProbe(1, str(log))
    assert probe.read().source is None  # no pace yet: the reading says why
    line = "iter 3: loss 5.0000, time 300.00ms, mfu 12.00% \u2588\n".encode()
    with log.open("ab") as out:
        out.write(line[:20])  # half a line, as a reader racing the writer sees it
    assert probe.read().source is None
    with log.open("ab") as out:
        out.write(line[20:-3])  # stop inside the 3-byte UTF-8 character
    with log.open("ab") as out:
        out.write(line[-3:])
    reading = probe.read()
    assert reading.iteration == 3
    assert reading.last_line.endswith("\u2588")


def test_untimed_lines_timed_by_when_they_appear(tmp_path):
    log = tmp_path / "train.log"
    log.write_text("", encoding="utf-8")
    probe = LogProgressProbe(1, str(log))
    probe.read()
    for step in range(4):
        with log.open("a", encoding="utf-8") as out:
            out.write(f"step {step * 10} | loss 2.0\n")
        probe.read()
        time.sleep(0.2)
    reading = probe.read()
    assert reading.iteration == 30
    # 10 steps per 0.2 s of appearing, give or take scheduling on a busy machine
    assert reading.seconds_per_iter == pytest.approx(0.02, rel=0.5)


def test_starts_near_the_end_of_a_big_log(tmp_path):
    log = tmp_path / "big.log"
    with log.open("w", encoding="utf-8") as out:
        out.write("iter 1: loss 9.0000, time 100.00ms, mfu 1.00%\n")  # far before the tail
        filler = "x" * 99 + "\n"
        out.write(filler * (3 * INITIAL_TAIL_BYTES // len(filler)))
    probe = LogProgressProbe(1, str(log))
    reading = probe.read()
    assert reading.source is None
    assert reading.no_pace.startswith("no pace: no step lines recognised yet in")
    assert "PYTHONUNBUFFERED=1" in reading.no_pace
    with log.open("a", encoding="utf-8") as out:
        out.write("iter 2: loss 8.0000, time 100.00ms, mfu 1.00%\n")
    assert probe.read().iteration == 2


def test_no_step_lines_says_what_it_reads_and_the_last_line_it_could_not(tmp_path):
    log = tmp_path / "train.log"
    unread = "Epoch 3 done: accuracy 0.91 after " + "x" * 200  # a line of the script's own, no format reads it
    log.write_text(f"loading the dataset\n\x1b[32m{unread}\x1b[0m\n\n", encoding="utf-8")
    reason = LogProgressProbe(1, str(log)).read().no_pace
    assert reason.startswith(f"no pace: no step lines recognised yet in {log}")
    quoted = reason.split('"')[1]  # the last line that was not empty, shortened and without its colours
    assert quoted.startswith("Epoch 3 done: accuracy 0.91 after xxx") and quoted.endswith("…") and len(quoted) <= 80
    assert [parser.name for parser in FORMATS if parser.name in reason] == [parser.name for parser in FORMATS]
    assert "step 120 | loss 2.29 | time 520ms" in reason  # the shape a script's own line can take to be read
    assert "--log PATH" in reason


def test_truncated_log_is_read_from_the_start(tmp_path):
    log = tmp_path / "train.log"
    log.write_text("iter 50: loss 3.0000, time 100.00ms, mfu 1.00%\n" * 3, encoding="utf-8")
    probe = LogProgressProbe(1, str(log))
    assert probe.read().iteration == 50
    log.write_text("iter 0: loss 9.0000, time 200.00ms, mfu -100.00%\n", encoding="utf-8")  # a restart
    reading = probe.read()
    assert (reading.iteration, reading.seconds_per_iter) == (0, 0.2)


def test_never_raises_and_says_why(tmp_path):
    missing = LogProgressProbe(1, str(tmp_path / "nope.log"))
    assert "does not exist" in missing.read().no_pace
    directory = LogProgressProbe(1, str(tmp_path))
    assert directory.read().source is None
    assert directory.reason
    gone = LogProgressProbe(pid=2**22 + 12345)
    assert "no process" in gone.read().no_pace


# --- whose log: the training process's, whatever gputop is attached to ---------------------------------------


def test_log_owners_prefer_the_lowest_live_rank_then_the_training_process():
    from probes.frame import ProcessSample
    from probes.sensors.progress import log_owners

    tree = [ProcessSample(pid=10, ppid=1, role="launcher", name="torchrun"),
            ProcessSample(pid=12, ppid=10, role="rank", name="python", rank=1),
            ProcessSample(pid=11, ppid=10, role="rank", name="python", rank=0, alive=False),  # rank 0 exited
            ProcessSample(pid=13, ppid=10, role="rank", name="python", rank=2)]
    assert log_owners(tree, root_pid=10) == [(12, "rank 1 (PID 12)"), (13, "rank 2 (PID 13)"), (10, None)]
    wrapped = [ProcessSample(pid=20, ppid=1, role="launcher", name="bash"),
               ProcessSample(pid=21, ppid=20, role="main", name="python3")]
    assert log_owners(wrapped, root_pid=20) == [(21, "python3 (PID 21)"), (20, None)]


def test_no_pace_is_said_in_the_snapshot_and_the_view():
    from probes.frame import Frame, ProgressReading, TargetInfo
    from probes.monitoring.monitor import Monitor

    why = "no pace: the job writes no step lines to a file gputop can read (the stdout of PID 5 is a pipe)"
    monitor = Monitor()
    view = monitor.ingest(Frame(seq=1, time=1.0, interval_s=1.0, target=TargetInfo(pid=5, alive=True),
                                progress=ProgressReading(no_pace=why)))
    assert view.pace.hint == why
    document = monitor.snapshot()
    assert (document["progress"], document["no_pace"]) == (None, why)
