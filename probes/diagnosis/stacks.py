"""What a sampled stack is doing, for the diagnosis: each stack is put in one activity (compiling,
saving a checkpoint, in a collective, blocked on network reads, waiting for the DataLoader, preparing
data, waiting, computing) by the library frames it contains, and a thread's samples over a window are
summed into a profile that also remembers which frame is responsible. Running torch.compile's compiled code
(runs_compiled_code, is_generated_code) is no activity of its own: it computes or waits as eager code does, but
the advice must know the model runs compiled.

Pure functions over probes.frame types. Classifying one stack is cached (stacks repeat tick after tick),
so diagnosing a long history costs little.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Final, Literal, get_args

from probes.frame import StackCount, StackFrame
from probes.lru import LruCache
from probes.sampling.stacks import frame_matches
from probes.stack_identity import is_generated_code, is_generated_file, is_library

# What a stack does, most specific first: when one stack holds several markers, the first listed wins (a
# collective inside a distributed checkpoint is the checkpoint; a socket read inside a DataLoader fetch is I/O).
# Declared once here; the names below are its members, and ACTIVITIES lists them in this order.
Activity = Literal["compile", "checkpoint", "comms", "io", "data_wait", "data_prep", "queue_wait", "wait", "compute"]
COMPILE: Final[Activity] = "compile"
CHECKPOINT: Final[Activity] = "checkpoint"
COMMS: Final[Activity] = "comms"
IO: Final[Activity] = "io"
DATA_WAIT: Final[Activity] = "data_wait"  # the main thread waits for DataLoader workers
DATA_PREP: Final[Activity] = "data_prep"  # the thread itself loads, decodes, tokenizes or collates samples
QUEUE_WAIT: Final[Activity] = "queue_wait"  # blocked in a queue's get() outside the DataLoader
WAIT: Final[Activity] = "wait"  # idle: sleeping, a lock, an event, a select
COMPUTE: Final[Activity] = "compute"  # running (Python, or a native call under a Python line)
ACTIVITIES: tuple[Activity, ...] = get_args(Activity)

# How a rank's main thread waits for the other ranks where no collective frame shows (classify_stack's
# `peer_wait`): in a CPU (gloo) job, DDP's reducer waits inside backward; in a GPU job whose GPU spins (NCCL
# kernels waiting for peers: util high, power low), the host waits at its next synchronisation.
PeerWait = Literal["backward", "sync"]
PEER_WAIT_BACKWARD: Final[PeerWait] = "backward"  # an idle backward is DDP's reducer waiting
PEER_WAIT_SYNC: Final[PeerWait] = "sync"

# Frames inside these files mean torch.compile is compiling (not running compiled code, which goes
# through eval_frame.py and the runtime wrappers instead).
_COMPILE_FILES = (
    "torch/_dynamo/convert_frame.py",
    "torch/_dynamo/symbolic_convert.py",
    "torch/_dynamo/output_graph.py",
    "torch/_dynamo/bytecode_transformation.py",
    "torch/_functorch/_aot_autograd/graph_compile.py",
    "torch/_functorch/partitioners.py",
    "torch/_inductor/compile_fx.py",
    "torch/_inductor/graph.py",
    "torch/_inductor/scheduler.py",
    "torch/_inductor/codecache.py",
    "torch/_inductor/async_compile.py",
    "torch/_inductor/compile_worker/",
)
# What runs around and beneath that code: the call of a compiled graph, AOTAutograd's wrappers around its forward
# and backward (any backend), Inductor's and Triton's kernel launchers.
_COMPILED_RUNTIME_FILES = (
    "torch/_inductor/output_code.py",  # CompiledFxGraph.__call__
    "torch/_functorch/_aot_autograd/runtime_wrappers.py",
    "torch/_inductor/runtime/triton_heuristics.py",  # CachingAutotuner.run
    "torch/_inductor/runtime/static_triton_launcher.py",
    "triton/runtime/",
    "triton/backends/",
)
_CHECKPOINT_MARKERS = (
    ("save", "torch/serialization.py"),
    ("_save", "torch/serialization.py"),
    ("save_file", "safetensors/torch.py"),
    ("_save_checkpoint", "transformers/trainer.py"),
    ("save_checkpoint", "lightning/pytorch/trainer/trainer.py"),
    ("save_checkpoint", "deepspeed/runtime/engine.py"),
)
_CHECKPOINT_FILES = ("torch/distributed/checkpoint/",)
_COMMS_FILES = (
    "torch/distributed/distributed_c10d.py",
    "torch/distributed/_functional_collectives.py",
    "torch/distributed/c10d_logger.py",  # the logging wrapper every c10d collective runs under
    "torch/distributed/algorithms/ddp_comm_hooks/",
    "torch/distributed/fsdp/_fully_shard/_fsdp_collectives.py",  # FSDP2's all-gather and reduce-scatter
)
# Collectives run from hooks, named by the hook: FSDP's unshard (all-gather) and gradient reduce-scatter,
# DDP's buffer broadcast before forward.
_COMMS_MARKERS = (
    ("_unshard", "torch/distributed/fsdp/_runtime_utils.py"),
    ("_reduce_grad", "torch/distributed/fsdp/_runtime_utils.py"),
    ("FSDPParamGroup.unshard", "torch/distributed/fsdp/_fully_shard/_fsdp_param_group.py"),
    ("FSDPParamGroup.wait_for_unshard", "torch/distributed/fsdp/_fully_shard/_fsdp_param_group.py"),
    ("FSDPParamGroup.post_backward", "torch/distributed/fsdp/_fully_shard/_fsdp_param_group.py"),
    ("DistributedDataParallel._sync_buffers", "torch/nn/parallel/distributed.py"),
    ("DistributedDataParallel._distributed_broadcast_coalesced", "torch/nn/parallel/distributed.py"),
)
# DDP's gradient all-reduce runs from autograd hooks in C++: a rank waiting for a slower peer shows only
# backward's entry into the engine as its innermost Python frame, idle. A lone process shows the same while
# the GPU runs its backward, so this counts as a collective only for a rank of a CPU (gloo) job.
_REDUCER_WAIT = ("_engine_run_backward", "torch/autograd/graph.py")
# Where the host waits for the GPU. A rank whose GPU spins (util high, power low: NCCL kernels waiting for
# peers) and whose main thread sits here is waiting for the other ranks. `.item()` and `.cpu()` show only
# with native frames (--native): their CUDA copies and synchronisations are named below.
_DEVICE_SYNC = (
    ("synchronize", "torch/cuda/__init__.py"),
    ("Event.synchronize", "torch/cuda/streams.py"),
    ("Stream.synchronize", "torch/cuda/streams.py"),
)
_DEVICE_SYNC_NATIVE = ("cudaStreamSynchronize", "cudaDeviceSynchronize", "cudaEventSynchronize",
                       "_local_scalar_dense", "cudaMemcpy", "cuStreamSynchronize", "cuMemcpyDtoH")
# Network and object-store clients; a socket read under any of them is I/O.
_IO_FILES = (
    "/socket.py", "/ssl.py", "/http/client.py", "/urllib/request.py", "/urllib3/", "/requests/",
    "/fsspec/", "/s3fs/", "/gcsfs/", "/botocore/", "/aiohttp/", "/smart_open/",
)
_IO_FUNCTIONS = frozenset({"read", "readinto", "recv", "recv_into", "readline", "_safe_read",
                           "_read_status", "getresponse", "urlopen", "open", "_fill_buffer",
                           "_readinto_chunked", "connect", "create_connection", "do_open"})
_DATALOADER_FILE = "torch/utils/data/dataloader.py"
# Only the multi-process iterator waits on workers; the single-process one fetches on the main thread.
_DATALOADER_WAIT_FUNCTIONS = ("_try_get_data", "_get_data")
_MULTIPROCESS_ITERATOR = "_MultiProcessingDataLoaderIter."
_WORKER_LOOP = ("_worker_loop", "torch/utils/data/_utils/worker.py")
_DATA_FILES = (
    "torch/utils/data/_utils/fetch.py", "torch/utils/data/_utils/collate.py", "torch/utils/data/dataset.py",
    "torch/utils/data/datapipes/", "/datasets/", "/tokenizers/", "/tiktoken/", "/torchvision/transforms/",
    "/PIL/", "/webdataset/", "/streaming/", "transformers/tokenization_",
)
# Data preparation in the user's own code, by name: get_batch, load_batch, tokenize, collate_fn, ...
_DATA_FUNCTION = re.compile(
    r"(^|_)(get_?batch(es)?|next_batch|load_batch|fetch_batch|read_batch|tokeni[sz]e\w*|"
    r"detokeni[sz]e|collate\w*|preprocess\w*|augment\w*)$",
    re.IGNORECASE,
)
_QUEUE_GET = (("get", "multiprocessing/queues.py"), ("get", "/queue.py"), ("get", "multiprocessing/managers.py"))

_SHORT_PATH = re.compile(r".*/(?:site-packages|dist-packages|lib/python\d+(?:\.\d+)?)/")


def short_path(file: str) -> str:
    """A file as a person reads it: torch/utils/data/dataloader.py, socket.py, train.py."""
    shortened = _SHORT_PATH.sub("", file)
    if shortened != file:
        return shortened
    return file.rsplit("/", 1)[-1]


def file_words(file: str) -> str:
    """A source file as a person reads it: 'train.py', 'torch/optim/adam.py'; Inductor's generated code named as
    such, its file by the start of its hash: 'torch.compile's generated code czn2vzoo….py'."""
    if not file:
        return "?"
    if is_generated_file(file):
        return f"torch.compile's generated code {short_path(file)[:8]}….py"
    return short_path(file)


