"""What the training step already does, read from the job and never guessed (StepFacts): compiled or eager, the
attention's implementation, autocast and the precision the compiled code computes in, the GradScaler, activation
checkpointing, the optimizer's implementation, host synchronisations, pinned memory and non-blocking copies, GPU
memory used of total. Each fact is a Fact: its value and where it was read. A fact not seen is None: unknown, which
is not "no".

Read from the main thread's sampled stacks over STEP_FACTS_LOOKBACK_S (step_marks.py says what each stack shows; the
main process's other threads for the pin-memory thread and compiled code run off the main thread), the source lines
those stacks name and the code torch.compile generated (read from this machine's disk: probes/sensors/source_lines.py;
in a replay, as the recording machine read them where this one cannot: step_source.py), the training process's command
line (a few flags whose meaning is fixed: `--compile=False`, `--bf16`, ...) and NVML (GpuSummary). py-spy's --locals
is not used: a setting held only in a variable (`with ctx:`, nanoGPT's dtype from its config file) stays unknown. The
stacks win over the command line: they are what runs.

Each frame's marks are counted once (memoised with the frame's stacks, as frame_stacks.py memoises its summary), so a
call sums one small tally per frame of the look-back, whatever the History's length.
"""

from __future__ import annotations

import weakref
from collections import Counter, OrderedDict
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Generic, Literal, TypeVar, cast

from probes.diagnosis import step_source
from probes.diagnosis.frame_stacks import CACHED_RANKS, frame_stacks
from probes.diagnosis.gpu_summary import GpuSummary
from probes.diagnosis.stacks import file_words, short_path
from probes.diagnosis.step_marks import Mark, Origin, StackMarks
from probes.diagnosis.step_source import RECORDED_WHERE, Generated
from probes.diagnosis.windows import MAX_LOOKBACK_FRAMES, recent
from probes.frame import Frame

# As long as the compile look-back (compile_history.COMPILE_HISTORY_S): a GPU-bound main thread shows a window only a
# few samples, most of them waiting, and the optimizer's step is one sample in 45 on GPT-2 XL (tests/fixtures/h200).
STEP_FACTS_LOOKBACK_S = 60.0
# Main-thread samples of nn.Module forwards outside compiled code, with none inside it, that make a model "eager".
MIN_EAGER_SAMPLES = 5
MAX_HOST_SYNCS = 3  # sync sites kept, most sampled first
MAX_UNREAD = 3

Compiled = Literal["compiled", "eager"]
Attention = Literal["sdpa", "flash_attn", "xformers", "by_hand"]
Autocast = Literal["bfloat16", "float16", "on"]  # "on": autocast seen, its dtype not read
Dtype = Literal["bfloat16", "float16", "float32"]
Scaler = Literal["enabled", "disabled", "seen"]  # "seen": a GradScaler in the stacks, whether it scales not read
OnOff = Literal["on", "off"]
OptimizerImpl = Literal["fused", "foreach", "per_parameter"]
HostSync = Literal["item", "cpu", "tolist", "numpy", "print", "synchronize"]

V = TypeVar("V")


@dataclass(frozen=True)
class Fact(Generic[V]):
    """One fact of the step: its value, where it was read (`origin`, and the frame, line or flag in `where`) and,
    read from the stacks or the lines they name, in how many of the main thread's samples."""

    value: V
    origin: Origin
    where: str
    samples: int = 0
    of_samples: int = 0

    def share(self) -> float | None:
        """Of the main thread's samples over the look-back, the share that showed it (None where not sampled)."""
        return self.samples / self.of_samples if self.samples and self.of_samples else None

    def source(self) -> str:
        """Where it was read, in words: 'stacks: _fused_adam (torch/optim/adam.py:880) in 1 of 45 main-thread
        samples'."""
        counted = f" in {self.samples} of {self.of_samples} main-thread samples" if self.samples else ""
        return f"{self.origin}: {self.where}{counted}"


