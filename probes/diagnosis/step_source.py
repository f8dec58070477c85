"""The job's source as the step facts read it (step_facts.py): what each sampled stack's lines say (StackMarks,
step_marks.py) and what torch.compile's generated code says (Generated), read from this machine's disk or, in a
replay, as the machine that recorded the run read them.

Some facts are read from the lines a stack names (attention written by hand, `with torch.autocast(...)`, `.item()`,
non_blocking copies, the GradScaler's `if not self._enabled:`) and from Inductor's files, which are on the machine the
job ran on. A live run writes what it read of them into its recording (SourceWriter: on the frame line where a stack,
or a generated file, first shows, under RECORDING_KEY, beside the frame's own fields, which older readers ignore), and
reading a recording back hands them here (remember). A replay on another machine, or after the job's files moved,
then says what the live screen said, each fact taken from the recording marked so: its place ends with RECORDED_WHERE.
Where this machine reads a line itself its own reading stands, so a live run never takes a recorded one; a recording
written before this carries none and replays as before (its unread files listed as unread).

What is recorded is small: per stack, keyed by a digest of its frames (the same on every machine), the marks read
from source lines and whether its innermost line of the user's code was read; per generated file, its attention op
and buffer dtypes. Both tables are bounded, least recently used first.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import re
import threading
from collections import Counter, OrderedDict
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Generic, TypeVar, cast

from probes.diagnosis.stacks import is_library
from probes.diagnosis.step_marks import Mark, StackMarks, stack_marks_cached
from probes.frame import ROLE_DATALOADER_WORKER, Frame, StackFrame
from probes.lru import LruCache
from probes.sensors import source_lines
from probes.stack_identity import is_main_thread

Stack = tuple[StackFrame, ...]  # innermost frame first

# The key of a frame line's object that carries what the recording machine read (probes/outputs/recording.py).
RECORDING_KEY = "step_source"
# How a fact read on the recording machine says so, after its place: "HandAttention.forward (train.py:41): softmax
# and a matmul written out (read on the recording machine)".
RECORDED_WHERE = " (read on the recording machine)"
WRITTEN_STACKS = 4096  # stacks a recording remembers it carries; one seen again after more are written is written again
WRITTEN_FILES = 256  # generated files, likewise
# What this process keeps of the recordings it read: a few hundred bytes a stack, so a few megabytes at most.
RECORDED_STACKS = 16384
RECORDED_FILES = 1024
_MARK_FIELDS = tuple(f.name for f in dataclasses.fields(StackMarks) if f.name != "unread_file"
                     and "Mark" in str(f.type))


# --- torch.compile's generated code -----------------------------------------------------------------------------


@dataclass(frozen=True)
class Generated:
    """What one file of torch.compile's generated code says (None fields where it does not say)."""

    attention: str | None = None  # "sdpa", "flash_attn" or "by_hand"
    attention_op: str | None = None  # the forward's op where the file names one (a backward's file names its own)
    dtypes: tuple[tuple[str, int], ...] = ()  # buffers allocated, per float dtype
    recorded: bool = False  # read on the machine that recorded the run, not here


_FUSED_ATTENTION_OP = re.compile(r"aten\._(?:scaled_dot_product_\w*?attention\w*|flash_attention_forward|"
                                 r"efficient_attention_forward)")
_FLASH_ATTN_OP = re.compile(r"torch\.ops\.flash_attn\.\w+")
_SOFTMAX_OP = re.compile(r"aten\._(?:safe_)?softmax\b")
_BMM_OP = re.compile(r"aten\.bmm\b")
_BUFFER_DTYPE = re.compile(r"empty_strided(?:_\w+)?\(\([^()]*\),\s*\([^()]*\),\s*torch\.(bfloat16|float16|float32)\)")
_generated_here: LruCache[str, tuple[Generated | None]] = LruCache(64)


def _read_generated(path: str) -> Generated | None:
    text = source_lines.file_text(path)
    if text is None:
        return None
    fused = sorted(set(_FUSED_ATTENTION_OP.findall(text)), key=lambda op: (op.endswith("_backward"), op))
    flash = _FLASH_ATTN_OP.search(text)
    attention = op = None
    if fused:  # the forward's op by name, where a backward's file names it too
        attention, op = "sdpa", fused[0]
    elif flash:
        attention, op = "flash_attn", flash.group(0)
    elif _SOFTMAX_OP.search(text) and _BMM_OP.search(text):
        attention, op = "by_hand", "aten._softmax and aten.bmm"
    dtypes = Counter(_BUFFER_DTYPE.findall(text))
    return Generated(attention, op, tuple(sorted(dtypes.items(), key=lambda item: -item[1])))


