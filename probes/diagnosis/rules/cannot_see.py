"""cannot_see: what is said when gputop cannot read the target's stacks at all (ptrace denied, py-spy missing,
not a Python process): the reason and its fix, never a guessed bottleneck. Not a rule in RULES: it replaces
whatever the rules would conclude while no stack of the main thread has been read, and `gputop doctor`
(probes/doctor.py) explains the same denial at length.
"""

from __future__ import annotations

from probes.diagnosis.evidence import Evidence
from probes.diagnosis.rules.rule import BottleneckFacts, Candidate

CANNOT_SEE = BottleneckFacts(
    name="cannot_see",
    words="cannot see",
    # Nothing is concluded about the job's work, so no shared-CPU advice is put before the fix.
    runs_on_host_cpu=False,
    short_of_host_cpu=False,
    hung_in=(),
    badge="blind",
    fix_removes=None,
    gpu_busy=False,
    kernels_bound=False,
    news_while_starting=False,
)


def blind(ev: Evidence) -> bool:
    """Whether the verdict must be "cannot see": the sampler says no stack can be read, and none was."""
    return ev.latest.stacks.blocked is not None and not ev.main.samples


def cannot_see(ev: Evidence, guess: Candidate) -> Candidate:
    """The "cannot see" verdict; ``guess`` (what the rules made of the counters alone) is kept as a hint only
    when it rests on GPU or cgroup counters, which do not need the stacks."""
    stacks = ev.latest.stacks
    # The reason's first sentence says what happened; the fix it goes on with is the advice, said once.
    what = (stacks.reason or "no stack could be read").split(". ", 1)[0]
    lines = [f"cannot see: {stacks.blocked} ({what})"]
    if guess.from_metrics and guess.bottleneck not in ("unknown", "cannot_see") and guess.evidence:
        lines.append(f"from the counters alone, without stacks: {guess.bottleneck} ({guess.evidence[0]})")
    lines.append("CPU, I/O, cgroup and GPU figures are still read; `gputop doctor --pid PID` lists what is "
                 "visible and the fix for each")
    return Candidate("cannot_see", 0.0, lines, [_fix(stacks.blocked or "")], from_metrics=guess.from_metrics)


def _fix(blocked: str) -> str:
    if blocked == "ptrace denied":
        return ("Run gputop as the target's user or as root; in a container add CAP_SYS_PTRACE (docker run "
                "--cap-add SYS_PTRACE); with kernel.yama.ptrace_scope above 0 run it as root or lower the scope.")
    if blocked.startswith("py-spy"):
        return "Install py-spy beside gputop (pip install py-spy) and start gputop again."
    if blocked == "not a Python process":
        return "Pass the PID of the Python training process (or its launcher) to --pid."
    return "See the reason above; `gputop doctor --pid PID` runs py-spy once and says what fails."