@dataclass(frozen=True)
class StepFacts:
    """What the step does, as read from the job; each None where nothing showed it."""

    samples: int = 0  # the main thread's samples over the look-back
    compiled: Fact[Compiled] | None = None
    attention: Fact[Attention] | None = None
    autocast: Fact[Autocast] | None = None
    # The lowest-precision float the compiled graphs compute in (their buffers), or as the command line sets it.
    compute_dtype: Fact[Dtype] | None = None
    grad_scaler: Fact[Scaler] | None = None
    checkpointing: Fact[OnOff] | None = None
    recompute_samples: int = 0  # main-thread samples running a checkpointed forward again, inside backward
    optimizer: Fact[OptimizerImpl] | None = None
    host_syncs: tuple[Fact[HostSync], ...] = ()  # each site, most sampled first
    pin_memory: Fact[OnOff] | None = None
    non_blocking: Fact[OnOff] | None = None
    gpu_memory: Fact[tuple[int, int]] | None = None  # (used, total) bytes of the job's GPUs
    # Files a sampled stack named that are not readable here (a replay on another machine, a job in another
    # container): what their lines would have said is unknown.
    unread: tuple[str, ...] = ()

    def _named(self) -> list[tuple[str, Fact | None]]:
        return [
            ("", self.compiled), ("attention ", self.attention), ("autocast ", self.autocast),
            ("computes in ", self.compute_dtype), ("GradScaler ", self.grad_scaler),
            ("activation checkpointing ", self.checkpointing), ("optimizer ", self.optimizer),
            *(("host sync ", sync) for sync in self.host_syncs), ("pin_memory ", self.pin_memory),
            ("non_blocking copies ", self.non_blocking)]

    def lines(self) -> tuple[str, ...]:
        """One line a fact, for a person: 'compiled (stacks: … in 16 of 45 main-thread samples)'; then the files
        whose lines could not be read, for what is unknown because of them."""
        shown = [f"{label}{_words(fact.value)} ({fact.source()})" for label, fact in self._named() if fact is not None]
        if self.gpu_memory is not None:
            shown.append(f"GPU memory ({self.gpu_memory.source()})")
        if self.unread:
            unread = ", ".join(file_words(path) for path in self.unread)
            shown.append(f"not readable here, so what their lines do is unknown: {unread}")
        return tuple(shown)

    def summary(self) -> str | None:
        """The facts in one short line, without their sources: 'compiled · optimizer fused · GPU memory 76 of 140
        GiB'; None where nothing was read."""
        shown = [f"{label}{_words(fact.value)}" for label, fact in self._named() if fact is not None]
        if self.gpu_memory is not None:
            used, total = self.gpu_memory.value
            shown.append(f"GPU memory {used / 2**30:.0f} of {total / 2**30:.0f} GiB")
        return " · ".join(shown) or None


def _words(value: object) -> str:
    """A fact's value as a person reads it: a GradScaler seen in the stacks may be one built with enabled=False
    (nanoGPT calls its scaler in bf16 too), so "seen" does not say it scales."""
    return "in the step (whether it scales not read)" if value == "seen" else str(value)


class _Tally:
    """Samples per mark of one kind over the look-back."""

    def __init__(self) -> None:
        self.marks: Counter[Mark] = Counter()

    def add(self, mark: Mark | None, samples: int) -> None:
        if mark is not None:
            self.marks[mark] += samples

    def best(self, total: int) -> Fact | None:
        """The value most samples showed, with its commonest place."""
        if not self.marks:
            return None
        by_value: Counter[str] = Counter()
        for mark, samples in self.marks.items():
            by_value[mark.value] += samples
        value = by_value.most_common(1)[0][0]
        mark, _ = max(((m, n) for m, n in self.marks.items() if m.value == value), key=lambda item: item[1])
        return Fact(value, mark.origin, mark.where, by_value[value], total)