def generated_here(path: str) -> Generated | None:
    """The generated code at `path` as this machine reads it, once (None where it is not readable here)."""
    return _generated_here.get_or_build(path, lambda: (_read_generated(path),))[0]


def generated(path: str) -> Generated | None:
    """The generated code at `path`: read here, else as the recording machine read it (None where neither did)."""
    return generated_here(path) or _recorded.file(path)


# --- one stack's marks ------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class _RecordedStack:
    """What the recording machine read of one stack's lines: the marks it read from them, and whether it read its
    innermost line of the user's code (so that file is not "not readable" in the replay)."""

    marks: tuple[tuple[str, Mark], ...]
    read: bool


_digests: LruCache[Stack, str] = LruCache(2048)


def stack_digest(stack: Stack) -> str:
    """A name for the stack that is the same on every machine and in every process (Python's own hash is not)."""
    def digest() -> str:
        text = json.dumps([[f.function, f.file, f.line, f.native] for f in stack], separators=(",", ":"))
        return hashlib.blake2b(text.encode("utf-8", "replace"), digest_size=12).hexdigest()

    return _digests.get_or_build(stack, digest)


def marks(stack: Stack) -> StackMarks:
    """What the stack shows of the step, as stack_marks reads it here, with what the recording machine read of its
    lines wherever this machine did not read them itself (a replay elsewhere). Memoised by stack, as its parts are."""
    here = stack_marks_cached(stack)
    if not _recorded.has_stacks():  # nothing recorded was read in this process: a live run
        return here
    entry = _recorded.stack(stack_digest(stack))
    if entry is None:
        return here
    merged = _merged.get(stack)
    if merged is None or merged[0] is not entry:  # first asked, or recorded again since
        merged = (entry, _merge(here, entry))
        _merged.put(stack, merged)
    return merged[1]


def _merge(here: StackMarks, entry: _RecordedStack) -> StackMarks:
    """A mark read from source on the recording machine stands where this machine read none from source: for the
    same stack, step_marks reads a line only where the stack's frames say nothing, so a mark from the frames here
    (a GradScaler only "seen") is one this machine fell back to for want of the line."""
    changes: dict[str, Any] = {}
    for name, mark in entry.marks:
        mine = getattr(here, name)
        if mine is None or mine.origin != "source":
            changes[name] = Mark(mark.value, mark.origin, mark.where + RECORDED_WHERE)
    if entry.read and here.unread_file is not None:
        changes["unread_file"] = None
    return dataclasses.replace(here, **changes) if changes else here


def _from_source(stack: Stack, found: StackMarks) -> _RecordedStack | None:
    """What a recording carries of a stack read here: its marks from source lines, and whether its innermost line
    of the user's code was read; None where no line of it mattered."""
    read = [(name, mark) for name in _MARK_FIELDS if (mark := getattr(found, name)) is not None and
            mark.origin == "source"]
    python = [f for f in stack if not f.native]
    user_innermost = bool(python) and not is_library(python[0])
    if not read and not (user_innermost and found.unread_file is None):
        return None
    return _RecordedStack(tuple(read), user_innermost and found.unread_file is None)


# --- written with a recording, read back with it -------------------------------------------------------------------


class SourceWriter:
    """For one recording: what this machine read of the stacks and generated files a frame shows, the first time
    each shows (again once WRITTEN_STACKS others came between), as the object to write under RECORDING_KEY."""

    def __init__(self) -> None:
        self._stacks: _Bounded[str, bool] = _Bounded(WRITTEN_STACKS)
        self._files: _Bounded[str, bool] = _Bounded(WRITTEN_FILES)

    def new_in(self, frame: Frame) -> dict[str, Any] | None:
        """The readings the frame's stacks need that this recording does not carry yet; None where none. A frame
        read on another node (`gputop agent`'s, merged here) names files of that node: nothing is read for it."""
        if frame.node is not None:
            return None
        workers = {p.pid for p in frame.processes if p.role == ROLE_DATALOADER_WORKER}
        stacks: dict[str, Any] = {}
        files: dict[str, Any] = {}
        for count in frame.stacks.counts:
            if count.pid in workers:
                continue  # a worker's marks say nothing of the step
            found = stack_marks_cached(count.frames)
            for path in found.generated_files:
                if self._files.get(path) is None:
                    self._files.put(path, True)
                    code = generated_here(path)
                    if code is not None:
                        files[path] = {"attention": code.attention, "attention_op": code.attention_op,
                                       "dtypes": [list(pair) for pair in code.dtypes]}
            if not is_main_thread(count.pid, count.tid, count.thread_name, count.frames, count.pid):
                continue  # only the main thread's lines make facts
            digest = stack_digest(count.frames)
            if self._stacks.get(digest) is not None:
                continue
            self._stacks.put(digest, True)
            entry = _from_source(count.frames, found)
            if entry is not None:
                stacks[digest] = {"marks": {name: [m.value, m.origin, m.where] for name, m in entry.marks},
                                  "read": entry.read}
        if not stacks and not files:
            return None
        return {"stacks": stacks, "files": files}