def describe(frame: StackFrame) -> str:
    """'Class.method (file.py:123)'; 'Runner.call (torch.compile's generated code czn2vzoo….py:224)'."""
    return f"{frame.function} ({file_line(frame)})"


def file_line(frame: StackFrame) -> str:
    """'multiprocessing/queues.py:103'; the file alone where the frame has no line."""
    where = file_words(frame.file)
    return f"{where}:{frame.line}" if frame.line else where


def runs_compiled_code(frames: Sequence[StackFrame]) -> bool:
    """The stack runs torch.compile's compiled code (generated code, a compiled graph's wrappers, Triton's
    launchers) and is not compiling: compiling is a phase of its own, running compiled code is the model at work."""
    return not any(_is_compile(f) for f in frames) and any(
        is_generated_code(f) or _in_files(f, _COMPILED_RUNTIME_FILES) for f in frames)


def _base_name(function: str) -> str:
    return function.rsplit(".", 1)[-1]


def _in_files(frame: StackFrame, fragments: Iterable[str]) -> bool:
    return any(fragment in frame.file for fragment in fragments)


# aot_autograd.py holds both the compile entry points and, as closures, the wrappers that run the
# compiled graph (aot_module_simplified.<locals>.forward): only the former mean compiling.
_AOT_AUTOGRAD_FILE = "torch/_functorch/aot_autograd.py"