_KINDS: tuple[tuple[str, Callable[[StackMarks], Mark | None]], ...] = (
    ("compiled", lambda m: m.compiled),
    ("eager", lambda m: m.eager_module),
    ("attention", lambda m: m.attention),
    ("autocast", lambda m: m.autocast),
    ("grad_scaler", lambda m: m.grad_scaler),
    ("checkpointing", lambda m: m.checkpointing),
    ("optimizer", lambda m: m.optimizer),
    ("pin_memory", lambda m: m.pin_memory),
    ("non_blocking", lambda m: m.non_blocking),
)


@dataclass(frozen=True)
class _FrameTally:
    """One frame's main-thread marks, counted once: samples per (kind, mark), host syncs, the recomputed forward,
    generated files run, user files not readable, and the pin-memory thread seen off the main thread."""

    samples: int = 0
    marks: tuple[tuple[str, Mark, int], ...] = ()
    syncs: tuple[tuple[Mark, int], ...] = ()
    recompute: int = 0
    generated: tuple[str, ...] = ()
    unread: tuple[str, ...] = ()
    pinned_elsewhere: tuple[Mark, ...] = ()


# As frame_stacks.py's cache: an entry goes with its frame's stacks (a weakref finalizer), and the bound caps it where
# far more frames are alive at once (a replay holds its whole recording; a job of many ranks).
_TALLY_LIMIT = 4 * CACHED_RANKS * (MAX_LOOKBACK_FRAMES + 16)
_tallies: OrderedDict[int, tuple[int, _FrameTally]] = OrderedDict()


def _frame_tally(frame: Frame, main_pid: int) -> _FrameTally:
    """The frame's tally for the main process `main_pid` (memoised)."""
    key = id(frame.stacks)  # unique while the stacks live, and the entry goes when they do
    cached = _tallies.get(key)
    if cached is not None and cached[0] == main_pid:
        return cached[1]
    tally = _count_frame(frame, main_pid)
    if cached is None:
        weakref.finalize(frame.stacks, _tallies.pop, key, None)
    while len(_tallies) >= _TALLY_LIMIT:
        _tallies.popitem(last=False)
    _tallies[key] = (main_pid, tally)
    return tally


def _count_frame(frame: Frame, main_pid: int) -> _FrameTally:
    counted: Counter[tuple[str, Mark]] = Counter()
    syncs: Counter[Mark] = Counter()
    generated: dict[str, None] = {}
    unread: dict[str, None] = {}
    pinned: dict[Mark, None] = {}
    total = recompute = 0
    stacks = frame_stacks(frame, main_pid)
    for count in stacks.main_counts:
        marks = step_source.marks(count.frames)
        total += count.count
        for name, read in _KINDS:
            mark = read(marks)
            if mark is not None:
                counted[(name, mark)] += count.count
        if marks.host_sync is not None:
            syncs[marks.host_sync] += count.count
        recompute += count.count if marks.recomputing else 0
        generated.update(dict.fromkeys(marks.generated_files))
        if marks.unread_file is not None:
            unread[marks.unread_file] = None
    for count in stacks.other_counts:  # the pin-memory thread; compiled backward on autograd's device thread
        marks = step_source.marks(count.frames)
        generated.update(dict.fromkeys(marks.generated_files))
        if marks.pin_memory is not None:
            pinned[Mark("on", "stacks", f"{marks.pin_memory.where} on another thread")] = None
    return _FrameTally(total, tuple((name, mark, n) for (name, mark), n in counted.items()), tuple(syncs.items()),
                       recompute, tuple(generated), tuple(unread), tuple(pinned))


