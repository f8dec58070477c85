"""What every log format shares: the closed list of format names, what a parsed line says, and the one
interface a format's parser offers. The formats themselves and their order live in ``probes.logformats``."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from probes.frame import LogFormat
from probes.logformats.peak_tables import PeakTable
from probes.models.convention import PrintedCount

# Every format gputop recognises, named once. A name here without a parser in FORMATS, or a parser whose name is
# missing here, fails tests/unit/test_logformats.py. The name is what the snapshot's progress.format says.


@dataclass(frozen=True)
class ProgressLine:
    """What one log line says about progress."""

    format: LogFormat
    iteration: int | None = None  # Lightning: epoch × batches per epoch + batch, so it keeps growing
    total: int | None = None  # the length of the bar the iteration counts along; None where it runs past one bar
    seconds_per_iter: float | None = None
    # Set when seconds_per_iter was worked out from another figure the line printed rather than printed itself:
    # what it was worked out from (HF Trainer's "train_steps_per_second", DeepSpeed's "CurrSamplesPerSec ÷ 32
    # samples per step").
    derived_from: str | None = None
    loss: float | None = None
    reported_mfu_pct: float | None = None  # the framework's own MFU figure (nanoGPT divides by the A100's peak)
    # The framework's own achieved TFLOP/s per GPU, where it prints that rather than an MFU (Megatron-LM).
    reported_tflops_per_gpu: float | None = None
    # The framework's own tokens per second as the line prints it (nanochat's tok/sec, torchtitan's tps, llm.c's
    # tok/s): whose tokens it counts (the whole job's or one device's) is its format's printed_tokens_per_s_over.
    reported_tokens_per_s: float | None = None
    epoch: float | None = None
    timestamp: float | None = None  # Unix time printed on the line, if any


LineParser = Callable[[str], ProgressLine | None]  # one line as a terminal shows it -> what it says, or None


@dataclass(frozen=True)
class FormatParser:
    """One framework's log lines.

    ``parse`` gets one line as a terminal shows it (ANSI escapes and surrounding whitespace removed, never
    empty) and answers a ProgressLine carrying ``name``, or None when the line is not this format's progress.
    It reads one line alone and keeps nothing between lines.

    A format that needs earlier lines to read a later one (Composer prints a block of lines per batch; DeepSpeed
    prints its samples per step once, at start, and a samples/s throughput later) also has a ``reader``: a
    factory of a fresh line reader with its own state, answering as ``parse`` does. ``LogReader`` makes one per
    log file, so two logs never share a partial block.
    """

    name: LogFormat
    parse: LineParser
    # The line is a bar redrawn with \r: its newest state has no terminator yet and is read anyway, and a bar
    # with another total drawn while the training bar is unfinished (evaluation) is not the training bar.
    redraws_in_place: bool = False
    # Formats whose lines, once this format has been seen in the same log, are this format's (HF Trainer draws
    # its progress bar with tqdm).
    supersedes: tuple[LogFormat, ...] = ()
    # What the MFU this format prints is measured against, where the framework fixes it whatever the GPU
    # ("an A100's 312 TFLOP/s" for nanoGPT): said beside the log's figure so a reader sees why it differs.
    printed_mfu_against: str | None = None
    # What the achieved TFLOP/s per GPU this format prints counts ("Megatron-LM's num_floating_point_operations
    # ..."): said where it differs from gputop's achieved FLOP/s.
    printed_tflops_counts: str | None = None
    # How the FLOPs behind the MFU or achieved TFLOP/s this format prints count a token, attention above all (the
    # whole T×T score matrix, as gputop counts, or the causal half): set exactly where the format prints one
    # (tests/unit/test_logformats.py), said beside the printed figure and used to put gputop's in its terms.
    printed_mfu_counts: PrintedCount | None = None
    # Where the framework looks its peak up by device name in a table of its own (nanochat's and torchtitan's
    # get_peak_flops): that table, so the peak it took for the GPU gputop reads is named, and flagged where it is
    # not that GPU's (a row meant for another GPU, or none). printed_mfu_against says it without a GPU.
    printed_mfu_peaks: PeakTable | None = None
    # Whose tokens the tokens per second this format prints count and over what time ("every rank's tokens over
    # the optimizer step's dt"): set exactly where its fixture prints one (tests/unit/test_logformats_programs.py).
    printed_tokens_per_s_over: str | None = None
    reader: Callable[[], LineParser] | None = None

    def mfu_peak_sentence(self, gpu_name: str | None, printed_mfu: bool = True) -> str | None:
        """What the MFU this format prints is against on the GPU so named, flagged where it is not that GPU's own
        peak; None where the format keeps no table of its own or the GPU is not known. Without a printed MFU
        (``printed_mfu`` False) only the case that explains its absence is said: no row, so it printed 0."""
        table = self.printed_mfu_peaks
        if table is None or not gpu_name or not gpu_name.strip():
            return None
        if not printed_mfu and not table.divides_by_infinity(gpu_name):
            return None
        return table.sentence(gpu_name)
