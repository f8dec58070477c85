"""The model a running job states itself, read from its command line (and the head of its log), for the
live pace when the user gives neither ``--model`` nor ``--baseline``.

Two readers, tried in order, the first that recognises the command line wins:
- nanoGPT's train.py, its config file and ``--key=value`` overrides (probes/models/nanogpt_config.py): first,
  because its train.py is recognised by the configurator.py beside it, a surer sign than an argument that
  names a folder;
- a Hugging Face config.json named by an argument (probes/models/hf_command_line.py): ``--model_name_or_path
  DIR``, ``--config PATH.json``, any argument that is a folder holding one.

Each gives a StatedModel (probes/models/stated.py) that says where the shape came from; the pace shows it
("Model from ..."), on screen and in the snapshot. Nothing is executed, unpickled or downloaded: files on this
machine are read, that is all. The process's own files (its arguments, working directory and stdout) are read
by probes/sensors/process_facts.py, which owns one process's files in /proc.

The same two readers, in the same order, give `gputop probe --like PID` every setting the job trains with
(``SETTINGS_READERS``, ``job_settings``): each with where it was read, or why it could not be.
"""

from __future__ import annotations

from collections.abc import Sequence

from probes.models import hf_command_line, nanogpt_config
from probes.models.stated import StatedModel
from probes.models.stated_settings import StatedSettings
from probes.sensors.process_facts import process_arguments, process_cwd, stdout_file

LOG_HEAD_BYTES = 256 * 1024  # what a reader may look for there (nanoGPT's parameter count) is printed early

READERS = (
    nanogpt_config.read_command_line,  # train.py beside configurator.py: the surest sign, so asked first
    hf_command_line.read_command_line,  # any argument that names a config.json or a folder holding one
)


def read_job_command_line(argv: Sequence[str], cwd: str, log_text: str | None = None) -> StatedModel | None:
    """The model the first reader that knows this command line finds, or None. Never raises."""
    for reader in READERS:
        stated = reader(argv, cwd, log_text)
        if stated is not None:
            return stated
    return None


SETTINGS_READERS = (nanogpt_config.read_settings, hf_command_line.read_settings)  # in READERS' order, for its reason


def read_job_settings(argv: Sequence[str], cwd: str, log_text: str | None = None,
                      world_size: int | None = None) -> StatedSettings | None:
    """The settings the first reader that knows this command line finds, or None. Never raises."""
    for reader in SETTINGS_READERS:
        settings = reader(argv, cwd, log_text, world_size)
        if settings is not None:
            return settings
    return None


def job_settings(pid: int, world_size: int | None = None) -> StatedSettings | None:
    """The settings the job `pid` states on its command line (and in its log's head, its stdout when that is a
    file); None when no reader knows it or /proc cannot be read. Never raises."""
    argv = process_arguments(pid)
    cwd = process_cwd(pid) if argv is not None else None
    if argv is None or cwd is None:
        return None
    log = stdout_file(pid)
    return read_job_settings(argv, cwd, _head(log) if log else None, world_size)


def stated_model(pid: int, log_path: str | None) -> StatedModel | None:
    """The model the job `pid` states on its command line (and in its log's head, `log_path` or its stdout
    when that is a file); None when no reader knows it or /proc cannot be read. Never raises."""
    argv = process_arguments(pid)
    cwd = process_cwd(pid) if argv is not None else None
    if argv is None or cwd is None:
        return None
    log = log_path or stdout_file(pid)
    return read_job_command_line(argv, cwd, _head(log) if log else None)


def _head(path: str) -> str | None:
    try:
        with open(path, encoding="utf-8", errors="replace") as handle:
            return handle.read(LOG_HEAD_BYTES)
    except OSError:
        return None