def step_facts(history: Sequence[Frame], main_pid: int, gpu: GpuSummary) -> StepFacts:
    """The StepFacts of the recent end of `history` (oldest first, not empty) for the main process `main_pid`."""
    tallies = {name: _Tally() for name, _ in _KINDS}
    syncs: Counter[Mark] = Counter()
    generated: dict[str, None] = {}
    unread: dict[str, None] = {}
    total = recompute = 0
    for frame in recent(history, STEP_FACTS_LOOKBACK_S):
        tally = _frame_tally(frame, main_pid)
        total += tally.samples
        for name, mark, samples in tally.marks:
            tallies[name].add(mark, samples)
        for mark, samples in tally.syncs:
            syncs[mark] += samples
        recompute += tally.recompute
        generated.update(dict.fromkeys(tally.generated))
        unread.update(dict.fromkeys(tally.unread))
        for mark in tally.pinned_elsewhere:
            tallies["pin_memory"].add(mark, 0)
    flags = command_line_marks(_command_line(history[-1], main_pid))
    code = {path: step_source.generated(path) for path in generated}
    unread.update((path, None) for path, read in code.items() if read is None)
    compiled = tallies["compiled"].best(total)
    eager = tallies["eager"].best(total)
    if compiled is None and (eager is None or eager.samples < MIN_EAGER_SAMPLES):
        compiled = _flag(flags, "compiled")
    elif compiled is None:
        compiled = eager
    return StepFacts(
        samples=total,
        compiled=cast("Fact[Compiled] | None", compiled),
        attention=cast("Fact[Attention] | None",
                       tallies["attention"].best(total) or _generated_attention(code)),
        autocast=cast("Fact[Autocast] | None", tallies["autocast"].best(total) or _flag(flags, "autocast")),
        compute_dtype=cast("Fact[Dtype] | None", _generated_dtype(code) or _flag(flags, "compute_dtype")),
        grad_scaler=cast("Fact[Scaler] | None", tallies["grad_scaler"].best(total)),
        checkpointing=cast("Fact[OnOff] | None",
                           tallies["checkpointing"].best(total) or _flag(flags, "checkpointing")),
        recompute_samples=recompute,
        optimizer=cast("Fact[OptimizerImpl] | None", tallies["optimizer"].best(total) or _flag(flags, "optimizer")),
        host_syncs=tuple(Fact(cast(HostSync, mark.value), mark.origin, mark.where, samples, total)
                         for mark, samples in syncs.most_common(MAX_HOST_SYNCS)),
        pin_memory=cast("Fact[OnOff] | None", tallies["pin_memory"].best(total)),
        non_blocking=cast("Fact[OnOff] | None", tallies["non_blocking"].best(total)),
        gpu_memory=_gpu_memory(gpu),
        unread=tuple(list(unread)[:MAX_UNREAD]),
    )


def _flag(flags: dict[str, Mark], name: str) -> Fact | None:
    mark = flags.get(name)
    return Fact(mark.value, mark.origin, mark.where) if mark is not None else None


def _generated_attention(code: dict[str, Generated | None]) -> Fact[Attention] | None:
    """The attention the generated code runs: a fused op wherever one file calls it (a forward's file first), else
    by hand."""
    ranked = sorted(((path, read) for path, read in code.items() if read is not None),
                    key=lambda item: (item[1].attention_op or "").endswith("_backward"))
    for wanted in ("sdpa", "flash_attn", "by_hand"):
        for path, read in ranked:
            if read.attention == wanted:
                where = f"{short_path(path)[:8]}….py calls {read.attention_op}" if wanted != "by_hand" else \
                    f"{short_path(path)[:8]}….py runs {read.attention_op} and no fused attention op"
                return Fact(wanted, "generated code", where + (RECORDED_WHERE if read.recorded else ""))
    return None


def _generated_dtype(code: dict[str, Generated | None]) -> Fact[Dtype] | None:
    """The lowest-precision float the generated code allocates buffers in, with the counts of each."""
    counts: Counter[str] = Counter()
    recorded = False
    for read in code.values():
        if read is not None:
            counts.update(dict(read.dtypes))
            recorded = recorded or (read.recorded and bool(read.dtypes))
    if not counts:
        return None
    value = next(d for d in ("bfloat16", "float16", "float32") if counts[d])
    buffers = ", ".join(f"{n} {d}" for d, n in counts.most_common())
    return Fact(cast(Dtype, value), "generated code",
                f"buffers of the compiled graphs: {buffers}" + (RECORDED_WHERE if recorded else ""))