def _is_compile(frame: StackFrame) -> bool:
    if frame.file.endswith(_AOT_AUTOGRAD_FILE):
        return "<locals>" not in frame.function
    return _in_files(frame, _COMPILE_FILES)


def _is_checkpoint(frame: StackFrame) -> bool:
    return _in_files(frame, _CHECKPOINT_FILES) or any(
        frame_matches(frame, function, suffix) for function, suffix in _CHECKPOINT_MARKERS)


def _is_comms(frame: StackFrame) -> bool:
    return _in_files(frame, _COMMS_FILES) or any(
        frame_matches(frame, function, suffix) for function, suffix in _COMMS_MARKERS)


def is_reducer_wait(frames: Sequence[StackFrame]) -> bool:
    """The innermost Python frame is backward's entry into the autograd engine (DDP's reducer waits there)."""
    innermost = next((f for f in frames if not f.native), None)
    return innermost is not None and frame_matches(innermost, *_REDUCER_WAIT)


def is_device_sync(frames: Sequence[StackFrame]) -> bool:
    """The thread waits for the GPU: torch.cuda.synchronize, an event or stream sync, or (native frames) a
    CUDA synchronisation or device-to-host copy such as `.item()` makes."""
    for frame in frames:
        if frame.native:
            if any(name in frame.function for name in _DEVICE_SYNC_NATIVE):
                return True
        elif any(frame_matches(frame, function, suffix) for function, suffix in _DEVICE_SYNC):
            return True
    return False


