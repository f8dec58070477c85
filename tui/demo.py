"""`gputop demo`: start the bundled training process (tui/demo_target.py), watch it in the live TUI, and
stop it on the way out, whatever the way out is (q, Ctrl-C, SIGTERM, a dropped SSH session).

The target runs in its own session (so a Ctrl-C typed before the screen is up does not reach it) and is
stopped as a process group (its DataLoader workers with it). The kernel also ends it when gputop dies
(PR_SET_PDEATHSIG), so even a SIGKILL of gputop leaves no training behind. Its log goes to a temporary
folder, read by the log probe; its checkpoints go to a folder inside that one, so removing the one folder on the way
out (q, Ctrl-C, SIGTERM or SIGHUP at any moment, an exception) leaves nothing behind, even when the target had to be
killed before it could clean up after itself.
"""

from __future__ import annotations

import importlib.util
import os
import shutil
import signal
import subprocess
import sys
import tempfile
from pathlib import Path

DEMO_TARGET = Path(__file__).with_name("demo_target.py")
EXIT_NEEDS_TORCH = 2
STOP_GRACE_S = 3.0


def stop_process_group(process: subprocess.Popen, grace_s: float = STOP_GRACE_S) -> None:
    """SIGTERM the target's process group, then SIGKILL what is left after a grace period."""
    for sig, wait_s in ((signal.SIGTERM, grace_s), (signal.SIGKILL, grace_s)):
        try:
            os.killpg(process.pid, sig)
        except (ProcessLookupError, PermissionError):
            break
        try:
            process.wait(timeout=wait_s)
        except subprocess.TimeoutExpired:
            continue
        # The leader is gone; its workers may still be exiting: make sure the group is empty.
        try:
            os.killpg(process.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
        break


def start_demo_target(workdir: str) -> subprocess.Popen:
    log = open(os.path.join(workdir, "train.log"), "w", encoding="utf-8")
    checkpoints = os.path.join(workdir, "checkpoints")
    os.mkdir(checkpoints)
    try:
        return subprocess.Popen(
            [sys.executable, str(DEMO_TARGET), "--parent-pid", str(os.getpid()), "--checkpoint-dir", checkpoints],
            stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT, start_new_session=True,
            env=dict(os.environ, PYTHONUNBUFFERED="1"),
        )
    finally:
        log.close()


def run_demo(interval_s: float) -> int:
    if importlib.util.find_spec("torch") is None:
        print("gputop demo needs torch: pip install 'gputop[probe]'", file=sys.stderr)
        return EXIT_NEEDS_TORCH
    from probes.monitoring import Engine, EngineConfig
    from tui.app import exit_status, make_app

    def unwind(signum, _frame) -> None:  # before the screen is up: leave through the `finally` below
        raise SystemExit(128 + signum)

    # Taken before anything is made, so a signal at any moment reaches the cleanup rather than the default action.
    previous_handlers = {sig: signal.signal(sig, unwind) for sig in (signal.SIGTERM, signal.SIGHUP)}
    workdir = tempfile.mkdtemp(prefix="gputop-demo-")
    target = None
    try:
        target = start_demo_target(workdir)
        engine = Engine(target.pid, EngineConfig(interval_s=interval_s,
                                                 log_path=os.path.join(workdir, "train.log")))
        try:
            app = make_app(engine=engine)
            # From here the app exits and restores the terminal; after the message in hand, so a signal that lands
            # while the screen is being built does not tear it down under its own on_mount.
            signal.signal(signal.SIGTERM, lambda *_: app.call_next(app.exit))

            def hung_up(signum, _frame) -> None:
                # The terminal is gone (a dropped SSH session, a closed tmux): there is no screen to restore, so
                # the training is stopped here and gputop leaves, not through Textual's shutdown. That shutdown
                # waits on its writes to the terminal, and after tmux's kill-server (SIGHUP, then the SIGCONT that
                # restarts Textual's output) it waited forever, with the training still running.
                for sig in previous_handlers:
                    signal.signal(sig, signal.SIG_IGN)
                try:
                    stop_process_group(target)
                    shutil.rmtree(workdir, ignore_errors=True)
                finally:
                    os._exit(128 + signum)

            signal.signal(signal.SIGHUP, hung_up)
            app.run()
        finally:
            # Said as soon as the screen is gone: stopping the sampler and the training can take seconds, which
            # read as a frozen terminal with nothing on it.
            print(f"gputop demo: stopping the demo training process (PID {target.pid})…", file=sys.stderr,
                  flush=True)
            engine.close()
    finally:
        for sig in previous_handlers:  # a second signal while stopping must not cut the cleanup short
            signal.signal(sig, signal.SIG_IGN)
        try:
            if target is not None:
                stop_process_group(target)
            shutil.rmtree(workdir, ignore_errors=True)
        finally:
            for sig, handler in previous_handlers.items():
                signal.signal(sig, handler)
    print(f"gputop demo: stopped the demo training process (PID {target.pid}).", file=sys.stderr)
    return exit_status(app)
