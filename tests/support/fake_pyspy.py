#!/usr/bin/env python3
"""A stand-in for py-spy that samples nothing: ``record`` sleeps its --duration (or until SIGINT, as py-spy 0.4
does) and then writes one raw line counting rate x elapsed samples of ``work (/app/fake.py:1)``, all of them working
(a record window's half without ``--idle`` logs its start and SIGINT as "record-active" and "sigint-active", so
that a test counts windows by the --idle half; it first waits $FAKE_PYSPY_START_UP_S, as py-spy attaches, and prints
py-spy's "Sampling process" line as it begins); ``dump`` prints
one busy thread, in ``work (/app/fake.py:1)`` or, when the file $FAKE_PYSPY_DUMP_AT exists, at the "function file"
it holds. Every start and every SIGINT is appended to $FAKE_PYSPY_LOG as a line of JSON."""

from __future__ import annotations

import json
import os
import signal
import sys
import time


def log(**entry) -> None:
    path = os.environ.get("FAKE_PYSPY_LOG")
    if path:
        with open(path, "a", encoding="utf-8") as handle:
            handle.write(json.dumps({"time": time.monotonic(), **entry}) + "\n")


def option(argv: list[str], name: str) -> str:
    return argv[argv.index(name) + 1]


def record(argv: list[str]) -> None:
    pid, rate, duration = int(option(argv, "--pid")), float(option(argv, "--rate")), float(option(argv, "--duration"))
    interrupted = []
    signal.signal(signal.SIGINT, lambda *_: interrupted.append(True))
    half = "" if "--idle" in argv else "-active"
    log(mode="record" + half, rate=rate, duration=duration)
    if os.environ.get("FAKE_PYSPY_FAILING_HALF") == ("idle" if half == "" else "active"):
        print("Error: fake failure of this half")
        sys.exit(1)
    # py-spy attaches before it samples: $FAKE_PYSPY_START_UP_S of that, then its "Sampling process" line.
    time.sleep(float(os.environ.get("FAKE_PYSPY_START_UP_S", "0")))
    print(f"py-spy> Sampling process {rate:g} times a second for {duration:g} seconds. Press Control-C to exit.\n",
          flush=True)  # and a blank line, as py-spy 0.4 prints it
    started = time.monotonic()
    while not interrupted and time.monotonic() - started < duration:
        time.sleep(0.01)
    if interrupted:
        log(mode="sigint" + half, rate=rate, duration=duration)
        print("Stopped sampling because Control-C pressed")
    samples = max(1, round(rate * (time.monotonic() - started)))
    with open(option(argv, "-o"), "w", encoding="utf-8") as out:
        out.write(f"thread ({pid}): MainThread;work (/app/fake.py:1) {samples}\n")


def dump(argv: list[str]) -> None:
    pid = int(option(argv, "--pid"))
    function, filename = "work", "/app/fake.py"
    at = os.environ.get("FAKE_PYSPY_DUMP_AT")
    if at and os.path.exists(at):
        with open(at, encoding="utf-8") as handle:
            function, filename = handle.read().split()
    log(mode="dump", function=function)
    print(json.dumps([{"thread_id": pid, "os_thread_id": pid, "thread_name": "MainThread", "active": True,
                       "owns_gil": False, "frames": [{"name": function, "filename": filename, "line": 1}]}]))


if __name__ == "__main__":
    args = sys.argv[1:]
    if args == ["--version"]:
        print("py-spy 0.4.3 (fake)")
    elif args and args[0] == "record":
        record(args)
    elif args and args[0] == "dump":
        dump(args)
    else:
        sys.exit(2)