def _is_io(frame: StackFrame) -> bool:
    return _base_name(frame.function) in _IO_FUNCTIONS and _in_files(frame, _IO_FILES)


def _is_dataloader_wait(frame: StackFrame) -> bool:
    if not frame.file.endswith(_DATALOADER_FILE):
        return False
    return frame.function.startswith(_MULTIPROCESS_ITERATOR) or any(
        frame_matches(frame, function, _DATALOADER_FILE) for function in _DATALOADER_WAIT_FUNCTIONS)


def _is_data_prep(frame: StackFrame) -> bool:
    name = _base_name(frame.function)
    if _in_files(frame, _DATA_FILES):
        return True
    if _DATA_FUNCTION.search(name):
        return True
    # A Dataset's __getitem__ in the user's code (torch.nn containers have one too: not data).
    return name == "__getitem__" and not is_library(frame)


def _is_queue_get(frame: StackFrame) -> bool:
    return any(frame_matches(frame, function, suffix) for function, suffix in _QUEUE_GET)


@dataclass(frozen=True)
class StackActivity:
    """One stack, classified: what it does and the frame that says so."""

    activity: Activity
    responsible: StackFrame | None  # the marker frame (or the innermost frame for wait/compute)
    user_frame: StackFrame | None  # the innermost frame of the user's own code at or above it


def _innermost_user_frame(frames: Sequence[StackFrame], start: int) -> StackFrame | None:
    return next((f for f in frames[start:] if not is_library(f)), None)


def classify_stack(frames: Sequence[StackFrame], idle: bool, peer_wait: PeerWait | None = None) -> StackActivity:
    """Which activity a stack (innermost frame first) shows; `idle` is py-spy's judgement of the thread;
    `peer_wait` (PEER_WAIT_*), for a rank's main thread, where it also waits for the other ranks.

    A phase (compiling, checkpointing, a collective) covers everything beneath it, so it wins wherever
    it sits. Otherwise the innermost marker says what the thread does now: a socket read inside a
    DataLoader fetch is I/O, a tokenizer under get_batch is data preparation. A queue get directly
    under the DataLoader is the DataLoader's wait.
    """
    synchronising = peer_wait == PEER_WAIT_SYNC and is_device_sync(frames)
    frames = tuple(f for f in frames if not f.native) or tuple(frames)
    # A forked DataLoader worker still shows the parent's frames beneath its _worker_loop: cut them.
    loop = next((i for i, f in enumerate(frames) if frame_matches(f, *_WORKER_LOOP)), None)
    if loop is not None:
        frames = frames[: loop + 1]
    first: dict[Activity, int] = {}  # activity -> index of its innermost marker
    last: dict[Activity, int] = {}  # activity -> index of its outermost marker
    # Code that runs while a module is imported (beneath importlib's frames) is not the phase its file names:
    # a rank importing torch._dynamo at start-up is not compiling. A compile that imports lazily still has
    # its entry point outside the import.
    importing_below = max((i for i, f in enumerate(frames) if f.file.startswith(_IMPORTLIB_FILE)), default=-1)
    for index, frame in enumerate(frames):
        for activity, test in _MARKER_TESTS:
            if index < importing_below and activity in _PHASES:
                continue
            if test(frame):
                first.setdefault(activity, index)
                last[activity] = index
    for activity in _PHASES:
        if activity in first:
            # The entry point names a phase (torch.save, the compile entry); a collective is named by
            # itself (all_reduce), not by the logging wrappers around it.
            return _found(activity, frames, first[activity] if activity == COMMS else last[activity])
    reducer_waits = peer_wait == PEER_WAIT_BACKWARD and idle
    if synchronising or (reducer_waits and is_reducer_wait(frames)):
        return _found(COMMS, frames, 0)
    local = sorted((first[a], a) for a in (IO, DATA_WAIT, DATA_PREP, QUEUE_WAIT) if a in first)
    if local:
        index, activity = local[0]
        if activity == QUEUE_WAIT and DATA_WAIT in first:
            activity, index = DATA_WAIT, last[DATA_WAIT]
        elif activity == QUEUE_WAIT:
            index = last[QUEUE_WAIT]
        elif activity == DATA_WAIT:
            index = last[DATA_WAIT]
        return _found(activity, frames, index)
    innermost = frames[0] if frames else None
    return StackActivity(WAIT if idle else COMPUTE, innermost, _innermost_user_frame(frames, 0))


