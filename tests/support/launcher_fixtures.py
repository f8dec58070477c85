"""The constructed process tables in tests/fixtures/launchers/ (one per launcher): read as the job tracker would
read them from /proc (`fixture_facts`), and the attached process as resolve_root would (`fixture_attachment`)."""

from __future__ import annotations

import json

from probes.frame import ROLE_OTHER
from probes.jobs.facts import Attachment, ProcessFacts
from probes.jobs.launchers import launcher_of_process, parse_dist_env
from probes.jobs.launchers.mp_spawn import is_spawn_child
from probes.sensors.process_facts import is_python_command
from support.paths import REPO

FIXTURES = REPO / "tests" / "fixtures" / "launchers"


def load_fixture(kind: str) -> dict:
    return json.loads((FIXTURES / f"{kind}.json").read_text())


def fixture_facts(fixture: dict) -> list[ProcessFacts]:
    """The fixture's process table as the tracker would read it: environments through the launchers' own
    readers, Python, spawn_main and a launcher's own process from the command line."""
    facts = []
    for p in fixture["processes"]:
        cmdline = tuple(p["cmdline"])
        facts.append(ProcessFacts(
            pid=p["pid"], ppid=p["ppid"], role=p.get("role", ROLE_OTHER), name=p["name"], cmdline=cmdline,
            alive=p.get("alive", True), started=p.get("started", p["pid"]), python=is_python_command(cmdline),
            env=parse_dist_env(p.get("environ", {})), spawn_child=is_spawn_child(cmdline),
            waiting_for_child=p.get("waiting_for_child", False),
            launcher_process=launcher_of_process(p["name"], cmdline) is not None, cpu_seconds=p.get("cpu_seconds")))
    return facts


def fixture_attachment(fixture: dict, facts: list[ProcessFacts]) -> Attachment:
    """The fixture's `attach` process as resolve_root would read it from /proc."""
    by_pid = {f.pid: f for f in facts}
    attached = by_pid[fixture["attach"]["pid"]]
    parent = by_pid[attached.ppid]
    return Attachment(
        pid=attached.pid, name=attached.name, cmdline=attached.cmdline, env=attached.env, parent_pid=parent.pid,
        parent_name=parent.name, parent_cmdline=parent.cmdline, parent_python=parent.python, parent_env=parent.env,
        ranked_siblings=sum(1 for f in facts if f.ppid == parent.pid and f.env.rank is not None))
