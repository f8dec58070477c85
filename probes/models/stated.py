"""The model a running job states itself, read from its command line (and the head of its log), for the
live pace when the user gives neither ``--model`` nor ``--baseline``.

Two readers, tried in order, the first that recognises the command line wins:
- nanoGPT's train.py, its config file and ``--key=value`` overrides (probes/models/nanogpt_config.py): first,
  because its train.py is recognised by the configurator.py beside it, a surer sign than an argument that
  names a folder;
- a Hugging Face config.json named by an argument (probes/models/hf_command_line.py): ``--model_name_or_path
  DIR``, ``--config PATH.json``, any argument that is a folder holding one.

Each says where the shape came from; the pace shows it ("Model from ..."), on screen and in the snapshot.
Nothing is executed, unpickled or downloaded: files on this machine are read, that is all.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass

from probes.models import ModelShape

LOG_HEAD_BYTES = 256 * 1024  # what a reader may look for there (nanoGPT's parameter count) is printed early


@dataclass(frozen=True)
class StatedModel:
    """The shape a job states, what the pace calls it, where it came from, and its tokens per iteration when
    the command line says them."""

    shape: ModelShape
    model: str  # what the pace calls the model: "nanoGPT", a config.json's path
    source: str  # e.g. "nanoGPT's command line: config/x.py --n_layer=4 (vocab from its 'number of parameters' line)"
    tokens_per_iter: int | None = None
    tokens_source: str | None = None  # how tokens_per_iter was worked out from the command line


def read_job_command_line(argv: Sequence[str], cwd: str, log_text: str | None = None) -> StatedModel | None:
    """The model the first reader that knows this command line finds, or None. Never raises."""
    # Imported here: both readers import StatedModel from this module.
    from probes.models import hf_command_line, nanogpt_config

    for reader in (nanogpt_config.read_command_line, hf_command_line.read_command_line):
        stated = reader(argv, cwd, log_text)
        if stated is not None:
            return stated
    return None


def stated_model(pid: int, log_path: str | None) -> StatedModel | None:
    """The model the job `pid` states on its command line (and in its log's head, `log_path` or its stdout
    when that is a file); None when no reader knows it or /proc cannot be read. Never raises."""
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as handle:
            argv = [part.decode("utf-8", "replace") for part in handle.read().split(b"\0") if part]
        cwd = os.readlink(f"/proc/{pid}/cwd")
    except OSError:
        return None
    log = log_path or _stdout_file(pid)
    return read_job_command_line(argv, cwd, _head(log) if log else None)


def _stdout_file(pid: int) -> str | None:
    try:
        path = os.readlink(f"/proc/{pid}/fd/1")
    except OSError:
        return None
    return path if os.path.isfile(path) else None


def _head(path: str) -> str | None:
    try:
        with open(path, encoding="utf-8", errors="replace") as handle:
            return handle.read(LOG_HEAD_BYTES)
    except OSError:
        return None