def _found(activity: Activity, frames: Sequence[StackFrame], index: int) -> StackActivity:
    if activity == DATA_WAIT:  # name the DataLoader's entry, __next__, as people know it
        while index + 1 < len(frames) and frames[index + 1].file.endswith(_DATALOADER_FILE):
            index += 1
    return StackActivity(activity, frames[index], _innermost_user_frame(frames, index))


_IMPORTLIB_FILE = "<frozen importlib._bootstrap"  # and _bootstrap_external


def importing_from(frames: Sequence[StackFrame]) -> StackFrame | None:
    """Where a stack imports a module from (the frame just outside importlib's outermost frame), or None where it
    runs no import."""
    outermost = max((i for i, f in enumerate(frames) if f.file.startswith(_IMPORTLIB_FILE)), default=None)
    if outermost is None:
        return None
    return frames[outermost + 1] if outermost + 1 < len(frames) else frames[outermost]


_PHASES = (COMPILE, CHECKPOINT, COMMS)

_MARKER_TESTS = (
    (COMPILE, _is_compile),
    (CHECKPOINT, _is_checkpoint),
    (COMMS, _is_comms),
    (IO, _is_io),
    (DATA_WAIT, _is_dataloader_wait),
    (DATA_PREP, _is_data_prep),
    (QUEUE_WAIT, _is_queue_get),
)

# Distinct stacks of a few windows; least recently used first, so that memory stays level (probes/lru.py).
_CLASSIFY_CACHE_SIZE = 1024
_classify_cache: LruCache[tuple[tuple[StackFrame, ...], bool, PeerWait | None], StackActivity] = LruCache(
    _CLASSIFY_CACHE_SIZE)


def classify_cached(frames: tuple[StackFrame, ...], idle: bool, peer_wait: PeerWait | None = None) -> StackActivity:
    """classify_stack, memoised: the same stacks come back tick after tick."""
    return _classify_cache.get_or_build((frames, idle, peer_wait), lambda: classify_stack(frames, idle, peer_wait))


@dataclass
class ThreadProfile:
    """One thread's (or a group of threads') samples over a window, by activity."""

    samples: int = 0
    by_activity: Counter[Activity] = field(default_factory=Counter)
    # activity -> Counter of (responsible frame, user frame) -> samples
    where: dict[Activity, Counter[tuple[StackFrame | None, StackFrame | None]]] = field(default_factory=dict)
    stacks: Counter[tuple[StackFrame, ...]] = field(default_factory=Counter)  # exact stack -> samples
    # activity -> the samples of it py-spy saw active (running or runnable), not blocked: a DataLoader worker inside
    # __getitem__ is data preparation whether it computes there or sleeps on a read
    awake: Counter[Activity] = field(default_factory=Counter)
    peer_wait: PeerWait | None = None  # a rank's main thread: how it waits for the others (classify_stack)

    def add(self, count: StackCount) -> None:
        classified = classify_cached(count.frames, count.idle, self.peer_wait)
        self.samples += count.count
        self.by_activity[classified.activity] += count.count
        self.where.setdefault(classified.activity, Counter())[
            (classified.responsible, classified.user_frame)] += count.count
        self.stacks[count.frames] += count.count
        if not count.idle:
            self.awake[classified.activity] += count.count

    def share(self, *activities: Activity) -> float:
        if not self.samples:
            return 0.0
        return sum(self.by_activity[a] for a in activities) / self.samples

    def awake_share(self, *activities: Activity) -> float:
        """The share of all samples that were in these activities and active (running or runnable)."""
        if not self.samples:
            return 0.0
        return sum(self.awake[a] for a in activities) / self.samples

    def top(self, *activities: Activity) -> tuple[StackFrame | None, StackFrame | None, float]:
        """(responsible frame, user frame, share of these activities' samples) of the commonest spot.

        Spots are grouped by function and file, lines aside (a hot loop spreads over several lines);
        the frames returned carry the commonest line of the winning group.
        """
        exact: Counter = Counter()
        for activity in activities:
            exact.update(self.where.get(activity, {}))
        if not exact:
            return None, None, 0.0
        groups: Counter = Counter()
        for (responsible, user_frame), samples in exact.items():
            groups[place_key(responsible, user_frame)] += samples
        best_group, samples = groups.most_common(1)[0]
        responsible, user_frame = max((pair for pair in exact if place_key(*pair) == best_group), key=exact.__getitem__)
        return responsible, user_frame, samples / max(1, sum(exact.values()))


