"""Where gputop finds no pace, it says why and what to do, for the two cases a newcomer hit (issue 20): stdout piped
into `tee` ("stdout is a pipe: pass --log FILE", naming the file tee writes), and nanoGPT's train.py writing into a
file block-buffered (python without -u: the file does not grow; say so and how to fix it). Real processes, the real
log probe; the same job unbuffered gets its pace, so the words cannot come from anything but the buffering."""

from __future__ import annotations

from pathlib import Path

from probes.sensors.process_facts import python_writes_unbuffered

NANOGPT_LIKE = Path(__file__).resolve().parents[1] / "targets" / "nanogpt_like.py"


def test_unbuffered_python_is_told_by_its_flag_or_its_environment():
    assert python_writes_unbuffered(["python3", "-u", "train.py"], {})
    assert python_writes_unbuffered(["python3", "-Bu", "train.py"], {})
    assert python_writes_unbuffered(["python3", "train.py"], {"PYTHONUNBUFFERED": "1"})
    assert not python_writes_unbuffered(["python3", "train.py", "-u"], {})  # the script's own -u
    assert not python_writes_unbuffered(["python3", "-m", "torch.distributed.run", "-u"], {})
    assert not python_writes_unbuffered(["python3", "-X", "dev", "train.py"], {"PYTHONUNBUFFERED": ""})
