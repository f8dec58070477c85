"""`gputop doctor [--pid P] [--json]`: what gputop can and cannot see here, and how to fix each (ptrace rights,
py-spy and the target's Python, NVML and the driver, GPM, clock event reasons, cgroup, PID namespace, the job's
Flight Recorder and NCCL variables). The checks are probes/doctor.py; this module only prints them and picks
the exit status: 0 nothing to fix (no GPU on the machine is a finding, not a failure), 3 something with a fix is
limited, 4 cannot see the process (tui/exitcodes.py).
"""

from __future__ import annotations

import argparse
import json
import os

from tui.commands.shared import UsageError, add_pid_argument
from tui.exitcodes import EXIT_CANNOT_SEE, EXIT_LIMITED, EXIT_OK

STATUS_LABEL = {"ok": "ok", "limited": "LIMITED", "cannot": "CANNOT"}
NOTHING_TO_FIX_LABEL = "note"  # a check that says what the machine is (no GPU), with nothing to fix


class DoctorCommand:
    name = "doctor"
    help = "what gputop can and cannot see here (ptrace, py-spy, NVML, cgroup, namespace), and how to fix each"
    description = ("Checks what gputop can read on this machine, and for --pid P what it can read of that process: "
                   "each line is ok, limited or cannot, with what it means and how to fix it. Exit status: "
                   f"{EXIT_OK} nothing to fix (a machine without a GPU too: gputop watches CPU jobs), "
                   f"{EXIT_LIMITED} something it reads is limited, {EXIT_CANNOT_SEE} gputop cannot see the "
                   "process's stacks.")

    def prepare_parser(self, parser: argparse.ArgumentParser) -> None:
        add_pid_argument(parser)
        parser.add_argument("--json", action="store_true", help="print one JSON document")

    def run(self, args: argparse.Namespace) -> int:
        from probes.doctor import diagnose_access, in_child_pid_namespace

        if args.pid is not None and not os.path.exists(f"/proc/{args.pid}") and not in_child_pid_namespace():
            # On the host a PID that is not there is a typo or a process gone; in a container it may be one
            # outside, which the report explains (exit 4).
            raise UsageError(f"no process with PID {args.pid} (check it with: ps -p {args.pid})")
        report = diagnose_access(args.pid)
        if args.json:
            print(json.dumps(report.as_dict(), indent=2))
        else:
            print("\n".join(format_report(report)))
        return exit_status(report)


def exit_status(report) -> int:
    if report.cannot_see_process:
        return EXIT_CANNOT_SEE
    return EXIT_OK if report.status == "ok" else EXIT_LIMITED


def format_report(report) -> list[str]:
    """The plain-text screen: one line per check, and its fix indented beneath."""
    user = _user()
    if report.pid is None:
        lines = [f"gputop doctor: what gputop can see on this machine, as {user} (pass --pid P for a process)"]
    else:
        lines = [f"gputop doctor: PID {report.pid}" + (f" ({report.command})" if report.command else "")
                 + f", as {user}"]
    width = max((len(check.name) for check in report.checks), default=0)
    for check in report.checks:
        if check.nothing_to_fix:
            lines.append(f"  {NOTHING_TO_FIX_LABEL:<8} {check.name:<{width}}  {check.brief}")
            continue
        lines.append(f"  {STATUS_LABEL[check.status]:<8} {check.name:<{width}}  {check.finding}")
        if check.fix and check.status != "ok":
            lines.append(f"  {'':<8} {'':<{width}}  fix: {check.fix}")
    if report.cannot_see_process:
        summary = "gputop cannot see this process's stacks: its verdict would be a guess; fix the CANNOT lines first"
    elif report.status == "ok":
        noted = any(check.nothing_to_fix for check in report.checks)
        summary = ("everything gputop reads is visible here" if not noted
                   else "gputop works here: nothing to fix (the note says what this machine lacks)")
    else:
        summary = "gputop works here, without what the LIMITED/CANNOT lines name"
    lines.append(summary)
    return lines


def _user() -> str:
    try:
        import pwd

        return pwd.getpwuid(os.geteuid()).pw_name
    except (KeyError, ImportError):
        return f"uid {os.geteuid()}"