def place_key(responsible: StackFrame | None, user_frame: StackFrame | None) -> tuple:
    """A place in the code as the profiles group it: by function and file, lines aside (a hot loop spreads over
    several lines)."""
    return tuple((f.function, f.file) if f is not None else None for f in (responsible, user_frame))


def format_where(responsible: StackFrame | None, user_frame: StackFrame | None) -> str:
    """'SocketIO.readinto (socket.py:706), called from fetch_shard (train.py:15)'."""
    if responsible is None:
        return "an unknown frame"
    text = describe(responsible)
    if user_frame is not None and user_frame != responsible:
        text += f", called from {describe(user_frame)}"
    return text


def format_place_first(responsible: StackFrame | None, user_frame: StackFrame | None) -> str:
    """format_where with the file and line first: 'at socket.py:706 in SocketIO.readinto, called from fetch_shard
    (train.py:15)'. A line cut to one row (an 80-column screen) keeps where it is and loses the words after."""
    if responsible is None:
        return "in an unknown frame"
    text = f"at {file_line(responsible)} in {responsible.function}"
    if user_frame is not None and user_frame != responsible:
        text += f", called from {describe(user_frame)}"
    return text


# Phases of a training loop that are not activities of their own (their stacks compute, wait for data or
# reduce like training does), told apart for the time shares (probes/diagnosis/shares.py) by an outer frame.
# Evaluation: a function of the user's own code named estimate_loss (nanoGPT), evaluate*, eval, eval_*,
# validate*, validation*, validation_step or test_step; Hugging Face's Trainer.evaluate and evaluation_loop;
# Lightning's evaluation loop. Library functions are matched by file too (torch has an eval_frame). The frame of
# @torch.no_grad() (decorate_context) is not matched: optimizers' step() runs under it as well.
_EVALUATION_FUNCTION = re.compile(r"^(estimate_loss|evaluat(e|ion)\w*|eval(_\w+)?|validat(e|ion)\w*|test_step)$",
                                  re.IGNORECASE)
_EVALUATION_MARKERS = (
    ("Trainer.evaluate", "transformers/trainer.py"),
    ("Trainer.evaluation_loop", "transformers/trainer.py"),
)
_EVALUATION_FILES = ("lightning/pytorch/loops/evaluation_loop.py",)
# Logging: the standard library's logging, and the experiment trackers' clients.
_LOGGING_FILES = ("/logging/__init__.py", "/logging/handlers.py", "/wandb/", "/mlflow/", "torch/utils/tensorboard/",
                  "/tensorboardX/", "/comet_ml/", "/neptune/", "/clearml/")


def is_evaluation(frames: Sequence[StackFrame]) -> bool:
    """The stack runs inside an evaluation (see _EVALUATION_FUNCTION for what is matched)."""
    return any((not is_library(f) and _EVALUATION_FUNCTION.match(_base_name(f.function)))
               or _in_files(f, _EVALUATION_FILES)
               or any(frame_matches(f, function, suffix) for function, suffix in _EVALUATION_MARKERS) for f in frames)


def is_logging(frames: Sequence[StackFrame]) -> bool:
    """The stack is inside a logging call or an experiment tracker's client."""
    return any(_in_files(f, _LOGGING_FILES) for f in frames)
