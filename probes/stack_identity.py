"""Whose code a stack frame runs, and which thread is a process's main one: the user's code, a library's (the
standard library, installed packages, native code) or the Python torch.compile generated. Pure functions of a
frame, below both the sampler (which keeps the main thread's stacks) and the diagnosis (which classifies them),
so that neither imports the other's floor.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

from probes.frame import StackFrame

# Frames of torch.compile's compiled code running (not compiling). Inductor writes the Python that runs each
# compiled graph (its Runner.call, or call on older torch) into its cache and imports it from there: by default
# /tmp/torchinductor_<user>/ (seen: /tmp/torchinductor_root/zn/czn2vzooio72….py on CPU, …/bl/cblfrorb….py on an
# H200). TORCHINDUCTOR_CACHE_DIR moves the cache, but the files keep their layout, <2 characters>/c<the same 2
# characters><hash>.py, which no file a person writes has.
_INDUCTOR_CACHE_DIR = "/torchinductor_"
_GENERATED_FILE = re.compile(r"/([a-z0-9]{2})/c\1[a-z0-9]{20,}\.py$")
_LIBRARY_PATH = re.compile(r"(/site-packages/|/dist-packages/|/lib/python\d+(\.\d+)?/|^<)")


def is_library(frame: StackFrame) -> bool:
    """True for the interpreter's standard library, installed packages and the code torch.compile generates;
    False for the user's code."""
    return bool(_LIBRARY_PATH.search(frame.file)) or frame.native or is_generated_code(frame)


def is_generated_code(frame: StackFrame) -> bool:
    """The frame runs Python that Inductor generated for a compiled graph (its cache; see _GENERATED_FILE)."""
    return is_generated_file(frame.file)


def is_generated_file(file: str) -> bool:
    """The file is one of Inductor's generated modules (its cache's layout)."""
    return _INDUCTOR_CACHE_DIR in file or bool(_GENERATED_FILE.search(file))


def is_main_thread(count_pid: int, tid: int, thread_name: str | None, frames: Sequence[StackFrame],
                   main_pid: int) -> bool:
    """The interpreter's main thread of `main_pid`: named MainThread, or the thread whose id is the PID,
    or (when py-spy gave neither) the one whose outermost frame is the script's <module>."""
    if count_pid != main_pid:
        return False
    if thread_name is not None:
        return thread_name == "MainThread"
    if tid == main_pid:
        return True
    return bool(frames) and frames[-1].function in ("<module>", "_run_module_as_main")