def remember(document: object) -> None:
    """Keep what a recording's frame line carries under RECORDING_KEY for the replay that reads it; what this
    gputop does not understand of it (a newer writer's, a damaged one) is left out, never fatal."""
    if not isinstance(document, Mapping):
        return
    stacks, files = document.get("stacks"), document.get("files")
    for digest, entry in stacks.items() if isinstance(stacks, Mapping) else ():
        parsed = _parse_stack(entry)
        if isinstance(digest, str) and parsed is not None:
            _recorded.put_stack(digest, parsed)
    for path, entry in files.items() if isinstance(files, Mapping) else ():
        parsed_file = _parse_file(entry)
        if isinstance(path, str) and parsed_file is not None:
            _recorded.put_file(path, parsed_file)


def _parse_stack(entry: object) -> _RecordedStack | None:
    if not isinstance(entry, Mapping) or not isinstance(entry.get("marks"), Mapping):
        return None
    read: list[tuple[str, Mark]] = []
    for name, mark in entry["marks"].items():
        if name in _MARK_FIELDS and isinstance(mark, list) and len(mark) == 3 and all(isinstance(x, str) for x in mark):
            read.append((name, Mark(mark[0], cast(Any, mark[1]), mark[2])))
    return _RecordedStack(tuple(read), entry.get("read") is True)


def _parse_file(entry: object) -> Generated | None:
    if not isinstance(entry, Mapping):
        return None
    attention, op, dtypes = entry.get("attention"), entry.get("attention_op"), entry.get("dtypes")
    if not (attention is None or isinstance(attention, str)) or not (op is None or isinstance(op, str)):
        return None
    pairs = tuple((d, n) for d, n in _pairs(dtypes) if isinstance(d, str) and isinstance(n, int))
    return Generated(attention, op, pairs, recorded=True)


def _pairs(value: object) -> Iterable[tuple[object, object]]:
    for item in value if isinstance(value, list) else ():
        if isinstance(item, list) and len(item) == 2:
            yield item[0], item[1]


K = TypeVar("K")
V = TypeVar("V")


class _Bounded(Generic[K, V]):
    """A mapping of at most `capacity` entries, least recently used out first, that can be asked without adding."""

    def __init__(self, capacity: int) -> None:
        self.capacity = capacity
        self._entries: OrderedDict[K, V] = OrderedDict()
        self._lock = threading.Lock()

    def __len__(self) -> int:
        return len(self._entries)

    def get(self, key: K) -> V | None:
        with self._lock:
            found = self._entries.get(key)
            if found is not None:
                self._entries.move_to_end(key)
            return found

    def put(self, key: K, value: V) -> None:
        with self._lock:
            self._entries[key] = value
            self._entries.move_to_end(key)
            while len(self._entries) > self.capacity:
                self._entries.popitem(last=False)


class _Recordings:
    """What the recordings read in this process carry: each stack's and each generated file's readings."""

    def __init__(self) -> None:
        self._stacks: _Bounded[str, _RecordedStack] = _Bounded(RECORDED_STACKS)
        self._files: _Bounded[str, Generated] = _Bounded(RECORDED_FILES)

    def has_stacks(self) -> bool:
        return len(self._stacks) > 0

    def stack(self, digest: str) -> _RecordedStack | None:
        return self._stacks.get(digest)

    def file(self, path: str) -> Generated | None:
        return self._files.get(path) if len(self._files) else None

    def put_stack(self, digest: str, entry: _RecordedStack) -> None:
        if self._stacks.get(digest) != entry:  # the same reading again keeps its merged marks
            self._stacks.put(digest, entry)

    def put_file(self, path: str, entry: Generated) -> None:
        self._files.put(path, entry)


_recorded = _Recordings()
_merged: _Bounded[Stack, tuple[_RecordedStack, StackMarks]] = _Bounded(1024)