def _gpu_memory(gpu: GpuSummary) -> Fact[tuple[int, int]] | None:
    used, total = gpu.mem_used_bytes, gpu.mem_total_bytes
    if used is None or not total:
        return None
    own = [p.used_memory_bytes for d in gpu.devices for p in d.processes
           if p.in_target and p.used_memory_bytes is not None]
    mine = f" (the job's processes: {sum(own) / 2**30:.1f} GiB)" if own else ""
    where = f"{gpu.label()}: {used / 2**30:.1f} of {total / 2**30:.1f} GiB used{mine}"
    return Fact((used, total), "NVML", where)


def _command_line(frame: Frame, main_pid: int) -> tuple[str, ...]:
    """The training process's command line (the main process's; the target's where the frame has none)."""
    process = frame.process(main_pid)
    return process.cmdline if process is not None and process.cmdline else frame.target.cmdline


_TRUE = ("true", "1", "yes")
_FALSE = ("false", "0", "no")


def _options(argv: Sequence[str]) -> list[tuple[str, str | None, str]]:
    """(name, value or None for a bare flag, as written) of each --option, `--a=b` and `--a b` alike."""
    found: list[tuple[str, str | None, str]] = []
    for index, arg in enumerate(argv):
        if not arg.startswith("--"):
            continue
        name, equals, value = arg[2:].partition("=")
        if equals:
            found.append((name, value, arg))
        elif index + 1 < len(argv) and not argv[index + 1].startswith("-"):
            found.append((name, argv[index + 1], f"{arg} {argv[index + 1]}"))
        else:
            found.append((name, None, arg))
    return found


def command_line_marks(argv: Sequence[str]) -> dict[str, Mark]:
    """What the command line sets, by the flags whose meaning is fixed: torch.compile (`--compile`, nanoGPT's
    `--compile=False`, Hugging Face's `--torch_compile`), autocast (`--bf16`, `--fp16`, Lightning's
    `--precision bf16-mixed`, Accelerate's `--mixed_precision`), the compute dtype (nanoGPT's `--dtype`),
    checkpointing (`--gradient_checkpointing`), a fused optimizer (`--optim adamw_torch_fused`)."""
    marks: dict[str, Mark] = {}

    def said(name: str, value: str, written: str) -> None:
        marks[name] = Mark(value, "command line", written)

    for name, value, written in _options(argv):
        lowered = value.lower() if value is not None else None
        on = lowered is None or lowered in _TRUE
        off = lowered in _FALSE
        if name in ("compile", "torch_compile") and (on or off):
            said("compiled", "compiled" if on else "eager", written)
        elif name in ("no-compile", "no_compile") and value is None:
            said("compiled", "eager", written)
        elif name in ("bf16", "fp16") and on:
            said("autocast", "bfloat16" if name == "bf16" else "float16", written)
        elif name == "precision" and lowered in ("bf16-mixed", "16-mixed"):
            said("autocast", "bfloat16" if lowered == "bf16-mixed" else "float16", written)
        elif name == "mixed_precision" and lowered in ("bf16", "fp16"):
            said("autocast", "bfloat16" if lowered == "bf16" else "float16", written)
        elif name == "dtype" and lowered in ("bfloat16", "float16", "float32"):
            said("compute_dtype", lowered, written)
        elif name in ("gradient_checkpointing", "activation_checkpointing") and (on or off):
            said("checkpointing", "on" if on else "off", written)
        elif name == "optim" and lowered is not None and "fused" in lowered:
            said("optimizer", "fused", written)
    return marks
